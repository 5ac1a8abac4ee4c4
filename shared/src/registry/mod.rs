//! The running-activity registry (DESIGN.md §2, heartbeat): which activity attempts run,
//! their heartbeats, and their end. Used by the heartbeat service (bus ingest, timeout
//! scanner, retention) and by the gateway (HTTP workers' heartbeats and polls).
//!
//! - PostgreSQL (`task_check`) is the record: a row per attempt, written when the attempt
//!   starts, ends or is stopped, and behind the heartbeats: at most once per attempt per
//!   write interval, never once per heartbeat.
//! - Redis is the hot path: every heartbeat reads the attempt's status there and records
//!   its time. On a miss, or while Redis is down, PostgreSQL answers (and heartbeats are
//!   written through to it), and Redis is repopulated. Losing Redis loses no data.
//! - The scanner ([`Registry::scan`]) times out attempts whose deadline passed, once,
//!   whatever the number of replicas (see `scan.rs`).
//!
//! ```no_run
//! # async fn demo(store: weft::store::Store, config: weft::Config) -> weft::Result<()> {
//! use weft::registry::{Cache, Registry};
//! let cache = Cache::new(&config.redis_url, &config.namespace)?;
//! let registry = Registry::new(store, Some(cache), config.heartbeat_write_interval);
//! let beats = [weft::messages::Beat { task_id: uuid::Uuid::nil(), details: None }];
//! for (task_id, answer) in registry.heartbeat(&beats).await? {
//!     println!("{task_id}: {:?}", answer.action);
//! }
//! # Ok(()) }
//! ```

mod cache;
pub mod limits;
mod model;
pub mod rows;
pub mod scan;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;
use uuid::Uuid;

pub use crate::store::pg::registry::{GATE_SQL, SCAN_SQL};
pub use cache::Cache;
pub use limits::{AttemptLimits, Deferral, LimitKind, RateLimit};
pub use model::{not_found, throttled, AttemptStatus, TaskCheck};
pub use scan::ScanReport;

use crate::admin::{CounterFamily, Metrics};
use crate::messages::{
    AttemptFinished, AttemptStarted, Beat, ClaimAttempt, HeartbeatAnswer, StopAttempts,
};
use crate::store::Store;
use crate::{Error, Result};
use cache::{Cached, Entry};
pub use rows::ClaimOutcome;
use rows::{BeatWrite, End, LimitedClaim, Stored};

/// Heartbeats handled at once per registry before new ones are answered THROTTLED.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 50_000;

/// The registry: cheap to clone (every clone shares the cache, counters and in-flight
/// bound).
#[derive(Clone, Debug)]
pub struct Registry {
    store: Store,
    cache: Option<Cache>,
    write_interval: Duration,
    in_flight: Arc<Semaphore>,
    max_in_flight: usize,
    stats: Arc<Counters>,
    /// `weft_claims_deferred{task_name, limit}`, once [`Registry::with_metrics`] gave it.
    deferred: Option<CounterFamily>,
}

/// Counters of a registry since it was made (all clones share them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Heartbeats received (throttled ones included).
    pub heartbeats: u64,
    /// Heartbeats answered from Redis.
    pub cache_hits: u64,
    /// Heartbeats Redis did not know (answered from PostgreSQL, then cached).
    pub cache_misses: u64,
    /// Heartbeats answered from PostgreSQL because Redis was unavailable.
    pub cache_unavailable: u64,
    /// Heartbeats answered THROTTLED.
    pub throttled: u64,
    /// `task_check` rows written because of heartbeats (write-behind, write-through, and
    /// the scanner confirming a live attempt): the figure the write interval bounds.
    pub heartbeat_writes: u64,
    /// Attempts whose status changed (registered, finished, stopped, timed out).
    pub status_writes: u64,
    /// Attempts timed out by this registry's scanner.
    pub timed_out: u64,
    /// Claims of limited tasks judged on the limited path (docs/task-limits.md).
    pub limited_claims: u64,
    /// Of those, the claims deferred (over a limit; the attempt stays SCHEDULED).
    pub deferred: u64,
}

