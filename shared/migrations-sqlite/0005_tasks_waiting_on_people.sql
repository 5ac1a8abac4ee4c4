-- Pending HUMAN and WAIT tasks (GET /api/admin/task/{type}); see the PostgreSQL migration.
CREATE INDEX tasks_waiting_on_people ON tasks (task_type, scheduled_time)
    WHERE task_type IN ('HUMAN', 'WAIT');
