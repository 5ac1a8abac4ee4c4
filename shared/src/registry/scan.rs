//! The timeout scanner and the retention purge.
//!
//! The scanner reads RUNNING attempts past their stored deadline through the partial
//! index `task_check_running_expiry` (so its cost follows the number of expired attempts,
//! not the table's size), locks them `FOR UPDATE SKIP LOCKED` (several replicas never take
//! the same attempt), and confirms each with Redis, because the stored deadline can lag the
//! last heartbeat by up to one write interval:
//! - Redis has a heartbeat younger than the timeout: the attempt lives; its heartbeat is
//!   written through (a new deadline), nothing else happens.
//! - Redis has an older one: TIMED_OUT, and `ActivityTimedOut` goes to the run's shard
//!   through the outbox, in the same transaction (published right after the commit; the
//!   history service's sweeper re-publishes it if this process dies in between).
//! - Redis knows nothing (down, restarted, entry expired): the stored deadline is trusted
//!   only once it passed by more than a write interval, the most it can lag.
//!
//! All comparisons are of absolute times (the database's clock for stored deadlines,
//! Redis's for Redis's heartbeats), never counted ticks.

use std::time::Duration;

use uuid::Uuid;

use super::cache::Liveness;
use super::pg::{self, BeatWrite};
use super::{add, AttemptStatus, Entry, Registry};
use crate::bus::Bus;
use crate::messages::{ActivityTimedOut, Command};
use crate::store::outbox::{self, OutboxMessage};
use crate::{Envelope, Result};

/// What one scan did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScanReport {
    /// Candidates read (RUNNING, stored deadline passed).
    pub candidates: usize,
    /// Attempts timed out.
    pub timed_out: usize,
    /// Candidates Redis showed alive (their deadline was moved).
    pub extended: usize,
    /// Candidates left for a later scan (no Redis evidence, deadline not surely passed).
    pub deferred: usize,
}

/// `(task_id, attempt, workflow_id, run_id, reply_to, timeout_seconds,
/// last heartbeat ms, deadline passed by more than the write interval)`.
type Candidate = (
    Uuid,
    i32,
    String,
    Option<Uuid>,
    String,
    i64,
    Option<i64>,
    bool,
);

/// The scanner's query, also shown with EXPLAIN ANALYZE by the benchmark.
pub const SCAN_SQL: &str =
    "SELECT task_id, attempt, workflow_id, run_id, reply_to, timeout_seconds,
        (extract(epoch FROM last_heartbeat_at) * 1000)::bigint,
        expires_at < now() - make_interval(secs => $2)
 FROM task_check
 WHERE status = 'RUNNING' AND expires_at IS NOT NULL AND expires_at < now()
 ORDER BY expires_at
 LIMIT $1
 FOR UPDATE SKIP LOCKED";

impl Registry {
    /// Times out, at most `limit` at a time, the attempts whose heartbeats stopped for
    /// longer than their timeout, telling each run's shard with `ActivityTimedOut`.
    /// Call it every scan interval, again at once while it returns `limit` candidates.
    pub async fn scan(&self, bus: &Bus, limit: i64) -> Result<ScanReport> {
        let mut tx = self.store.pool().begin().await?;
        let candidates: Vec<Candidate> = sqlx::query_as(SCAN_SQL)
            .bind(limit)
            .bind(self.write_interval.as_secs_f64())
            .fetch_all(&mut *tx)
            .await?;
        let mut report = ScanReport {
            candidates: candidates.len(),
            ..ScanReport::default()
        };
        if candidates.is_empty() {
            return Ok(report);
        }
        let ids: Vec<Uuid> = candidates.iter().map(|c| c.0).collect();
        let lives = match &self.cache {
            Some(cache) => cache.liveness(&ids).await,
            None => None,
        };
        let mut alive = Vec::new();
        let mut expired = Vec::new();
        for (i, c) in candidates.into_iter().enumerate() {
            let live = lives.as_ref().map(|l| l[i]);
            match verdict(&c, live) {
                Verdict::Alive(last_ms) => alive.push(BeatWrite {
                    task_id: c.0,
                    attempt: c.1,
                    at_ms: Some(last_ms),
                    details: None,
                }),
                Verdict::Expired => expired.push(c),
                Verdict::Unsure => report.deferred += 1,
            }
        }
        let extended = pg::write_beats(&mut *tx, &alive).await?;
        add(&self.stats.heartbeat_writes, extended);
        report.extended = alive.len();
        let messages = self.time_out(&mut tx, bus, &expired).await?;
        tx.commit().await?;
        report.timed_out = expired.len();
        add(&self.stats.timed_out, expired.len() as u64);
        add(&self.stats.status_writes, expired.len() as u64);
        if let Err(e) = self.store.publish_outbox(bus, &messages).await {
            tracing::warn!(error = %e, "publishing ActivityTimedOut failed; the outbox sweeper will");
        }
        if let Some(cache) = &self.cache {
            let entries: Vec<Entry> = expired
                .iter()
                .map(|c| Entry {
                    task_id: c.0,
                    attempt: c.1,
                    status: AttemptStatus::TimedOut,
                    reason: Some(reason(c.5)),
                    timeout_seconds: c.5,
                })
                .collect();
            cache.set_status(&entries, self.write_interval).await;
        }
        Ok(report)
    }