#[derive(Debug, Default)]
struct Counters {
    heartbeats: AtomicU64,
    cache_hits: AtomicU64,
    cache_misses: AtomicU64,
    cache_unavailable: AtomicU64,
    throttled: AtomicU64,
    heartbeat_writes: AtomicU64,
    status_writes: AtomicU64,
    timed_out: AtomicU64,
    limited_claims: AtomicU64,
    deferred: AtomicU64,
}

fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

impl Registry {
    /// A registry over `store` (PostgreSQL), with `cache` (Redis; `None` runs on
    /// PostgreSQL alone, writing every heartbeat through) and the write-behind
    /// `write_interval` (`WEFT_HEARTBEAT_WRITE_INTERVAL_MS`, default 60 s).
    pub fn new(store: Store, cache: Option<Cache>, write_interval: Duration) -> Self {
        Self {
            store,
            cache,
            write_interval,
            in_flight: Arc::new(Semaphore::new(DEFAULT_MAX_IN_FLIGHT)),
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            stats: Arc::default(),
            deferred: None,
        }
    }

    /// Counts deferred claims in `metrics`, as `weft_claims_deferred{task_name, limit}`
    /// (`limit`: `concurrency` or `rate`; one series per limited task name that was
    /// deferred, so their number follows the task definitions with limits).
    pub fn with_metrics(mut self, metrics: &Metrics) -> Self {
        self.deferred = Some(metrics.counter_family(
            "weft_claims_deferred",
            "Claims deferred by a task definition's limit (the task stays SCHEDULED), by task name and limit",
        ));
        self
    }

    /// Bounds the heartbeats handled at once (default [`DEFAULT_MAX_IN_FLIGHT`]); past it
    /// a batch is answered THROTTLED and the worker retries it.
    pub fn with_max_in_flight(mut self, max: usize) -> Self {
        let max = max.max(1);
        self.in_flight = Arc::new(Semaphore::new(max));
        self.max_in_flight = max;
        self
    }

    /// The store it writes to.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The write-behind interval.
    pub fn write_interval(&self) -> Duration {
        self.write_interval
    }

    /// Counters since the registry was made.
    pub fn stats(&self) -> Stats {
        let c = &self.stats;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Stats {
            heartbeats: get(&c.heartbeats),
            cache_hits: get(&c.cache_hits),
            cache_misses: get(&c.cache_misses),
            cache_unavailable: get(&c.cache_unavailable),
            throttled: get(&c.throttled),
            heartbeat_writes: get(&c.heartbeat_writes),
            status_writes: get(&c.status_writes),
            timed_out: get(&c.timed_out),
            limited_claims: get(&c.limited_claims),
            deferred: get(&c.deferred),
        }
    }

    /// Claims attempts for the workers that took them from their queues (a bus worker's
    /// `ClaimAttempt`, or the gateway handing a task to an HTTP poller), in one statement:
    /// an attempt the decider scheduled becomes RUNNING, watched from now with its
    /// heartbeat timeout; one stopped or ended while it waited is refused with its status;
    /// one RUNNING is refused unless the claim may take it over (a redelivered task: its
    /// earlier consumer died). One outcome per claim, in order; a claim repeating an
    /// earlier attempt of the same call is refused.
    ///
    /// An attempt whose task has limits (docs/task-limits.md) is then claimed on the
    /// limited path ([`Registry::claim_limited`]), or deferred; only such attempts pay
    /// for it.
    ///
    /// Redis is not written: most attempts end before their first heartbeat, which is
    /// the first to cache the attempt (a miss is answered from PostgreSQL).
    pub async fn claim_many(&self, claims: &[ClaimAttempt]) -> Result<Vec<ClaimOutcome>> {
        let mut outcomes = self.claim_fast(claims).await?;
        let limited: Vec<(usize, LimitedClaim)> = outcomes
            .iter()
            .enumerate()
            .filter_map(|(i, o)| {
                let limited = o.limited.clone()?;
                Some((
                    i,
                    LimitedClaim {
                        claim: claims[i].clone(),
                        limited,
                    },
                ))
            })
            .collect();
        if limited.is_empty() {
            return Ok(outcomes);
        }
        let (at, pending): (Vec<usize>, Vec<LimitedClaim>) = limited.into_iter().unzip();
        for (i, outcome) in at.into_iter().zip(self.claim_limited(&pending).await?) {
            outcomes[i] = outcome;
        }
        Ok(outcomes)
    }

