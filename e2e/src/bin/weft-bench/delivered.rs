//! With `--events`: when the listener has every lifecycle event of the throughput phase.
//! A run is COMPLETED before its last events are published (they go out after the commit
//! that writes them), so under load the events can trail the runs; the events row counts
//! a run done only once its events reached the listener.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sqlx::PgPool;
use weft::bus::Bus;

/// How long the listener's count must hold still, with nothing left to publish or to
/// deliver, before it is taken as final.
const SETTLED: Duration = Duration::from_millis(250);

/// The listener's bench-side pieces: its bus, its queue and its count of events.
pub struct Listener<'a> {
    pub bus: &'a Bus,
    pub queue: &'a str,
    pub seen: &'a AtomicU64,
}

impl Listener<'_> {
    /// Waits until every event is delivered: the outbox is empty (every event published
    /// and confirmed, so routed to the listener's queue), the queue holds none ready and
    /// the listener's count held still for [`SETTLED`]. Returns when the count last moved.
    pub async fn all_delivered(&self, pool: &PgPool, timeout: Duration) -> anyhow::Result<Instant> {
        let deadline = Instant::now() + timeout;
        let (mut last, mut moved) = (self.seen.load(Ordering::Relaxed), Instant::now());
        loop {
            tokio::time::sleep(Duration::from_millis(5)).await;
            let now = self.seen.load(Ordering::Relaxed);
            if now != last {
                (last, moved) = (now, Instant::now());
                continue;
            }
            if moved.elapsed() >= SETTLED {
                let outbox: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox")
                    .fetch_one(pool)
                    .await?;
                let ready = self.bus.message_count(self.queue).await?;
                if outbox == 0 && ready == 0 && self.seen.load(Ordering::Relaxed) == last {
                    return Ok(moved);
                }
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "the listener's events still coming after {timeout:?} ({last} so far)"
            );
        }
    }
}
