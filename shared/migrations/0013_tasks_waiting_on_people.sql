-- Pending HUMAN and WAIT tasks, listed by GET /api/admin/task/{type} (Conductor's pending
-- tasks query). Only those two types enter the index, and neither column in it changes
-- after the row is written, so other tasks' writes are untouched by it.
CREATE INDEX tasks_waiting_on_people ON tasks (task_type, scheduled_time)
    WHERE task_type IN ('HUMAN', 'WAIT');
