-- Conductor's poll data (GET /api/tasks/queue/polldata): per task type (and domain, which
-- Weft does not have: always ''), the last worker that took work and when. Written at most
-- once a second per task type by each gateway (HTTP polls) and heartbeat service (claims).
CREATE TABLE poll_data (
    task_name      TEXT        NOT NULL,
    domain         TEXT        NOT NULL DEFAULT '',
    worker_id      TEXT        NOT NULL,
    last_poll_time TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (task_name, domain)
);
