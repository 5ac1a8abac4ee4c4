//! Read-side queries over what the decider writes (`runs`, `tasks`, `history_events`).
//!
//! Only reads: the decider is the single writer of run state (DESIGN.md §2). Each query
//! is served by an index of the schema: `runs_current_by_workflow`, `tasks_by_run`, and
//! the `history_events` primary key `(run_id, event_id)`.

use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

/// A run's materialised state.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct RunView {
    /// The run.
    pub run_id: Uuid,
    /// Its workflow.
    pub workflow_id: String,
    /// Definition name.
    pub workflow_name: String,
    /// Definition version.
    pub workflow_version: i32,
    /// Workflow status (RUNNING, COMPLETED, …).
    pub status: String,
    /// Business sub-status (QUEUING, RUNNING, …).
    pub sub_status: String,
    /// Workflow input.
    pub input: Value,
    /// Workflow output, once shaped.
    pub output: Option<Value>,
    /// Workflow variables.
    pub variables: Value,
    /// The caller's correlation id.
    pub correlation_id: Option<String>,
    /// The parent run's workflow id.
    pub parent_workflow_id: Option<String>,
    /// Why the run failed or was terminated.
    pub reason: Option<String>,
    /// The tasks whose failure failed the run.
    pub failed_task_refs: Vec<String>,
    /// When the run started.
    pub start_time: DateTime<Utc>,
    /// When it ended.
    pub end_time: Option<DateTime<Utc>>,
    /// Last change.
    pub update_time: DateTime<Utc>,
    /// Whether this is the newest run of its workflow.
    pub is_current: bool,
    /// Signals kept for a task the run has not reached (`[{name, payload}]`), if any;
    /// once the run ended, those no task consumed. Read with the run itself, not by
    /// searches (absent from their columns).
    #[sqlx(default)]
    pub pending_signals: Option<Value>,
}

/// One task row of a run.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct TaskView {
    /// The task.
    pub task_id: Uuid,
    /// Its run.
    pub run_id: Uuid,
    /// Its workflow.
    pub workflow_id: String,
    /// Reference name.
    pub task_ref: String,
    /// Type.
    pub task_type: String,
    /// (Definition) name.
    pub task_name: String,
    /// Position in the run's schedule order.
    pub seq: i32,
    /// Loop iteration (0 outside loops).
    pub iteration: i32,
    /// Attempt, from 1.
    pub attempt: i32,
    /// Task status.
    pub status: String,
    /// Resolved input.
    pub input: Value,
    /// Output, once any.
    pub output: Option<Value>,
    /// Why it failed.
    pub reason: Option<String>,
    /// Who ran it.
    pub worker_id: Option<String>,
    /// When it was scheduled.
    pub scheduled_time: DateTime<Utc>,
    /// When a worker started it.
    pub start_time: Option<DateTime<Utc>>,
    /// When it ended.
    pub end_time: Option<DateTime<Utc>>,
    /// Last change.
    pub update_time: DateTime<Utc>,
    /// Conductor's `callbackAfterSeconds` (0 where a query leaves it out).
    #[sqlx(default)]
    pub callback_after_seconds: i64,
    /// The domain of a worker's task (none where a query leaves it out).
    #[sqlx(default)]
    pub domain: Option<String>,
}

/// One history event.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct EventView {
    /// Position in the run's history, from 1.
    pub event_id: i64,
    /// The event type, e.g. `TaskScheduled`.
    #[sqlx(rename = "type")]
    pub kind: String,
    /// When it happened.
    pub time: DateTime<Utc>,
    /// Its attributes.
    pub attributes: Value,
}
