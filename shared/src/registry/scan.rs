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
//! - Redis knows nothing (down, restarted, entry expired, or no heartbeat yet): the stored
//!   deadline is trusted once it passed by more than a write interval, the most it can
//!   lag — or at once when no heartbeat ever reached the registry (`last_heartbeat_at` is
//!   NULL from the claim until the first heartbeat, which is always written through).
//!
//! All comparisons are of absolute times (the database's clock for stored deadlines,
//! Redis's for Redis's heartbeats), never counted ticks.

use std::time::Duration;

use futures_util::FutureExt;
use uuid::Uuid;

use super::cache::Entry;
use super::rows::{BeatWrite, Liveness, ScanCandidate, ScanOutcome, ScanScope};
use super::{add, AttemptStatus, Registry};
use crate::bus::Bus;
use crate::messages::{ActivityTimedOut, AttemptRef, Command};
use crate::store::backend::LivenessProbe;
use crate::store::outbox::OutboxMessage;
use crate::topology::Names;
use crate::{Envelope, Result};

/// What one scan did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScanReport {
    /// Candidates read (RUNNING, stored deadline passed).
    pub candidates: usize,
    /// Attempts timed out.
    pub timed_out: usize,
    /// Candidates the cache showed alive (their deadline was moved).
    pub extended: usize,
    /// Candidates left for a later scan (no cache evidence, deadline not surely passed).
    pub deferred: usize,
    /// Candidates found expired by a suspecting scan ([`Registry::suspect`]), to confirm.
    pub suspected: usize,
}

impl Registry {
    /// Times out, at most `limit` at a time, the attempts whose heartbeats stopped for
    /// longer than their timeout, telling each run's shard with `ActivityTimedOut`.
    /// Call it every scan interval, again at once while it returns `limit` candidates.
    ///
    /// It judges from the heartbeats the registry has seen: one still waiting in the
    /// heartbeat queue is not counted. The heartbeat service scans in two steps instead
    /// ([`Registry::suspect`], then [`Registry::confirm`] once the queue has been read up
    /// to the suspicion).
    pub async fn scan(&self, bus: &Bus, limit: i64) -> Result<ScanReport> {
        Ok(self.scan_in(bus, limit, ScanScope::TimeOut).await?.report)
    }

    /// The first step of a scan: the attempts (at most `limit`) whose heartbeats the
    /// registry has seen stop for longer than their timeout, without timing them out. The
    /// live ones found on the way are extended. Confirm the suspects with
    /// [`Registry::confirm`] once every heartbeat sent before this call has been read.
    pub async fn suspect(&self, bus: &Bus, limit: i64) -> Result<(ScanReport, Vec<AttemptRef>)> {
        let outcome = self.scan_in(bus, limit, ScanScope::Suspect).await?;
        Ok((outcome.report, outcome.suspects))
    }

    /// The second step: judges `suspects` again (a heartbeat read since may have kept
    /// one alive) and times out those still expired.
    pub async fn confirm(&self, bus: &Bus, suspects: &[AttemptRef]) -> Result<ScanReport> {
        let limit = i64::try_from(suspects.len()).unwrap_or(i64::MAX);
        Ok(self
            .scan_in(bus, limit, ScanScope::Confirm(suspects))
            .await?
            .report)
    }

    async fn scan_in(&self, bus: &Bus, limit: i64, scope: ScanScope<'_>) -> Result<ScanOutcome> {
        let cache = self.cache.clone();
        let probe = move |ids: Vec<Uuid>| {
            let cache = cache.clone();
            async move {
                let lives = cache?.liveness(&ids).await?;
                Some(
                    lives
                        .into_iter()
                        .map(|l| Liveness {
                            now_ms: l.now_ms,
                            last_ms: l.last_ms,
                        })
                        .collect(),
                )
            }
            .boxed()
        };
        let outcome = self
            .store
            .scan_expired(bus.names(), limit, self.write_interval, &probe, scope)
            .await?;
        let report = outcome.report;
        add(&self.stats.heartbeat_writes, report.extended as u64);
        add(&self.stats.timed_out, report.timed_out as u64);
        add(&self.stats.status_writes, report.timed_out as u64);
        if let Err(e) = self.store.publish_outbox(bus, &outcome.messages).await {
            tracing::warn!(error = %e, "publishing ActivityTimedOut failed; the outbox sweeper will");
        }
        if let Some(cache) = &self.cache {
            let entries: Vec<Entry> = outcome
                .expired
                .iter()
                .map(|&(task_id, attempt, timeout_seconds)| Entry {
                    task_id,
                    attempt,
                    status: AttemptStatus::TimedOut,
                    reason: Some(reason(timeout_seconds)),
                    timeout_seconds,
                })
                .collect();
            cache.set_status(&entries, self.write_interval).await;
        }
        Ok(outcome)
    }

