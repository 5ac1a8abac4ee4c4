//! Hook deliveries on PostgreSQL (see [`crate::store::hooks`] for the lease and the
//! rollback sequences). The claim skips rows another dispatcher holds; the clock is the
//! database's.

use std::time::Duration;

use async_trait::async_trait;
use chrono::Utc;
use serde_json::Value;

use super::PgStore;
use crate::hooks::Backoff;
use crate::messages::RollbackHooksDone;
use crate::store::backend::HookStore;
use crate::store::hooks::{
    rollback_done, AttemptResult, Claimed, DeliveryView, SequenceMove, Settlement,
};
use crate::store::outbox::OutboxMessage;
use crate::topology::Names;
use crate::Result;

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
        let settled = Settlement::of(claimed, result, backoff, Utc::now());
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
        .bind(settled.status)
        .bind(settled.released)
        .bind(settled.retry_in.map(|d| d.as_secs_f64()))
        .bind(Value::Array(vec![settled.record.clone()]))
        .bind(result.error.as_deref())
        .execute(&mut *tx)
        .await?;
        let mut outbox = Vec::new();
        if updated.rows_affected() == 1 {
            let done = match settled.sequence_move(claimed, result) {
                SequenceMove::Stay => None,
                SequenceMove::Abort(reason) => {
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
                }
                SequenceMove::Advance(next_seq) => {
                    let next = sqlx::query(
                        "UPDATE hook_deliveries SET next_attempt_at = now(), updated_at = now()
                         WHERE run_id = $1 AND group_seq = $2 AND status = 'PENDING'",
                    )
                    .bind(claimed.run_id)
                    .bind(next_seq)
                    .execute(&mut *tx)
                    .await?;
                    (next.rows_affected() == 0).then_some(RollbackHooksDone {
                        run_id: claimed.run_id,
                        ok: true,
                        reason: None,
                    })
                }
            };
            if let Some(done) = done {
                outbox.push(rollback_done(names, claimed, done)?);
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
