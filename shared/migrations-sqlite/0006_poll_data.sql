-- Conductor's poll data; see the PostgreSQL migration.
CREATE TABLE poll_data (
    task_name      TEXT NOT NULL,
    domain         TEXT NOT NULL DEFAULT '',
    worker_id      TEXT NOT NULL,
    last_poll_time TEXT NOT NULL,
    PRIMARY KEY (task_name, domain)
);
