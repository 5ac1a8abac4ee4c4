-- Execution logs of tasks (Conductor's TaskExecLog): lines HTTP workers send with
-- POST /api/tasks/{taskId}/log or in a TaskResult's `logs`, read back in order with
-- GET /api/tasks/{taskId}/log.

CREATE TABLE task_logs (
    task_id      UUID        NOT NULL,
    -- Insertion order within the task (a bigserial is enough: lines are only appended).
    seq          BIGSERIAL   NOT NULL,
    log          TEXT        NOT NULL,
    created_time TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (task_id, seq)
);
