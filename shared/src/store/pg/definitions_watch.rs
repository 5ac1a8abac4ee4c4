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

/// Listens until `shutdown`, reconnecting with back-off.
pub(super) fn spawn(pool: PgPool, epoch: DefinitionsEpoch, shutdown: CancellationToken) {
    tokio::spawn(async move {
        let mut delay = Duration::from_millis(100);
        loop {
            match listen(&pool, &epoch, &shutdown).await {
                Ok(Ended::Shutdown) => return,
                Ok(Ended::Lost) => {
                    tracing::warn!(
                        "lost the connection that hears definition changes; reconnecting"
                    );
                    delay = Duration::from_millis(100);
                }
                Err(e) => {
                    tracing::warn!(error = %e, retry_in_ms = delay.as_millis() as u64, "cannot listen for definition changes; starts read definitions meanwhile");
                }
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(delay) => {}
            }
            delay = (delay * 2).min(Duration::from_secs(5));
        }
    });
}

/// Why a listening connection ended.
enum Ended {
    Shutdown,
    /// The connection dropped; notifications may have been missed.
    Lost,
}

async fn listen(
    pool: &PgPool,
    epoch: &DefinitionsEpoch,
    shutdown: &CancellationToken,
) -> Result<Ended, sqlx::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    listener.listen(CHANNEL).await?;
    // Only now: a change committed before the LISTEN is not heard, and anything read
    // before this moment belongs to an older epoch.
    epoch.start_watching();
    let ended = loop {
        tokio::select! {
            _ = shutdown.cancelled() => break Ok(Ended::Shutdown),
            heard = listener.try_recv() => match heard {
                Ok(Some(_)) => epoch.changed(),
                Ok(None) => break Ok(Ended::Lost),
                Err(e) => break Err(e),
            },
        }
    };
    epoch.stop_watching();
    ended
}
