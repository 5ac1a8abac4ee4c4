//! The batch consumer loop: everything already buffered (up to a maximum) goes to the
//! handler as one batch, so a handler can commit many messages in one transaction.

use std::future::Future;
use std::sync::Arc;

use futures_util::FutureExt;
use tokio_util::sync::CancellationToken;

use super::consume::{self, Ended, GRACE};
use super::dispose;
use super::transport::{Inbound, Subscription, Transport};
use super::{Delivery, Disposition};

/// `Bus::consume_batches`.
pub(crate) async fn run<F, Fut>(
    transport: Arc<dyn Transport>,
    queue: String,
    prefetch: u16,
    max_batch: usize,
    handler: Arc<F>,
    shutdown: CancellationToken,
) where
    F: Fn(Vec<Delivery>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Vec<Disposition>> + Send + 'static,
{
    consume::supervise(&*transport, &queue, prefetch, &shutdown, |sub| {
        session_loop(sub, &queue, max_batch, &handler, &shutdown)
    })
    .await;
}

async fn session_loop<F, Fut>(
    mut sub: Box<dyn Subscription>,
    queue: &str,
    max_batch: usize,
    handler: &Arc<F>,
    shutdown: &CancellationToken,
) -> Ended
where
    F: Fn(Vec<Delivery>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Vec<Disposition>> + Send + 'static,
{
    let ended = loop {
        let first = tokio::select! {
            biased;
            _ = shutdown.cancelled() => break Ended::Shutdown,
            next = sub.next() => next,
        };
        let mut batch = match first {
            Ok(inbound) => vec![inbound],
            Err(reason) => break Ended::Lost(reason),
        };
        // Take what has already arrived without waiting for more.
        let mut lost = None;
        while batch.len() < max_batch {
            match sub.next().now_or_never() {
                Some(Ok(inbound)) => batch.push(inbound),
                Some(Err(reason)) => {
                    lost = Some(reason);
                    break;
                }
                None => break,
            }
        }
        if !handle(queue, batch, handler, shutdown).await {
            break Ended::Shutdown;
        }
        if let Some(reason) = lost {
            break Ended::Lost(reason);
        }
    };
    if matches!(ended, Ended::Shutdown) {
        sub.cancel().await;
    }
    sub.close().await;
    ended
}

/// Runs the handler on one batch and settles it; `false` when it was abandoned
/// unfinished because shutdown outlasted the grace period.
async fn handle<F, Fut>(
    queue: &str,
    inbounds: Vec<Inbound>,
    handler: &Arc<F>,
    shutdown: &CancellationToken,
) -> bool
where
    F: Fn(Vec<Delivery>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Vec<Disposition>> + Send + 'static,
{
    let mut kept = Vec::with_capacity(inbounds.len());
    let mut batch = Vec::with_capacity(inbounds.len());
    for inbound in inbounds {
        match dispose::decode(&inbound, queue) {
            Ok(delivery) => {
                kept.push(inbound);
                batch.push(delivery);
            }
            Err(reason) => {
                dispose::settle(&*inbound.acker, queue, Disposition::DeadLetter(reason)).await;
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
    // Settled together: the acknowledgements go out in one write, not one round of the
    // connection's I/O each.
    let settled = kept.iter().map(|inbound| {
        let disposition = dispositions.next().unwrap_or(Disposition::Requeue);
        dispose::settle(&*inbound.acker, queue, disposition)
    });
    futures_util::future::join_all(settled).await;
    true
}
