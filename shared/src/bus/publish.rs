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
use uuid::Uuid;

use super::backoff::Backoff;
use super::connection::{Failure, Link};
use super::{check_name, TRACEPARENT_HEADER};
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
const PERSISTENT: u8 = 2;
/// The broker acks confirms in well under this; past it the connection is presumed dead.
const CONFIRM_TIMEOUT: Duration = Duration::from_secs(30);

/// Properties of every Weft message.
pub(crate) fn properties(message_id: Option<Uuid>, traceparent: Option<&str>) -> BasicProperties {
    let mut props = BasicProperties::default()
        .with_delivery_mode(PERSISTENT)
        .with_content_type("application/json".into());
    if let Some(id) = message_id {
        props = props.with_message_id(id.to_string().into());
    }
    let mut headers = FieldTable::default();
    if let Some(tp) = traceparent {
        headers.insert(
            TRACEPARENT_HEADER.into(),
            AMQPValue::LongString(LongString::from(tp)),
        );
    }
    headers.insert(
        crate::telemetry::PUBLISHED_AT_HEADER.into(),
        AMQPValue::LongLongInt(crate::telemetry::now_micros()),
    );
    props.with_headers(headers)
}

/// The `id` of an encoded envelope, if the body is one.
pub(crate) fn envelope_id(body: &[u8]) -> Option<Uuid> {
    #[derive(serde::Deserialize)]
    struct Id {
        id: Uuid,
    }
    serde_json::from_slice::<Id>(body).ok().map(|e| e.id)
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

    #[test]
    fn messages_are_persistent_json_with_id_and_trace() {
        let id = Uuid::new_v4();
        let props = properties(Some(id), Some("00-abc-def-01"));
        assert_eq!(props.delivery_mode(), &Some(PERSISTENT));
        assert_eq!(props.message_id(), &Some(id.to_string().into()));
        let headers = props.headers().clone().unwrap_or_default();
        assert_eq!(
            headers.inner().get(TRACEPARENT_HEADER),
            Some(&AMQPValue::LongString("00-abc-def-01".into()))
        );
    }

    #[test]
    fn envelope_id_reads_the_id_of_an_encoded_envelope() {
        let id = Uuid::new_v4();
        let body = serde_json::json!({ "id": id, "type": "X", "payload": {} }).to_string();
        assert_eq!(envelope_id(body.as_bytes()), Some(id));
        assert_eq!(envelope_id(b"not json"), None);
    }
}
