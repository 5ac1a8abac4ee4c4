//! Read-side queries on PostgreSQL (see [`crate::store::reads`]).

use async_trait::async_trait;
use uuid::Uuid;

use super::PgStore;
use crate::store::backend::ReadStore;
use crate::store::reads::{EventView, RunView, TaskView};
use crate::Result;

const RUN_COLUMNS: &str = "run_id, workflow_id, workflow_name, workflow_version, status,
    sub_status, input, output, variables, correlation_id, parent_workflow_id, reason,
    failed_task_refs, start_time, end_time, update_time, is_current, pending_signals";

const TASKS_OF_RUN: &str = "SELECT task_id, run_id, workflow_id, task_ref, task_type, task_name,
    seq, iteration, attempt, status, input, output, reason, worker_id, scheduled_time,
    start_time, end_time, update_time, callback_after_seconds, domain
    FROM tasks WHERE run_id = $1 ORDER BY seq, iteration, attempt";

const TASKS_PAGE: &str = "SELECT task_id, run_id, workflow_id, task_ref, task_type, task_name,
    seq, iteration, attempt, status, input, output, reason, worker_id, scheduled_time,
    start_time, end_time, update_time, callback_after_seconds, domain
    FROM tasks WHERE run_id = $1 AND (cardinality($2::text[]) = 0 OR status = ANY($2))
    ORDER BY seq, iteration, attempt OFFSET $3 LIMIT $4";

/// The current run of `workflow_id`, read first in `tx`, which it makes one snapshot (a
/// repeatable-read, read-only transaction): what `tx` reads next is of the same moment.
async fn current_run_in_snapshot(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    workflow_id: &str,
) -> Result<Option<RunView>> {
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        .execute(&mut **tx)
        .await?;
    let sql = format!("SELECT {RUN_COLUMNS} FROM runs WHERE workflow_id = $1 AND is_current");
    Ok(sqlx::query_as::<_, RunView>(&sql)
        .bind(workflow_id)
        .fetch_optional(&mut **tx)
        .await?)
}

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
        let Some(run) = current_run_in_snapshot(&mut tx, workflow_id).await? else {
            return Ok(None);
        };
        let tasks = sqlx::query_as::<_, TaskView>(TASKS_OF_RUN)
            .bind(run.run_id)
            .fetch_all(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(Some((run, tasks)))
    }

    /// A page of the current run's tasks, read from one snapshot as
    /// [`Self::current_run_with_tasks`]: the count and the page by `tasks_by_run`.
    async fn current_run_tasks_page(
        &self,
        workflow_id: &str,
        statuses: &[String],
        start: i64,
        count: i64,
    ) -> Result<Option<(RunView, i64, Vec<TaskView>)>> {
        let mut tx = self.pool.begin().await?;
        let Some(run) = current_run_in_snapshot(&mut tx, workflow_id).await? else {
            return Ok(None);
        };
        let total: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM tasks
             WHERE run_id = $1 AND (cardinality($2::text[]) = 0 OR status = ANY($2))",
        )
        .bind(run.run_id)
        .bind(statuses)
        .fetch_one(&mut *tx)
        .await?;
        let tasks = sqlx::query_as::<_, TaskView>(TASKS_PAGE)
            .bind(run.run_id)
            .bind(statuses)
            .bind(start)
            .bind(count)
            .fetch_all(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(Some((run, total, tasks)))
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

    /// Up to `limit` events of `run_id` with `event_id > after`, in order; on the read
    /// replica when there is one (a page may lag behind the run).
    async fn history_page(&self, run_id: Uuid, after: i64, limit: i64) -> Result<Vec<EventView>> {
        self.lagging_read(|pool| async move {
            Ok(sqlx::query_as::<_, EventView>(
                "SELECT event_id, type, time, attributes FROM history_events
                 WHERE run_id = $1 AND event_id > $2 ORDER BY event_id LIMIT $3",
            )
            .bind(run_id)
            .bind(after)
            .bind(limit)
            .fetch_all(&pool)
            .await?)
        })
        .await
    }
}
