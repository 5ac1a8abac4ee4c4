//! What the registry reads from and writes to its store (`task_check`), whichever the
//! backend ([`crate::store::backend::RegistryStore`]).

use uuid::Uuid;

use super::model::AttemptStatus;
use crate::messages::AttemptRef;
use crate::store::outbox::OutboxMessage;

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

/// What one scan wrote.
#[derive(Debug, Default)]
pub struct ScanOutcome {
    /// Counts.
    pub report: super::ScanReport,
    /// The `ActivityTimedOut` commands committed to the outbox, to publish now.
    pub messages: Vec<OutboxMessage>,
    /// The attempts timed out: `(task_id, attempt, timeout_seconds)`.
    pub expired: Vec<(Uuid, i32, i64)>,
}
