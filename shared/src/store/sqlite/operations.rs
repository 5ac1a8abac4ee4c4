//! Verdicts on operator commands and run chains, on SQLite (see
//! [`crate::store::operations`]).

use std::time::Duration;

use async_trait::async_trait;
use uuid::Uuid;

use super::SqliteStore;
use crate::store::backend::OperationStore;
use crate::store::operations::{ChainRow, ChainedRun, OperationOutcome, OutcomeRow};
use crate::Result;

#[async_trait]
impl OperationStore for SqliteStore {
    /// The verdict recorded for `request_id`, if any.
    async fn operation_outcome(&self, request_id: Uuid) -> Result<Option<OperationOutcome>> {
        let row: Option<OutcomeRow> = sqlx::query_as(
            "SELECT workflow_id, status, body FROM operation_outcomes WHERE request_id = ?",
        )
        .bind(request_id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|r| r.into_outcome(request_id)))
    }

    /// Deletes verdicts older than `age` (by this process's clock, which is the store's),
    /// at most `limit` of them, oldest first; returns how many.
    async fn purge_operation_outcomes(&self, age: Duration, limit: i64) -> Result<u64> {
        let age = chrono::Duration::from_std(age).unwrap_or(chrono::Duration::days(1));
        let cutoff = chrono::Utc::now() - age;
        let done = sqlx::query(
            "DELETE FROM operation_outcomes WHERE request_id IN (
                 SELECT request_id FROM operation_outcomes
                 WHERE created_at < ? ORDER BY created_at LIMIT ?)",
        )
        .bind(cutoff)
        .bind(limit)
        .execute(&mut *self.writer.sqlx().await?)
        .await?;
        Ok(done.rows_affected())
    }

    /// Every run of `workflow_id`, oldest first.
    async fn run_chain(&self, workflow_id: &str) -> Result<Vec<ChainedRun>> {
        let rows: Vec<ChainRow> = sqlx::query_as(
            "SELECT run_id, status, reset_from_run_id, reset_task_ref, is_current, start_time,
                    end_time
             FROM runs WHERE workflow_id = ? ORDER BY start_time, is_current",
        )
        .bind(workflow_id)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(ChainedRun::from).collect())
    }
}
