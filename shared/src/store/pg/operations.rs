//! Operator verdicts and run chains on PostgreSQL (see [`crate::store::operations`]).

use std::time::Duration;

use async_trait::async_trait;
use sqlx::Row;
use uuid::Uuid;

use super::PgStore;
use crate::store::backend::OperationStore;
use crate::store::operations::{ChainedRun, OperationOutcome};
use crate::Result;

#[async_trait]
impl OperationStore for PgStore {
    /// The verdict recorded for `request_id`, if any.
    async fn operation_outcome(&self, request_id: Uuid) -> Result<Option<OperationOutcome>> {
        let row = sqlx::query(
            "SELECT workflow_id, status, body FROM operation_outcomes WHERE request_id = $1",
        )
        .bind(request_id)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| {
            Ok(OperationOutcome {
                request_id,
                workflow_id: r.try_get("workflow_id")?,
                status: r.try_get("status")?,
                body: r.try_get("body")?,
            })
        })
        .transpose()
    }

    /// Deletes verdicts older than `age`, at most `limit` of them; returns how many.
    async fn purge_operation_outcomes(&self, age: Duration, limit: i64) -> Result<u64> {
        let age = chrono::Duration::from_std(age).unwrap_or(chrono::Duration::days(1));
        let done = sqlx::query(
            "DELETE FROM operation_outcomes WHERE request_id IN (
                 SELECT request_id FROM operation_outcomes
                 WHERE created_at < now() - $1::interval ORDER BY created_at LIMIT $2)",
        )
        .bind(age)
        .bind(limit)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected())
    }

    /// Every run of `workflow_id`, oldest first.
    async fn run_chain(&self, workflow_id: &str) -> Result<Vec<ChainedRun>> {
        let rows = sqlx::query(
            "SELECT run_id, status, reset_from_run_id, reset_task_ref, is_current, start_time,
                    end_time
             FROM runs WHERE workflow_id = $1 ORDER BY start_time, is_current",
        )
        .bind(workflow_id)
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .map(|r| {
                let from: Option<Uuid> = r.try_get("reset_from_run_id")?;
                let task_ref: Option<String> = r.try_get("reset_task_ref")?;
                Ok(ChainedRun {
                    run_id: r.try_get("run_id")?,
                    status: r.try_get("status")?,
                    reset_from: from.zip(task_ref),
                    is_current: r.try_get("is_current")?,
                    start_time: r.try_get("start_time")?,
                    end_time: r.try_get("end_time")?,
                })
            })
            .collect()
    }
}
