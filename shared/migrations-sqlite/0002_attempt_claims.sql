-- The registry becomes exact (docs/heartbeats.md): PostgreSQL's migration 0010. SQLite
-- cannot change a CHECK constraint, so the table is rebuilt with SCHEDULED allowed.

CREATE TABLE task_check_new (
    task_id           BLOB    NOT NULL,
    attempt           INTEGER NOT NULL,
    workflow_id       TEXT    NOT NULL DEFAULT '',
    run_id            BLOB,
    task_name         TEXT    NOT NULL DEFAULT '',
    task_ref          TEXT    NOT NULL DEFAULT '',
    worker_id         TEXT,
    reply_to          TEXT    NOT NULL DEFAULT '',
    status            TEXT    NOT NULL
        CHECK (status IN ('SCHEDULED', 'RUNNING', 'COMPLETED', 'FAILED', 'TIMED_OUT', 'STOPPED')),
    stop_reason       TEXT,
    input_bytes       INTEGER NOT NULL DEFAULT 0,
    output_bytes      INTEGER,
    details           TEXT,
    timeout_seconds   INTEGER NOT NULL DEFAULT 0,
    started_at        TEXT,
    created_at        TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now')),
    updated_at        TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now')),
    last_heartbeat_at TEXT,
    expires_at        TEXT,
    PRIMARY KEY (task_id, attempt)
);
INSERT INTO task_check_new SELECT task_id, attempt, workflow_id, run_id, task_name, task_ref,
    worker_id, reply_to, status, stop_reason, input_bytes, output_bytes, details,
    timeout_seconds, started_at, created_at, updated_at, last_heartbeat_at, expires_at
    FROM task_check;
DROP TABLE task_check;
ALTER TABLE task_check_new RENAME TO task_check;
CREATE INDEX task_check_running_expiry ON task_check (expires_at)
    WHERE status = 'RUNNING' AND expires_at IS NOT NULL;
CREATE INDEX task_check_finished_by_age ON task_check (updated_at)
    WHERE status NOT IN ('RUNNING', 'SCHEDULED');
CREATE INDEX task_check_by_run ON task_check (run_id);
