//! The task API's reads and writes on PostgreSQL (see [`crate::store::task_api`]).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::PgStore;
use crate::store::backend::TaskApiStore;
use crate::store::task_api::SELECT_TASK_WITH_RUN;
use crate::store::task_api::{TaskLog, TaskWithRun};
use crate::Result;

#[async_trait]
impl TaskApiStore for PgStore {
    /// Task `task_id` with its run's name (primary keys of `tasks` and `runs`); `None` for
    /// an unknown task.
    async fn task_with_run(&self, task_id: Uuid) -> Result<Option<TaskWithRun>> {
        Ok(sqlx::query_as::<_, TaskWithRun>(&format!(
            "{SELECT_TASK_WITH_RUN} WHERE t.task_id = $1"
        ))
        .bind(task_id)
        .fetch_optional(&self.pool)
        .await?)
    }

    async fn tasks_with_runs(&self, task_ids: &[Uuid]) -> Result<Vec<TaskWithRun>> {
        if task_ids.is_empty() {
            return Ok(Vec::new());
        }
        Ok(sqlx::query_as::<_, TaskWithRun>(&format!(
            "{SELECT_TASK_WITH_RUN} WHERE t.task_id = ANY($1)"
        ))
        .bind(task_ids)
        .fetch_all(&self.pool)
        .await?)
    }

    /// Appends `lines` to the log of `task_id`, in order, in one statement.
    async fn append_task_logs(&self, task_id: Uuid, lines: &[TaskLog]) -> Result<()> {
        if lines.is_empty() {
            return Ok(());
        }
        let texts: Vec<&str> = lines.iter().map(|l| l.log.as_str()).collect();
        let times: Vec<DateTime<Utc>> = lines.iter().map(|l| l.created_time).collect();
        sqlx::query(
            "INSERT INTO task_logs (task_id, log, created_time)
             SELECT $1, x.l, x.t
             FROM UNNEST($2::text[], $3::timestamptz[]) WITH ORDINALITY AS x(l, t, n)
             ORDER BY x.n",
        )
        .bind(task_id)
        .bind(&texts)
        .bind(&times)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// The log of `task_id`, in the order it was appended.
    async fn task_logs(&self, task_id: Uuid) -> Result<Vec<TaskLog>> {
        Ok(sqlx::query_as::<_, TaskLog>(
            "SELECT log, created_time FROM task_logs WHERE task_id = $1 ORDER BY seq",
        )
        .bind(task_id)
        .fetch_all(&self.pool)
        .await?)
    }
}
