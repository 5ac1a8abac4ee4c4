-- Signals a run keeps for a task it has not reached yet (see the PostgreSQL migration 0019).
ALTER TABLE runs ADD COLUMN pending_signals TEXT;
