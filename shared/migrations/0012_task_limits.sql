-- Task limits (docs/task-limits.md): a TaskDef's concurrentExecLimit and
-- rateLimitPerFrequency / rateLimitFrequencyInSeconds, enforced when a worker claims an
-- attempt. The decider writes the limits into the attempt's row with the commit that
-- schedules it; NULL (no limit) for almost every task, which then costs nothing: a NULL
-- takes no room in the row, and such a row enters no index below.

ALTER TABLE task_check
    ADD COLUMN concurrency_limit   INT,
    ADD COLUMN rate_limit          INT,
    ADD COLUMN rate_window_seconds INT;

-- The running attempts a concurrency-limited claim counts, by task name: only RUNNING
-- rows under a concurrency limit are in it.
CREATE INDEX task_check_limited_running ON task_check (task_name)
    WHERE status = 'RUNNING' AND concurrency_limit IS NOT NULL;

-- The current fixed window of each rate-limited task name (one row per name, written
-- only by rate-limited claims, under the name's advisory lock).
CREATE TABLE task_rate_windows (
    task_name    TEXT        PRIMARY KEY,
    window_start TIMESTAMPTZ NOT NULL,
    claims       INT         NOT NULL
);