    /// Deletes up to `batch` attempts that ended more than `retention` ago; returns how
    /// many. Bounded so that a large backlog never holds long locks: call it again while
    /// it returns `batch`.
    pub async fn purge(&self, retention: Duration, batch: i64) -> Result<u64> {
        self.store.purge_task_checks(retention, batch).await
    }
}

/// The stop reason of an attempt timed out by the scanner.
pub fn reason(timeout_seconds: i64) -> String {
    format!("no heartbeat for {timeout_seconds}s (responseTimeoutSeconds)")
}

/// The `ActivityTimedOut` commands for `expired`, for the outbox (a backend writes them
/// in the transaction that marks the attempts TIMED_OUT).
pub fn timeout_messages(names: &Names, expired: &[ScanCandidate]) -> Result<Vec<OutboxMessage>> {
    let mut messages = Vec::with_capacity(expired.len());
    for c in expired {
        let Some(run_id) = c.run_id else { continue };
        let command = Command::ActivityTimedOut(ActivityTimedOut {
            task_id: c.task_id,
            run_id,
            attempt: c.attempt,
            reason: reason(c.timeout_seconds),
        });
        let envelope = Envelope::new(&c.workflow_id, Some(run_id), &command)?;
        let key = if c.reply_to.is_empty() {
            names.command_key_for(&c.workflow_id)
        } else {
            c.reply_to.clone()
        };
        messages.push(OutboxMessage::new(
            names.commands_exchange(),
            key,
            &envelope,
            crate::telemetry::current_traceparent(),
        )?);
    }
    Ok(messages)
}

/// The scanner's judgement of one candidate.
#[derive(Debug, PartialEq)]
pub enum Verdict {
    /// Redis saw a heartbeat this recent (ms): not expired.
    Alive(i64),
    /// Its heartbeats stopped for longer than its timeout.
    Expired,
    /// No Redis evidence and the stored deadline may still lag: decide later.
    Unsure,
}

/// A scan's candidates sorted by their [`verdict`]s.
#[derive(Debug, Default)]
pub(crate) struct Sorted {
    /// Heartbeats to write for the candidates the cache showed alive.
    pub alive: Vec<BeatWrite>,
    /// The candidates to time out.
    pub expired: Vec<ScanCandidate>,
    /// How many are left for a later scan.
    pub deferred: usize,
}

/// Asks `probe` about `candidates` and judges each from its answer (none at all when
/// the cache cannot be reached). The same on every backend; only what they lock differs.
pub(crate) async fn judge(candidates: Vec<ScanCandidate>, probe: LivenessProbe<'_>) -> Sorted {
    let lives = probe(candidates.iter().map(|c| c.task_id).collect()).await;
    let mut sorted = Sorted::default();
    for (i, c) in candidates.into_iter().enumerate() {
        let live = lives.as_ref().and_then(|l| l.get(i).copied());
        match verdict(&c, live) {
            Verdict::Alive(last_ms) => sorted.alive.push(BeatWrite {
                task_id: c.task_id,
                attempt: c.attempt,
                at_ms: Some(last_ms),
                details: None,
            }),
            Verdict::Expired => sorted.expired.push(c),
            Verdict::Unsure => sorted.deferred += 1,
        }
    }
    sorted
}

/// Judges a candidate from the cache's evidence (`None`: none).
pub fn verdict(c: &ScanCandidate, live: Option<Liveness>) -> Verdict {
    let (timeout_ms, stored_last, surely_passed) = (
        c.timeout_seconds * 1_000,
        c.last_heartbeat_ms,
        c.surely_passed,
    );
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
        // No heartbeat ever reached the registry (the first one of an attempt is always
        // written through, a cache miss): the stored deadline, claim time + timeout, is
        // exact.
        _ if surely_passed || stored_last.is_none() => Verdict::Expired,
        _ => Verdict::Unsure,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate(timeout_s: i64, stored_last: i64, surely: bool) -> ScanCandidate {
        let id = Uuid::nil();
        ScanCandidate {
            task_id: id,
            attempt: 1,
            workflow_id: "wf".into(),
            run_id: Some(id),
            reply_to: "shard.0".into(),
            timeout_seconds: timeout_s,
            last_heartbeat_ms: Some(stored_last),
            surely_passed: surely,
        }
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
