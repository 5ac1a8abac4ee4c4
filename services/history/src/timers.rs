//! The timer firer: publishes durable timers (`weft::store::timers`) once they are due.
//!
//! Each round publishes up to [`BATCH`] due timers; a full batch is followed at once by
//! the next round. Otherwise the firer sleeps until the earliest pending timer is due,
//! but never longer than [`POLL_INTERVAL`]: the decider may have inserted a timer due
//! sooner than the earliest one known, and nothing tells the firer about it. So a timer
//! is published at most about `POLL_INTERVAL` (plus one round's work) after it is due,
//! and never before: due-ness is decided by the database's `now()`, one clock for every
//! replica, never by counting ticks (DESIGN.md §3.6).
//!
//! Any number of history replicas may run a firer: `SKIP LOCKED` keeps two of them from
//! publishing the same row at once, and a crash between publish and commit only costs a
//! duplicate, which consumers absorb (they are idempotent).

use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use tokio_util::sync::CancellationToken;
use weft::admin::Metrics;
use weft::bus::Bus;
use weft::store::Store;

/// Timers published per round.
pub const BATCH: i64 = 500;

/// Longest sleep between rounds; bounds how late a newly inserted timer can fire.
pub const POLL_INTERVAL: Duration = Duration::from_millis(250);

/// Shortest sleep between rounds that published nothing, so that due rows held by
/// another replica (being published there) do not make this one spin.
const MIN_WAIT: Duration = Duration::from_millis(20);

/// Pause after a failed round (database or broker trouble): the failed rows stay due,
/// and retrying at once would only hammer what is failing.
const ERROR_BACKOFF: Duration = Duration::from_secs(1);

/// Publishes due timers until shutdown.
pub struct TimerFirer {
    store: Store,
    bus: Bus,
    fired: Counter,
    lateness: Histogram,
}

impl TimerFirer {
    /// A firer publishing on `bus`, registering its metrics in `metrics`.
    pub fn new(store: Store, bus: Bus, metrics: &Metrics) -> Self {
        Self {
            store,
            bus,
            fired: metrics.counter("weft_timers_fired", "Durable timers published"),
            lateness: metrics.histogram(
                "weft_timer_lateness_seconds",
                "How long after its fire_at a timer's publish was confirmed",
                // 1 ms .. ~33 s.
                exponential_buckets(0.001, 2.0, 16),
            ),
        }
    }

    /// Fires timers until `shutdown`. A round in progress finishes first (its publishes
    /// are bounded by the bus's retries); a shutdown in the middle of it at worst leaves
    /// published rows behind, to be published again.
    pub async fn run(&self, shutdown: CancellationToken) {
        while !shutdown.is_cancelled() {
            let wait = self.round().await;
            if wait.is_zero() {
                continue;
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// One round: fire what is due, then work out how long to sleep.
    async fn round(&self) -> Duration {
        let report = match self.store.fire_timers(&self.bus, BATCH).await {
            Ok(report) => report,
            Err(e) => {
                tracing::warn!(error = %e, "firing timers failed");
                return ERROR_BACKOFF;
            }
        };
        let fired = report.fired();
        if fired > 0 {
            self.fired.inc_by(fired as u64);
            for late in &report.lateness {
                self.lateness.observe(late.as_secs_f64());
            }
            tracing::debug!(count = fired, "fired timers");
        }
        if !report.failed.is_empty() {
            for (id, e) in &report.failed {
                tracing::warn!(timer = %id, error = %e, "publishing a timer failed; it stays and fires later");
            }
            return ERROR_BACKOFF;
        }
        if fired as i64 >= BATCH {
            return Duration::ZERO;
        }
        match self.store.next_timer_in().await {
            // Became due during a round that made progress: go on at once.
            Ok(Some(next)) if next.is_zero() && fired > 0 => Duration::ZERO,
            Ok(Some(next)) => next.clamp(MIN_WAIT, POLL_INTERVAL),
            Ok(None) => POLL_INTERVAL,
            Err(e) => {
                tracing::warn!(error = %e, "reading the next timer failed");
                ERROR_BACKOFF
            }
        }
    }
}
