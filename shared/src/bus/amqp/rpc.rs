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
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use amqprs::channel::{BasicConsumeArguments, ConsumerMessage};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::sync::oneshot;

use super::client::Chan;
use super::connection::Link;
use super::publish;
use crate::bus::transport::Message;
use crate::{Error, Result};

/// The broker's pseudo-queue for direct replies.
pub(crate) const REPLY_TO: &str = "amq.rabbitmq.reply-to";

/// What a waiting call receives: the reply, or why none will come.
type Waiter = oneshot::Sender<Result<Message>>;

/// The calls waiting on one reply channel, by correlation id; `None` once that channel
/// is gone, so a late registration fails instead of waiting for a reply that cannot come.
/// `missed`: a call on it ended without its reply (a timeout).
#[derive(Default)]
struct Waiting(Mutex<Option<HashMap<String, Waiter>>>, AtomicBool);

impl Waiting {
    fn open() -> Self {
        Self(Mutex::new(Some(HashMap::new())), AtomicBool::new(false))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<HashMap<String, Waiter>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn missed(&self) -> bool {
        self.1.load(Ordering::Relaxed)
    }

    /// A call on this channel ended without its reply.
    fn mark_missed(&self) {
        self.1.store(true, Ordering::Relaxed);
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
        if self.waiting.remove(self.correlation_id).is_some() {
            // No reply came: the next call takes a new channel (see `Replies::route`).
            self.waiting.mark_missed();
        }
    }
}

/// A reply channel: requests go out on it, replies come back on its consumer.
#[derive(Clone)]
struct Route {
    channel: Chan,
    waiting: Arc<Waiting>,
}

/// The reply channel of the current connection, opened on first use; kept by the link.
#[derive(Default)]
pub(crate) struct Replies {
    route: tokio::sync::Mutex<Option<Route>>,
    /// The channel replies are published on: not in confirm mode (see [`Link::reply`]).
    answering: tokio::sync::Mutex<Option<Chan>>,
}

impl std::fmt::Debug for Replies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replies").finish_non_exhaustive()
    }
}

impl Replies {
    /// The live reply channel, or a new one on the link's live connection. A channel on
    /// which a call went unanswered is replaced too: on a quorum queue whose leader
    /// changed, a channel's requests can stay pending in the broker for good (seen on
    /// RabbitMQ 3.10: every claim after a node's loss unanswered), while a new channel's
    /// go through. The calls still waiting on the old one fail at once and are retried.
    async fn route(&self, link: &Link) -> Result<Route> {
        let mut current = self.route.lock().await;
        if let Some(route) = current
            .as_ref()
            .filter(|r| r.channel.is_open() && !r.waiting.missed())
        {
            return Ok(route.clone());
        }
        if let Some(stale) = current.take() {
            tokio::spawn(async move { stale.channel.close().await });
        }
        let session = link.session().await.map_err(|f| f.into_error())?;
        let channel = session.channel().await?;
        let args = BasicConsumeArguments::new(REPLY_TO, "")
            .manual_ack(false)
            .finish();
        let consumed = channel
            .call(|c| async move { c.basic_consume_rx(args).await })
            .await;
        let (_tag, replies) = match consumed {
            Ok(consumer) => consumer,
            Err(e) => {
                channel.close().await;
                return Err(e.into());
            }
        };
        let route = Route {
            channel,
            waiting: Arc::new(Waiting::open()),
        };
        tokio::spawn(dispatch(replies, route.waiting.clone()));
        *current = Some(route.clone());
        Ok(route)
    }
}

/// Hands every reply to the call waiting for it, until the channel goes away; then fails
/// the calls still waiting on it.
async fn dispatch(mut replies: UnboundedReceiver<ConsumerMessage>, waiting: Arc<Waiting>) {
    let why = loop {
        let Some(raw) = replies.recv().await else {
            break "the reply channel closed".to_owned();
        };
        let (Some(props), Some(body)) = (raw.basic_properties, raw.content) else {
            continue;
        };
        let Some(correlation_id) = props.correlation_id() else {
            tracing::debug!("a reply without correlation id; dropping it");
            continue;
        };
        // No waiter: the call timed out or was dropped; the reply is simply late.
        if let Some(waiter) = waiting.remove(correlation_id) {
            let _ = waiter.send(Ok(publish::message_of(body, &props)));
        }
    };
    tracing::debug!(reason = %why, "reply channel closed");
    waiting.close(&why);
}

impl Link {
    /// Publishes a reply to a request (`routing_key` is the request's `reply_to`) without
    /// waiting for a publisher confirm: a confirm says the broker took the message, not
    /// that the caller got it, and a reply is transient either way — a lost one is the
    /// caller's timeout and retry. Waiting for it cost a broker round trip (about half a
    /// millisecond) on every claim's answer. One retry on a fresh channel.
    pub(crate) async fn reply(&self, routing_key: &str, message: &Message) -> Result<()> {
        let mut failure = None;
        for _ in 0..2 {
            let mut slot = self.replies.answering.lock().await;
            let channel = match slot.as_ref().filter(|c| c.is_open()) {
                Some(channel) => channel.clone(),
                None => {
                    let session = self.session().await.map_err(|f| f.into_error())?;
                    let channel = session.channel().await?;
                    *slot = Some(channel.clone());
                    channel
                }
            };
            let sent = channel
                .publish(
                    "",
                    routing_key,
                    message.body.clone(),
                    publish::properties(message),
                )
                .await;
            match sent {
                Ok(()) => return Ok(()),
                Err(e) => {
                    *slot = None;
                    failure = Some(e);
                }
            }
        }
        Err(failure.map_or_else(|| Error::Bus("reply not sent".into()), Error::from))
    }

    /// Publishes `message` as a request on the reply channel and waits for its reply
    /// (the caller bounds the wait).
    pub(crate) async fn request(
        &self,
        exchange: &str,
        routing_key: &str,
        mut message: Message,
    ) -> Result<Message> {
        let route = self.replies.route(self).await?;
        let correlation_id = uuid::Uuid::new_v4().simple().to_string();
        let (tx, rx) = oneshot::channel();
        if !route.waiting.insert(correlation_id.clone(), tx) {
            return Err(Error::Bus("reply channel lost before the request".into()));
        }
        let _registered = Registration {
            waiting: &route.waiting,
            correlation_id: &correlation_id,
        };
        message.correlation_id = Some(correlation_id.clone());
        message.reply_to = Some(REPLY_TO.to_owned());
        let props = publish::properties(&message);
        route
            .channel
            .publish(exchange, routing_key, message.body, props)
            .await?;
        rx.await
            .unwrap_or_else(|_| Err(Error::Bus("reply channel dropped".into())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A call that ends without its reply marks its channel to be replaced; one answered
    /// does not.
    #[test]
    fn an_unanswered_call_marks_its_channel_missed() {
        let waiting = Waiting::open();
        let (tx, rx) = oneshot::channel();
        assert!(waiting.insert("answered".into(), tx));
        {
            let _call = Registration {
                waiting: &waiting,
                correlation_id: "answered",
            };
            let waiter = waiting.remove("answered").expect("registered");
            let _ = waiter.send(Err(Error::Bus("a reply".into())));
        }
        assert!(rx.blocking_recv().is_ok());
        assert!(!waiting.missed(), "the reply came");

        let (tx, _rx) = oneshot::channel();
        assert!(waiting.insert("timed out".into(), tx));
        drop(Registration {
            waiting: &waiting,
            correlation_id: "timed out",
        });
        assert!(waiting.missed(), "no reply came");
    }
}
