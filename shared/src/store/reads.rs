//! Read-side queries over what the decider writes (`runs`, `tasks`, `history_events`).
//!
//! Only reads: the decider is the single writer of run state (DESIGN.md §2). Each query
//! is served by an index of the schema: `runs_current_by_workflow`, `tasks_by_run`, and
//! the `history_events` primary key `(run_id, event_id)`.

use async_trait::async_trait;

use super::backend::ReadStore;
use super::pg::PgStore;
use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use crate::Result;

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

const RUN_COLUMNS: &str = "run_id, workflow_id, workflow_name, workflow_version, status,
    sub_status, input, output, variables, correlation_id, parent_workflow_id, reason,
    failed_task_refs, start_time, end_time, update_time, is_current";

const TASKS_OF_RUN: &str = "SELECT task_id, run_id, workflow_id, task_ref, task_type, task_name,
    seq, iteration, attempt, status, input, output, reason, worker_id, scheduled_time,
    start_time, end_time, update_time
    FROM tasks WHERE run_id = $1 ORDER BY seq, iteration, attempt";

#[async_trait]
impl ReadStore for PgStore {
    /// The current run of `workflow_id` (the newest of its reset chain), if it has one.
    async fn current_run(&self, workflow_id: &str) -> Result<Option<RunView>> {
        let sql = format!("SELECT {RUN_COLUMNS} FROM runs WHERE workflow_id = $1 AND is_current");
        Ok(sqlx::query_as::<_, RunView>(&sql)
            .bind(workflow_id)
            .fetch_optional(&self.pool)
            .await?)
    }

    /// The current run of `workflow_id` and its task rows, read from ONE snapshot (a
    /// repeatable-read transaction): the decider commits a run's status and its tasks
    /// together, and a reader must never see one without the other.
    async fn current_run_with_tasks(
        &self,
        workflow_id: &str,
    ) -> Result<Option<(RunView, Vec<TaskView>)>> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            .execute(&mut *tx)
            .await?;
        let sql = format!("SELECT {RUN_COLUMNS} FROM runs WHERE workflow_id = $1 AND is_current");
        let Some(run) = sqlx::query_as::<_, RunView>(&sql)
            .bind(workflow_id)
            .fetch_optional(&mut *tx)
            .await?
        else {
            return Ok(None);
        };
        let tasks = sqlx::query_as::<_, TaskView>(TASKS_OF_RUN)
            .bind(run.run_id)
            .fetch_all(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(Some((run, tasks)))
    }

    /// Run `run_id`, provided it belongs to `workflow_id`.
    async fn run_of_workflow(&self, workflow_id: &str, run_id: Uuid) -> Result<Option<RunView>> {
        let sql = format!("SELECT {RUN_COLUMNS} FROM runs WHERE run_id = $1 AND workflow_id = $2");
        Ok(sqlx::query_as::<_, RunView>(&sql)
            .bind(run_id)
            .bind(workflow_id)
            .fetch_optional(&self.pool)
            .await?)
    }

    /// The task rows of `run_id` in schedule order (`seq`, then iteration and attempt, so
    /// the order is total even if a row is ever re-used for a retry).
    async fn tasks_of_run(&self, run_id: Uuid) -> Result<Vec<TaskView>> {
        Ok(sqlx::query_as::<_, TaskView>(TASKS_OF_RUN)
            .bind(run_id)
            .fetch_all(&self.pool)
            .await?)
    }

    /// Up to `limit` events of `run_id` with `event_id > after`, in order.
    async fn history_page(&self, run_id: Uuid, after: i64, limit: i64) -> Result<Vec<EventView>> {
        Ok(sqlx::query_as::<_, EventView>(
            "SELECT event_id, type, time, attributes FROM history_events
             WHERE run_id = $1 AND event_id > $2 ORDER BY event_id LIMIT $3",
        )
        .bind(run_id)
        .bind(after)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?)
    }
}
