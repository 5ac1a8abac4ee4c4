//! Hook deliveries (`hook_deliveries`, docs/hooks.md): inserted by the decider with their
//! cause (see [`deliveries_json`] and the decider's commit), claimed when due by the
//! history service's dispatcher, and settled attempt by attempt.
//!
//! A claim is a lease, not a lock held across the HTTP call: it bumps the attempt count
//! and pushes `next_attempt_at` past the attempt's deadline in one short statement, so a
//! dispatcher that dies mid-call leaves a row that becomes due again when the lease
//! ends (a duplicate call, which receivers absorb through the delivery id).
//!
//! The rollback hooks of one reset form a sequence (`group_seq`, most recent task first)
//! under the run the reset created: only its head is due; the next member becomes due
//! once the head is *released* — an awaited hook when it succeeded, another one when its
//! first attempt was made. When the last member is released, or an awaited one is
//! dead-lettered, the run is told with a `RollbackHooksDone` command, written to the
//! outbox in the transaction that settles the attempt.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{json, Value};
use uuid::Uuid;

use super::outbox::OutboxMessage;
use crate::hooks::{Backoff, NewDelivery};
use crate::messages::{Command, RollbackHooksDone};
use crate::topology::Names;
use crate::{Envelope, Result};

pub use super::pg::hooks::CLAIM_SQL;

/// The `jsonb` array the decider's commit inserts from (`jsonb_to_recordset`): one
/// parameter for any number of deliveries.
pub fn deliveries_json<'a>(deliveries: impl IntoIterator<Item = &'a NewDelivery>) -> Value {
    Value::Array(
        deliveries
            .into_iter()
            .map(|d| {
                json!({
                    "id": d.id, "workflow_id": d.workflow_id, "run_id": d.run_id,
                    "hook": d.hook, "event": d.event, "task_ref": d.task_ref,
                    "task_id": d.task_id, "iteration": d.iteration, "url": d.url,
                    "headers": d.headers, "body": d.body, "signature": d.signature,
                    "blocking": d.blocking, "group_seq": d.group_seq,
                    "traceparent": d.traceparent,
                })
            })
            .collect(),
    )
}

/// A delivery claimed for one attempt.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Claimed {
    /// The delivery id.
    pub id: Uuid,
    /// Its workflow.
    pub workflow_id: String,
    /// Its run.
    pub run_id: Uuid,
    /// The hook's kind.
    pub hook: String,
    /// The event that caused it.
    pub event: String,
    /// The task, for a task's hook.
    pub task_ref: Option<String>,
    /// Where to POST.
    pub url: String,
    /// Extra headers (an object of strings).
    pub headers: Value,
    /// The body.
    pub body: String,
    /// The signature header's value.
    pub signature: Option<String>,
    /// An awaited rollback hook.
    pub blocking: bool,
    /// Its position in a rollback sequence.
    pub group_seq: Option<i32>,
    /// This attempt's number, from 1.
    #[sqlx(rename = "attempt_count")]
    pub attempt: i32,
    /// Whether its rollback sequence had already moved past it.
    pub released: bool,
    /// The trace of the decision that fired it.
    pub traceparent: Option<String>,
}

/// How one attempt went.
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptResult {
    /// The receiver's HTTP status, if it answered.
    pub status_code: Option<u16>,
    /// Why it failed (a non-2xx answer, a timeout, a refused connection).
    pub error: Option<String>,
    /// How long the call took.
    pub duration: Duration,
    /// Retrying cannot help (the outbound guard refused the call): the delivery is
    /// dead-lettered at once, whatever attempts it has left.
    pub permanent: bool,
}

impl AttemptResult {
    /// A 2xx answer.
    pub fn succeeded(&self) -> bool {
        self.error.is_none() && self.status_code.is_some_and(|s| (200..300).contains(&s))
    }
}

