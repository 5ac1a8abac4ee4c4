//! The consumer loop, the same for every transport: manual acks, bounded concurrency,
//! re-established after the subscription is lost, graceful on shutdown.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::backoff::Backoff;
use super::dispose;
use super::transport::{Inbound, Subscription, Transport};
use super::{ConsumeOptions, Disposition};
use crate::Error;

/// How long in-flight handlers may take to finish once shutdown (or the loss of the
/// subscription) stopped the consumer; unfinished ones are abandoned unacknowledged.
pub(crate) const GRACE: Duration = Duration::from_secs(10);

/// Why one subscription ended.
pub(crate) enum Ended {
    /// `shutdown` fired: stop for good.
    Shutdown,
    /// The subscription went away: start over.
    Lost(String),
}

/// Runs subscription after subscription on `queue` until `shutdown`, with back-off in
/// between.
pub(crate) async fn supervise<S, Fut>(
    transport: &dyn Transport,
    queue: &str,
    prefetch: u16,
    shutdown: &CancellationToken,
    mut session_fn: S,
) where
    S: FnMut(Box<dyn Subscription>) -> Fut,
    Fut: Future<Output = Ended>,
{
    if let Err(e) = super::check_name("queue", queue) {
        tracing::error!(error = %e, "cannot consume");
        return;
    }
    let mut backoff = Backoff::new();
    loop {
        match transport.subscribe(queue, prefetch, shutdown).await {
            Err(Error::ShuttingDown) => return,
            Err(e) => tracing::warn!(%queue, error = %e, "starting the consumer failed"),
            Ok(subscription) => {
                tracing::info!(%queue, "consuming");
                match session_fn(subscription).await {
                    Ended::Shutdown => return,
                    Ended::Lost(reason) => {
                        tracing::warn!(%queue, %reason, "consumer stopped; restarting");
                        backoff.reset();
                    }
                }
            }
        }
        if !backoff.sleep(shutdown).await {
            return;
        }
    }
}

/// Turns a message into what the handler takes; the error is the reason to dead-letter it.
pub(crate) type Decode<D> = fn(&Inbound, &str) -> Result<D, String>;

/// `Bus::consume` (with `dispose::decode`) and `Bus::consume_raw` (`dispose::raw`).
pub(crate) async fn run<D, F, Fut>(
    transport: Arc<dyn Transport>,
    queue: String,
    opts: ConsumeOptions,
    decode: Decode<D>,
    handler: Arc<F>,
    shutdown: CancellationToken,
) where
    D: Send + 'static,
    F: Fn(D) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Disposition> + Send + 'static,
{
    supervise(&*transport, &queue, opts.prefetch, &shutdown, |sub| {
        session_loop(sub, &queue, opts, decode, &handler, &shutdown)
    })
    .await;
}

async fn session_loop<D, F, Fut>(
    mut sub: Box<dyn Subscription>,
    queue: &str,
    opts: ConsumeOptions,
    decode: Decode<D>,
    handler: &Arc<F>,
    shutdown: &CancellationToken,
) -> Ended
where
    D: Send + 'static,
    F: Fn(D) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Disposition> + Send + 'static,
{
    // A permit per running handler; taken before the next delivery so that with one
    // permit the next message starts only after the previous one was settled.
    let permits = Arc::new(Semaphore::new(opts.concurrency.max(1)));
    let mut running = JoinSet::new();
    let ended = loop {
        while running.try_join_next().is_some() {}
        let permit = tokio::select! {
            biased;
            _ = shutdown.cancelled() => break Ended::Shutdown,
            permit = permits.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break Ended::Shutdown, // never closed
            },
        };
        let next = tokio::select! {
            biased;
            _ = shutdown.cancelled() => break Ended::Shutdown,
            next = sub.next() => next,
        };
        let inbound = match next {
            Ok(inbound) => inbound,
            Err(reason) => break Ended::Lost(reason),
        };
        let (queue, handler) = (queue.to_owned(), handler.clone());
        running.spawn(async move {
            let disposition = match decode(&inbound, &queue) {
                // Boxed: a handler's future can be kilobytes (a worker's runs a task and
                // publishes its result), and inline it would make this task as large,
                // copied whole at every spawn whatever state it is in.
                Ok(delivery) => dispose::guarded(Box::pin(handler(delivery)))
                    .await
                    .unwrap_or_else(|panic| {
                        Disposition::DeadLetter(format!("handler panicked: {panic}"))
                    }),
                Err(reason) => Disposition::DeadLetter(reason),
            };
            dispose::settle(&*inbound.acker, &queue, disposition).await;
            drop(permit);
        });
    };
    if matches!(ended, Ended::Shutdown) {
        // Stop taking work before waiting for the running handlers.
        sub.cancel().await;
    }
    let finished = tokio::time::timeout(GRACE, async {
        while running.join_next().await.is_some() {}
    })
    .await;
    if finished.is_err() {
        tracing::warn!(%queue, unfinished = running.len(), "handlers did not finish in time; abandoning them unacknowledged");
        running.abort_all();
        // Let the aborted tasks drop their deliveries before the subscription closes.
        while running.join_next().await.is_some() {}
    }
    sub.close().await;
    ended
}
