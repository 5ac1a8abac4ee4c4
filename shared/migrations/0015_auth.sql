-- Who may do what (docs/security.md): API tokens, stored as the SHA-256 of the secret
-- (never the secret), and the audit trail of every state-changing request.
CREATE TABLE api_tokens (
    name       TEXT        PRIMARY KEY,
    token_hash TEXT        NOT NULL UNIQUE,
    scopes     JSONB       NOT NULL,
    -- The task types a `work` scope is limited to; NULL: every task type.
    task_types JSONB,
    created_at TIMESTAMPTZ NOT NULL,
    expires_at TIMESTAMPTZ
);

CREATE TABLE audit_log (
    id          BIGSERIAL   PRIMARY KEY,
    at          TIMESTAMPTZ NOT NULL,
    -- The token's name; NULL when auth is off.
    actor       TEXT,
    action      TEXT        NOT NULL,
    target      TEXT,
    workflow_id TEXT,
    reason      TEXT,
    -- The HTTP status of the answer; NULL for rows written with the change itself.
    status      INTEGER,
    method      TEXT        NOT NULL,
    path        TEXT        NOT NULL
);
CREATE INDEX audit_log_at ON audit_log (at);
CREATE INDEX audit_log_workflow ON audit_log (workflow_id, at) WHERE workflow_id IS NOT NULL;
CREATE INDEX audit_log_actor ON audit_log (actor, at) WHERE actor IS NOT NULL;
