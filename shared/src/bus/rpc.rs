//! Request/reply over RabbitMQ direct reply-to (`amq.rabbitmq.reply-to`).
//!
//! A caller consumes the pseudo-queue `amq.rabbitmq.reply-to` (no-ack, as the broker
//! requires) on one channel per connection and publishes every request on that same
//! channel (the broker refuses a request naming a reply consumer of another channel) with
//! `reply_to` and a fresh `correlation_id`. The replies come back on that consumer without
//! any queue being declared; a dispatcher task hands each to the call waiting for its
//! correlation id.
//!
//! The reply channel belongs to one connection: when the link reconnects, the next call
//! opens a new one, and the calls waiting on the dead one fail at once with a bus error
//! instead of waiting for their timeout. Requests and replies are transient (not written
//! to disk): a request outlives its caller only as long as its timeout, so a reply the
//! broker lost is the same as a late one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use lapin::options::{BasicConsumeOptions, BasicPublishOptions};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Consumer};
use tokio::sync::oneshot;

use super::connection::Link;
use super::{check_name, publish, Bus, Delivery};
use crate::{Envelope, Error, Result};

/// The broker's pseudo-queue for direct replies.
const REPLY_TO: &str = "amq.rabbitmq.reply-to";
/// AMQP delivery mode of a message kept in memory only.
const TRANSIENT: u8 = 1;

/// What a waiting call receives: the reply, or why none will come.
type Waiter = oneshot::Sender<Result<Envelope>>;

/// The calls waiting on one reply channel, by correlation id; `None` once that channel
/// is gone, so a late registration fails instead of waiting for a reply that cannot come.
#[derive(Default)]
struct Waiting(Mutex<Option<HashMap<String, Waiter>>>);

impl Waiting {
    fn open() -> Self {
        Self(Mutex::new(Some(HashMap::new())))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<HashMap<String, Waiter>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a waiter; `false` when the channel is already gone.
    fn insert(&self, correlation_id: String, waiter: Waiter) -> bool {
        match self.lock().as_mut() {
            Some(map) => map.insert(correlation_id, waiter).is_none(),
            None => false,
        }
    }

    fn remove(&self, correlation_id: &str) -> Option<Waiter> {
        self.lock().as_mut()?.remove(correlation_id)
    }

    /// Fails every waiting call with `why` and refuses new ones.
    fn close(&self, why: &str) {
        let waiters = self.lock().take().unwrap_or_default();
        for (_, waiter) in waiters {
            let _ = waiter.send(Err(Error::Bus(format!("reply channel lost: {why}"))));
        }
    }
}

/// Removes a call's waiter when the call ends, whichever way (reply, timeout, dropped).
struct Registration<'a> {
    waiting: &'a Waiting,
    correlation_id: &'a str,
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        self.waiting.remove(self.correlation_id);
    }
}

/// A reply channel: requests go out on it, replies come back on its consumer.
#[derive(Clone)]
struct Route {
    channel: Channel,
    waiting: Arc<Waiting>,
}

/// The reply channel of the current connection, opened on first use; kept by the link.
#[derive(Default)]
pub(crate) struct Replies {
    route: tokio::sync::Mutex<Option<Route>>,
}

impl std::fmt::Debug for Replies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replies").finish_non_exhaustive()
    }
}

impl Replies {
    /// The live reply channel, or a new one on the link's live connection.
    async fn route(&self, link: &Link) -> Result<Route> {
        let mut current = self.route.lock().await;
        if let Some(route) = current.as_ref().filter(|r| r.channel.status().connected()) {
            return Ok(route.clone());
        }
        let session = link.session().await.map_err(|f| f.into_error())?;
        let channel = session.conn.create_channel().await?;
        let opts = BasicConsumeOptions {
            no_ack: true,
            ..BasicConsumeOptions::default()
        };
        let consumer = channel
            .basic_consume(REPLY_TO.into(), "".into(), opts, FieldTable::default())
            .await?;
        let route = Route {
            channel,
            waiting: Arc::new(Waiting::open()),
        };
        tokio::spawn(dispatch(consumer, route.waiting.clone()));
        *current = Some(route.clone());
        Ok(route)
    }
}

