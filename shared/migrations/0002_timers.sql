-- Durable timers (a delayed outbox): messages committed with the state change that
-- needs them (retry back-off, WAIT durations, timeouts) and published by the history
-- service once `fire_at` has passed, compared with the database's clock.
CREATE TABLE timers (
    -- UUIDv7, made by the writer.
    id          UUID        PRIMARY KEY,
    workflow_id TEXT        NOT NULL,
    run_id      UUID,
    -- When the message is due; it is never published before.
    fire_at     TIMESTAMPTZ NOT NULL,
    exchange    TEXT        NOT NULL,
    routing_key TEXT        NOT NULL,
    -- The encoded envelope, published as is.
    body        BYTEA       NOT NULL,
    traceparent TEXT,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);
-- The firer's query (due rows in fire_at order, LIMIT n) reads only the due rows, however
-- many future timers wait; min(fire_at) for the next wake-up is one index probe.
CREATE INDEX timers_by_fire_at ON timers (fire_at);
-- Cancelling a run's timers (terminate, reset, completion).
CREATE INDEX timers_by_run ON timers (run_id);
