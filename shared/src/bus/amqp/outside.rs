//! The start-event queue, consumed with a second AMQP client (lapin).
//!
//! Outside publishers write to `<ns>.starts` (docs/start-events.md), and AMQP lets them
//! put any bytes in a header's long string (the .NET client sends a `byte[]` header so).
//! amqprs reads every string as UTF-8: a frame with other bytes fails its whole
//! connection, the broker hands the message to the next consumer, which fails the same
//! way — one such message would stop the queue for good, and every consumer sharing the
//! connection with it. lapin reads long strings as bytes. So the one queue that outside
//! publishers write to is consumed with lapin, on a connection of its own; everything
//! Weft publishes itself, and every other queue, goes through amqprs. A header that is
//! not UTF-8 reaches the handler as lossy text.

use std::sync::Arc;

use async_trait::async_trait;
use futures_util::StreamExt;
use lapin::message::Delivery as RawDelivery;
use lapin::options::{
    BasicAckOptions, BasicCancelOptions, BasicConsumeOptions, BasicNackOptions, BasicQosOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, Consumer};
use tokio_util::sync::CancellationToken;

use super::ack_batch::{AckBatcher, Outcome, SendAck};
use super::connection::{broker_of, Link};
use super::consume::settled;
use super::publish::{self, PERSISTENT};
use crate::bus::backoff::Backoff;
use crate::bus::transport::{Acker, HeaderValue, Inbound, Message, Subscription};
use crate::bus::{DEAD_REASON_HEADER, ORIGINAL_QUEUE_HEADER};
use crate::topology::Names;
use crate::{Error, Result};

/// How long one broker gets to accept the connection before the next is tried.
const PER_BROKER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Connects (retrying with back-off until `shutdown`) and starts consuming `queue`.
pub(crate) async fn open(
    link: Arc<Link>,
    queue: &str,
    prefetch: u16,
    shutdown: &CancellationToken,
) -> Result<OutsideSubscription> {
    let mut backoff = Backoff::new();
    loop {
        let attempt = tokio::select! {
            _ = shutdown.cancelled() => return Err(Error::ShuttingDown),
            attempt = consume(&link, queue, prefetch) => attempt,
        };
        match attempt {
            Ok(subscription) => return Ok(subscription),
            Err(e) => tracing::warn!(%queue, error = %e, "consuming the start-event queue failed"),
        }
        if !backoff.sleep(shutdown).await {
            return Err(Error::ShuttingDown);
        }
    }
}

async fn consume(link: &Arc<Link>, queue: &str, prefetch: u16) -> Result<OutsideSubscription> {
    let conn = connect(link).await?;
    let started = async {
        let channel = conn.create_channel().await?;
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
        Ok::<_, lapin::Error>((channel, consumer))
    };
    match started.await {
        Ok((channel, consumer)) => Ok(OutsideSubscription {
            link: link.clone(),
            conn,
            channel,
            consumer,
            acks: AckBatcher::new(),
        }),
        Err(e) => {
            let _ = conn.close(200, "OK".into()).await;
            Err(Error::Bus(format!("consuming {queue}: {e}")))
        }
    }
}

/// A connection to the first broker of the list that takes one.
async fn connect(link: &Link) -> Result<Connection> {
    let mut failures = Vec::new();
    for url in link.urls_in_order() {
        let name = format!("{}/starts", link.connection_name);
        let props = ConnectionProperties::default().with_connection_name(name.into());
        match tokio::time::timeout(PER_BROKER_TIMEOUT, Connection::connect(&url, props)).await {
            Ok(Ok(conn)) => return Ok(conn),
            Ok(Err(e)) => failures.push(format!("{}: {e}", broker_of(&url))),
            Err(_) => failures.push(format!(
                "{}: no answer within {PER_BROKER_TIMEOUT:?}",
                broker_of(&url)
            )),
        }
    }
    Err(Error::Bus(format!("connect: {}", failures.join("; "))))
}

/// A consumer of the start-event queue on a connection of its own.
pub(crate) struct OutsideSubscription {
    link: Arc<Link>,
    conn: Connection,
    channel: Channel,
    consumer: Consumer,
    acks: Arc<AckBatcher<lapin::Acker>>,
}

#[async_trait]
impl Subscription for OutsideSubscription {
    async fn next(&mut self) -> Result<Inbound, String> {
        match self.consumer.next().await {
            Some(Ok(raw)) => {
                self.acks.delivered(raw.delivery_tag);
                Ok(Inbound {
                    message: message_of(&raw.data, &raw.properties),
                    redelivered: raw.redelivered,
                    acker: Box::new(OutsideAcker {
                        link: self.link.clone(),
                        acks: self.acks.clone(),
                        raw,
                    }),
                })
            }
            Some(Err(e)) => Err(e.to_string()),
            None => Err("the consumer was cancelled".into()),
        }
    }

