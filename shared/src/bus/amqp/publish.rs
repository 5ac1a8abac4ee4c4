//! Confirmed, persistent publishing.
//!
//! A small pool of confirm-mode channels per connection. A publish holds its channel's
//! lock only while handing its frames to the client (the broker numbers confirms in the
//! order publishes arrive on a channel, so two publishers racing on one channel could
//! swap their confirms); the wait for the broker's ack happens outside the lock, so many
//! publishes share one channel's round trip and throughput is not one publish per round
//! trip.

use std::sync::atomic::{AtomicUsize, Ordering};

use amqprs::{BasicProperties, FieldTable, FieldValue, LongStr};
use tokio::sync::oneshot;

use super::client::{AmqpError, Chan};
use super::connection::{Failure, Link, Session};
use crate::bus::backoff::Backoff;
use crate::bus::check_name;
use crate::bus::transport::{HeaderValue, Message};
use crate::bus::CONFIRM_TIMEOUT;
use crate::{Error, Result};

/// Confirm channels per connection.
const POOL_SIZE: usize = 4;
/// Publish attempts before giving up; with the back-off this spans about 11 s, enough
/// for a broker restart.
const MAX_ATTEMPTS: u32 = 8;
/// Attempts failing while the connection stays up (channel errors such as a missing
/// exchange) do not get better with time: give up sooner.
const MAX_CHANNEL_FAILURES: u32 = 2;
/// AMQP delivery mode of a message written to disk.
pub(crate) const PERSISTENT: u8 = 2;
/// AMQP delivery mode of a message kept in memory only.
const TRANSIENT: u8 = 1;

/// The AMQP properties of `message`: JSON, its delivery mode, id, reply route and
/// headers (text as long strings, integers as long-longs).
///
/// A property or header name longer than AMQP carries (255 bytes) is left out: the ids
/// Weft writes are uuids, and the `Bus` checks names before they get here.
pub(crate) fn properties(message: &Message) -> BasicProperties {
    let mode = if message.persistent {
        PERSISTENT
    } else {
        TRANSIENT
    };
    let mut props = BasicProperties::default();
    props
        .with_delivery_mode(mode)
        .with_content_type("application/json");
    let short = |s: &str| s.len() <= 255;
    if let Some(id) = message.message_id.as_deref().filter(|s| short(s)) {
        props.with_message_id(id);
    }
    if let Some(reply_to) = message.reply_to.as_deref().filter(|s| short(s)) {
        props.with_reply_to(reply_to);
    }
    if let Some(id) = message.correlation_id.as_deref().filter(|s| short(s)) {
        props.with_correlation_id(id);
    }
    if message.priority > 0 {
        props.with_priority(message.priority);
    }
    let mut headers = FieldTable::new();
    for (name, value) in &message.headers {
        let value = match value {
            HeaderValue::Text(s) => text(s),
            HeaderValue::Int(v) => FieldValue::l(*v),
        };
        if let Ok(name) = name.as_str().try_into() {
            headers.insert(name, value);
        }
    }
    props.with_headers(headers);
    props
}

/// A text header value (an AMQP long string).
pub(crate) fn text(s: &str) -> FieldValue {
    FieldValue::S(LongStr::try_from(s).unwrap_or_default())
}

/// The [`Message`] view of a delivery's body and properties; header types Weft does not
/// write are left out.
pub(crate) fn message_of(data: Vec<u8>, props: &BasicProperties) -> Message {
    let mut headers = std::collections::BTreeMap::new();
    if let Some(table) = props.headers() {
        for (name, value) in table.as_ref() {
            let value = match value {
                FieldValue::S(s) => HeaderValue::Text(s.as_ref().clone()),
                FieldValue::x(bytes) => {
                    let bytes: Vec<u8> = bytes.clone().into();
                    HeaderValue::Text(String::from_utf8_lossy(&bytes).into_owned())
                }
                FieldValue::l(v) => HeaderValue::Int(*v),
                FieldValue::I(v) => HeaderValue::Int(i64::from(*v)),
                FieldValue::i(v) => HeaderValue::Int(i64::from(*v)),
                FieldValue::s(v) => HeaderValue::Int(i64::from(*v)),
                FieldValue::u(v) => HeaderValue::Int(i64::from(*v)),
                FieldValue::b(v) => HeaderValue::Int(i64::from(*v)),
                FieldValue::B(v) => HeaderValue::Int(i64::from(*v)),
                FieldValue::T(v) => match i64::try_from(*v) {
                    Ok(v) => HeaderValue::Int(v),
                    Err(_) => continue,
                },
                _ => continue,
            };
            headers.insert(name.as_ref().clone(), value);
        }
    }
    Message {
        body: data,
        headers,
        message_id: props.message_id().cloned(),
        persistent: props.delivery_mode() == Some(PERSISTENT),
        reply_to: props.reply_to().cloned(),
        correlation_id: props.correlation_id().cloned(),
        priority: props.priority().unwrap_or(0),
    }
}

/// Confirm-mode channels of one connection, opened lazily.
pub(crate) struct Pool {
    slots: Vec<tokio::sync::Mutex<Option<Chan>>>,
    next: AtomicUsize,
}

