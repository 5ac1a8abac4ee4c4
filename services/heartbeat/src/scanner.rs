//! The timeout scanner's loop: every scan interval, until no full batch remains, it
//! suspects the attempts whose heartbeats stopped ([`Registry::suspect`]), sends a
//! barrier through the heartbeat queue and, once the ingest has recorded every heartbeat
//! queued before it, times out the suspects still expired ([`Registry::confirm`]). So an
//! attempt whose heartbeat waits behind a backlog is never timed out (docs/heartbeats.md).
//! Several replicas may run it; `FOR UPDATE SKIP LOCKED` shares the work.

use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use tokio_util::sync::CancellationToken;
use weft::admin::Metrics;
use weft::bus::Bus;
use weft::messages::{Barrier, HeartbeatMessage};
use weft::registry::Registry;
use weft::Envelope;

/// Candidates per scan transaction.
pub const BATCH: i64 = 500;
/// How long the scanner waits for its barrier to come through the heartbeat queue; a
/// longer backlog defers every time-out to a later scan.
pub const BARRIER_TIMEOUT: Duration = Duration::from_secs(30);

/// Scans for timed-out attempts.
pub struct Scanner {
    registry: Registry,
    bus: Bus,
    scans: Counter,
    failures: Counter,
    /// Scans whose suspects waited for a later scan: the barrier did not come through.
    behind_backlog: Counter,
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
            behind_backlog: metrics.counter(
                "weft_heartbeat_scans_behind_backlog",
                "Scans whose time-outs waited: the heartbeat queue was not read up to them in time",
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
            match self.scan_once().await {
                Ok(Some(report)) => {
                    if (report.candidates as i64) < BATCH || report.candidates == report.deferred {
                        return;
                    }
                }
                Ok(None) => return,
                Err(e) => {
                    self.failures.inc();
                    tracing::warn!(error = %e, "timeout scan failed");
                    return;
                }
            }
        }
    }

    /// One batch: suspects, the barrier, the confirmation. `None` when the barrier did not
    /// come through in time (the suspects wait for the next scan).
    async fn scan_once(&self) -> weft::Result<Option<weft::registry::ScanReport>> {
        let (mut report, suspects) = self.registry.suspect(&self.bus, BATCH).await?;
        if suspects.is_empty() {
            return Ok(Some(report));
        }
        if let Err(e) = self.barrier().await {
            self.behind_backlog.inc();
            tracing::warn!(error = %e, suspects = suspects.len(),
                "the heartbeat queue was not read up to the scan in time; time-outs wait for the next scan");
            return Ok(None);
        }
        let confirmed = self.registry.confirm(&self.bus, &suspects).await?;
        report.timed_out = confirmed.timed_out;
        report.extended += confirmed.extended;
        report.deferred += confirmed.deferred;
        if confirmed.timed_out > 0 || confirmed.extended > 0 {
            tracing::info!(
                timed_out = confirmed.timed_out,
                alive_after_all = confirmed.extended,
                "suspected attempts judged"
            );
        }
        Ok(Some(report))
    }

    /// Waits until the ingest has recorded every heartbeat queued before now: a request
    /// through the heartbeat queue, answered behind them.
    async fn barrier(&self) -> weft::Result<()> {
        let request = Envelope::new("", None, &HeartbeatMessage::Barrier(Barrier {}))?;
        let queue = self.bus.names().heartbeat_queue();
        self.bus
            .call("", &queue, &request, BARRIER_TIMEOUT)
            .await
            .map(|_| ())
    }
}
