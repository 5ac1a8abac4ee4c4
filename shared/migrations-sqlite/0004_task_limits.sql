-- Task limits (docs/task-limits.md): PostgreSQL's migration 0012. NULL is no limit.

ALTER TABLE task_check ADD COLUMN concurrency_limit INTEGER;
ALTER TABLE task_check ADD COLUMN rate_limit INTEGER;
ALTER TABLE task_check ADD COLUMN rate_window_seconds INTEGER;

CREATE INDEX task_check_limited_running ON task_check (task_name)
    WHERE status = 'RUNNING' AND concurrency_limit IS NOT NULL;

CREATE TABLE task_rate_windows (
    task_name    TEXT    PRIMARY KEY,
    window_start TEXT    NOT NULL,
    claims       INTEGER NOT NULL
);
