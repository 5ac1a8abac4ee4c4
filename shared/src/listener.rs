//! Event listeners: your code on the events exchange (docs/events.md, docs/hooks.md).
//!
//! Implement [`EventListener`] and hand it to [`run`]: it declares a durable queue of
//! its own, `<namespace>.listener.<name>` (with its dead-letter queue), binds it to the
//! events exchange with the listener's [`bindings`](EventListener::bindings), and calls
//! [`on_event`](EventListener::on_event) for each lifecycle event, one at a time in
//! queue order. An event is acknowledged only after the handler returned `Ok`, so a
//! listener that dies mid-event sees it again: delivery is at least once (deduplicate
//! on `(runId, eventId, taskId)` where it matters). The queue outlives the process, so
//! events published while the listener is down wait for it.
//!
//! ```no_run
//! use weft::listener::{EventListener, ListenerError};
//! use weft::messages::LifecycleEvent;
//!
//! struct Failures;
//!
//! impl EventListener for Failures {
//!     fn bindings(&self) -> Vec<String> {
//!         vec!["task.failed".into(), "workflow.failed".into()]
//!     }
//!     async fn on_event(&self, event: LifecycleEvent) -> Result<(), ListenerError> {
//!         eprintln!("{} {} {:?}", event.event, event.workflow_id, event.reason);
//!         Ok(())
//!     }
//! }
//!
//! # async fn example() -> weft::Result<()> {
//! let config = weft::Config::from_env()?;
//! weft::listener::run(&config, "failures", Failures, weft::shutdown::on_signals()).await
//! # }
//! ```

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::bus::{Bus, ConsumeOptions, Disposition};
use crate::messages::{EventMessage, LifecycleEvent};
use crate::topology::Names;
use crate::{Config, Result};

/// How long an event a listener asked to retry waits before it goes back to the queue,
/// so that a failing listener does not spin on it.
pub const RETRY_PAUSE: Duration = Duration::from_secs(1);

/// What a listener could not do with an event.
#[derive(Debug, thiserror::Error)]
pub enum ListenerError {
    /// Retrying may help (a file system or a downstream service is unavailable): the
    /// event goes back to the queue and comes again after [`RETRY_PAUSE`].
    #[error("retry later: {0}")]
    Retry(String),
    /// Retrying cannot help: the event goes to the queue's dead-letter queue with this
    /// reason, and the listener goes on with the next one.
    #[error("rejected: {0}")]
    Reject(String),
}

/// Code that reacts to lifecycle events.
pub trait EventListener: Send + Sync + 'static {
    /// Routing keys to bind the listener's queue with (`#` for every event,
    /// `workflow.*`, `task.timed_out`, ...). Default: every event.
    fn bindings(&self) -> Vec<String> {
        vec!["#".to_owned()]
    }

    /// Handles one event; `Ok` acknowledges it.
    fn on_event(
        &self,
        event: LifecycleEvent,
    ) -> impl Future<Output = std::result::Result<(), ListenerError>> + Send;
}

/// The queue of the listener named `name` under `names`' namespace.
pub fn queue_name(names: &Names, name: &str) -> String {
    format!("{}.listener.{name}", names.namespace())
}

/// Runs `listener` as `name` until `shutdown`: connects to the broker of `config` as a
/// client of the services (waiting for the broker, then for the services' exchanges),
/// declares and binds the listener's queue, and consumes it. A
/// shutdown lets the event in hand finish; nothing unfinished is acknowledged.
pub async fn run<L: EventListener>(
    config: &Config,
    name: &str,
    listener: L,
    shutdown: CancellationToken,
) -> Result<()> {
    let names = config.names();
    let bus = match Bus::connect_client(&config.amqp_url, names.clone(), shutdown.clone()).await {
        Ok(bus) => bus,
        Err(crate::Error::ShuttingDown) => return Ok(()),
        Err(e) => return Err(e),
    };
    let queue = queue_name(&names, name);
    let exchange = names.events_exchange();
    let keys = listener.bindings();
    let bindings: Vec<(&str, &str)> = keys
        .iter()
        .map(|k| (exchange.as_str(), k.as_str()))
        .collect();
    bus.declare_queue(&queue, &bindings).await?;
    tracing::info!(queue = %queue, bindings = ?keys, "event listener consuming");
    let listener = Arc::new(listener);
    let opts = ConsumeOptions {
        prefetch: config.prefetch,
        concurrency: 1,
    };
    let consumer = bus.consume(
        &queue,
        opts,
        move |delivery| {
            let listener = listener.clone();
            async move {
                let event = match delivery.envelope.decode::<EventMessage>() {
                    Ok(EventMessage::LifecycleEvent(event)) => event,
                    Err(e) => {
                        return Disposition::DeadLetter(format!("not a lifecycle event: {e}"))
                    }
                };
                match listener.on_event(event).await {
                    Ok(()) => Disposition::Ack,
                    Err(ListenerError::Reject(why)) => Disposition::DeadLetter(why),
                    Err(ListenerError::Retry(why)) => {
                        tracing::warn!(reason = %why, "event listener asked to retry an event");
                        tokio::time::sleep(RETRY_PAUSE).await;
                        Disposition::Requeue
                    }
                }
            }
        },
        shutdown,
    );
    consumer
        .await
        .map_err(|e| crate::Error::Bus(format!("event listener {name} stopped: {e}")))
}
