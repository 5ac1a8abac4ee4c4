//! Conductor's execution lookups and removal on SQLite (see
//! [`crate::store::executions`]).

use async_trait::async_trait;

use super::reads::{run_view, RUN_COLUMNS};
use super::SqliteStore;
use crate::store::backend::ExecutionStore;
use crate::store::executions::{removal_blocker, Removal, RunningFilter, MAX_LOOKUP};
use crate::store::poll_data::PollData;
use crate::store::reads::{RunView, TaskView};
use crate::{Error, Result};

#[async_trait]
impl ExecutionStore for SqliteStore {
    async fn runs_by_correlation(
        &self,
        name: &str,
        correlation_ids: &[String],
        include_closed: bool,
    ) -> Result<Vec<RunView>> {
        let ids = serde_json::to_string(correlation_ids)
            .map_err(|e| Error::Decode(format!("correlation ids: {e}")))?;
        let sql = format!(
            "SELECT {RUN_COLUMNS} FROM runs
             WHERE is_current AND correlation_id IN (SELECT value FROM json_each(?))
               AND workflow_name = ? AND (? OR status = 'RUNNING')
             ORDER BY start_time DESC, run_id DESC LIMIT ?"
        );
        sqlx::query(&sql)
            .bind(ids)
            .bind(name)
            .bind(include_closed)
            .bind(MAX_LOOKUP)
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(run_view)
            .collect()
    }

    async fn running_workflow_ids(
        &self,
        name: &str,
        version: i32,
        filter: &RunningFilter,
    ) -> Result<Vec<String>> {
        let query = match filter {
            RunningFilter::Running => sqlx::query_scalar(
                "SELECT workflow_id FROM runs
                 WHERE is_current AND workflow_name = ? AND status = 'RUNNING'
                   AND workflow_version = ?
                 ORDER BY start_time DESC, run_id DESC LIMIT ?",
            )
            .bind(name)
            .bind(version)
            .bind(MAX_LOOKUP),
            RunningFilter::StartedBetween { from, to } => sqlx::query_scalar(
                "SELECT workflow_id FROM runs
                 WHERE is_current AND workflow_name = ? AND workflow_version = ?
                   AND start_time BETWEEN ? AND ?
                 ORDER BY start_time DESC, run_id DESC LIMIT ?",
            )
            .bind(name)
            .bind(version)
            .bind(*from)
            .bind(*to)
            .bind(MAX_LOOKUP),
        };
        Ok(query.fetch_all(&self.pool).await?)
    }

    async fn pending_tasks(
        &self,
        task_type: &str,
        start: i64,
        count: i64,
    ) -> Result<Vec<TaskView>> {
        // `tasks_waiting_on_people`: the type's tasks by age; the status filters them.
        Ok(sqlx::query_as::<_, TaskView>(
            "SELECT task_id, run_id, workflow_id, task_ref, task_type, task_name, seq,
                 iteration, attempt, status, input, output, reason, worker_id,
                 scheduled_time, start_time, end_time, update_time
             FROM tasks
             WHERE task_type = ? AND task_type IN ('HUMAN', 'WAIT')
               AND status IN ('SCHEDULED', 'IN_PROGRESS')
             ORDER BY scheduled_time, task_id LIMIT ? OFFSET ?",
        )
        .bind(task_type)
        .bind(count)
        .bind(start)
        .fetch_all(&self.pool)
        .await?)
    }

    async fn record_poll_data(&self, polls: &[PollData]) -> Result<()> {
        if polls.is_empty() {
            return Ok(());
        }
        let mut tx = self.writer.begin().await?;
        for p in polls {
            sqlx::query(
                "INSERT INTO poll_data (task_name, domain, worker_id, last_poll_time)
                 VALUES (?, ?, ?, ?)
                 ON CONFLICT (task_name, domain) DO UPDATE
                     SET worker_id = excluded.worker_id,
                         last_poll_time = excluded.last_poll_time
                     WHERE poll_data.last_poll_time < excluded.last_poll_time",
            )
            .bind(&p.task_name)
            .bind(&p.domain)
            .bind(&p.worker_id)
            .bind(p.last_poll_time)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn poll_data(&self, task_name: Option<&str>) -> Result<Vec<PollData>> {
        Ok(sqlx::query_as::<_, PollData>(
            "SELECT task_name, domain, worker_id, last_poll_time FROM poll_data
             WHERE ?1 IS NULL OR task_name = ?1 ORDER BY task_name, domain",
        )
        .bind(task_name)
        .fetch_all(&self.pool)
        .await?)
    }

    async fn remove_workflow(&self, workflow_id: &str) -> Result<Removal> {
        // The write lock (BEGIN IMMEDIATE) keeps the decider's commits out meanwhile.
        let mut tx = self.writer.begin().await?;
        let status: Option<String> =
            sqlx::query_scalar("SELECT status FROM runs WHERE workflow_id = ? AND is_current")
                .bind(workflow_id)
                .fetch_optional(&mut *tx)
                .await?;
        let started = match status {
            Some(_) => false,
            None => sqlx::query_scalar::<_, String>(
                "SELECT workflow_id FROM workflow_starts WHERE workflow_id = ?",
            )
            .bind(workflow_id)
            .fetch_optional(&mut *tx)
            .await?
            .is_some(),
        };
        if let Some(blocker) = removal_blocker(status, started) {
            return Ok(blocker);
        }
        const RUNS: &str = "(SELECT run_id FROM runs WHERE workflow_id = ?)";
        for sql in [
            format!(
                "DELETE FROM task_logs WHERE task_id IN
                 (SELECT task_id FROM tasks WHERE run_id IN {RUNS})"
            ),
            format!("DELETE FROM tasks WHERE run_id IN {RUNS}"),
            format!("DELETE FROM history_events WHERE run_id IN {RUNS}"),
            format!("DELETE FROM timers WHERE run_id IN {RUNS}"),
            format!("DELETE FROM task_check WHERE run_id IN {RUNS}"),
            "DELETE FROM hook_deliveries WHERE workflow_id = ?".to_owned(),
            "DELETE FROM workflow_starts WHERE workflow_id = ?".to_owned(),
            "DELETE FROM runs WHERE workflow_id = ?".to_owned(),
        ] {
            sqlx::query(&sql)
                .bind(workflow_id)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(Removal::Removed)
    }
}
