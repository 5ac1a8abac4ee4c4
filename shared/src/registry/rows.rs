//! What the registry reads from and writes to its store (`task_check`), whichever the
//! backend ([`crate::store::backend::RegistryStore`]).

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::limits::{AttemptLimits, Deferral, CONCURRENCY_RETRY_AFTER};
use super::model::{AttemptStatus, TaskCheck};
use crate::messages::{AttemptRef, ClaimAttempt};
use crate::store::outbox::OutboxMessage;
use crate::{Error, Result};

/// An attempt's status as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Stored {
    /// The task.
    pub task_id: Uuid,
    /// Its attempt number.
    pub attempt: i32,
    /// The attempt's status.
    pub status: AttemptStatus,
    /// Why it was stopped or ended, if it was.
    pub reason: Option<String>,
    /// Heartbeat timeout (0: none).
    pub timeout_seconds: i64,
}

/// The outcome of one claim: the attempt's row afterwards, and whether the claim got it.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimOutcome {
    /// The attempt's status afterwards (RUNNING when claimed; when refused, what stopped
    /// the claim: STOPPED, an end, or RUNNING held by another worker; SCHEDULED when
    /// limited or deferred).
    pub stored: Stored,
    /// The attempt is now the claimant's.
    pub claimed: bool,
    /// Set by the first step of a claim ([`RegistryStore::claim_many`]) for an attempt
    /// whose row is SCHEDULED under limits: not claimed yet, its claim goes on to the
    /// limited path ([`RegistryStore::claim_limited`]), which decides it.
    ///
    /// [`RegistryStore::claim_many`]: crate::store::backend::RegistryStore::claim_many
    /// [`RegistryStore::claim_limited`]: crate::store::backend::RegistryStore::claim_limited
    pub limited: Option<Limited>,
    /// The attempt is over a limit of its task: it stays SCHEDULED and the claimant is to
    /// come back later.
    pub deferred: Option<Deferral>,
}

/// What the limited path needs of an attempt's row: the task name the limits count
/// (the row's, as the decider wrote it, not the claimant's word) and the limits.
#[derive(Debug, Clone, PartialEq)]
pub struct Limited {
    /// The task name whose attempts the limits count.
    pub task_name: String,
    /// The limits the decider wrote.
    pub limits: AttemptLimits,
}

/// A claim on its way through the limited path.
#[derive(Debug, Clone, PartialEq)]
pub struct LimitedClaim {
    /// The claim.
    pub claim: ClaimAttempt,
    /// Its row's task name and limits.
    pub limited: Limited,
}

impl ClaimOutcome {
    /// The answer the claimant gets: CONTINUE when claimed, DEFER (with when to come
    /// back) when over a limit, STOP with the reason when refused.
    pub fn answer(&self) -> crate::messages::HeartbeatAnswer {
        use crate::messages::{HeartbeatAction, HeartbeatAnswer};
        if self.claimed {
            return HeartbeatAnswer::new(HeartbeatAction::Continue, None);
        }
        if let Some(d) = &self.deferred {
            return HeartbeatAnswer {
                action: HeartbeatAction::Defer,
                reason: Some(d.reason.clone()),
                retry_after_ms: Some(d.retry_after.as_millis().try_into().unwrap_or(u64::MAX)),
            };
        }
        if self.limited.is_some() {
            // Not decided (the limited path did not run): come back, nothing was spent.
            return HeartbeatAnswer {
                action: HeartbeatAction::Defer,
                reason: Some("limited task not judged yet".to_owned()),
                retry_after_ms: Some(CONCURRENCY_RETRY_AFTER.as_millis() as u64),
            };
        }
        match self.stored.status {
            AttemptStatus::Scheduled | AttemptStatus::Running => HeartbeatAnswer::new(
                HeartbeatAction::Stop,
                Some("claimed by another worker".to_owned()),
            ),
            other => other.answer(self.stored.reason.as_deref()),
        }
    }
}

/// A heartbeat to write to the store.
#[derive(Debug, Clone)]
pub struct BeatWrite {
    /// The task.
    pub task_id: Uuid,
    /// Its attempt number.
    pub attempt: i32,
    /// When (ms since the epoch, cache clock); `None`: now, by the store's clock.
    pub at_ms: Option<i64>,
    /// Progress details (JSON text) to keep; `None` keeps the stored ones.
    pub details: Option<String>,
}

