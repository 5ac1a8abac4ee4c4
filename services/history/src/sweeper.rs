//! The outbox sweeper: publishes outbox rows older than the sweep age. A row that
//! old was committed by a decider (or gateway) that crashed or lost the broker before
//! publishing it; publishing it again is safe because every consumer is idempotent.

use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use tokio_util::sync::CancellationToken;
use weft::admin::Metrics;
use weft::bus::Bus;
use weft::store::Store;

/// Rows re-published per round.
const BATCH: i64 = 500;

/// Periodically re-publishes stale outbox rows.
pub struct Sweeper {
    store: Store,
    bus: Bus,
    older_than: Duration,
    republished: Counter,
}

impl Sweeper {
    /// A sweeper for rows older than `older_than`.
    pub fn new(store: Store, bus: Bus, metrics: &Metrics, older_than: Duration) -> Self {
        Self {
            store,
            bus,
            older_than,
            republished: metrics.counter(
                "weft_outbox_republished",
                "Outbox messages re-published by the sweeper",
            ),
        }
    }

    /// Sweeps until `shutdown`: a full batch is followed at once by the next round,
    /// otherwise the sweeper waits a fraction of the sweep age.
    pub async fn run(&self, shutdown: CancellationToken) {
        let idle = (self.older_than / 4).clamp(Duration::from_millis(50), Duration::from_secs(1));
        loop {
            let wait = match self
                .store
                .sweep_outbox(&self.bus, self.older_than, BATCH)
                .await
            {
                Ok(n) => {
                    if n > 0 {
                        self.republished.inc_by(n as u64);
                        tracing::info!(count = n, "re-published stale outbox messages");
                    }
                    if n as i64 == BATCH {
                        Duration::ZERO
                    } else {
                        idle
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "outbox sweep failed");
                    Duration::from_secs(1)
                }
            };
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }
}