/// Hands every reply to the call waiting for it, until the channel goes away; then fails
/// the calls still waiting on it.
async fn dispatch(mut consumer: Consumer, waiting: Arc<Waiting>) {
    let why = loop {
        let raw = match consumer.next().await {
            Some(Ok(raw)) => raw,
            Some(Err(e)) => break e.to_string(),
            None => break "the reply consumer was cancelled".to_owned(),
        };
        let Some(correlation_id) = raw.properties.correlation_id().as_ref() else {
            tracing::debug!("a reply without correlation id; dropping it");
            continue;
        };
        // No waiter: the call timed out or was dropped; the reply is simply late.
        if let Some(waiter) = waiting.remove(correlation_id.as_str()) {
            let _ = waiter.send(Envelope::from_bytes(&raw.data));
        }
    };
    tracing::debug!(reason = %why, "reply channel closed");
    waiting.close(&why);
}

/// Properties of a request or a reply: transient JSON with the envelope's id and the
/// current trace context.
fn properties(envelope: &Envelope, correlation_id: Option<&str>) -> BasicProperties {
    let traceparent = crate::telemetry::current_traceparent();
    let mut props = publish::properties(Some(envelope.id), traceparent.as_deref())
        .with_delivery_mode(TRANSIENT);
    if let Some(id) = correlation_id {
        props = props.with_correlation_id(id.into());
    }
    props
}

impl Bus {
    /// Sends `envelope` to `exchange`/`routing_key` as a request and waits for its reply
    /// (at most `timeout`, everything included: connecting, publishing, the answer).
    ///
    /// The responder answers with [`Bus::reply`]. Fails with [`Error::NoReply`] when no
    /// reply came in time (responder down or slow, request routed nowhere), and with
    /// [`Error::Bus`] when the connection or the reply channel was lost meanwhile; both
    /// can be retried. Requests are transient and not confirmed: a lost one is a timeout.
    pub async fn call(
        &self,
        exchange: &str,
        routing_key: &str,
        envelope: &Envelope,
        timeout: Duration,
    ) -> Result<Envelope> {
        check_name("exchange", exchange)?;
        check_name("routing key", routing_key)?;
        let body = envelope.to_bytes()?;
        let exchange_and_reply = async {
            let route = self.link.replies.route(&self.link).await?;
            let correlation_id = uuid::Uuid::new_v4().simple().to_string();
            let (tx, rx) = oneshot::channel();
            if !route.waiting.insert(correlation_id.clone(), tx) {
                return Err(Error::Bus("reply channel lost before the request".into()));
            }
            let _registered = Registration {
                waiting: &route.waiting,
                correlation_id: &correlation_id,
            };
            let props = properties(envelope, Some(&correlation_id)).with_reply_to(REPLY_TO.into());
            route
                .channel
                .basic_publish(
                    exchange.into(),
                    routing_key.into(),
                    BasicPublishOptions::default(),
                    &body,
                    props,
                )
                .await?;
            rx.await
                .unwrap_or_else(|_| Err(Error::Bus("reply channel dropped".into())))
        };
        tokio::time::timeout(timeout, exchange_and_reply)
            .await
            .unwrap_or_else(|_| {
                Err(Error::NoReply {
                    exchange: exchange.to_owned(),
                    routing_key: routing_key.to_owned(),
                    timeout,
                })
            })
    }

    /// Answers a request received by a consumer: publishes `envelope` to the default
    /// exchange with the request's `reply_to` as routing key and its `correlation_id`.
    ///
    /// A no-op when the delivery asked for no reply. Transient; waits only for the
    /// broker's confirm (a caller that is gone makes the broker drop the reply).
    pub async fn reply(&self, delivery: &Delivery, envelope: &Envelope) -> Result<()> {
        let Some(reply_to) = delivery.reply_to.as_deref() else {
            return Ok(());
        };
        let body = envelope.to_bytes()?;
        let props = properties(envelope, delivery.correlation_id.as_deref());
        self.link.publish("", reply_to, &body, props).await
    }
}
