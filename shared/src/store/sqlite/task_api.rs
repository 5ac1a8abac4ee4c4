//! The task API's reads and task logs on SQLite (see [`crate::store::task_api`]).

use async_trait::async_trait;
use uuid::Uuid;

use super::SqliteStore;
use crate::store::backend::TaskApiStore;
use crate::store::task_api::SELECT_TASK_WITH_RUN;
use crate::store::task_api::{TaskLog, TaskWithRun};
use crate::Result;

#[async_trait]
impl TaskApiStore for SqliteStore {
    /// Task `task_id` with its run's name; `None` for an unknown task.
    async fn task_with_run(&self, task_id: Uuid) -> Result<Option<TaskWithRun>> {
        Ok(
            sqlx::query_as::<_, TaskWithRun>(&format!(
                "{SELECT_TASK_WITH_RUN} WHERE t.task_id = ?"
            ))
            .bind(task_id)
            .fetch_optional(&self.pool)
            .await?,
        )
    }

    /// One read each: `weft dev`'s reads are local and cheap.
    async fn tasks_with_runs(&self, task_ids: &[Uuid]) -> Result<Vec<TaskWithRun>> {
        let mut found = Vec::with_capacity(task_ids.len());
        for task_id in task_ids {
            found.extend(self.task_with_run(*task_id).await?);
        }
        Ok(found)
    }

    /// Appends `lines` to the log of `task_id`, in order, in one transaction.
    async fn append_task_logs(&self, task_id: Uuid, lines: &[TaskLog]) -> Result<()> {
        if lines.is_empty() {
            return Ok(());
        }
        let mut tx = self.writer.begin().await?;
        for line in lines {
            sqlx::query("INSERT INTO task_logs (task_id, log, created_time) VALUES (?, ?, ?)")
                .bind(task_id)
                .bind(&line.log)
                .bind(line.created_time)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// The log of `task_id`, in the order it was appended.
    async fn task_logs(&self, task_id: Uuid) -> Result<Vec<TaskLog>> {
        Ok(sqlx::query_as::<_, TaskLog>(
            "SELECT log, created_time FROM task_logs WHERE task_id = ? ORDER BY seq",
        )
        .bind(task_id)
        .fetch_all(&self.pool)
        .await?)
    }
}
