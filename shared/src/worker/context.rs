//! [`ActivityContext`]: what a handler registered with `WorkerBuilder::activity` can ask
//! of the worker while it runs: report progress, and learn that it was stopped.

use std::sync::Arc;

use serde_json::Value;
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};
use uuid::Uuid;

use super::heartbeat::{Heartbeats, Key, Registered, Stop};

/// The running attempt's link to the worker's heartbeat scheduler.
///
/// Heartbeats are automatic by default: the handler need not call anything to stay
/// alive. When the heartbeat service answers STOP (the run was terminated, reset or
/// skipped, or the attempt timed out) or NOT_FOUND, the context is cancelled: the handler
/// should return soon; whatever it returns is not reported, and the activity is not run
/// again. Cheap to clone; every clone sees the same attempt.
#[derive(Debug, Clone)]
pub struct ActivityContext {
    key: Key,
    heartbeats: Heartbeats,
    stop: Arc<Stop>,
}

impl ActivityContext {
    /// The context of the attempt `registered` (the runner keeps the registration: the
    /// attempt leaves the schedule when it ends, whoever still holds a context).
    pub(crate) fn new(registered: &Registered) -> Self {
        Self {
            key: registered.key(),
            heartbeats: registered.heartbeats().clone(),
            stop: registered.stop().clone(),
        }
    }

    /// The task this attempt belongs to.
    pub fn task_id(&self) -> Uuid {
        self.key.task_id
    }

    /// The attempt number (from 1).
    pub fn attempt(&self) -> i32 {
        self.key.attempt
    }

    /// Reports progress: `details` (kept on the task, visible to operators) go with a
    /// heartbeat at the scheduler's next tick; `Value::Null` sends a bare heartbeat.
    ///
    /// Cheap and never blocks: calling it often sends at most one beat per tick. Needed
    /// only when automatic heartbeats are off (`WorkerBuilder::automatic_heartbeats`),
    /// where an attempt that stops calling it is timed out by the heartbeat service.
    pub fn heartbeat(&self, details: Value) {
        let details = (!details.is_null()).then_some(details);
        self.heartbeats.request(&self.key, details);
    }

    /// Whether the heartbeat service said to stop this attempt.
    pub fn is_cancelled(&self) -> bool {
        self.stop.token().is_cancelled()
    }

    /// Resolves once the heartbeat service says to stop this attempt; `select!` on it
    /// beside the work.
    pub fn cancelled(&self) -> WaitForCancellationFuture<'_> {
        self.stop.token().cancelled()
    }

    /// A token cancelled when the attempt is stopped, to hand to code that takes one.
    pub fn cancellation_token(&self) -> CancellationToken {
        self.stop.token().child_token()
    }

    /// Why the attempt was stopped, once it was (e.g. the terminate's reason).
    pub fn stop_reason(&self) -> Option<String> {
        self.stop.reason().map(str::to_owned)
    }
}
