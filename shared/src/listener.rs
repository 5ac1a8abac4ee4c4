//! Event listeners: your code on the events exchange (docs/events.md, docs/hooks.md).
//!
//! Implement [`EventListener`] and hand it to [`run`]: it declares a durable queue of
//! its own, `<namespace>.listener.<name>` (with its dead-letter queue), binds it to the
//! events exchange with the listener's [`bindings`](EventListener::bindings), and calls
//! [`on_event`](EventListener::on_event) for each lifecycle event, one at a time in
//! queue order — each event of a message that carries several (`WEFT_EVENTS_TOGETHER`,
//! docs/events.md) in turn. A message is acknowledged only after its events' handler
//! returned `Ok`, so a
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
use crate::event_batch::events_of;
use crate::messages::LifecycleEvent;
use crate::topology::Names;
use crate::Envelope;
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
            async move { handle(listener.as_ref(), &delivery.envelope).await }
        },
        shutdown,
    );
    consumer
        .await
        .map_err(|e| crate::Error::Bus(format!("event listener {name} stopped: {e}")))
}

/// What becomes of a message of the events exchange: each event it carries (one, or
/// several sent together, docs/events.md) handed to `listener` in turn. A retry puts the
/// whole message back after [`RETRY_PAUSE`] (the events before it come again, those
/// refused before it too: delivery is at least once); an event refused, one whose
/// handler panicked, or a part that is no event does not stop the others, and the
/// message then goes to the dead-letter queue with a reason naming each one.
async fn handle<L: EventListener>(listener: &L, envelope: &Envelope) -> Disposition {
    let events = match events_of(envelope) {
        Ok(events) => events,
        Err(e) => return Disposition::DeadLetter(format!("not a lifecycle event: {e}")),
    };
    let several = events.len() > 1;
    let mut refused = Vec::new();
    for (i, event) in events.into_iter().enumerate() {
        let event = match event {
            Ok((_, event)) => event,
            Err(e) => {
                refused.push(format!("message {i}: not a lifecycle event: {e}"));
                continue;
            }
        };
        // Named only when refused: most events are handled.
        let named = (i, event.event.clone(), event.run_id, event.event_id);
        let why = match crate::bus::guarded(listener.on_event(event)).await {
            Ok(Ok(())) => continue,
            Ok(Err(ListenerError::Retry(why))) => {
                tracing::warn!(reason = %why, "event listener asked to retry an event");
                tokio::time::sleep(RETRY_PAUSE).await;
                return Disposition::Requeue;
            }
            Ok(Err(ListenerError::Reject(why))) => why,
            Err(panic) => format!("the listener panicked: {panic}"),
        };
        match several {
            true => {
                let (i, key, run, id) = named;
                refused.push(format!(
                    "message {i} ({key} of run {run}, event {id}): {why}"
                ));
            }
            false => return Disposition::DeadLetter(why),
        }
    }
    match refused.is_empty() {
        true => Disposition::Ack,
        false => Disposition::DeadLetter(format!(
            "refused: {}; the other events of the message were handled",
            refused.join("; ")
        )),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::event_batch::LifecycleEventBatch;

    /// Records the events it is handed; refuses the ones with `event_id` in `refuse`,
    /// panics on those in `panic_on`.
    #[derive(Default)]
    struct Recorder {
        seen: Mutex<Vec<i64>>,
        refuse: Vec<i64>,
        panic_on: Vec<i64>,
    }

    impl EventListener for Recorder {
        async fn on_event(&self, event: LifecycleEvent) -> std::result::Result<(), ListenerError> {
            self.seen.lock().unwrap().push(event.event_id);
            assert!(!self.panic_on.contains(&event.event_id), "cannot take it");
            match self.refuse.contains(&event.event_id) {
                true => Err(ListenerError::Reject("not for me".into())),
                false => Ok(()),
            }
        }
    }

    fn event(event_id: i64) -> Vec<u8> {
        crate::event_batch::test_event("wf", "task.completed", event_id)
            .to_bytes()
            .unwrap()
    }

    fn together(ids: &[i64]) -> Envelope {
        let bodies: Vec<Vec<u8>> = ids.iter().map(|&i| event(i)).collect();
        let parts: Vec<(&[u8], Option<&str>)> =
            bodies.iter().map(|b| (b.as_slice(), None)).collect();
        Envelope::from_bytes(&LifecycleEventBatch::encode(&parts).unwrap()).unwrap()
    }

    #[tokio::test]
    async fn each_event_sent_together_is_handed_over_in_order() {
        let listener = Recorder::default();
        assert_eq!(
            handle(&listener, &together(&[4, 7, 9])).await,
            Disposition::Ack
        );
        let alone = Envelope::from_bytes(&event(11)).unwrap();
        assert_eq!(handle(&listener, &alone).await, Disposition::Ack);
        assert_eq!(*listener.seen.lock().unwrap(), [4, 7, 9, 11]);
    }

    #[tokio::test]
    async fn a_refused_event_among_others_dead_letters_the_message_naming_it() {
        let listener = Recorder {
            refuse: vec![7],
            ..Recorder::default()
        };
        let Disposition::DeadLetter(why) = handle(&listener, &together(&[4, 7, 9])).await else {
            panic!("a refused event must dead-letter its message");
        };
        assert!(
            why.contains("message 1") && why.contains("event 7") && why.contains("not for me"),
            "{why}"
        );
        assert_eq!(
            *listener.seen.lock().unwrap(),
            [4, 7, 9],
            "the events after the refused one are handled"
        );
        let alone = Envelope::from_bytes(&event(7)).unwrap();
        assert_eq!(
            handle(&listener, &alone).await,
            Disposition::DeadLetter("not for me".into()),
            "an event alone keeps its listener's reason"
        );
    }

    #[tokio::test]
    async fn a_listener_that_panics_on_one_event_still_gets_the_others() {
        let listener = Recorder {
            panic_on: vec![4],
            ..Recorder::default()
        };
        let Disposition::DeadLetter(why) = handle(&listener, &together(&[4, 7])).await else {
            panic!("a panicking event must dead-letter its message");
        };
        assert!(
            why.contains("message 0") && why.contains("panicked") && why.contains("cannot take it"),
            "{why}"
        );
        assert_eq!(*listener.seen.lock().unwrap(), [4, 7]);
    }
}
