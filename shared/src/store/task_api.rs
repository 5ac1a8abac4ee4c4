//! What the gateway's task API reads and writes besides commands: a task with its run
//! (poll, results, task by id) and task execution logs (`task_logs`, migration 0006).

use chrono::{DateTime, Utc};

use super::reads::TaskView;

/// A task row with what its run adds.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct TaskWithRun {
    /// The task.
    #[sqlx(flatten)]
    pub task: TaskView,
    /// The run's definition name (Conductor's `workflowType`).
    pub workflow_name: String,
    /// The run's correlation id.
    pub correlation_id: Option<String>,
    /// Whether the run is its workflow's current one (false once a reset replaced it).
    #[sqlx(default)]
    pub run_is_current: bool,
}

/// The select of a [`TaskWithRun`] (both back-ends), a `WHERE` on `t.task_id` to follow.
pub(crate) const SELECT_TASK_WITH_RUN: &str =
    "SELECT t.task_id, t.run_id, t.workflow_id, t.task_ref, t.task_type, t.task_name,
            t.seq, t.iteration, t.attempt, t.status, t.input, t.output, t.reason,
            t.worker_id, t.scheduled_time, t.start_time, t.end_time, t.update_time,
            t.callback_after_seconds, t.domain,
            r.workflow_name, r.correlation_id, r.is_current AS run_is_current
     FROM tasks t JOIN runs r ON r.run_id = t.run_id";

/// One line of a task's execution log.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct TaskLog {
    /// The text.
    pub log: String,
    /// When it was written (as the worker says, or when it arrived).
    pub created_time: DateTime<Utc>,
}
