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

use async_trait::async_trait;

use super::backend::HookStore;
use super::pg::PgStore;
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

/// The dispatcher's claim: due pending rows, oldest due first, skipping rows another
/// dispatcher is claiming; `$1` rows at most, leased for `$2` seconds. Public so that a
/// test can check its plan reads the partial `hook_deliveries_due` index.
pub const CLAIM_SQL: &str = "
UPDATE hook_deliveries d
SET attempt_count = d.attempt_count + 1,
    next_attempt_at = now() + make_interval(secs => $2),
    updated_at = now()
FROM (SELECT id FROM hook_deliveries
      WHERE status = 'PENDING' AND next_attempt_at <= now()
      ORDER BY next_attempt_at LIMIT $1 FOR UPDATE SKIP LOCKED) due
WHERE d.id = due.id
RETURNING d.id, d.workflow_id, d.run_id, d.hook, d.event, d.task_ref, d.url, d.headers,
          d.body, d.signature, d.blocking, d.group_seq, d.attempt_count, d.released,
          d.traceparent";

/// The `jsonb` array the decider's commit inserts from (`jsonb_to_recordset`): one
/// parameter for any number of deliveries.
pub fn deliveries_json(deliveries: &[NewDelivery]) -> Value {
    Value::Array(
        deliveries
            .iter()
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

#[async_trait]
impl HookStore for PgStore {
    /// Claims up to `limit` due deliveries for one attempt each, leased for `lease`.
    async fn claim_hook_deliveries(&self, limit: i64, lease: Duration) -> Result<Vec<Claimed>> {
        Ok(sqlx::query_as(CLAIM_SQL)
            .bind(limit)
            .bind(lease.as_secs_f64())
            .fetch_all(&self.pool)
            .await?)
    }

    /// Records attempt `result` of `claimed` and settles it: delivered, retried after
    /// `backoff`, or dead-lettered once attempts run out; moves its rollback sequence on.
    /// Returns the outbox messages committed with it (the `RollbackHooksDone` command),
    /// for the caller to publish.
    async fn settle_hook_attempt(
        &self,
        names: &Names,
        claimed: &Claimed,
        result: &AttemptResult,
        backoff: &Backoff,
    ) -> Result<Vec<OutboxMessage>> {
        let ok = result.succeeded();
        let retry_in = (!ok)
            .then(|| backoff.after(u32::try_from(claimed.attempt).unwrap_or(u32::MAX)))
            .flatten();
        let (status, released) = match (ok, retry_in) {
            (true, _) => ("DELIVERED", true),
            (false, Some(_)) => ("PENDING", claimed.released || !claimed.blocking),
            (false, None) => ("DEAD", true),
        };
        let record = json!({
            "attempt": claimed.attempt,
            "time": Utc::now(),
            "statusCode": result.status_code,
            "error": result.error,
            "durationMs": u64::try_from(result.duration.as_millis()).unwrap_or(u64::MAX),
        });
        let mut tx = self.pool.begin().await?;
        // A lease that ran out while the call went on may have let another attempt settle
        // the row first: only a pending row is settled.
        let updated = sqlx::query(
            "UPDATE hook_deliveries SET status = $2, released = $3,
                 next_attempt_at = now() + make_interval(secs => $4),
                 attempts = attempts || $5::jsonb, last_error = $6, updated_at = now()
             WHERE id = $1 AND status = 'PENDING'",
        )
        .bind(claimed.id)
        .bind(status)
        .bind(released)
        .bind(retry_in.map(|d| d.as_secs_f64()))
        .bind(Value::Array(vec![record]))
        .bind(result.error.as_deref())
        .execute(&mut *tx)
        .await?;
        let mut outbox = Vec::new();
        if updated.rows_affected() == 1 {
            if let Some(seq) = claimed.group_seq {
                let done = if status == "DEAD" && claimed.blocking {
                    let reason = format!(
                        "rollback hook {} of task {:?} (delivery {}, {}) failed after {} attempts: {}",
                        claimed.hook,
                        claimed.task_ref.as_deref().unwrap_or_default(),
                        claimed.id,
                        claimed.url,
                        claimed.attempt,
                        result.error.as_deref().unwrap_or("no answer"),
                    );
                    sqlx::query(
                        "UPDATE hook_deliveries SET status = 'SKIPPED', next_attempt_at = NULL,
                             last_error = $2, updated_at = now()
                         WHERE run_id = $1 AND group_seq IS NOT NULL AND status = 'PENDING'
                           AND NOT released",
                    )
                    .bind(claimed.run_id)
                    .bind(format!("not sent: {reason}"))
                    .execute(&mut *tx)
                    .await?;
                    Some(RollbackHooksDone {
                        run_id: claimed.run_id,
                        ok: false,
                        reason: Some(reason),
                    })
                } else if released && !claimed.released {
                    let next = sqlx::query(
                        "UPDATE hook_deliveries SET next_attempt_at = now(), updated_at = now()
                         WHERE run_id = $1 AND group_seq = $2 AND status = 'PENDING'",
                    )
                    .bind(claimed.run_id)
                    .bind(seq + 1)
                    .execute(&mut *tx)
                    .await?;
                    (next.rows_affected() == 0).then_some(RollbackHooksDone {
                        run_id: claimed.run_id,
                        ok: true,
                        reason: None,
                    })
                } else {
                    None
                };
                if let Some(done) = done {
                    let envelope = Envelope::new(
                        &claimed.workflow_id,
                        Some(claimed.run_id),
                        &Command::RollbackHooksDone(done),
                    )?;
                    outbox.push(OutboxMessage::new(
                        names.commands_exchange(),
                        names.command_key_for(&claimed.workflow_id),
                        &envelope,
                        crate::telemetry::current_traceparent(),
                    )?);
                }
            }
        }
        super::outbox::insert(&mut tx, &outbox).await?;
        tx.commit().await?;
        Ok(outbox)
    }

    /// How long until the earliest pending delivery is due, by the database's clock
    /// (zero when one is due; `None` when none is pending with a due time).
    async fn next_hook_delivery_in(&self) -> Result<Option<Duration>> {
        let seconds: Option<f64> = sqlx::query_scalar(
            "SELECT EXTRACT(EPOCH FROM min(next_attempt_at) - clock_timestamp())::float8
             FROM hook_deliveries WHERE status = 'PENDING'",
        )
        .fetch_one(&self.pool)
        .await?;
        Ok(seconds.map(|s| Duration::try_from_secs_f64(s.max(0.0)).unwrap_or(Duration::MAX)))
    }

    /// Every delivery of `workflow_id`'s runs, oldest first.
    async fn hook_deliveries(&self, workflow_id: &str) -> Result<Vec<DeliveryView>> {
        Ok(sqlx::query_as(
            "SELECT id AS delivery_id, run_id, hook, event, task_ref, task_id, iteration, url,
                    status, blocking, group_seq AS sequence, attempt_count, attempts,
                    CASE WHEN status = 'PENDING' THEN next_attempt_at END AS next_attempt_at,
                    last_error, created_at, updated_at
             FROM hook_deliveries WHERE workflow_id = $1
             ORDER BY created_at, group_seq NULLS FIRST, id",
        )
        .bind(workflow_id)
        .fetch_all(&self.pool)
        .await?)
    }
}
