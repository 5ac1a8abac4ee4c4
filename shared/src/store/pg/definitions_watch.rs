//! Hears other processes' changes to the definitions: a trigger on `definitions` and
//! `task_definitions` sends `NOTIFY weft_definitions` with each change (migration
//! `0016`), delivered once the change has committed; each one moves the
//! [`DefinitionsEpoch`] on. While the listening connection is down the epoch is not
//! current, so caches hold nothing they could not be told about.

use std::time::Duration;

use sqlx::postgres::PgListener;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::store::definitions_epoch::DefinitionsEpoch;

/// The channel the trigger notifies.
const CHANNEL: &str = "weft_definitions";

/// Listens until `shutdown`, reconnecting with back-off: doubling while connecting or
/// listening fails, from the start again once a connection has listened.
pub(super) fn spawn(pool: PgPool, epoch: DefinitionsEpoch, shutdown: CancellationToken) {
    tokio::spawn(async move {
        let mut delay = FIRST_RETRY;
        loop {
            match listen(&pool, &epoch, &shutdown).await {
                Ended::Shutdown => return,
                Ended::Lost(e) => {
                    tracing::warn!(
                        error = e.map(|e| e.to_string()),
                        "lost the connection that hears definition changes; reconnecting"
                    );
                    delay = FIRST_RETRY;
                }
                Ended::NotListening(e) => {
                    tracing::warn!(error = %e, retry_in_ms = delay.as_millis() as u64, "cannot listen for definition changes; starts read definitions meanwhile");
                }
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(delay) => {}
            }
            delay = next_retry(delay);
        }
    });
}

/// The first wait before reconnecting.
const FIRST_RETRY: Duration = Duration::from_millis(100);
/// The longest wait between two attempts.
const LAST_RETRY: Duration = Duration::from_secs(5);

/// The wait after `delay`, when the attempt that followed it failed too.
fn next_retry(delay: Duration) -> Duration {
    (delay * 2).min(LAST_RETRY)
}

/// Why a listening connection ended.
enum Ended {
    Shutdown,
    /// The connection had listened, then dropped (with the error, if one was reported):
    /// notifications may have been missed.
    Lost(Option<sqlx::Error>),
    /// No connection could listen.
    NotListening(sqlx::Error),
}

async fn listen(pool: &PgPool, epoch: &DefinitionsEpoch, shutdown: &CancellationToken) -> Ended {
    let mut listener = match PgListener::connect_with(pool).await {
        Ok(listener) => listener,
        Err(e) => return Ended::NotListening(e),
    };
    if let Err(e) = listener.listen(CHANNEL).await {
        return Ended::NotListening(e);
    }
    // Only now: a change committed before the LISTEN is not heard, and anything read
    // before this moment belongs to an older epoch.
    epoch.start_watching();
    let ended = loop {
        tokio::select! {
            _ = shutdown.cancelled() => break Ended::Shutdown,
            heard = listener.try_recv() => match heard {
                Ok(Some(_)) => epoch.changed(),
                Ok(None) => break Ended::Lost(None),
                Err(e) => break Ended::Lost(Some(e)),
            },
        }
    };
    epoch.stop_watching();
    ended
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_double_up_to_five_seconds() {
        let waits: Vec<u128> = std::iter::successors(Some(FIRST_RETRY), |d| Some(next_retry(*d)))
            .take(9)
            .map(|d| d.as_millis())
            .collect();
        assert_eq!(waits, [100, 200, 400, 800, 1600, 3200, 5000, 5000, 5000]);
    }
}
