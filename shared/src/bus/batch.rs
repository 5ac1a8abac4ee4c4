//! The batch consumer loop: everything already buffered (up to a maximum) goes to the
//! handler as one batch, so a handler can commit many messages in one transaction.

use std::future::Future;
use std::sync::Arc;

use futures_util::{FutureExt, StreamExt};
use lapin::message::Delivery as RawDelivery;
use tokio_util::sync::CancellationToken;

use super::connection::{Link, Session};
use super::consume::{self, Ended, GRACE};
use super::dispose;
use super::{Delivery, Disposition};

/// `Bus::consume_batches`.
pub(crate) async fn run<F, Fut>(
    link: Arc<Link>,
    queue: String,
    prefetch: u16,
    max_batch: usize,
    handler: Arc<F>,
    shutdown: CancellationToken,
) where
    F: Fn(Vec<Delivery>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Vec<Disposition>> + Send + 'static,
{
    consume::supervise(&link, &queue, &shutdown, |session| {
        session_loop(
            &link, session, &queue, prefetch, max_batch, &handler, &shutdown,
        )
    })
    .await;
}

async fn session_loop<F, Fut>(
    link: &Link,
    session: Arc<Session>,
    queue: &str,
    prefetch: u16,
    max_batch: usize,
    handler: &Arc<F>,
    shutdown: &CancellationToken,
) -> lapin::Result<Ended>
where
    F: Fn(Vec<Delivery>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Vec<Disposition>> + Send + 'static,
{
    let (channel, mut consumer) = consume::open(&session, queue, prefetch).await?;
    let ended = loop {
        let first = tokio::select! {
            biased;
            _ = shutdown.cancelled() => break Ended::Shutdown,
            next = consumer.next() => next,
        };
        let mut raws = match first {
            Some(Ok(raw)) => vec![raw],
            Some(Err(e)) => break Ended::Lost(e.to_string()),
            None => break Ended::Lost("the consumer was cancelled".into()),
        };
        // Take what has already arrived without waiting for more.
        let mut lost = None;
        while raws.len() < max_batch {
            match consumer.next().now_or_never() {
                Some(Some(Ok(raw))) => raws.push(raw),
                Some(Some(Err(e))) => {
                    lost = Some(e.to_string());
                    break;
                }
                Some(None) => {
                    lost = Some("the consumer was cancelled".to_owned());
                    break;
                }
                None => break,
            }
        }
        if !handle(link, queue, raws, handler, shutdown).await {
            break Ended::Shutdown;
        }
        if let Some(reason) = lost {
            break Ended::Lost(reason);
        }
    };
    if matches!(ended, Ended::Shutdown) {
        consume::cancel(&channel, &consumer).await;
    }
    consume::close(&channel).await;
    Ok(ended)
}

/// Runs the handler on one batch and settles it; `false` when it was abandoned
/// unfinished because shutdown outlasted the grace period.
async fn handle<F, Fut>(
    link: &Link,
    queue: &str,
    raws: Vec<RawDelivery>,
    handler: &Arc<F>,
    shutdown: &CancellationToken,
) -> bool
where
    F: Fn(Vec<Delivery>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Vec<Disposition>> + Send + 'static,
{
    let mut kept = Vec::with_capacity(raws.len());
    let mut batch = Vec::with_capacity(raws.len());
    for raw in raws {
        match dispose::decode(&raw, queue) {
            Ok(delivery) => {
                kept.push(raw);
                batch.push(delivery);
            }
            Err(reason) => {
                dispose::settle(link, queue, &raw, Disposition::DeadLetter(reason)).await;
            }
        }
    }
    if batch.is_empty() {
        return true;
    }
    let size = batch.len();
    let run = dispose::guarded(handler(batch));
    tokio::pin!(run);
    let outcome = tokio::select! {
        outcome = &mut run => outcome,
        _ = shutdown.cancelled() => match tokio::time::timeout(GRACE, &mut run).await {
            Ok(outcome) => outcome,
            Err(_) => {
                tracing::warn!(%queue, size, "batch did not finish in time; abandoning it unacknowledged");
                return false;
            }
        },
    };
    let dispositions = outcome.unwrap_or_else(|panic| {
        vec![Disposition::DeadLetter(format!("batch handler panicked: {panic}")); size]
    });
    if dispositions.len() != size {
        tracing::error!(%queue, size, returned = dispositions.len(), "batch handler returned the wrong number of dispositions; requeueing the missing ones");
    }
    let mut dispositions = dispositions.into_iter();
    for raw in &kept {
        let disposition = dispositions.next().unwrap_or(Disposition::Requeue);
        dispose::settle(link, queue, raw, disposition).await;
    }
    true
}
