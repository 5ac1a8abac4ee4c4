//! Conductor's execution lookups and removal on PostgreSQL (see
//! [`crate::store::executions`]).

use async_trait::async_trait;

use super::PgStore;
use crate::store::backend::ExecutionStore;
use crate::store::executions::{removal_blocker, Removal, RunningFilter, MAX_LOOKUP};
use crate::store::poll_data::PollData;
use crate::store::reads::{RunView, TaskView};
use crate::Result;

const RUN_COLUMNS: &str = "run_id, workflow_id, workflow_name, workflow_version, status,
    sub_status, input, output, variables, correlation_id, parent_workflow_id, reason,
    failed_task_refs, start_time, end_time, update_time, is_current";

#[async_trait]
impl ExecutionStore for PgStore {
    async fn runs_by_correlation(
        &self,
        name: &str,
        correlation_ids: &[String],
        include_closed: bool,
    ) -> Result<Vec<RunView>> {
        // `runs_search_by_correlation` finds the ids; the name and status filter the few.
        let sql = format!(
            "SELECT {RUN_COLUMNS} FROM runs
             WHERE is_current AND correlation_id = ANY($1) AND workflow_name = $2
               AND ($3 OR status = 'RUNNING')
             ORDER BY start_time DESC, run_id DESC LIMIT $4"
        );
        Ok(sqlx::query_as::<_, RunView>(&sql)
            .bind(correlation_ids)
            .bind(name)
            .bind(include_closed)
            .bind(MAX_LOOKUP)
            .fetch_all(&self.pool)
            .await?)
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
                 WHERE is_current AND workflow_name = $1 AND status = 'RUNNING'
                   AND workflow_version = $2
                 ORDER BY start_time DESC, run_id DESC LIMIT $3",
            )
            .bind(name)
            .bind(version)
            .bind(MAX_LOOKUP),
            RunningFilter::StartedBetween { from, to } => sqlx::query_scalar(
                "SELECT workflow_id FROM runs
                 WHERE is_current AND workflow_name = $1 AND workflow_version = $2
                   AND start_time BETWEEN $3 AND $4
                 ORDER BY start_time DESC, run_id DESC LIMIT $5",
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
             WHERE task_type = $1 AND task_type IN ('HUMAN', 'WAIT')
               AND status IN ('SCHEDULED', 'IN_PROGRESS')
             ORDER BY scheduled_time, task_id LIMIT $2 OFFSET $3",
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
        let col = |f: fn(&PollData) -> String| polls.iter().map(f).collect::<Vec<_>>();
        sqlx::query(
            "INSERT INTO poll_data (task_name, domain, worker_id, last_poll_time)
             SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], $4::timestamptz[])
             ON CONFLICT (task_name, domain) DO UPDATE
                 SET worker_id = EXCLUDED.worker_id, last_poll_time = EXCLUDED.last_poll_time
                 WHERE poll_data.last_poll_time < EXCLUDED.last_poll_time",
        )
        .bind(col(|p| p.task_name.clone()))
        .bind(col(|p| p.domain.clone()))
        .bind(col(|p| p.worker_id.clone()))
        .bind(polls.iter().map(|p| p.last_poll_time).collect::<Vec<_>>())
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn poll_data(&self, task_name: Option<&str>) -> Result<Vec<PollData>> {
        Ok(sqlx::query_as::<_, PollData>(
            "SELECT task_name, domain, worker_id, last_poll_time FROM poll_data
             WHERE $1::text IS NULL OR task_name = $1 ORDER BY task_name, domain",
        )
        .bind(task_name)
        .fetch_all(&self.pool)
        .await?)
    }

    async fn remove_workflow(&self, workflow_id: &str) -> Result<Removal> {
        let mut tx = self.pool.begin().await?;
        // The row lock holds off a decider commit to this run until the removal is done
        // (that commit then finds its version gone and reloads nothing).
        let status: Option<String> = sqlx::query_scalar(
            "SELECT status FROM runs WHERE workflow_id = $1 AND is_current FOR UPDATE",
        )
        .bind(workflow_id)
        .fetch_optional(&mut *tx)
        .await?;
        let started = match status {
            Some(_) => false,
            None => sqlx::query_scalar::<_, String>(
                "SELECT workflow_id FROM workflow_starts WHERE workflow_id = $1",
            )
            .bind(workflow_id)
            .fetch_optional(&mut *tx)
            .await?
            .is_some(),
        };
        if let Some(blocker) = removal_blocker(status, started) {
            return Ok(blocker);
        }
        sqlx::query(REMOVE_SQL)
            .bind(workflow_id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(Removal::Removed)
    }
}

/// Every row of one workflow, in one statement; each delete reaches its rows by an index
/// (`runs_by_workflow`, the history's primary key, `tasks_by_run`, `task_logs`' key,
/// `timers_by_run`, `task_check_by_run`, `hook_deliveries_by_workflow`).
const REMOVE_SQL: &str = "
WITH run_ids AS (
    SELECT run_id FROM runs WHERE workflow_id = $1
), task_ids AS (
    SELECT task_id FROM tasks WHERE run_id IN (SELECT run_id FROM run_ids)
), logs AS (
    DELETE FROM task_logs WHERE task_id IN (SELECT task_id FROM task_ids) RETURNING 1
), task_rows AS (
    DELETE FROM tasks WHERE run_id IN (SELECT run_id FROM run_ids) RETURNING 1
), events AS (
    DELETE FROM history_events WHERE run_id IN (SELECT run_id FROM run_ids) RETURNING 1
), timer_rows AS (
    DELETE FROM timers WHERE run_id IN (SELECT run_id FROM run_ids) RETURNING 1
), checks AS (
    DELETE FROM task_check WHERE run_id IN (SELECT run_id FROM run_ids) RETURNING 1
), hooks AS (
    DELETE FROM hook_deliveries WHERE workflow_id = $1 RETURNING 1
), starts AS (
    DELETE FROM workflow_starts WHERE workflow_id = $1 RETURNING 1
), run_rows AS (
    DELETE FROM runs WHERE workflow_id = $1 RETURNING 1
)
SELECT (SELECT count(*) FROM logs), (SELECT count(*) FROM task_rows),
    (SELECT count(*) FROM events), (SELECT count(*) FROM timer_rows),
    (SELECT count(*) FROM checks), (SELECT count(*) FROM hooks),
    (SELECT count(*) FROM starts), (SELECT count(*) FROM run_rows)";
