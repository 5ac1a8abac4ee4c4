//! Read-side queries over what the decider writes, on SQLite (see
//! [`crate::store::reads`]). Snapshots that must agree (a run and its tasks) are read
//! in one read transaction: under WAL it sees one committed state throughout.

use async_trait::async_trait;
use sqlx::sqlite::SqliteRow;
use sqlx::Row;
use uuid::Uuid;

use super::SqliteStore;
use crate::store::backend::ReadStore;
use crate::store::reads::{EventView, RunView, TaskView};
use crate::Result;

pub(super) const RUN_COLUMNS: &str = "run_id, workflow_id, workflow_name, workflow_version, status,
    sub_status, input, output, variables, correlation_id, parent_workflow_id, reason,
    failed_task_refs, start_time, end_time, update_time, is_current, pending_signals";

pub(super) const TASKS_OF_RUN: &str = "SELECT task_id, run_id, workflow_id, task_ref, task_type,
    task_name, seq, iteration, attempt, status, input, output, reason, worker_id,
    scheduled_time, start_time, end_time, update_time, callback_after_seconds, domain
    FROM tasks WHERE run_id = ? ORDER BY seq, iteration, attempt";

/// A `runs` row (selected with [`RUN_COLUMNS`]); `failed_task_refs` is a JSON array.
pub(super) fn run_view(r: &SqliteRow) -> Result<RunView> {
    let refs: String = r.try_get("failed_task_refs")?;
    Ok(RunView {
        run_id: r.try_get("run_id")?,
        workflow_id: r.try_get("workflow_id")?,
        workflow_name: r.try_get("workflow_name")?,
        workflow_version: r.try_get("workflow_version")?,
        status: r.try_get("status")?,
        sub_status: r.try_get("sub_status")?,
        input: r.try_get("input")?,
        output: r.try_get("output")?,
        variables: r.try_get("variables")?,
        correlation_id: r.try_get("correlation_id")?,
        parent_workflow_id: r.try_get("parent_workflow_id")?,
        reason: r.try_get("reason")?,
        failed_task_refs: super::string_array(&refs)?,
        start_time: r.try_get("start_time")?,
        end_time: r.try_get("end_time")?,
        update_time: r.try_get("update_time")?,
        is_current: r.try_get("is_current")?,
        pending_signals: r.try_get("pending_signals")?,
    })
}

/// The current run of `workflow_id`, read in `tx` (so what `tx` reads next is of the same
/// moment).
async fn current_run_in(
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
    workflow_id: &str,
) -> Result<Option<RunView>> {
    let sql = format!("SELECT {RUN_COLUMNS} FROM runs WHERE workflow_id = ? AND is_current");
    sqlx::query(&sql)
        .bind(workflow_id)
        .fetch_optional(&mut **tx)
        .await?
        .as_ref()
        .map(run_view)
        .transpose()
}

#[async_trait]
impl ReadStore for SqliteStore {
    /// The current run of `workflow_id` (the newest of its reset chain), if it has one.
    async fn current_run(&self, workflow_id: &str) -> Result<Option<RunView>> {
        let sql = format!("SELECT {RUN_COLUMNS} FROM runs WHERE workflow_id = ? AND is_current");
        sqlx::query(&sql)
            .bind(workflow_id)
            .fetch_optional(&self.pool)
            .await?
            .as_ref()
            .map(run_view)
            .transpose()
    }

    /// The current run of `workflow_id` and its task rows, read in one transaction (one
    /// snapshot): the decider commits a run's status and its tasks together.
    async fn current_run_with_tasks(
        &self,
        workflow_id: &str,
    ) -> Result<Option<(RunView, Vec<TaskView>)>> {
        let mut tx = self.pool.begin().await?;
        let Some(run) = current_run_in(&mut tx, workflow_id).await? else {
            return Ok(None);
        };
        let tasks = sqlx::query_as::<_, TaskView>(TASKS_OF_RUN)
            .bind(run.run_id)
            .fetch_all(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(Some((run, tasks)))
    }

    /// A page of the current run's tasks, read in one transaction as
    /// [`Self::current_run_with_tasks`]: the count and the page by `tasks_by_run`.
    async fn current_run_tasks_page(
        &self,
        workflow_id: &str,
        statuses: &[String],
        start: i64,
        count: i64,
    ) -> Result<Option<(RunView, i64, Vec<TaskView>)>> {
        let mut tx = self.pool.begin().await?;
        let Some(run) = current_run_in(&mut tx, workflow_id).await? else {
            return Ok(None);
        };
        let of_status = if statuses.is_empty() {
            String::new()
        } else {
            format!(" AND status IN ({})", vec!["?"; statuses.len()].join(", "))
        };
        let count_sql = format!("SELECT count(*) FROM tasks WHERE run_id = ?{of_status}");
        let mut total = sqlx::query_scalar::<_, i64>(&count_sql).bind(run.run_id);
        for s in statuses {
            total = total.bind(s);
        }
        let total = total.fetch_one(&mut *tx).await?;
        let page_sql = format!(
            "SELECT task_id, run_id, workflow_id, task_ref, task_type, task_name, seq,
             iteration, attempt, status, input, output, reason, worker_id, scheduled_time,
             start_time, end_time, update_time, callback_after_seconds, domain
             FROM tasks WHERE run_id = ?{of_status}
             ORDER BY seq, iteration, attempt LIMIT ? OFFSET ?"
        );
        let mut page = sqlx::query_as::<_, TaskView>(&page_sql).bind(run.run_id);
        for s in statuses {
            page = page.bind(s);
        }
        let tasks = page.bind(count).bind(start).fetch_all(&mut *tx).await?;
        tx.commit().await?;
        Ok(Some((run, total, tasks)))
    }

    /// Run `run_id`, provided it belongs to `workflow_id`.
    async fn run_of_workflow(&self, workflow_id: &str, run_id: Uuid) -> Result<Option<RunView>> {
        let sql = format!("SELECT {RUN_COLUMNS} FROM runs WHERE run_id = ? AND workflow_id = ?");
        sqlx::query(&sql)
            .bind(run_id)
            .bind(workflow_id)
            .fetch_optional(&self.pool)
            .await?
            .as_ref()
            .map(run_view)
            .transpose()
    }

    /// The task rows of `run_id` in schedule order (`seq`, then iteration and attempt).
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
             WHERE run_id = ? AND event_id > ? ORDER BY event_id LIMIT ?",
        )
        .bind(run_id)
        .bind(after)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?)
    }
}
