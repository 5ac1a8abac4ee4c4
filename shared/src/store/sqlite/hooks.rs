//! Hook deliveries on SQLite (see [`crate::store::hooks`] for the lease and the rollback
//! sequences). A claim is one `UPDATE … RETURNING` statement, atomic under SQLite's
//! single writer; the clock is this process's.

use std::time::Duration;

use async_trait::async_trait;
use chrono::Utc;

use super::outbox::{plus, until};
use super::SqliteStore;
use crate::hooks::Backoff;
use crate::messages::RollbackHooksDone;
use crate::store::backend::HookStore;
use crate::store::hooks::{
    rollback_done, AttemptResult, Claimed, DeliveryView, SequenceMove, Settlement,
};
use crate::store::outbox::OutboxMessage;
use crate::topology::Names;
use crate::Result;

/// The dispatcher's claim: due pending rows, oldest due first, `?3` rows at most, leased
/// until `?2` (`?1` is now).
const CLAIM_SQL: &str = "
UPDATE hook_deliveries
SET attempt_count = attempt_count + 1, next_attempt_at = ?2, updated_at = ?1
WHERE id IN (SELECT id FROM hook_deliveries
             WHERE status = 'PENDING' AND next_attempt_at <= ?1
             ORDER BY next_attempt_at LIMIT ?3)
RETURNING id, workflow_id, run_id, hook, event, task_ref, url, headers, body, signature,
          blocking, group_seq, attempt_count, released, traceparent";

#[async_trait]
impl HookStore for SqliteStore {
    /// Claims up to `limit` due deliveries for one attempt each, leased for `lease`.
    async fn claim_hook_deliveries(&self, limit: i64, lease: Duration) -> Result<Vec<Claimed>> {
        let now = Utc::now();
        Ok(sqlx::query_as(CLAIM_SQL)
            .bind(now)
            .bind(plus(now, lease))
            .bind(limit)
            // An UPDATE … RETURNING: a write.
            .fetch_all(&mut *self.writer.sqlx().await?)
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
        let now = Utc::now();
        let settled = Settlement::of(claimed, result, backoff, now);
        let mut tx = self.writer.begin().await?;
        // A lease that ran out while the call went on may have let another attempt settle
        // the row first: only a pending row is settled.
        let updated = sqlx::query(
            "UPDATE hook_deliveries SET status = ?2, released = ?3, next_attempt_at = ?4,
                 attempts = json_insert(attempts, '$[#]', json(?5)), last_error = ?6,
                 updated_at = ?7
             WHERE id = ?1 AND status = 'PENDING'",
        )
        .bind(claimed.id)
        .bind(settled.status)
        .bind(settled.released)
        .bind(settled.retry_in.map(|d| plus(now, d)))
        .bind(settled.record.to_string())
        .bind(result.error.as_deref())
        .bind(now)
        .execute(&mut *tx)
        .await?;
        let mut outbox = Vec::new();
        if updated.rows_affected() == 1 {
            let done = match settled.sequence_move(claimed, result) {
                SequenceMove::Stay => None,
                SequenceMove::Abort(reason) => {
                    sqlx::query(
                        "UPDATE hook_deliveries SET status = 'SKIPPED', next_attempt_at = NULL,
                             last_error = ?2, updated_at = ?3
                         WHERE run_id = ?1 AND group_seq IS NOT NULL AND status = 'PENDING'
                           AND NOT released",
                    )
                    .bind(claimed.run_id)
                    .bind(format!("not sent: {reason}"))
                    .bind(now)
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
                        "UPDATE hook_deliveries SET next_attempt_at = ?3, updated_at = ?3
                         WHERE run_id = ?1 AND group_seq = ?2 AND status = 'PENDING'",
                    )
                    .bind(claimed.run_id)
                    .bind(next_seq)
                    .bind(now)
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

    /// How long until the earliest pending delivery is due, by this process's clock
    /// (zero when one is due; `None` when none is pending with a due time).
    async fn next_hook_delivery_in(&self) -> Result<Option<Duration>> {
        let next: Option<chrono::DateTime<Utc>> = sqlx::query_scalar(
            "SELECT min(next_attempt_at) FROM hook_deliveries WHERE status = 'PENDING'",
        )
        .fetch_one(&self.pool)
        .await?;
        Ok(next.map(until))
    }

    /// Every delivery of `workflow_id`'s runs, oldest first.
    async fn hook_deliveries(&self, workflow_id: &str) -> Result<Vec<DeliveryView>> {
        Ok(sqlx::query_as(
            "SELECT id AS delivery_id, run_id, hook, event, task_ref, task_id, iteration, url,
                    status, blocking, group_seq AS sequence, attempt_count, attempts,
                    CASE WHEN status = 'PENDING' THEN next_attempt_at END AS next_attempt_at,
                    last_error, created_at, updated_at
             FROM hook_deliveries WHERE workflow_id = ?
             ORDER BY created_at, group_seq NULLS FIRST, id",
        )
        .bind(workflow_id)
        .fetch_all(&self.pool)
        .await?)
    }
}
