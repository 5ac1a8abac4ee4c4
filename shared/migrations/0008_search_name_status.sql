-- Search (issue 5): `workflowType = x AND status IN (…)`, the list page of a UI filtered
-- by definition and status, walks one index in the answer's order per status value;
-- without it, a rare (name, status) pair scans every run of the name or of the status.
CREATE INDEX runs_search_by_name_status
    ON runs (workflow_name, status, start_time DESC, run_id DESC) WHERE is_current;
