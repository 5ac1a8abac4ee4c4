-- Weft schema for SQLite (weft dev): the end state of PostgreSQL's migrations 0001..0009
-- (shared/migrations), in SQLite's types. See docs/storage.md for the why of each table.
--
-- Conventions (they follow how sqlx encodes Rust values for SQLite):
--   * UUIDs are BLOBs (16 bytes, sqlx's `Uuid` encoding).
--   * Timestamps are TEXT in RFC 3339, UTC, `+00:00` offset, shortest exact fraction
--     (sqlx's `DateTime<Utc>` encoding, e.g. `2024-05-01T10:00:00.123456+00:00`); such
--     strings sort in time order. Writers bind them from Rust (never `datetime('now')`,
--     whose format differs); the defaults below are a fallback in the same shape.
--   * jsonb is TEXT holding JSON; arrays (text[]) are TEXT holding a JSON array.
--   * Booleans are INTEGER 0/1.

-- Registered workflow definitions, keyed by (name, version).
CREATE TABLE definitions (
    name        TEXT    NOT NULL,
    version     INTEGER NOT NULL,
    definition  TEXT    NOT NULL,
    created_at  TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now')),
    updated_at  TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now')),
    PRIMARY KEY (name, version)
);

-- Starts accepted by the gateway and not necessarily applied yet.
CREATE TABLE workflow_starts (
    workflow_id      TEXT    PRIMARY KEY,
    idempotency_key  TEXT    UNIQUE,
    workflow_name    TEXT    NOT NULL,
    workflow_version INTEGER NOT NULL,
    input            TEXT    NOT NULL,
    correlation_id   TEXT,
    created_at       TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now'))
);

-- One row per run: the materialised state the decider writes with every event.
CREATE TABLE runs (
    run_id             BLOB    PRIMARY KEY,
    workflow_id        TEXT    NOT NULL,
    workflow_name      TEXT    NOT NULL,
    workflow_version   INTEGER NOT NULL,
    status             TEXT    NOT NULL,
    sub_status         TEXT    NOT NULL,
    input              TEXT    NOT NULL,
    output             TEXT,
    variables          TEXT    NOT NULL DEFAULT '{}',
    correlation_id     TEXT,
    parent_workflow_id TEXT,
    reason             TEXT,
    -- JSON array of task reference names.
    failed_task_refs   TEXT    NOT NULL DEFAULT '[]',
    start_time         TEXT    NOT NULL,
    end_time           TEXT,
    update_time        TEXT    NOT NULL,
    -- Number of history events; the optimistic concurrency token.
    version            INTEGER NOT NULL,
    -- The newest run of its workflow id (resets add runs to a chain).
    is_current         INTEGER NOT NULL DEFAULT 1,
    -- Where a run created by a reset came from.
    reset_from_run_id  BLOB,
    reset_task_ref     TEXT,
    input_bytes        INTEGER GENERATED ALWAYS AS (length(CAST(input AS BLOB))) STORED,
    output_bytes       INTEGER GENERATED ALWAYS AS (length(CAST(output AS BLOB))) STORED
);
-- One current run per workflow. SQLite checks it per statement (PostgreSQL defers it to
-- the commit): the commit updates the old run (no longer current) before inserting its
-- successor.
CREATE UNIQUE INDEX runs_one_current_per_workflow ON runs (workflow_id) WHERE is_current;
CREATE INDEX runs_by_workflow ON runs (workflow_id, start_time);
CREATE INDEX runs_by_status_time ON runs (status, start_time DESC);
CREATE INDEX runs_by_name_time ON runs (workflow_name, start_time DESC);
CREATE INDEX runs_search_by_start ON runs (start_time DESC, run_id DESC) WHERE is_current;
CREATE INDEX runs_search_by_status ON runs (status, start_time DESC, run_id DESC)
    WHERE is_current;
CREATE INDEX runs_search_by_name ON runs (workflow_name, start_time DESC, run_id DESC)
    WHERE is_current;
CREATE INDEX runs_search_by_correlation ON runs (correlation_id)
    WHERE is_current AND correlation_id IS NOT NULL;
CREATE INDEX runs_search_by_name_status
    ON runs (workflow_name, status, start_time DESC, run_id DESC) WHERE is_current;

-- The append-only history of each run: the source of truth.
CREATE TABLE history_events (
    run_id     BLOB    NOT NULL,
    event_id   INTEGER NOT NULL,
    type       TEXT    NOT NULL,
    time       TEXT    NOT NULL,
    attributes TEXT    NOT NULL,
    PRIMARY KEY (run_id, event_id)
);

-- Per-run task rows (materialised from history for reads).
CREATE TABLE tasks (
    task_id        BLOB    PRIMARY KEY,
    run_id         BLOB    NOT NULL,
    workflow_id    TEXT    NOT NULL,
    task_ref       TEXT    NOT NULL,
    task_type      TEXT    NOT NULL,
    task_name      TEXT    NOT NULL,
    seq            INTEGER NOT NULL,
    iteration      INTEGER NOT NULL DEFAULT 0,
    attempt        INTEGER NOT NULL,
    status         TEXT    NOT NULL,
    input          TEXT    NOT NULL,
    output         TEXT,
    reason         TEXT,
    worker_id      TEXT,
    scheduled_time TEXT    NOT NULL,
    start_time     TEXT,
    end_time       TEXT,
    update_time    TEXT    NOT NULL,
    input_bytes    INTEGER GENERATED ALWAYS AS (length(CAST(input AS BLOB))) STORED,
    output_bytes   INTEGER GENERATED ALWAYS AS (length(CAST(output AS BLOB))) STORED
);
CREATE INDEX tasks_by_run ON tasks (run_id, seq);

-- Messages committed with the state change that caused them, published after commit.
CREATE TABLE outbox (
    -- UUIDv7, made by the writer.
    id          BLOB PRIMARY KEY,
    exchange    TEXT NOT NULL,
    routing_key TEXT NOT NULL,
    body        BLOB NOT NULL,
    traceparent TEXT,
    created_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now'))
);
CREATE INDEX outbox_by_created ON outbox (created_at);

-- Durable timers (a delayed outbox).
CREATE TABLE timers (
    id          BLOB PRIMARY KEY,
    workflow_id TEXT NOT NULL,
    run_id      BLOB,
    fire_at     TEXT NOT NULL,
    exchange    TEXT NOT NULL,
    routing_key TEXT NOT NULL,
    body        BLOB NOT NULL,
    traceparent TEXT,
    created_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now'))
);
CREATE INDEX timers_by_fire_at ON timers (fire_at);
CREATE INDEX timers_by_run ON timers (run_id);

-- Registered task definitions (Conductor's TaskDef), keyed by name.
CREATE TABLE task_definitions (
    name        TEXT PRIMARY KEY,
    definition  TEXT NOT NULL,
    created_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now')),
    updated_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now'))
);

-- The heartbeat registry: one row per activity attempt a worker took.
CREATE TABLE task_check (
    task_id           BLOB    NOT NULL,
    attempt           INTEGER NOT NULL,
    workflow_id       TEXT    NOT NULL DEFAULT '',
    run_id            BLOB,
    task_name         TEXT    NOT NULL DEFAULT '',
    task_ref          TEXT    NOT NULL DEFAULT '',
    worker_id         TEXT,
    reply_to          TEXT    NOT NULL DEFAULT '',
    status            TEXT    NOT NULL
        CHECK (status IN ('RUNNING', 'COMPLETED', 'FAILED', 'TIMED_OUT', 'STOPPED')),
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
CREATE INDEX task_check_running_expiry ON task_check (expires_at)
    WHERE status = 'RUNNING' AND expires_at IS NOT NULL;
CREATE INDEX task_check_finished_by_age ON task_check (updated_at)
    WHERE status <> 'RUNNING';
CREATE INDEX task_check_by_run ON task_check (run_id);

-- The decider's verdict on each operator command.
CREATE TABLE operation_outcomes (
    request_id  BLOB    PRIMARY KEY,
    workflow_id TEXT    NOT NULL,
    status      INTEGER NOT NULL,
    body        TEXT    NOT NULL,
    created_at  TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now'))
);
CREATE INDEX operation_outcomes_by_created ON operation_outcomes (created_at);

-- Execution logs of tasks (Conductor's TaskExecLog), read back in insertion order.
CREATE TABLE task_logs (
    -- Insertion order (global; PostgreSQL's bigserial is global too).
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id      BLOB    NOT NULL,
    log          TEXT    NOT NULL,
    created_time TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now'))
);
CREATE INDEX task_logs_by_task ON task_logs (task_id, seq);

-- Hook deliveries (docs/hooks.md): one row per HTTP call a hook declared in a definition
-- asks for.
CREATE TABLE hook_deliveries (
    id              BLOB    PRIMARY KEY,
    workflow_id     TEXT    NOT NULL,
    run_id          BLOB    NOT NULL,
    hook            TEXT    NOT NULL,
    event           TEXT    NOT NULL,
    task_ref        TEXT,
    task_id         BLOB,
    iteration       INTEGER NOT NULL DEFAULT 0,
    url             TEXT    NOT NULL,
    headers         TEXT    NOT NULL DEFAULT '{}',
    body            TEXT    NOT NULL,
    signature       TEXT,
    blocking        INTEGER NOT NULL DEFAULT 0,
    group_seq       INTEGER,
    status          TEXT    NOT NULL DEFAULT 'PENDING',
    next_attempt_at TEXT,
    attempt_count   INTEGER NOT NULL DEFAULT 0,
    attempts        TEXT    NOT NULL DEFAULT '[]',
    released        INTEGER NOT NULL DEFAULT 0,
    last_error      TEXT,
    traceparent     TEXT,
    created_at      TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now')),
    updated_at      TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now'))
);
CREATE INDEX hook_deliveries_due ON hook_deliveries (next_attempt_at)
    WHERE status = 'PENDING';
CREATE INDEX hook_deliveries_by_workflow ON hook_deliveries (workflow_id, created_at);
CREATE INDEX hook_deliveries_by_group ON hook_deliveries (run_id, group_seq)
    WHERE group_seq IS NOT NULL;