impl Pool {
    pub(crate) fn new() -> Self {
        Self {
            slots: (0..POOL_SIZE)
                .map(|_| tokio::sync::Mutex::new(None))
                .collect(),
            next: AtomicUsize::new(0),
        }
    }
}

impl Session {
    /// Sends one publish on a pooled channel and returns its confirm to come.
    async fn send(
        &self,
        exchange: &str,
        routing_key: &str,
        body: Vec<u8>,
        props: BasicProperties,
    ) -> Result<oneshot::Receiver<bool>, AmqpError> {
        let pool = &self.pool;
        let start = pool.next.fetch_add(1, Ordering::Relaxed);
        let free = (0..pool.slots.len())
            .find_map(|i| pool.slots[(start + i) % pool.slots.len()].try_lock().ok());
        let mut slot = match free {
            Some(slot) => slot,
            None => pool.slots[start % pool.slots.len()].lock().await,
        };
        let channel = match slot.as_ref().filter(|c| c.is_open()) {
            Some(channel) => channel.clone(),
            None => {
                let channel = self.channel().await?;
                channel.confirm_select().await?;
                *slot = Some(channel.clone());
                channel
            }
        };
        let res = channel
            .publish_confirmed(exchange, routing_key, body, props)
            .await;
        if res.is_err() {
            *slot = None;
        }
        res
    }
}

impl Link {
    /// Publishes and waits for the broker's confirm, reconnecting and retrying (bounded)
    /// when the connection or channel fails.
    pub(crate) async fn publish(
        &self,
        exchange: &str,
        routing_key: &str,
        body: &[u8],
        props: BasicProperties,
    ) -> Result<()> {
        check_name("exchange", exchange)?;
        check_name("routing key", routing_key)?;
        let mut backoff = Backoff::new();
        let mut channel_failures = 0;
        let mut last = String::new();
        for attempt in 1..=MAX_ATTEMPTS {
            if attempt > 1 {
                tokio::time::sleep(backoff.next_delay()).await;
            }
            let session = match self.session().await {
                Ok(session) => session,
                Err(Failure::Fatal(e)) => return Err(e),
                Err(Failure::Transient(e)) => {
                    tracing::warn!(attempt, error = %e, "publish: no broker connection");
                    last = e.to_string();
                    continue;
                }
            };
            // Handing the frames over waits for room in the client's outgoing queue, which
            // fills when the broker stops reading (a memory or disk alarm, a dead peer):
            // bounded like the confirm. A publish given up here was never sent (`Unsent`).
            let sent = tokio::time::timeout(
                CONFIRM_TIMEOUT,
                session.send(exchange, routing_key, body.to_vec(), props.clone()),
            )
            .await
            .unwrap_or_else(|_| {
                Err(AmqpError::client(format!(
                    "the client could not send the publish within {CONFIRM_TIMEOUT:?} (the broker is not reading)"
                )))
            });
            let confirmed: Result<bool, String> = match sent {
                Ok(confirm) => match tokio::time::timeout(CONFIRM_TIMEOUT, confirm).await {
                    Ok(Ok(acked)) => Ok(acked),
                    Ok(Err(_)) => Err("the channel closed before the broker confirmed".into()),
                    Err(_) => Err(format!("no publisher confirm within {CONFIRM_TIMEOUT:?}")),
                },
                Err(e) => Err(e.to_string()),
            };
            match confirmed {
                Ok(true) => return Ok(()),
                Ok(false) => {
                    return Err(Error::NotConfirmed {
                        exchange: exchange.to_owned(),
                        routing_key: routing_key.to_owned(),
                    })
                }
                Err(e) => {
                    tracing::warn!(attempt, %exchange, %routing_key, error = %e, "publish failed");
                    last = e;
                    if session.is_up() {
                        channel_failures += 1;
                        if channel_failures >= MAX_CHANNEL_FAILURES {
                            break;
                        }
                    }
                }
            }
        }
        Err(Error::Bus(format!(
            "publish to {exchange:?}/{routing_key:?} failed: {last}"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bus::TRACEPARENT_HEADER;

    #[test]
    fn properties_and_message_of_round_trip() {
        let mut message = Message {
            body: b"{}".to_vec(),
            message_id: Some("m-1".into()),
            persistent: true,
            correlation_id: Some("c-1".into()),
            ..Message::default()
        };
        message.headers.insert(
            TRACEPARENT_HEADER.into(),
            HeaderValue::Text("00-abc-def-01".into()),
        );
        message
            .headers
            .insert("x-weft-published-at".into(), HeaderValue::Int(42));
        let props = properties(&message);
        assert_eq!(props.delivery_mode(), Some(PERSISTENT));
        let name = TRACEPARENT_HEADER.try_into().unwrap();
        assert_eq!(
            props.headers().and_then(|h| h.get(&name)),
            Some(&text("00-abc-def-01"))
        );
        assert_eq!(message_of(b"{}".to_vec(), &props), message);
        message.persistent = false;
        assert_eq!(properties(&message).delivery_mode(), Some(TRANSIENT));
    }
}
