//! Verdicts on operator commands (terminate, skip, reset, pause, resume), and the run
//! chain a reset builds.
//!
//! The gateway cannot answer an operator from what it reads before publishing: two
//! operators resetting the same run at once would both see it RUNNING. The decider, the
//! single writer, records its verdict under the request's id in the transaction that
//! applies the command (or alone, for a refusal), and the gateway waits for that row.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

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

/// An `operation_outcomes` row as both backends read it.
#[derive(sqlx::FromRow)]
pub(super) struct OutcomeRow {
    workflow_id: String,
    status: i16,
    body: Value,
}

impl OutcomeRow {
    /// The verdict on `request_id` this row stores.
    pub(super) fn into_outcome(self, request_id: Uuid) -> OperationOutcome {
        OperationOutcome {
            request_id,
            workflow_id: self.workflow_id,
            status: self.status,
            body: self.body,
        }
    }
}

/// A `runs` row of a chain as both backends read it.
#[derive(sqlx::FromRow)]
pub(super) struct ChainRow {
    run_id: Uuid,
    status: String,
    reset_from_run_id: Option<Uuid>,
    reset_task_ref: Option<String>,
    is_current: bool,
    start_time: DateTime<Utc>,
    end_time: Option<DateTime<Utc>>,
}

impl From<ChainRow> for ChainedRun {
    fn from(r: ChainRow) -> Self {
        Self {
            run_id: r.run_id,
            status: r.status,
            reset_from: r.reset_from_run_id.zip(r.reset_task_ref),
            is_current: r.is_current,
            start_time: r.start_time,
            end_time: r.end_time,
        }
    }
}