    /// The first step of [`Registry::claim_many`]: claims what needs no limit (one
    /// statement), and leaves the attempts of limited tasks unclaimed, flagged
    /// [`ClaimOutcome::limited`], for [`Registry::claim_limited`]. The heartbeat service
    /// writes the two steps in separate groups, so that limited claims waiting on their
    /// task's lock never hold up the others.
    pub async fn claim_fast(&self, claims: &[ClaimAttempt]) -> Result<Vec<ClaimOutcome>> {
        if claims.is_empty() {
            return Ok(Vec::new());
        }
        let outcomes = self.store.claim_many(claims).await?;
        add(
            &self.stats.status_writes,
            outcomes.iter().filter(|o| o.claimed).count() as u64,
        );
        let mut by_attempt: HashMap<(Uuid, i32), ClaimOutcome> = outcomes
            .into_iter()
            .map(|o| ((o.stored.task_id, o.stored.attempt), o))
            .collect();
        claims
            .iter()
            .map(|c| {
                let key = (c.started.attempt.task_id, c.started.attempt.attempt);
                match by_attempt.get_mut(&key) {
                    Some(first) => {
                        let outcome = first.clone();
                        // Later claims of the same attempt in this call lose to the first.
                        first.claimed = false;
                        first.limited = None;
                        Ok(outcome)
                    }
                    None => Err(Error::Decode(format!(
                        "no claim outcome for attempt {} of task {}",
                        key.1, key.0
                    ))),
                }
            })
            .collect()
    }

    /// The second step of [`Registry::claim_many`], for the attempts its first step
    /// flagged: each is claimed under its task's limits, or deferred (it stays SCHEDULED;
    /// the answer says when to come back). Deferrals are counted by task name and limit
    /// ([`Registry::with_metrics`]). One outcome per claim, in order.
    pub async fn claim_limited(&self, claims: &[LimitedClaim]) -> Result<Vec<ClaimOutcome>> {
        if claims.is_empty() {
            return Ok(Vec::new());
        }
        let outcomes = self.store.claim_limited(claims).await?;
        add(&self.stats.limited_claims, claims.len() as u64);
        add(
            &self.stats.status_writes,
            outcomes.iter().filter(|o| o.claimed).count() as u64,
        );
        let mut by_attempt: HashMap<(Uuid, i32), ClaimOutcome> = outcomes
            .into_iter()
            .map(|o| ((o.stored.task_id, o.stored.attempt), o))
            .collect();
        claims
            .iter()
            .map(|c| {
                let a = c.claim.started.attempt;
                let Some(first) = by_attempt.get_mut(&(a.task_id, a.attempt)) else {
                    return Err(Error::Decode(format!(
                        "no claim outcome for attempt {} of task {}",
                        a.attempt, a.task_id
                    )));
                };
                let outcome = first.clone();
                // Later claims of the same attempt in this call lose to the first.
                first.claimed = false;
                first.deferred = None;
                if let Some(d) = &outcome.deferred {
                    add(&self.stats.deferred, 1);
                    if let Some(family) = &self.deferred {
                        family
                            .get_or_create(&vec![
                                ("task_name".to_owned(), c.limited.task_name.clone()),
                                ("limit".to_owned(), d.limit.as_str().to_owned()),
                            ])
                            .inc();
                    }
                }
                Ok(outcome)
            })
            .collect()
    }

    /// [`Registry::claim_many`] for one claim.
    pub async fn claim(&self, claim: &ClaimAttempt) -> Result<ClaimOutcome> {
        self.claim_many(std::slice::from_ref(claim))
            .await?
            .pop()
            .ok_or_else(|| Error::Decode("the claim returned no outcome".into()))
    }

