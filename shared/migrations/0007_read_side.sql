-- Read side (issue 5): payload sizes per task and per run, and the indexes of search and
-- statistics. Sizes are STORED generated columns, so the decider's commit statement does
-- not change: PostgreSQL computes them when a row is written. They measure the JSON
-- text PostgreSQL renders (`jsonb::text`), which is what an API answer carries.

ALTER TABLE tasks
    ADD COLUMN input_bytes  INT GENERATED ALWAYS AS (octet_length(input::text)) STORED,
    ADD COLUMN output_bytes INT GENERATED ALWAYS AS (octet_length(output::text)) STORED;

ALTER TABLE runs
    ADD COLUMN input_bytes  INT GENERATED ALWAYS AS (octet_length(input::text)) STORED,
    ADD COLUMN output_bytes INT GENERATED ALWAYS AS (octet_length(output::text)) STORED;

-- Search lists current runs (one per workflow id), newest first; each filter of the
-- query subset has a partial index whose order is the answer's order, so a page costs
-- its size, not the table's.
CREATE INDEX runs_search_by_start ON runs (start_time DESC, run_id DESC) WHERE is_current;
CREATE INDEX runs_search_by_status ON runs (status, start_time DESC, run_id DESC)
    WHERE is_current;
CREATE INDEX runs_search_by_name ON runs (workflow_name, start_time DESC, run_id DESC)
    WHERE is_current;
-- Free text: exact or prefix (`abc*`) match on the correlation id (the workflow id has
-- `runs_by_workflow`; text_pattern_ops serves LIKE 'abc%' in any collation).
CREATE INDEX runs_search_by_correlation ON runs (correlation_id text_pattern_ops)
    WHERE is_current AND correlation_id IS NOT NULL;
CREATE INDEX runs_search_by_workflow_prefix ON runs (workflow_id text_pattern_ops)
    WHERE is_current;
