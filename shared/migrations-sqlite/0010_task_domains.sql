-- A worker's task's domain (see the PostgreSQL migration 0020).
ALTER TABLE tasks ADD COLUMN domain TEXT;
