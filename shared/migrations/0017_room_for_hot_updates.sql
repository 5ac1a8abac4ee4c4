-- A run's row is updated at every step of the run and a task's row when its attempt
-- ends. Neither update changes an indexed column until the run ends, so PostgreSQL can
-- write it as a heap-only tuple (no new entry in any of the row's indexes: `runs` has
-- eleven) — but only when the new version fits on the same page. At the default
-- fillfactor (100) the pages that new runs were just inserted into are full, and two of
-- a run's three step updates went to every index (BENCHMARKS.md, "Where the WAL goes").
-- Leave a fifth of each new page free for those updates. Existing pages are unchanged.
ALTER TABLE runs SET (fillfactor = 80);
ALTER TABLE tasks SET (fillfactor = 80);
