//! The worker's heartbeat scheduler: keeps every running activity of the process alive
//! with one batched request per tick, and stops the activities the service says to stop.
//!
//! [`Heartbeats`] is the cheap-to-clone handle the runner registers activities with;
//! [`run`] is the loop that ticks, sends what is due through a [`Transport`] and applies
//! the answers; [`schedule`] holds the rules (due times, retries), free of I/O.

mod counters;
mod schedule;
mod transport;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Instant;

use crate::messages::AttemptRef;
use serde_json::Value;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

use self::counters::Counters;
use self::schedule::{Cycle, Round, Schedule};
pub(crate) use self::schedule::{Key, Policy};
pub use self::schedule::{MAX_INTERVAL, MIN_INTERVAL};
pub(crate) use self::transport::{BusTransport, Transport};
use crate::admin::Metrics;

/// Fired when the service answers STOP or NOT_FOUND for an activity.
#[derive(Debug, Default)]
pub(crate) struct Stop {
    token: CancellationToken,
    reason: OnceLock<String>,
}

impl Stop {
    fn fire(&self, reason: String) {
        let _ = self.reason.set(reason);
        self.token.cancel();
    }

    /// Cancelled once the activity is stopped.
    pub(crate) fn token(&self) -> &CancellationToken {
        &self.token
    }

    /// Why it was stopped, once it was.
    pub(crate) fn reason(&self) -> Option<&str> {
        self.reason.get().map(String::as_str)
    }
}

/// The schedule of one worker process, shared by the runner and the scheduler loop.
#[derive(Debug, Clone)]
pub(crate) struct Heartbeats {
    schedule: Arc<Mutex<Schedule>>,
    counters: Counters,
    /// Numbers the registrations.
    runs: Arc<AtomicU64>,
}

impl Heartbeats {
    pub(crate) fn new(policy: Policy, metrics: &Metrics) -> Self {
        Self {
            schedule: Arc::new(Mutex::new(Schedule::new(policy))),
            counters: Counters::new(metrics),
            runs: Arc::new(AtomicU64::new(0)),
        }
    }

    pub(crate) fn counters(&self) -> &Counters {
        &self.counters
    }

    fn lock(&self) -> MutexGuard<'_, Schedule> {
        self.schedule.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Puts an activity on the schedule until the returned guard is dropped.
    pub(crate) fn register(
        &self,
        attempt: AttemptRef,
        response_timeout_seconds: i64,
    ) -> Registered {
        let key = Key {
            task_id: attempt.task_id,
            attempt: attempt.attempt,
            run: self.runs.fetch_add(1, Ordering::Relaxed),
        };
        let stop = self
            .lock()
            .add(key, response_timeout_seconds, Instant::now());
        Registered {
            heartbeats: self.clone(),
            key,
            stop,
        }
    }

    /// Activities on the schedule.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }

    /// Asks for a beat of attempt `key` at the next tick, carrying `details` if any (a
    /// no-op once the attempt left the schedule).
    pub(crate) fn request(&self, key: &Key, details: Option<Value>) {
        self.lock().request(key, details);
    }
}

/// An activity on the schedule; taken off when dropped.
#[derive(Debug)]
pub(crate) struct Registered {
    heartbeats: Heartbeats,
    key: Key,
    stop: Arc<Stop>,
}

impl Registered {
    /// Whether and why the service stopped the activity.
    pub(crate) fn stop(&self) -> &Arc<Stop> {
        &self.stop
    }

    pub(crate) fn key(&self) -> Key {
        self.key
    }

    pub(crate) fn heartbeats(&self) -> &Heartbeats {
        &self.heartbeats
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.heartbeats.lock().remove(&self.key);
    }
}

/// Ticks until `shutdown`, sending one cycle of heartbeats per tick.
///
/// Missed ticks (the process stalled, or a cycle took long) are skipped, not caught up:
/// the next cycle sends what is overdue once.
pub(crate) async fn run<T: Transport>(
    heartbeats: Heartbeats,
    transport: T,
    shutdown: CancellationToken,
) {
    let tick = heartbeats.lock().policy().tick;
    let mut ticks = tokio::time::interval(tick);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = ticks.tick() => {}
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = cycle(&heartbeats, &transport) => {}
        }
    }
}

/// Sends every activity due now once, then the retries of this cycle.
pub(crate) async fn cycle<T: Transport>(heartbeats: &Heartbeats, transport: &T) {
    let (due, max_batch) = {
        let schedule = heartbeats.lock();
        (
            schedule.due(Instant::now()),
            schedule.policy().max_batch.max(1),
        )
    };
    let mut cycle = Cycle::default();
    let mut round = due;
    loop {
        for ids in round.chunks(max_batch) {
            let sent = heartbeats.lock().beats(ids);
            if sent.is_empty() {
                continue;
            }
            let beats = sent.iter().map(|s| s.beat.clone()).collect();
            let sent_at = Instant::now();
            let counters = &heartbeats.counters;
            counters.requests.inc();
            counters.beats.inc_by(sent.len() as u64);
            let answers = transport.send(beats).await;
            if let Err(e) = &answers {
                counters.failed.inc();
                tracing::warn!(beats = sent.len(), error = %e, "heartbeat request failed");
            }
            let outcome = answers.as_ref().map_err(|_| ());
            heartbeats
                .lock()
                .apply(&mut cycle, &sent, outcome, sent_at, Instant::now());
        }
        round = loop {
            match cycle.next_round(Instant::now()) {
                Round::Send(ids) => break ids,
                Round::WaitUntil(at) => tokio::time::sleep_until(at.into()).await,
                Round::Done => {
                    if cycle.gave_up > 0 {
                        tracing::warn!(
                            activities = cycle.gave_up,
                            "heartbeats not delivered this cycle; retrying next tick"
                        );
                    }
                    return;
                }
            }
        };
    }
}

#[cfg(test)]
mod tests;