    /// Registers an attempt a worker started without a claim (an `AttemptStarted` of an
    /// older SDK): a claim that may take a running attempt over, so that a stop that raced
    /// the start stays; the status the attempt has afterwards.
    pub async fn register(&self, started: &AttemptStarted) -> Result<AttemptStatus> {
        Ok(self
            .register_many(std::slice::from_ref(started))
            .await?
            .pop()
            .unwrap_or(AttemptStatus::Running))
    }

    /// [`Registry::register`] for many attempts in one statement.
    pub async fn register_many(&self, started: &[AttemptStarted]) -> Result<Vec<AttemptStatus>> {
        let claims: Vec<ClaimAttempt> = started
            .iter()
            .map(|s| ClaimAttempt {
                started: s.clone(),
                takeover: true,
            })
            .collect();
        Ok(self
            .claim_many(&claims)
            .await?
            .into_iter()
            .map(|o| o.stored.status)
            .collect())
    }

    /// Records heartbeats and answers each: CONTINUE for a running attempt, STOP (with
    /// the reason) for one stopped, timed out or finished, NOT_FOUND for an unknown task,
    /// THROTTLED (for the whole batch) when too many heartbeats are in flight. One answer
    /// per beat, in order. A beat's `details` are kept as the attempt's progress.
    ///
    /// Costs one Redis round trip per batch; PostgreSQL is written only for attempts whose
    /// stored heartbeat is older than the write interval, for Redis misses, and for every
    /// beat while Redis is down. Fails only when PostgreSQL is needed and unreachable.
    pub async fn heartbeat(&self, beats: &[Beat]) -> Result<Vec<(Uuid, HeartbeatAnswer)>> {
        add(&self.stats.heartbeats, beats.len() as u64);
        let wanted = beats.len().clamp(1, self.max_in_flight) as u32;
        let Ok(_permit) = self.in_flight.try_acquire_many(wanted) else {
            add(&self.stats.throttled, beats.len() as u64);
            return Ok(beats.iter().map(|b| (b.task_id, throttled())).collect());
        };
        let encoded: Vec<(Uuid, Option<String>)> = beats
            .iter()
            .map(|b| (b.task_id, b.details.as_ref().map(|d| d.to_string())))
            .collect();
        let cached = match &self.cache {
            Some(cache) => cache.beat(&encoded, self.write_interval).await,
            None => None,
        };
        match cached {
            Some(cached) => self.answer_cached(&encoded, cached).await,
            None => {
                add(&self.stats.cache_unavailable, beats.len() as u64);
                self.answer_from_store(&encoded, false).await
            }
        }
    }

    /// Answers a probe before attempts start: STOP (with the reason) for an attempt that
    /// was stopped while it waited in its queue, NOT_FOUND for one not registered yet,
    /// its status's answer otherwise. Reads only, and records no heartbeat: Redis first,
    /// PostgreSQL (by primary key) for what Redis does not hold — an entry expired, lost
    /// in an outage, or a stop committed but not cached yet — or for all when Redis
    /// cannot answer.
    pub async fn probe(&self, task_ids: &[Uuid]) -> Result<Vec<(Uuid, HeartbeatAnswer)>> {
        let cached = match &self.cache {
            Some(cache) => cache.statuses(task_ids).await,
            None => None,
        };
        let cached = cached.unwrap_or_else(|| vec![None; task_ids.len()]);
        let missed: Vec<Uuid> = task_ids
            .iter()
            .zip(&cached)
            .filter(|(_, c)| c.is_none())
            .map(|(id, _)| *id)
            .collect();
        let stored: HashMap<Uuid, Stored> = if missed.is_empty() {
            HashMap::new()
        } else {
            self.store
                .load_latest(&missed)
                .await?
                .into_iter()
                .map(|s| (s.task_id, s))
                .collect()
        };
        Ok(task_ids
            .iter()
            .zip(cached)
            .map(|(id, c)| {
                let answer = match c {
                    Some((status, reason)) => status.answer(Some(&reason)),
                    None => stored
                        .get(id)
                        .map(|r| r.status.answer(r.reason.as_deref()))
                        .unwrap_or_else(not_found),
                };
                (*id, answer)
            })
            .collect())
    }