    /// Marks `expired` TIMED_OUT and queues their `ActivityTimedOut` in the outbox.
    async fn time_out(
        &self,
        tx: &mut sqlx::PgConnection,
        bus: &Bus,
        expired: &[Candidate],
    ) -> Result<Vec<OutboxMessage>> {
        if expired.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<Uuid> = expired.iter().map(|c| c.0).collect();
        let attempts: Vec<i32> = expired.iter().map(|c| c.1).collect();
        let reasons: Vec<String> = expired.iter().map(|c| reason(c.5)).collect();
        sqlx::query(
            "UPDATE task_check AS c SET status = 'TIMED_OUT', stop_reason = x.reason,
                 updated_at = now()
             FROM UNNEST($1::uuid[], $2::int[], $3::text[]) AS x(task_id, attempt, reason)
             WHERE c.task_id = x.task_id AND c.attempt = x.attempt",
        )
        .bind(&ids)
        .bind(&attempts)
        .bind(&reasons)
        .execute(&mut *tx)
        .await?;
        let names = bus.names();
        let mut messages = Vec::with_capacity(expired.len());
        for (c, why) in expired.iter().zip(reasons) {
            let (task_id, attempt, workflow_id, run_id, reply_to) = (c.0, c.1, &c.2, c.3, &c.4);
            let Some(run_id) = run_id else { continue };
            let command = Command::ActivityTimedOut(ActivityTimedOut {
                task_id,
                run_id,
                attempt,
                reason: why,
            });
            let envelope = Envelope::new(workflow_id, Some(run_id), &command)?;
            let key = if reply_to.is_empty() {
                names.command_key_for(workflow_id)
            } else {
                reply_to.clone()
            };
            messages.push(OutboxMessage::new(
                names.commands_exchange(),
                key,
                &envelope,
                crate::telemetry::current_traceparent(),
            )?);
        }
        outbox::insert(tx, &messages).await?;
        Ok(messages)
    }

    /// Deletes up to `batch` attempts that ended more than `retention` ago; returns how
    /// many. Bounded so that a large backlog never holds long locks: call it again while
    /// it returns `batch`.
    pub async fn purge(&self, retention: Duration, batch: i64) -> Result<u64> {
        let done = sqlx::query(
            "DELETE FROM task_check WHERE (task_id, attempt) IN (
                 SELECT task_id, attempt FROM task_check
                 WHERE status <> 'RUNNING' AND updated_at < now() - make_interval(secs => $1)
                 LIMIT $2)",
        )
        .bind(retention.as_secs_f64())
        .bind(batch)
        .execute(self.store.pool())
        .await?;
        Ok(done.rows_affected())
    }
}

fn reason(timeout_seconds: i64) -> String {
    format!("no heartbeat for {timeout_seconds}s (responseTimeoutSeconds)")
}

#[derive(Debug, PartialEq)]
enum Verdict {
    /// Redis saw a heartbeat this recent (ms): not expired.
    Alive(i64),
    Expired,
    /// No Redis evidence and the stored deadline may still lag: decide later.
    Unsure,
}

fn verdict(c: &Candidate, live: Option<Liveness>) -> Verdict {
    let (timeout_ms, stored_last, surely_passed) = (c.5 * 1_000, c.6, c.7);
    match live {
        Some(Liveness {
            now_ms,
            last_ms: Some(last),
        }) => {
            let last = last.max(stored_last.unwrap_or(0));
            if now_ms - last < timeout_ms {
                Verdict::Alive(last)
            } else {
                Verdict::Expired
            }
        }
        _ if surely_passed => Verdict::Expired,
        _ => Verdict::Unsure,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate(timeout_s: i64, stored_last: i64, surely: bool) -> Candidate {
        let id = Uuid::nil();
        (
            id,
            1,
            "wf".into(),
            Some(id),
            "shard.0".into(),
            timeout_s,
            Some(stored_last),
            surely,
        )
    }

    #[test]
    fn a_recent_heartbeat_in_redis_keeps_an_attempt_alive() {
        let live = Liveness {
            now_ms: 100_000,
            last_ms: Some(95_000),
        };
        assert_eq!(
            verdict(&candidate(10, 50_000, false), Some(live)),
            Verdict::Alive(95_000)
        );
    }

    #[test]
    fn an_old_heartbeat_in_redis_times_out() {
        let live = Liveness {
            now_ms: 100_000,
            last_ms: Some(80_000),
        };
        assert_eq!(
            verdict(&candidate(10, 50_000, false), Some(live)),
            Verdict::Expired
        );
    }

    #[test]
    fn without_redis_only_a_surely_passed_deadline_times_out() {
        assert_eq!(verdict(&candidate(10, 0, false), None), Verdict::Unsure);
        assert_eq!(verdict(&candidate(10, 0, true), None), Verdict::Expired);
        let unknown = Liveness {
            now_ms: 100_000,
            last_ms: None,
        };
        assert_eq!(
            verdict(&candidate(10, 0, false), Some(unknown)),
            Verdict::Unsure
        );
    }
}
