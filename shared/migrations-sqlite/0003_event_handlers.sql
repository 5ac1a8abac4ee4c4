-- Conductor's event handlers (docs/event-handlers.md): PostgreSQL's migration 0011.
CREATE TABLE event_handlers (
    name        TEXT    PRIMARY KEY,
    event       TEXT    NOT NULL,
    active      INTEGER NOT NULL,
    definition  TEXT    NOT NULL,
    created_at  TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now')),
    updated_at  TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now'))
);

CREATE TABLE event_executions (
    id          BLOB    PRIMARY KEY,
    handler     TEXT    NOT NULL,
    event       TEXT    NOT NULL,
    message_id  TEXT,
    action      TEXT,
    status      TEXT    NOT NULL,
    output      TEXT    NOT NULL,
    created_at  TEXT    NOT NULL
);
CREATE INDEX event_executions_by_handler ON event_executions (handler, created_at DESC, id);