/// How one attempt ends.
#[derive(Debug, Clone, Copy)]
pub struct End<'a> {
    /// The attempt.
    pub attempt: AttemptRef,
    /// Its final status.
    pub status: AttemptStatus,
    /// Why, when stopped or failed.
    pub reason: Option<&'a str>,
    /// Size of its output, when it completed.
    pub output_bytes: Option<i64>,
}

/// What the heartbeat cache knows of an attempt's liveness, for the scanner.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Liveness {
    /// The cache's clock now, ms.
    pub now_ms: i64,
    /// The last heartbeat of the asked task, ms; `None` when the cache has no entry.
    pub last_ms: Option<i64>,
}

/// A RUNNING attempt past its stored deadline, as the scanner reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct ScanCandidate {
    /// The task.
    pub task_id: Uuid,
    /// Its attempt number.
    pub attempt: i32,
    /// The workflow it belongs to.
    pub workflow_id: String,
    /// Its run, when known.
    pub run_id: Option<Uuid>,
    /// Routing key its result goes to ('' = the workflow's shard).
    pub reply_to: String,
    /// Heartbeat timeout, seconds.
    pub timeout_seconds: i64,
    /// The stored last heartbeat, ms since the epoch.
    pub last_heartbeat_ms: Option<i64>,
    /// The stored deadline passed by more than a write interval (the most it can lag).
    pub surely_passed: bool,
}

/// Which attempts a scan judges, and what becomes of those it finds expired.
#[derive(Debug, Clone, Copy)]
pub enum ScanScope<'a> {
    /// Every RUNNING attempt past its stored deadline; the expired ones are timed out.
    TimeOut,
    /// Every RUNNING attempt past its stored deadline; the expired ones are only reported
    /// ([`ScanOutcome::suspects`]), to be confirmed once every heartbeat queued before now
    /// has been read (docs/heartbeats.md, "No time-out while a heartbeat waits").
    Suspect,
    /// Only these attempts (suspects of an earlier scan), each judged again: timed out if
    /// still expired.
    Confirm(&'a [crate::messages::AttemptRef]),
}

impl ScanScope<'_> {
    /// The task ids the backend restricts its read to (`None`: every candidate).
    pub fn only(&self) -> Option<Vec<Uuid>> {
        match self {
            ScanScope::Confirm(attempts) => Some(attempts.iter().map(|a| a.task_id).collect()),
            _ => None,
        }
    }

    /// Whether `c` is within the scope (a confirmation names attempts, not tasks).
    pub fn covers(&self, c: &ScanCandidate) -> bool {
        match self {
            ScanScope::Confirm(attempts) => attempts
                .iter()
                .any(|a| a.task_id == c.task_id && a.attempt == c.attempt),
            _ => true,
        }
    }
}

/// What one scan wrote.
#[derive(Debug, Default)]
pub struct ScanOutcome {
    /// Counts.
    pub report: super::ScanReport,
    /// The attempts judged expired by a [`ScanScope::Suspect`] scan (nothing written).
    pub suspects: Vec<crate::messages::AttemptRef>,
    /// The `ActivityTimedOut` commands committed to the outbox, to publish now.
    pub messages: Vec<OutboxMessage>,
    /// The attempts timed out: `(task_id, attempt, timeout_seconds)`.
    pub expired: Vec<(Uuid, i32, i64)>,
}

/// An attempt's status row as read back, before its status is parsed:
/// `(task_id, attempt, status, stop_reason, timeout_seconds)`.
pub(crate) type StoredRow = (Uuid, i32, String, Option<String>, i64);

/// Parses a [`StoredRow`]; an unknown status is a decoding error, not a guess.
pub(crate) fn stored(
    (task_id, attempt, status, reason, timeout_seconds): StoredRow,
) -> Result<Stored> {
    Ok(Stored {
        task_id,
        attempt,
        status: parse_status(&status)?,
        reason,
        timeout_seconds,
    })
}