    async fn cancel(&mut self) {
        let cancel = self
            .channel
            .basic_cancel(self.consumer.tag(), BasicCancelOptions::default());
        if let Err(e) = cancel.await {
            tracing::debug!(error = %e, "cancelling the consumer failed");
        }
    }

    async fn close(self: Box<Self>) {
        if self.channel.status().connected() {
            let _ = self.channel.close(200, "OK".into()).await;
        }
        let _ = self.conn.close(200, "OK".into()).await;
    }
}

impl SendAck for lapin::Acker {
    async fn send_ack(&self, multiple: bool) -> Outcome {
        self.ack(BasicAckOptions { multiple })
            .await
            .map_err(|e| e.to_string())
    }
}

/// Settles one delivery of the start-event queue.
struct OutsideAcker {
    link: Arc<Link>,
    acks: Arc<AckBatcher<lapin::Acker>>,
    raw: RawDelivery,
}

impl std::fmt::Debug for OutsideAcker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutsideAcker")
            .field("delivery_tag", &self.raw.delivery_tag)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl Acker for OutsideAcker {
    async fn ack(&self) -> Result<()> {
        let res = self
            .acks
            .ack(self.raw.delivery_tag, self.raw.acker.clone())
            .await;
        settled(res, "acknowledge")
    }

    async fn requeue(&self) -> Result<()> {
        let options = BasicNackOptions {
            requeue: true,
            ..BasicNackOptions::default()
        };
        let res = self
            .raw
            .acker
            .nack(options)
            .await
            .map_err(|e| e.to_string());
        self.acks.settled_alone(self.raw.delivery_tag);
        settled(res, "requeue")
    }

    /// Copies the message to `<queue>.dlq` (confirmed, through the bus's own
    /// connection: its body, id, headers and the reason), then acks it.
    async fn dead_letter(&self, queue: &str, reason: &str) -> Result<()> {
        let mut message = message_of(&self.raw.data, &self.raw.properties);
        message.persistent = true;
        message
            .headers
            .insert(DEAD_REASON_HEADER.into(), HeaderValue::Text(reason.into()));
        message.headers.insert(
            ORIGINAL_QUEUE_HEADER.into(),
            HeaderValue::Text(queue.into()),
        );
        let mut props = publish::properties(&message);
        props.with_delivery_mode(PERSISTENT);
        self.link
            .publish("", &Names::dlq(queue), &message.body, props)
            .await?;
        self.ack().await
    }
}

/// The [`Message`] view of a delivery: long strings that are not UTF-8 as lossy text,
/// header types Weft does not write left out.
fn message_of(data: &[u8], props: &BasicProperties) -> Message {
    let mut headers = std::collections::BTreeMap::new();
    if let Some(table) = props.headers().as_ref() {
        for (name, value) in table.inner() {
            let value = match value {
                AMQPValue::LongString(s) => {
                    HeaderValue::Text(String::from_utf8_lossy(s.as_bytes()).into_owned())
                }
                AMQPValue::ShortString(s) => HeaderValue::Text(s.as_str().to_owned()),
                AMQPValue::ByteArray(b) => {
                    HeaderValue::Text(String::from_utf8_lossy(b.as_slice()).into_owned())
                }
                AMQPValue::LongLongInt(v) => HeaderValue::Int(*v),
                AMQPValue::LongInt(v) => HeaderValue::Int(i64::from(*v)),
                AMQPValue::LongUInt(v) => HeaderValue::Int(i64::from(*v)),
                AMQPValue::ShortInt(v) => HeaderValue::Int(i64::from(*v)),
                AMQPValue::ShortUInt(v) => HeaderValue::Int(i64::from(*v)),
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

#[cfg(test)]
mod tests {
    use super::*;
    use lapin::types::LongString;

    #[test]
    fn a_long_string_that_is_not_utf8_is_read_as_lossy_text() {
        let mut headers = FieldTable::default();
        headers.insert(
            "x-note".into(),
            AMQPValue::LongString(LongString::from(vec![b'a', 0xff])),
        );
        headers.insert("x-n".into(), AMQPValue::LongInt(7));
        let props = BasicProperties::default()
            .with_headers(headers)
            .with_delivery_mode(PERSISTENT);
        let message = message_of(b"{}", &props);
        assert_eq!(message.header_text("x-note"), Some("a\u{fffd}"));
        assert_eq!(message.header_int("x-n"), Some(7));
        assert!(message.persistent);
    }
}
