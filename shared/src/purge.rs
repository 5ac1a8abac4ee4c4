//! The loop behind every retention job: delete expired rows in bounded batches until
//! shutdown, a full batch followed at once by the next one, otherwise a pause.

use std::future::Future;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use tokio_util::sync::CancellationToken;

use crate::Result;

/// Runs `purge` (which deletes at most `batch` rows and says how many) until `shutdown`,
/// counting the rows in `purged`; waits `idle` after a short batch or a failure (logged
/// as "purging `what` failed").
pub async fn in_batches<F, Fut>(
    what: &str,
    batch: i64,
    idle: Duration,
    purged: &Counter,
    shutdown: CancellationToken,
    mut purge: F,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<u64>>,
{
    loop {
        let wait = match purge().await {
            Ok(n) => {
                purged.inc_by(n);
                if i64::try_from(n).is_ok_and(|n| n >= batch) {
                    Duration::ZERO
                } else {
                    idle
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "purging {what} failed");
                idle
            }
        };
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
    }
}
