-- Conductor's task domain (`taskToDomain` at start): a worker's task goes to the queue of
-- its domain, taken only by workers polling that domain (docs/domains.md). NULL: none.
ALTER TABLE tasks ADD COLUMN domain TEXT;