/// A delivery as `GET /api/workflow/{id}/hooks` shows it.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
#[serde(rename_all = "camelCase")]
pub struct DeliveryView {
    /// The delivery id (`X-Weft-Delivery`).
    pub delivery_id: Uuid,
    /// The run it belongs to.
    pub run_id: Uuid,
    /// The hook's kind.
    pub hook: String,
    /// The lifecycle event that caused it.
    pub event: String,
    /// The task, for a task's hook.
    pub task_ref: Option<String>,
    /// The task's id.
    pub task_id: Option<Uuid>,
    /// The task's loop iteration.
    pub iteration: i32,
    /// Where it is sent.
    pub url: String,
    /// PENDING, DELIVERED, DEAD or SKIPPED.
    pub status: String,
    /// An awaited rollback hook.
    pub blocking: bool,
    /// Position in its reset's rollback sequence.
    pub sequence: Option<i32>,
    /// Attempts started.
    pub attempt_count: i32,
    /// Each finished attempt: `{attempt, time, statusCode?, error?, durationMs}`.
    pub attempts: Value,
    /// When the next attempt is due, while pending.
    pub next_attempt_at: Option<DateTime<Utc>>,
    /// The last failure.
    pub last_error: Option<String>,
    /// When its cause was committed.
    pub created_at: DateTime<Utc>,
    /// Last change.
    pub updated_at: DateTime<Utc>,
}

/// How one attempt settles its delivery, whichever the backend: the row's new status,
/// whether its rollback sequence may move past it, when to retry, and the attempt's
/// record for the row's `attempts`.
pub(crate) struct Settlement {
    /// DELIVERED, PENDING (retried after `retry_in`) or DEAD.
    pub status: &'static str,
    /// Whether the sequence may move past the delivery: a hook that is not awaited is
    /// released by its first attempt, an awaited one by its success (or its death).
    pub released: bool,
    /// When to try again; `None` once attempts run out (or it succeeded).
    pub retry_in: Option<Duration>,
    /// `{attempt, time, statusCode?, error?, durationMs}`.
    pub record: Value,
}

/// What settling an attempt does to its rollback sequence.
pub(crate) enum SequenceMove {
    /// Nothing: not in a sequence, or not released by this attempt.
    Stay,
    /// An awaited hook was dead-lettered: the rest of the sequence is skipped for this
    /// reason, and the run is told the rollback failed.
    Abort(String),
    /// The delivery was released: member `group_seq` becomes due; when there is none,
    /// the run is told the rollback is done.
    Advance(i32),
}

impl Settlement {
    /// Settles attempt `result` of `claimed`, retrying after `backoff`; `now` is the
    /// store's clock.
    pub(crate) fn of(
        claimed: &Claimed,
        result: &AttemptResult,
        backoff: &Backoff,
        now: DateTime<Utc>,
    ) -> Self {
        let ok = result.succeeded();
        let retry_in = (!ok && !result.permanent)
            .then(|| backoff.after(u32::try_from(claimed.attempt).unwrap_or(u32::MAX)))
            .flatten();
        let (status, released) = match (ok, retry_in) {
            (true, _) => ("DELIVERED", true),
            (false, Some(_)) => ("PENDING", claimed.released || !claimed.blocking),
            (false, None) => ("DEAD", true),
        };
        let record = json!({
            "attempt": claimed.attempt,
            "time": now,
            "statusCode": result.status_code,
            "error": result.error,
            "durationMs": u64::try_from(result.duration.as_millis()).unwrap_or(u64::MAX),
        });
        Self {
            status,
            released,
            retry_in,
            record,
        }
    }

    /// What the settled row does to its rollback sequence (the row was still pending).
    pub(crate) fn sequence_move(&self, claimed: &Claimed, result: &AttemptResult) -> SequenceMove {
        let Some(seq) = claimed.group_seq else {
            return SequenceMove::Stay;
        };
        if self.status == "DEAD" && claimed.blocking {
            let after = if result.permanent {
                "without retry (retrying cannot help)".to_owned()
            } else {
                format!("after {} attempts", claimed.attempt)
            };
            SequenceMove::Abort(format!(
                "rollback hook {} of task {:?} (delivery {}, {}) failed {after}: {}",
                claimed.hook,
                claimed.task_ref.as_deref().unwrap_or_default(),
                claimed.id,
                claimed.url,
                result.error.as_deref().unwrap_or("no answer"),
            ))
        } else if self.released && !claimed.released {
            SequenceMove::Advance(seq + 1)
        } else {
            SequenceMove::Stay
        }
    }
}

/// The `RollbackHooksDone` command telling `claimed`'s run how its rollback went, for
/// the outbox of the transaction that settles the attempt.
pub(crate) fn rollback_done(
    names: &Names,
    claimed: &Claimed,
    done: RollbackHooksDone,
) -> Result<OutboxMessage> {
    let envelope = Envelope::new(
        &claimed.workflow_id,
        Some(claimed.run_id),
        &Command::RollbackHooksDone(done),
    )?;
    OutboxMessage::new(
        names.commands_exchange(),
        names.command_key_for(&claimed.workflow_id),
        &envelope,
        crate::telemetry::current_traceparent(),
    )
}
