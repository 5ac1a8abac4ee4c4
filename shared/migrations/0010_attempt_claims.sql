-- The registry becomes exact (docs/heartbeats.md): the decider writes an attempt's row in
-- the commit that schedules it (SCHEDULED), a worker's claim moves it to RUNNING
-- (compare-and-set: a stopped or already claimed attempt is refused), and the commit that
-- applies its result, timeout or stop ends it.

ALTER TABLE task_check DROP CONSTRAINT task_check_status_check;
ALTER TABLE task_check ADD CONSTRAINT task_check_status_check
    CHECK (status IN ('SCHEDULED', 'RUNNING', 'COMPLETED', 'FAILED', 'TIMED_OUT', 'STOPPED'));

-- Retention purges ended attempts only; a SCHEDULED attempt may wait for its worker for
-- as long as its queue holds it.
DROP INDEX task_check_finished_by_age;
CREATE INDEX task_check_finished_by_age ON task_check (updated_at)
    WHERE status NOT IN ('RUNNING', 'SCHEDULED');