    /// Answers from what Redis said; writes behind the attempts that are due, and answers
    /// the misses from PostgreSQL.
    async fn answer_cached(
        &self,
        beats: &[(Uuid, Option<String>)],
        cached: Vec<Cached>,
    ) -> Result<Vec<(Uuid, HeartbeatAnswer)>> {
        let mut answers: Vec<Option<HeartbeatAnswer>> = vec![None; beats.len()];
        let mut due = Vec::new();
        let mut missed = Vec::new();
        for (i, ((task_id, _), c)) in beats.iter().zip(cached).enumerate() {
            match c {
                Cached::Miss => missed.push(i),
                Cached::Known {
                    attempt,
                    status,
                    reason,
                    due: is_due,
                    details,
                } => {
                    if is_due {
                        due.push(BeatWrite {
                            task_id: *task_id,
                            attempt,
                            at_ms: None,
                            details,
                        });
                    }
                    answers[i] = Some(status.answer(Some(&reason)));
                }
            }
        }
        add(&self.stats.cache_hits, (beats.len() - missed.len()) as u64);
        if !due.is_empty() {
            let written = self.store.write_beats(&due).await?;
            add(&self.stats.heartbeat_writes, written);
        }
        if !missed.is_empty() {
            add(&self.stats.cache_misses, missed.len() as u64);
            let misses: Vec<(Uuid, Option<String>)> =
                missed.iter().map(|&i| beats[i].clone()).collect();
            let from_store = self.answer_from_store(&misses, true).await?;
            for (&i, (_, answer)) in missed.iter().zip(from_store) {
                answers[i] = Some(answer);
            }
        }
        Ok(beats
            .iter()
            .zip(answers)
            .map(|((id, _), a)| (*id, a.unwrap_or_else(not_found)))
            .collect())
    }

    /// Answers from PostgreSQL, writing the heartbeats of running attempts through, and
    /// (when `repopulate`) caching what it read.
    async fn answer_from_store(
        &self,
        beats: &[(Uuid, Option<String>)],
        repopulate: bool,
    ) -> Result<Vec<(Uuid, HeartbeatAnswer)>> {
        let ids: Vec<Uuid> = beats.iter().map(|(id, _)| *id).collect();
        let rows: HashMap<Uuid, Stored> = self
            .store
            .load_latest(&ids)
            .await?
            .into_iter()
            .map(|s| (s.task_id, s))
            .collect();
        let writes: Vec<BeatWrite> = beats
            .iter()
            .filter_map(|(id, details)| {
                let row = rows
                    .get(id)
                    .filter(|r| r.status == AttemptStatus::Running)?;
                Some(BeatWrite {
                    task_id: *id,
                    attempt: row.attempt,
                    at_ms: None,
                    details: details.clone(),
                })
            })
            .collect();
        let written = self.store.write_beats(&writes).await?;
        add(&self.stats.heartbeat_writes, written);
        if repopulate {
            if let Some(cache) = &self.cache {
                let entries: Vec<Entry> = rows.values().map(entry).collect();
                cache.populate(&entries, self.write_interval).await;
            }
        }
        Ok(ids
            .iter()
            .map(|id| {
                let answer = rows
                    .get(id)
                    .map(|r| r.status.answer(r.reason.as_deref()))
                    .unwrap_or_else(not_found);
                (*id, answer)
            })
            .collect())
    }

    /// Ends an attempt whose worker published its result (COMPLETED, FAILED or
    /// FAILED_WITH_TERMINAL_ERROR): no longer scanned; its heartbeats answer STOP
    /// ("already finished"). An attempt already timed out or stopped keeps that status.
    /// Any other `status` is [`Error::Decode`] (a bad message: dead-letter it).
    pub async fn finish(&self, finished: &AttemptFinished) -> Result<AttemptStatus> {
        self.finish_many(std::slice::from_ref(finished))
            .await?
            .pop()
            .unwrap_or_else(|| Err(Error::Decode("no answer for the attempt".into())))
    }

