-- Conductor's `callbackAfterSeconds` of a task (see the PostgreSQL migration 0018).
ALTER TABLE tasks ADD COLUMN callback_after_seconds INTEGER NOT NULL DEFAULT 0;