/// A claim's outcome as a backend reads it back: the attempt's status (`None` when
/// another claim created the row in the same instant) is the claimed one's RUNNING. An
/// attempt not claimed whose row is SCHEDULED under limits (`limited`, from the row) is
/// left to the limited path.
pub(crate) fn claim_outcome(
    task_id: Uuid,
    attempt: i32,
    claimed: bool,
    status: Option<String>,
    reason: Option<String>,
    timeout_seconds: i64,
    limited: Option<Limited>,
) -> Result<ClaimOutcome> {
    let status = match (claimed, status) {
        (true, _) | (false, None) => AttemptStatus::Running,
        (false, Some(s)) => parse_status(&s)?,
    };
    let limited = limited
        .filter(|l| !claimed && status == AttemptStatus::Scheduled && !l.limits.is_unlimited());
    Ok(ClaimOutcome {
        stored: Stored {
            task_id,
            attempt,
            status,
            reason: if claimed { None } else { reason },
            timeout_seconds,
        },
        claimed,
        limited,
        deferred: None,
    })
}

/// The outcome of a limited claim the limits deferred: the attempt stays SCHEDULED.
pub(crate) fn deferred(claim: &LimitedClaim, deferral: Deferral) -> ClaimOutcome {
    ClaimOutcome {
        stored: Stored {
            task_id: claim.claim.started.attempt.task_id,
            attempt: claim.claim.started.attempt.attempt,
            status: AttemptStatus::Scheduled,
            reason: None,
            timeout_seconds: 0,
        },
        claimed: false,
        limited: None,
        deferred: Some(deferral),
    }
}

fn parse_status(status: &str) -> Result<AttemptStatus> {
    AttemptStatus::parse(status)
        .ok_or_else(|| Error::Decode(format!("task_check.status {status:?}")))
}

/// `task_check` as read (same columns on both backends), before its status is parsed.
#[derive(sqlx::FromRow)]
pub(crate) struct CheckRow {
    task_id: Uuid,
    attempt: i32,
    workflow_id: String,
    run_id: Option<Uuid>,
    task_name: String,
    task_ref: String,
    worker_id: Option<String>,
    status: String,
    stop_reason: Option<String>,
    input_bytes: i64,
    output_bytes: Option<i64>,
    details: Option<serde_json::Value>,
    timeout_seconds: i64,
    started_at: Option<DateTime<Utc>>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    last_heartbeat_at: Option<DateTime<Utc>>,
    expires_at: Option<DateTime<Utc>>,
}

/// The columns of a [`CheckRow`], for a backend's `SELECT`.
pub(crate) const CHECK_COLUMNS: &str = "task_id, attempt, workflow_id, run_id, task_name, task_ref,
    worker_id, status, stop_reason, input_bytes, output_bytes, details, timeout_seconds,
    started_at, created_at, updated_at, last_heartbeat_at, expires_at";

impl CheckRow {
    /// The row as the registry shows it.
    pub(crate) fn into_check(self) -> Result<TaskCheck> {
        Ok(TaskCheck {
            status: parse_status(&self.status)?,
            task_id: self.task_id,
            attempt: self.attempt,
            workflow_id: self.workflow_id,
            run_id: self.run_id,
            task_name: self.task_name,
            task_ref: self.task_ref,
            worker_id: self.worker_id,
            stop_reason: self.stop_reason,
            input_bytes: self.input_bytes,
            output_bytes: self.output_bytes,
            details: self.details,
            timeout_seconds: self.timeout_seconds,
            started_at: self.started_at,
            created_at: self.created_at,
            updated_at: self.updated_at,
            last_heartbeat_at: self.last_heartbeat_at,
            expires_at: self.expires_at,
        })
    }
}

impl ScanOutcome {
    /// The outcome of a scan that read `candidates` rows, before anything is written.
    pub(crate) fn read(candidates: usize) -> Self {
        Self {
            report: super::ScanReport {
                candidates,
                ..super::ScanReport::default()
            },
            ..Self::default()
        }
    }

    /// Records the attempts a [`ScanScope::Suspect`] scan found expired.
    pub(crate) fn suspected(&mut self, expired: &[ScanCandidate]) {
        self.report.suspected = expired.len();
        self.suspects = expired
            .iter()
            .map(|c| crate::messages::AttemptRef {
                task_id: c.task_id,
                attempt: c.attempt,
            })
            .collect();
    }

    /// Records the attempts the scan timed out (their messages are set by the backend,
    /// which commits them with the attempts).
    pub(crate) fn timed_out(&mut self, expired: &[ScanCandidate]) {
        self.report.timed_out = expired.len();
        self.expired = expired
            .iter()
            .map(|c| (c.task_id, c.attempt, c.timeout_seconds))
            .collect();
    }
}
