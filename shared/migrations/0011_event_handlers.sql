-- Conductor's event handlers (docs/event-handlers.md) and their executions.
CREATE TABLE event_handlers (
    name        TEXT        PRIMARY KEY,
    event       TEXT        NOT NULL,
    active      BOOLEAN     NOT NULL,
    definition  JSONB       NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE event_executions (
    id          UUID        PRIMARY KEY,
    handler     TEXT        NOT NULL,
    event       TEXT        NOT NULL,
    message_id  TEXT,
    action      TEXT,
    status      TEXT        NOT NULL,
    output      JSONB       NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX event_executions_by_handler ON event_executions (handler, created_at DESC, id);