    /// [`Registry::finish`] for many attempts in one statement and one Redis call (group
    /// commit). The outer error is the database's; each attempt gets its status, or
    /// [`Error::Decode`] for a status that is not a result's.
    pub async fn finish_many(
        &self,
        finished: &[AttemptFinished],
    ) -> Result<Vec<Result<AttemptStatus>>> {
        let statuses: Vec<Result<AttemptStatus>> = finished
            .iter()
            .map(|f| {
                AttemptStatus::from_result(&f.status).ok_or_else(|| {
                    Error::Decode(format!(
                        "AttemptFinished status {:?}: expected COMPLETED, FAILED or FAILED_WITH_TERMINAL_ERROR",
                        f.status
                    ))
                })
            })
            .collect();
        let ends: Vec<End<'_>> = finished
            .iter()
            .zip(&statuses)
            .filter_map(|(f, s)| {
                let status = *s.as_ref().ok()?;
                Some(End {
                    attempt: f.attempt,
                    status,
                    reason: None,
                    output_bytes: Some(f.output_bytes),
                })
            })
            .collect();
        let rows = if ends.is_empty() {
            Vec::new()
        } else {
            self.store.end_each(&ends).await?
        };
        self.cache_ends(&rows).await;
        let by_attempt: HashMap<(Uuid, i32), AttemptStatus> = rows
            .iter()
            .map(|r| ((r.task_id, r.attempt), r.status))
            .collect();
        Ok(finished
            .iter()
            .zip(statuses)
            .map(|(f, s)| {
                s.map(|wanted| {
                    by_attempt
                        .get(&(f.attempt.task_id, f.attempt.attempt))
                        .copied()
                        .unwrap_or(wanted)
                })
            })
            .collect())
    }

    /// Stops attempts (the decider's terminate, reset, skip, fork cancel): STOPPED with
    /// the reason, which their next heartbeat is told. An attempt not registered yet is
    /// recorded STOPPED so that its registration does not bring it back.
    pub async fn stop(&self, stop: &StopAttempts) -> Result<()> {
        if stop.attempts.is_empty() {
            return Ok(());
        }
        let ends: Vec<End<'_>> = stop
            .attempts
            .iter()
            .map(|a| End {
                attempt: *a,
                status: AttemptStatus::Stopped,
                reason: Some(&stop.reason),
                output_bytes: None,
            })
            .collect();
        let rows = self.store.end_each(&ends).await?;
        self.cache_ends(&rows).await;
        Ok(())
    }

    async fn cache_ends(&self, rows: &[Stored]) {
        add(&self.stats.status_writes, rows.len() as u64);
        if let Some(cache) = &self.cache {
            let entries: Vec<Entry> = rows.iter().map(entry).collect();
            cache.set_status(&entries, self.write_interval).await;
        }
    }

    /// What the registry knows of a task's newest attempt, with the last heartbeat and
    /// details from Redis when newer; `None` for an unknown task.
    pub async fn get(&self, task_id: Uuid) -> Result<Option<TaskCheck>> {
        let Some(mut check) = self.store.task_check(task_id).await? else {
            return Ok(None);
        };
        if let Some(cache) = &self.cache {
            if let Some((last_ms, details)) = cache.peek(task_id).await {
                let last = last_ms.and_then(chrono::DateTime::from_timestamp_millis);
                // The cache sees every beat and PostgreSQL only some: at the same
                // millisecond (a beat written through, then more within that ms; the
                // cache counts in ms, PostgreSQL in µs) the cache's are the newer.
                let stored_ms = check
                    .last_heartbeat_at
                    .map(|t| t.timestamp_millis())
                    .and_then(chrono::DateTime::from_timestamp_millis);
                if last >= stored_ms {
                    check.last_heartbeat_at = last;
                    if let Some(d) = details.and_then(|d| serde_json::from_str(&d).ok()) {
                        check.details = Some(d);
                    }
                }
            }
        }
        Ok(Some(check))
    }
}

fn entry(row: &Stored) -> Entry {
    Entry {
        task_id: row.task_id,
        attempt: row.attempt,
        status: row.status,
        reason: row.reason.clone(),
        timeout_seconds: row.timeout_seconds,
    }
}
