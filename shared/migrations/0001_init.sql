-- Weft schema, version 1. See docs/storage.md for the why of each table.

-- Registered workflow definitions, keyed by (name, version).
CREATE TABLE definitions (
    name        TEXT        NOT NULL,
    version     INT         NOT NULL,
    definition  JSONB       NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (name, version)
);

-- Starts accepted by the gateway (2xx answered) and not necessarily applied yet.
-- The idempotency key makes a repeated start answer the first workflow id.
CREATE TABLE workflow_starts (
    workflow_id     TEXT        PRIMARY KEY,
    idempotency_key TEXT        UNIQUE,
    workflow_name   TEXT        NOT NULL,
    workflow_version INT        NOT NULL,
    input           JSONB       NOT NULL,
    correlation_id  TEXT,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- One row per run: the materialised state the decider writes with every event.
CREATE TABLE runs (
    run_id             UUID        PRIMARY KEY,
    workflow_id        TEXT        NOT NULL,
    workflow_name      TEXT        NOT NULL,
    workflow_version   INT         NOT NULL,
    status             TEXT        NOT NULL,
    sub_status         TEXT        NOT NULL,
    input              JSONB       NOT NULL,
    output             JSONB,
    variables          JSONB       NOT NULL DEFAULT '{}',
    correlation_id     TEXT,
    parent_workflow_id TEXT,
    reason             TEXT,
    failed_task_refs   TEXT[]      NOT NULL DEFAULT '{}',
    start_time         TIMESTAMPTZ NOT NULL,
    end_time           TIMESTAMPTZ,
    update_time        TIMESTAMPTZ NOT NULL,
    -- Number of history events; the optimistic concurrency token.
    version            BIGINT      NOT NULL,
    -- The newest run of its workflow id (resets add runs to a chain).
    is_current         BOOLEAN     NOT NULL DEFAULT TRUE
);
CREATE UNIQUE INDEX runs_current_by_workflow ON runs (workflow_id) WHERE is_current;
CREATE INDEX runs_by_workflow ON runs (workflow_id, start_time);
CREATE INDEX runs_by_status_time ON runs (status, start_time DESC);
CREATE INDEX runs_by_name_time ON runs (workflow_name, start_time DESC);

-- The append-only history of each run: the source of truth.
CREATE TABLE history_events (
    run_id     UUID        NOT NULL,
    event_id   BIGINT      NOT NULL,
    type       TEXT        NOT NULL,
    time       TIMESTAMPTZ NOT NULL,
    attributes JSONB       NOT NULL,
    PRIMARY KEY (run_id, event_id)
);

-- Per-run task rows (materialised from history for reads).
CREATE TABLE tasks (
    task_id        UUID        PRIMARY KEY,
    run_id         UUID        NOT NULL,
    workflow_id    TEXT        NOT NULL,
    task_ref       TEXT        NOT NULL,
    task_type      TEXT        NOT NULL,
    task_name      TEXT        NOT NULL,
    seq            INT         NOT NULL,
    iteration      INT         NOT NULL DEFAULT 0,
    attempt        INT         NOT NULL,
    status         TEXT        NOT NULL,
    input          JSONB       NOT NULL,
    output         JSONB,
    reason         TEXT,
    worker_id      TEXT,
    scheduled_time TIMESTAMPTZ NOT NULL,
    start_time     TIMESTAMPTZ,
    end_time       TIMESTAMPTZ,
    update_time    TIMESTAMPTZ NOT NULL
);
CREATE INDEX tasks_by_run ON tasks (run_id, seq);

-- Messages committed with the state change that caused them, published after commit;
-- rows left behind by a crash are re-published by the history service's sweeper.
CREATE TABLE outbox (
    -- UUIDv7, made by the writer: time-ordered, and known without a round trip.
    id          UUID        PRIMARY KEY,
    exchange    TEXT        NOT NULL,
    routing_key TEXT        NOT NULL,
    body        BYTEA       NOT NULL,
    traceparent TEXT,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX outbox_by_created ON outbox (created_at);

-- The decider's commit is one statement (data-modifying CTEs); this aborts it, and so
-- every write of the batch, when fewer runs matched their expected version than were
-- updated: another writer moved one of them.
CREATE FUNCTION weft_check_versions(updated BIGINT, expected BIGINT) RETURNS BOOLEAN
LANGUAGE plpgsql AS $$
BEGIN
    IF updated <> expected THEN
        RAISE EXCEPTION 'run version moved: % of % runs matched', updated, expected
            USING ERRCODE = 'WFT01';
    END IF;
    RETURN TRUE;
END
$$;
