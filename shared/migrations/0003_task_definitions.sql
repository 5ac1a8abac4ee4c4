-- Registered task definitions (Conductor's TaskDef), keyed by name: the retry and timeout
-- policies of SIMPLE tasks. A start copies the ones its definition needs into the run's
-- definition (`taskDefinition`), so changing or deleting a row never affects started runs.
CREATE TABLE task_definitions (
    name        TEXT        PRIMARY KEY,
    definition  JSONB       NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);
