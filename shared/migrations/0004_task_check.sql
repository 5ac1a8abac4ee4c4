-- The heartbeat registry (DESIGN.md §2, heartbeat): one row per activity attempt a worker
-- took, written by the heartbeat service (and the gateway for HTTP workers). Redis holds
-- the hot copy (status, last heartbeat); this table is written behind, at most once per
-- attempt per write interval plus on every status change. See docs/heartbeats.md.

CREATE TABLE task_check (
    task_id           UUID        NOT NULL,
    attempt           INT         NOT NULL,
    -- Empty/NULL while the row is a placeholder: a stop or a result that arrived before
    -- the attempt's registration (the registration fills them in, keeping the status).
    workflow_id       TEXT        NOT NULL DEFAULT '',
    run_id            UUID,
    task_name         TEXT        NOT NULL DEFAULT '',
    task_ref          TEXT        NOT NULL DEFAULT '',
    worker_id         TEXT,
    -- Routing key of the run's command shard: where ActivityTimedOut goes.
    reply_to          TEXT        NOT NULL DEFAULT '',
    status            TEXT        NOT NULL
        CHECK (status IN ('RUNNING', 'COMPLETED', 'FAILED', 'TIMED_OUT', 'STOPPED')),
    -- Why the attempt was stopped or timed out (the next heartbeat is told).
    stop_reason       TEXT,
    input_bytes       BIGINT      NOT NULL DEFAULT 0,
    output_bytes      BIGINT,
    -- The last progress details a heartbeat carried.
    details           JSONB,
    -- Heartbeat timeout (responseTimeoutSeconds); 0: not watched.
    timeout_seconds   BIGINT      NOT NULL DEFAULT 0,
    -- When the worker says it started (its clock).
    started_at        TIMESTAMPTZ,
    created_at        TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at        TIMESTAMPTZ NOT NULL DEFAULT now(),
    last_heartbeat_at TIMESTAMPTZ,
    -- Absolute deadline: last_heartbeat_at + timeout (NULL when not watched). Can be stale
    -- by up to one write interval; the scanner confirms a candidate with Redis.
    expires_at        TIMESTAMPTZ,
    PRIMARY KEY (task_id, attempt)
);

-- The scanner's index: only RUNNING rows are in it, so its query reads the expired ones
-- and stops, whatever the number of finished rows kept for retention.
CREATE INDEX task_check_running_expiry ON task_check (expires_at)
    WHERE status = 'RUNNING' AND expires_at IS NOT NULL;

-- The retention purge's index: finished rows by age.
CREATE INDEX task_check_finished_by_age ON task_check (updated_at)
    WHERE status <> 'RUNNING';

-- Operators' lookups: the attempts of a run.
CREATE INDEX task_check_by_run ON task_check (run_id);
