//! The timeout scanner's loop: every scan interval, [`Registry::scan`] until no full batch
//! remains. Several replicas may run it; `FOR UPDATE SKIP LOCKED` shares the work.

use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use tokio_util::sync::CancellationToken;
use weft::admin::Metrics;
use weft::bus::Bus;
use weft::registry::Registry;

/// Candidates per scan transaction.
pub const BATCH: i64 = 500;

/// Scans for timed-out attempts.
pub struct Scanner {
    registry: Registry,
    bus: Bus,
    scans: Counter,
    failures: Counter,
}

impl Scanner {
    /// A scanner over `registry`, sending `ActivityTimedOut` on `bus`.
    pub fn new(registry: Registry, bus: Bus, metrics: &Metrics) -> Self {
        Self {
            registry,
            bus,
            scans: metrics.counter("weft_heartbeat_scans", "Timeout scans run"),
            failures: metrics.counter(
                "weft_heartbeat_scan_failures",
                "Timeout scans that failed (retried at the next interval)",
            ),
        }
    }

    /// Scans every `interval` until `shutdown`; a scan in progress is finished (it is one
    /// transaction: committed whole, or rolled back whole if the process dies).
    pub async fn run(&self, interval: Duration, shutdown: CancellationToken) {
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(interval) => {}
            }
            self.scan_all(&shutdown).await;
        }
    }

    /// Scans until a batch comes back short of [`BATCH`] candidates.
    pub async fn scan_all(&self, shutdown: &CancellationToken) {
        while !shutdown.is_cancelled() {
            self.scans.inc();
            match self.registry.scan(&self.bus, BATCH).await {
                Ok(report) => {
                    if report.timed_out > 0 {
                        tracing::info!(
                            timed_out = report.timed_out,
                            extended = report.extended,
                            "attempts timed out"
                        );
                    }
                    if (report.candidates as i64) < BATCH || report.candidates == report.deferred {
                        return;
                    }
                }
                Err(e) => {
                    self.failures.inc();
                    tracing::warn!(error = %e, "timeout scan failed");
                    return;
                }
            }
        }
    }
}
