-- Hook deliveries (docs/hooks.md): one row per HTTP call a hook declared in a definition
-- asks for. The decider inserts them in the transaction that commits their cause (a
-- reset's rollback, a task or run that completed, failed or timed out); the history
-- service's dispatcher claims the due ones, POSTs them, and records every attempt here.
CREATE TABLE hook_deliveries (
    -- The delivery id, sent as `X-Weft-Delivery` so receivers can deduplicate; name-based
    -- on its cause, so a cause committed twice cannot deliver twice.
    id              UUID        PRIMARY KEY,
    workflow_id     TEXT        NOT NULL,
    -- The run the cause belongs to; for a rollback, the run created by the reset (the
    -- one that waits for its rollback hooks).
    run_id          UUID        NOT NULL,
    -- onRollback, onTimeout, onFailure, onComplete.
    hook            TEXT        NOT NULL,
    -- The lifecycle event that caused it (workflow.reset for rollbacks).
    event           TEXT        NOT NULL,
    task_ref        TEXT,
    task_id         UUID,
    iteration       INT         NOT NULL DEFAULT 0,
    url             TEXT        NOT NULL,
    headers         JSONB       NOT NULL DEFAULT '{}',
    -- The exact bytes POSTed (and signed).
    body            TEXT        NOT NULL,
    -- `sha256=<hex>` HMAC of the body with the definition's `hooks.secret`, if it has one.
    signature       TEXT,
    -- An awaited (`await: true`) rollback hook: its reset waits for its success.
    blocking        BOOLEAN     NOT NULL DEFAULT false,
    -- Position in its reset's rollback sequence (0 = most recent task first); NULL for
    -- hooks that are not rollbacks. Only the head of a sequence is due at a time.
    group_seq       INT,
    -- PENDING (to be attempted, or waiting for its turn), DELIVERED, DEAD (attempts
    -- exhausted: dead-lettered), SKIPPED (a rollback not sent because an awaited one
    -- before it failed).
    status          TEXT        NOT NULL DEFAULT 'PENDING',
    -- When the next attempt is due; NULL while waiting for its turn and once settled.
    -- A claimed delivery's value is pushed past the attempt's lease.
    next_attempt_at TIMESTAMPTZ,
    -- Attempts started so far.
    attempt_count   INT         NOT NULL DEFAULT 0,
    -- Each finished attempt: {attempt, time, statusCode?, error?, durationMs}.
    attempts        JSONB       NOT NULL DEFAULT '[]',
    -- A rollback's sequence moved past it (its first attempt was made, or for an awaited
    -- one, it succeeded).
    released        BOOLEAN     NOT NULL DEFAULT false,
    last_error      TEXT,
    -- W3C trace context of the decision that fired it: each attempt joins that trace.
    traceparent     TEXT,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at      TIMESTAMPTZ NOT NULL DEFAULT now()
);
-- The dispatcher's scan (due pending rows in due order) reads only pending rows, however
-- many settled ones the table holds.
CREATE INDEX hook_deliveries_due ON hook_deliveries (next_attempt_at)
    WHERE status = 'PENDING';
-- GET /api/workflow/{id}/hooks.
CREATE INDEX hook_deliveries_by_workflow ON hook_deliveries (workflow_id, created_at);
-- A rollback sequence's next member, and its members when an awaited one fails.
CREATE INDEX hook_deliveries_by_group ON hook_deliveries (run_id, group_seq)
    WHERE group_seq IS NOT NULL;
