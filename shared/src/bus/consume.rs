//! The consumer loop: one channel per consumer, manual acks, bounded concurrency,
//! re-established after connection loss, graceful on shutdown.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use lapin::options::{BasicCancelOptions, BasicConsumeOptions, BasicQosOptions};
use lapin::types::FieldTable;
use lapin::{Channel, Consumer};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::backoff::Backoff;
use super::connection::{Link, Session};
use super::dispose;
use super::{ConsumeOptions, Delivery, Disposition};

/// How long in-flight handlers may take to finish once shutdown (or connection loss)
/// stopped the consumer; unfinished ones are abandoned unacknowledged.
pub(crate) const GRACE: Duration = Duration::from_secs(10);

/// Why one consumer session ended.
pub(crate) enum Ended {
    /// `shutdown` fired: stop for good.
    Shutdown,
    /// The channel or connection went away: start over.
    Lost(String),
}

/// Opens a channel with `prefetch` and starts consuming `queue` on it.
pub(crate) async fn open(
    session: &Session,
    queue: &str,
    prefetch: u16,
) -> lapin::Result<(Channel, Consumer)> {
    let channel = session.conn.create_channel().await?;
    channel
        .basic_qos(prefetch, BasicQosOptions::default())
        .await?;
    let consumer = channel
        .basic_consume(
            queue.into(),
            "".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await?;
    tracing::info!(%queue, tag = %consumer.tag(), "consuming");
    Ok((channel, consumer))
}

/// Stops the broker sending more messages to `consumer`.
pub(crate) async fn cancel(channel: &Channel, consumer: &Consumer) {
    let cancel = channel.basic_cancel(consumer.tag(), BasicCancelOptions::default());
    if let Err(e) = cancel.await {
        tracing::debug!(error = %e, "cancelling the consumer failed");
    }
}

/// Closes the channel, which hands every unacknowledged message back to the queue.
pub(crate) async fn close(channel: &Channel) {
    if channel.status().connected() {
        if let Err(e) = channel.close(200, "OK".into()).await {
            tracing::debug!(error = %e, "closing the consumer channel failed");
        }
    }
}

/// Runs a consumer session after session until `shutdown`, with back-off in between.
pub(crate) async fn supervise<S, Fut>(
    link: &Link,
    queue: &str,
    shutdown: &CancellationToken,
    mut session_fn: S,
) where
    S: FnMut(Arc<Session>) -> Fut,
    Fut: Future<Output = lapin::Result<Ended>>,
{
    if let Err(e) = super::check_name("queue", queue) {
        tracing::error!(error = %e, "cannot consume");
        return;
    }
    let mut backoff = Backoff::new();
    loop {
        let Ok(session) = link.session_wait_with(shutdown, false).await else {
            return; // shutting down
        };
        match session_fn(session).await {
            Ok(Ended::Shutdown) => return,
            Ok(Ended::Lost(reason)) => {
                tracing::warn!(%queue, %reason, "consumer stopped; restarting");
                backoff.reset();
            }
            Err(e) => tracing::warn!(%queue, error = %e, "starting the consumer failed"),
        }
        if !backoff.sleep(shutdown).await {
            return;
        }
    }
}

/// `Bus::consume`.
pub(crate) async fn run<F, Fut>(
    link: Arc<Link>,
    queue: String,
    opts: ConsumeOptions,
    handler: Arc<F>,
    shutdown: CancellationToken,
) where
    F: Fn(Delivery) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Disposition> + Send + 'static,
{
    supervise(&link, &queue, &shutdown, |session| {
        session_loop(&link, session, &queue, opts, &handler, &shutdown)
    })
    .await;
}

async fn session_loop<F, Fut>(
    link: &Arc<Link>,
    session: Arc<Session>,
    queue: &str,
    opts: ConsumeOptions,
    handler: &Arc<F>,
    shutdown: &CancellationToken,
) -> lapin::Result<Ended>
where
    F: Fn(Delivery) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Disposition> + Send + 'static,
{
    let (channel, mut consumer) = open(&session, queue, opts.prefetch).await?;
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
            next = consumer.next() => next,
        };
        let raw = match next {
            Some(Ok(raw)) => raw,
            Some(Err(e)) => break Ended::Lost(e.to_string()),
            None => break Ended::Lost("the consumer was cancelled".into()),
        };
        let (link, queue, handler) = (link.clone(), queue.to_owned(), handler.clone());
        running.spawn(async move {
            let disposition = match dispose::decode(&raw, &queue) {
                Ok(delivery) => dispose::guarded(handler(delivery))
                    .await
                    .unwrap_or_else(|panic| {
                        Disposition::DeadLetter(format!("handler panicked: {panic}"))
                    }),
                Err(reason) => Disposition::DeadLetter(reason),
            };
            dispose::settle(&link, &queue, &raw, disposition).await;
            drop(permit);
        });
    };
    if matches!(ended, Ended::Shutdown) {
        // Stop taking work before waiting for the running handlers.
        cancel(&channel, &consumer).await;
    }
    let finished = tokio::time::timeout(GRACE, async {
        while running.join_next().await.is_some() {}
    })
    .await;
    if finished.is_err() {
        tracing::warn!(%queue, unfinished = running.len(), "handlers did not finish in time; abandoning them unacknowledged");
        running.abort_all();
    }
    close(&channel).await;
    Ok(ended)
}
