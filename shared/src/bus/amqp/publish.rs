//! Confirmed, persistent publishing.
//!
//! A small pool of confirm-mode channels per connection. A publish holds its channel's
//! lock only while handing the frames to lapin (lapin numbers confirms when it queues the
//! frames, so two publishers racing on one channel could swap their confirms); the wait
//! for the broker's ack happens outside the lock, so many publishes share one channel's
//! round trip and throughput is not one publish per round trip.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::types::{AMQPValue, FieldTable, LongString};
use lapin::{BasicProperties, Channel, Confirmation, Connection, PublisherConfirm};

use super::connection::{Failure, Link};
use crate::bus::backoff::Backoff;
use crate::bus::check_name;
use crate::bus::transport::{HeaderValue, Message};
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
/// The broker acks confirms in well under this; past it the connection is presumed dead.
const CONFIRM_TIMEOUT: Duration = Duration::from_secs(30);

/// The AMQP properties of `message`: JSON, its delivery mode, id, reply route and
/// headers (text as long strings, integers as long-longs).
pub(crate) fn properties(message: &Message) -> BasicProperties {
    let mode = if message.persistent {
        PERSISTENT
    } else {
        TRANSIENT
    };
    let mut props = BasicProperties::default()
        .with_delivery_mode(mode)
        .with_content_type("application/json".into());
    if let Some(id) = &message.message_id {
        props = props.with_message_id(id.as_str().into());
    }
    if let Some(reply_to) = &message.reply_to {
        props = props.with_reply_to(reply_to.as_str().into());
    }
    if let Some(id) = &message.correlation_id {
        props = props.with_correlation_id(id.as_str().into());
    }
    if message.priority > 0 {
        props = props.with_priority(message.priority);
    }
    let mut headers = FieldTable::default();
    for (name, value) in &message.headers {
        let value = match value {
            HeaderValue::Text(s) => AMQPValue::LongString(LongString::from(s.as_str())),
            HeaderValue::Int(v) => AMQPValue::LongLongInt(*v),
        };
        headers.insert(name.as_str().into(), value);
    }
    props.with_headers(headers)
}

/// The [`Message`] view of a delivery's body and properties; header types Weft does not
/// write are left out.
pub(crate) fn message_of(data: &[u8], props: &BasicProperties) -> Message {
    let mut headers = std::collections::BTreeMap::new();
    if let Some(table) = props.headers().as_ref() {
        for (name, value) in table.inner() {
            let value = match value {
                AMQPValue::LongString(s) => {
                    HeaderValue::Text(String::from_utf8_lossy(s.as_bytes()).into_owned())
                }
                AMQPValue::ShortString(s) => HeaderValue::Text(s.as_str().to_owned()),
                AMQPValue::LongLongInt(v) => HeaderValue::Int(*v),
                AMQPValue::LongInt(v) => HeaderValue::Int(i64::from(*v)),
                AMQPValue::Timestamp(v) => match i64::try_from(*v) {
                    Ok(v) => HeaderValue::Int(v),
                    Err(_) => continue,
                },
                _ => continue,
            };
            headers.insert(name.as_str().to_owned(), value);
        }
    }
    Message {
        body: data.to_vec(),
        headers,
        message_id: props.message_id().as_ref().map(|s| s.to_string()),
        persistent: props.delivery_mode() == &Some(PERSISTENT),
        reply_to: props.reply_to().as_ref().map(|s| s.to_string()),
        correlation_id: props.correlation_id().as_ref().map(|s| s.to_string()),
        priority: props.priority().unwrap_or(0),
    }
}

/// Confirm-mode channels of one connection, opened lazily.
pub(crate) struct Pool {
    slots: Vec<tokio::sync::Mutex<Option<Channel>>>,
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

    /// Queues one publish on a pooled channel and returns its pending confirm.
    async fn send(
        &self,
        conn: &Connection,
        exchange: &str,
        routing_key: &str,
        body: &[u8],
        props: BasicProperties,
    ) -> lapin::Result<PublisherConfirm> {
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let free = (0..self.slots.len())
            .find_map(|i| self.slots[(start + i) % self.slots.len()].try_lock().ok());
        let mut slot = match free {
            Some(slot) => slot,
            None => self.slots[start % self.slots.len()].lock().await,
        };
        let channel = match slot.as_ref().filter(|c| c.status().connected()) {
            Some(channel) => channel.clone(),
            None => {
                let channel = conn.create_channel().await?;
                channel
                    .confirm_select(ConfirmSelectOptions::default())
                    .await?;
                *slot = Some(channel.clone());
                channel
            }
        };
        let opts = BasicPublishOptions::default();
        let res = channel
            .basic_publish(exchange.into(), routing_key.into(), opts, body, props)
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
            let sent = session
                .pool
                .send(&session.conn, exchange, routing_key, body, props.clone())
                .await;
            let confirmed: Result<Confirmation, String> = match sent {
                Ok(confirm) => match tokio::time::timeout(CONFIRM_TIMEOUT, confirm).await {
                    Ok(res) => res.map_err(|e| e.to_string()),
                    Err(_) => Err(format!("no publisher confirm within {CONFIRM_TIMEOUT:?}")),
                },
                Err(e) => Err(e.to_string()),
            };
            match confirmed {
                Ok(Confirmation::Ack(_)) => return Ok(()),
                Ok(Confirmation::Nack(_) | Confirmation::NotRequested) => {
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
        assert_eq!(props.delivery_mode(), &Some(PERSISTENT));
        assert_eq!(
            props
                .headers()
                .clone()
                .unwrap_or_default()
                .inner()
                .get(TRACEPARENT_HEADER),
            Some(&AMQPValue::LongString("00-abc-def-01".into()))
        );
        assert_eq!(message_of(b"{}", &props), message);
        message.persistent = false;
        assert_eq!(properties(&message).delivery_mode(), &Some(TRANSIENT));
    }
}
