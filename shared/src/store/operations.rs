//! Verdicts on operator commands (terminate, skip, reset, pause, resume), and the run
//! chain a reset builds.
//!
//! The gateway cannot answer an operator from what it reads before publishing: two
//! operators resetting the same run at once would both see it RUNNING. The decider, the
//! single writer, records its verdict under the request's id in the transaction that
//! applies the command (or alone, for a refusal), and the gateway waits for that row.

use async_trait::async_trait;

use super::backend::OperationStore;
use super::pg::PgStore;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::Row;
use uuid::Uuid;

use crate::Result;

/// The decider's verdict on one operator command.
#[derive(Debug, Clone, PartialEq)]
pub struct OperationOutcome {
    /// The gateway's request id.
    pub request_id: Uuid,
    /// The workflow it was for.
    pub workflow_id: String,
    /// The HTTP status the operator gets (200, or 400/404/409).
    pub status: i16,
    /// The answer's body: `{"runId", ...}` when applied, `{"code", "message"}` when refused.
    pub body: Value,
}

/// One run of a workflow's chain (`GET /api/workflow/{id}/runs`).
#[derive(Debug, Clone, PartialEq)]
pub struct ChainedRun {
    /// The run.
    pub run_id: Uuid,
    /// Its status.
    pub status: String,
    /// The run a reset continued from, and the task it went back to.
    pub reset_from: Option<(Uuid, String)>,
    /// Whether it is the current run.
    pub is_current: bool,
    /// When it started.
    pub start_time: DateTime<Utc>,
    /// When it ended.
    pub end_time: Option<DateTime<Utc>>,
}

/// First and last pause between two looks at the outcome table.
pub(super) const FIRST_POLL: Duration = Duration::from_millis(2);
pub(super) const MAX_POLL: Duration = Duration::from_millis(100);

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
