-- Signals a run keeps for a WAIT, HUMAN or asynchronous EVENT task it has not reached
-- yet (`[{name, payload}]`, NULL when none), written by the decider with the run: shown
-- in the run's JSON as `pendingSignals` (docs/task-updates.md).
ALTER TABLE runs ADD COLUMN pending_signals JSONB;
