-- Conductor's `callbackAfterSeconds` of a task: how long a SCHEDULED task stays out of
-- its queue (a retry waiting out its back-off, a task its worker gave back with a
-- callback). The delayed message itself is a durable timer (docs/callbacks.md).
ALTER TABLE tasks ADD COLUMN callback_after_seconds BIGINT NOT NULL DEFAULT 0;
