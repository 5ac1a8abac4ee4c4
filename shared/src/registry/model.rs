//! The registry's vocabulary: an attempt's status, its stored row, and how a status
//! answers a heartbeat.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use crate::messages::{HeartbeatAction, HeartbeatAnswer};

/// The status of one attempt in the registry (`task_check.status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum AttemptStatus {
    /// The decider scheduled it; no worker has claimed it yet. Not watched by the
    /// scanner (a task waiting for a worker is the decider's poll timeout's business).
    Scheduled,
    /// A worker runs it; heartbeats answer CONTINUE and the scanner watches it.
    Running,
    /// Its worker published a successful result.
    Completed,
    /// Its worker published a failure.
    Failed,
    /// Its heartbeats stopped for longer than its heartbeat timeout.
    TimedOut,
    /// The decider stopped it (terminate, reset, skip, fork cancel).
    Stopped,
}

impl AttemptStatus {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptStatus::Scheduled => "SCHEDULED",
            AttemptStatus::Running => "RUNNING",
            AttemptStatus::Completed => "COMPLETED",
            AttemptStatus::Failed => "FAILED",
            AttemptStatus::TimedOut => "TIMED_OUT",
            AttemptStatus::Stopped => "STOPPED",
        }
    }

    /// Parses a stored name.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "SCHEDULED" => AttemptStatus::Scheduled,
            "RUNNING" => AttemptStatus::Running,
            "COMPLETED" => AttemptStatus::Completed,
            "FAILED" => AttemptStatus::Failed,
            "TIMED_OUT" => AttemptStatus::TimedOut,
            "STOPPED" => AttemptStatus::Stopped,
            _ => return None,
        })
    }

    /// Whether the attempt has not ended yet (scheduled or running).
    pub fn is_open(self) -> bool {
        matches!(self, AttemptStatus::Scheduled | AttemptStatus::Running)
    }

    /// The status a worker's result status (`COMPLETED`, `FAILED`,
    /// `FAILED_WITH_TERMINAL_ERROR`) ends an attempt with; `None` for anything else.
    pub fn from_result(status: &str) -> Option<Self> {
        match status {
            "COMPLETED" => Some(AttemptStatus::Completed),
            "FAILED" | "FAILED_WITH_TERMINAL_ERROR" => Some(AttemptStatus::Failed),
            _ => None,
        }
    }

    /// What a heartbeat of an attempt in this status is answered.
    pub fn answer(self, reason: Option<&str>) -> HeartbeatAnswer {
        let stop = |why: &str| HeartbeatAnswer {
            action: HeartbeatAction::Stop,
            reason: Some(reason.filter(|r| !r.is_empty()).unwrap_or(why).to_owned()),
            retry_after_ms: None,
        };
        match self {
            // A heartbeat for an attempt nobody claimed: a worker that runs it without a
            // claim (HTTP heartbeats of a polled task race its claim) is not stopped.
            AttemptStatus::Scheduled | AttemptStatus::Running => HeartbeatAnswer {
                action: HeartbeatAction::Continue,
                reason: None,
                retry_after_ms: None,
            },
            AttemptStatus::Completed | AttemptStatus::Failed => HeartbeatAnswer {
                action: HeartbeatAction::Stop,
                reason: Some("already finished".to_owned()),
                retry_after_ms: None,
            },
            AttemptStatus::TimedOut => stop("timed out"),
            AttemptStatus::Stopped => stop("stopped"),
        }
    }
}

/// The answer for a task the registry does not know.
pub fn not_found() -> HeartbeatAnswer {
    HeartbeatAnswer {
        action: HeartbeatAction::NotFound,
        reason: Some("unknown task".to_owned()),
        retry_after_ms: None,
    }
}

/// The answer when the service is overloaded: retry soon.
pub fn throttled() -> HeartbeatAnswer {
    HeartbeatAnswer {
        action: HeartbeatAction::Throttled,
        reason: None,
        retry_after_ms: None,
    }
}

/// What the registry knows of one attempt: its `task_check` row, with the last heartbeat
/// and details taken from Redis when Redis has newer ones than PostgreSQL.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskCheck {
    /// The task.
    pub task_id: Uuid,
    /// The attempt (from 1).
    pub attempt: i32,
    /// The workflow (empty while only a stop or a result is known).
    pub workflow_id: String,
    /// The run.
    pub run_id: Option<Uuid>,
    /// The task's (definition) name.
    pub task_name: String,
    /// The task's reference name.
    pub task_ref: String,
    /// Who runs it.
    pub worker_id: Option<String>,
    /// Its status.
    pub status: AttemptStatus,
    /// Why it was stopped or timed out.
    pub stop_reason: Option<String>,
    /// Size of the input in bytes of JSON.
    pub input_bytes: i64,
    /// Size of the output in bytes of JSON, once finished.
    pub output_bytes: Option<i64>,
    /// The last progress details a heartbeat carried.
    pub details: Option<Value>,
    /// Heartbeat timeout in seconds (0: not watched).
    pub timeout_seconds: i64,
    /// When the worker started it (its clock).
    pub started_at: Option<DateTime<Utc>>,
    /// When the row was created.
    pub created_at: DateTime<Utc>,
    /// When the row was last written.
    pub updated_at: DateTime<Utc>,
    /// The last heartbeat known.
    pub last_heartbeat_at: Option<DateTime<Utc>>,
    /// The deadline as stored in PostgreSQL (may lag the last heartbeat by one write
    /// interval).
    pub expires_at: Option<DateTime<Utc>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_round_trip_and_answer() {
        for s in [
            AttemptStatus::Running,
            AttemptStatus::Completed,
            AttemptStatus::Failed,
            AttemptStatus::TimedOut,
            AttemptStatus::Stopped,
        ] {
            assert_eq!(AttemptStatus::parse(s.as_str()), Some(s));
        }
        let run = AttemptStatus::Running.answer(None);
        assert_eq!(run.action, HeartbeatAction::Continue);
        let stop = AttemptStatus::Stopped.answer(Some("terminated"));
        assert_eq!(stop.action, HeartbeatAction::Stop);
        assert_eq!(stop.reason.as_deref(), Some("terminated"));
        let done = AttemptStatus::Completed.answer(None);
        assert_eq!(done.reason.as_deref(), Some("already finished"));
        assert_eq!(
            AttemptStatus::from_result("FAILED_WITH_TERMINAL_ERROR"),
            Some(AttemptStatus::Failed)
        );
        assert_eq!(AttemptStatus::from_result("IN_PROGRESS"), None);
    }
}
