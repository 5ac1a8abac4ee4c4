//! Hook deliveries (docs/hooks.md): what the decider writes when a hook declared in a
//! definition (`dsl::hooks`) fires, and what the dispatcher needs to send it — the
//! request's body (the event document, or the declared template resolved against it),
//! its signature, and the retry schedule.
//!
//! The pure parts live here so that both writers (the decider) and the sender (the
//! history service's dispatcher) agree on them, and so that they are unit-tested apart
//! from any I/O.

pub mod backoff;
pub mod body;
pub mod sign;

use serde_json::{Map, Value};
use uuid::Uuid;

pub use crate::secret::Secret;
pub use backoff::Backoff;

/// Header carrying the delivery id (the same on every attempt): receivers deduplicate on it.
pub const DELIVERY_HEADER: &str = "x-weft-delivery";
/// Header carrying the HMAC-SHA256 signature of the body, `sha256=<hex>`.
pub const SIGNATURE_HEADER: &str = "x-weft-signature";
/// Header naming the hook (`onRollback`, `onTimeout`, ...).
pub const HOOK_HEADER: &str = "x-weft-hook";
/// Header naming the lifecycle event that caused the call (`workflow.reset`, `task.timed_out`, ...).
pub const EVENT_HEADER: &str = "x-weft-event";
/// Header carrying the attempt number, from 1.
pub const ATTEMPT_HEADER: &str = "x-weft-attempt";

/// A delivery to insert (`hook_deliveries`), written by the decider in the transaction
/// that commits its cause.
#[derive(Debug, Clone, PartialEq)]
pub struct NewDelivery {
    /// The delivery id: name-based on its cause (see [`delivery_id`]).
    pub id: Uuid,
    /// The workflow.
    pub workflow_id: String,
    /// The run the cause belongs to (for a rollback, the run the reset created).
    pub run_id: Uuid,
    /// `onRollback`, `onTimeout`, `onFailure` or `onComplete`.
    pub hook: String,
    /// The lifecycle event that caused it (`workflow.reset` for a rollback).
    pub event: String,
    /// The task, for a task's hook.
    pub task_ref: Option<String>,
    /// The task's id.
    pub task_id: Option<Uuid>,
    /// The task's loop iteration (0 outside loops).
    pub iteration: i32,
    /// Where to POST.
    pub url: String,
    /// Extra request headers, as declared.
    pub headers: Map<String, Value>,
    /// The exact body sent (and signed).
    pub body: String,
    /// `sha256=<hex>` of the body with the definition's secret, when it declares one.
    pub signature: Option<String>,
    /// An awaited rollback hook.
    pub blocking: bool,
    /// Position in the reset's rollback sequence (0 first); `None` for other hooks.
    pub group_seq: Option<i32>,
    /// W3C trace context of the decision that fired it; the attempts join its trace.
    pub traceparent: Option<String>,
}

/// The id of the delivery of `hook` for `cause` in run `run_id`: the same cause always
/// yields the same id, so a redelivered or replayed cause cannot deliver twice.
pub fn delivery_id(run_id: Uuid, hook: &str, cause: &str) -> Uuid {
    Uuid::new_v5(&run_id, format!("hook:{hook}:{cause}").as_bytes())
}
