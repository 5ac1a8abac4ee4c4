-- API tokens and the audit trail; see the PostgreSQL migration.
CREATE TABLE api_tokens (
    name       TEXT PRIMARY KEY,
    token_hash TEXT NOT NULL UNIQUE,
    scopes     TEXT NOT NULL,
    task_types TEXT,
    created_at TEXT NOT NULL,
    expires_at TEXT
);

CREATE TABLE audit_log (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    at          TEXT    NOT NULL,
    actor       TEXT,
    action      TEXT    NOT NULL,
    target      TEXT,
    workflow_id TEXT,
    reason      TEXT,
    status      INTEGER,
    method      TEXT    NOT NULL,
    path        TEXT    NOT NULL
);
CREATE INDEX audit_log_at ON audit_log (at);
CREATE INDEX audit_log_workflow ON audit_log (workflow_id, at) WHERE workflow_id IS NOT NULL;
CREATE INDEX audit_log_actor ON audit_log (actor, at) WHERE actor IS NOT NULL;
