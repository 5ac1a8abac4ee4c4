//! The registry's counters on `/metrics`: copied from [`Registry::stats`] every second
//! (the registry counts with plain atomics on its hot path, shared with the gateway).
//! Deferred claims are counted by the registry itself, by task name and limit
//! (`weft_claims_deferred`, [`Registry::with_metrics`]).

use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use tokio_util::sync::CancellationToken;
use weft::admin::Metrics;
use weft::registry::{Registry, Stats};

/// How often the counters are refreshed.
const EVERY: Duration = Duration::from_secs(1);

/// Reads one counter out of the registry's stats.
type Field = fn(&Stats) -> u64;

/// Copies the registry's counters into the metrics registry.
pub struct Exporter {
    registry: Registry,
    counters: Vec<(Counter, Field)>,
}

impl Exporter {
    /// Registers the counters.
    pub fn new(registry: Registry, metrics: &Metrics) -> Self {
        let specs: [(&str, &str, Field); 9] = [
            ("weft_heartbeats", "Heartbeats received", |s| s.heartbeats),
            (
                "weft_heartbeat_cache_hits",
                "Heartbeats answered from Redis",
                |s| s.cache_hits,
            ),
            (
                "weft_heartbeat_cache_misses",
                "Heartbeats Redis did not know (answered from PostgreSQL)",
                |s| s.cache_misses,
            ),
            (
                "weft_heartbeat_cache_unavailable",
                "Heartbeats answered from PostgreSQL while Redis was unavailable",
                |s| s.cache_unavailable,
            ),
            (
                "weft_heartbeats_throttled",
                "Heartbeats answered THROTTLED",
                |s| s.throttled,
            ),
            (
                "weft_heartbeat_pg_writes",
                "task_check rows written because of heartbeats",
                |s| s.heartbeat_writes,
            ),
            (
                "weft_attempt_status_writes",
                "Attempt status changes written",
                |s| s.status_writes,
            ),
            (
                "weft_attempts_timed_out",
                "Attempts timed out by the scanner",
                |s| s.timed_out,
            ),
            (
                "weft_limited_claims",
                "Claims of limited tasks judged under their task's limits (deferred ones: weft_claims_deferred)",
                |s| s.limited_claims,
            ),
        ];
        let counters = specs
            .into_iter()
            .map(|(name, help, get)| (metrics.counter(name, help), get))
            .collect();
        Self { registry, counters }
    }

    /// Refreshes until `shutdown`.
    pub async fn run(&self, shutdown: CancellationToken) {
        loop {
            let stats = self.registry.stats();
            for (counter, get) in &self.counters {
                let (now, seen) = (get(&stats), counter.get());
                if now > seen {
                    counter.inc_by(now - seen);
                }
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(EVERY) => {}
            }
        }
    }
}
