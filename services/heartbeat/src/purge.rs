//! Retention of ended attempts: deleted in bounded batches once older than
//! `WEFT_TASK_CHECK_RETENTION_HOURS`, so `task_check` holds running attempts and a
//! bounded tail of ended ones.

use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use tokio_util::sync::CancellationToken;
use weft::admin::Metrics;
use weft::registry::Registry;

/// Rows deleted per statement, so a backlog never holds long locks.
const BATCH: i64 = 5_000;
/// Pause between rounds when there is nothing (more) to delete.
const IDLE: Duration = Duration::from_secs(60);

/// Deletes ended attempts after their retention.
pub struct Purge {
    registry: Registry,
    retention: Duration,
    purged: Counter,
}

impl Purge {
    /// A purge of `registry`'s attempts ended more than `retention` ago.
    pub fn new(registry: Registry, retention: Duration, metrics: &Metrics) -> Self {
        Self {
            registry,
            retention,
            purged: metrics.counter(
                "weft_task_check_purged",
                "Ended attempts deleted from the registry after their retention",
            ),
        }
    }

    /// Purges until `shutdown`: a full batch is followed at once by the next one.
    pub async fn run(&self, shutdown: CancellationToken) {
        weft::purge::in_batches(
            "ended attempts",
            BATCH,
            IDLE,
            &self.purged,
            shutdown,
            || self.registry.purge(self.retention, BATCH),
        )
        .await;
    }
}
