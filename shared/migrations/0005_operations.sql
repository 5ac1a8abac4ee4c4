-- Operator operations (terminate, skip, reset, pause): the run chain and the outcomes the
-- gateway answers operators with.

-- A reset commits the old run (no longer current) and its successor (current) in one
-- statement; a deferred constraint lets both rows change before "one current run per
-- workflow" is checked. Its index serves the `workflow_id = $1 AND is_current` lookups.
DROP INDEX runs_current_by_workflow;
ALTER TABLE runs ADD CONSTRAINT runs_one_current_per_workflow
    EXCLUDE USING btree (workflow_id WITH =) WHERE (is_current)
    DEFERRABLE INITIALLY DEFERRED;

-- Where a run created by a reset came from.
ALTER TABLE runs ADD COLUMN reset_from_run_id UUID;
ALTER TABLE runs ADD COLUMN reset_task_ref TEXT;

-- The decider's verdict on each operator command, written in the same transaction as
-- its effect (or alone, for a refusal); the gateway waits for it to answer the request.
CREATE TABLE operation_outcomes (
    request_id  UUID        PRIMARY KEY,
    workflow_id TEXT        NOT NULL,
    -- The HTTP status the operator gets: 200, or 400/404/409 for a refusal.
    status      SMALLINT    NOT NULL,
    body        JSONB       NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX operation_outcomes_by_created ON operation_outcomes (created_at);
