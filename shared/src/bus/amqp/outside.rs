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
use crate::bus::transport::{Acker, Inbound, Message, Subscription};
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
    /// connection; see [`dead_letter_properties`]), then acks it.
    async fn dead_letter(&self, queue: &str, reason: &str) -> Result<()> {
        let props = dead_letter_properties(&self.raw.properties, queue, reason);
        self.link
            .publish("", &Names::dlq(queue), &self.raw.data, props)
            .await?;
        self.ack().await
    }
}

/// The properties of a dead-letter copy: the original's as its publisher sent them
/// ([`amqprs_properties`]), with the reason and the queue among the headers, made
/// persistent. Two are left out: `expiration` (the copy must not expire from the
/// dead-letter queue) and `user_id` (the broker refuses a publish whose user id is not
/// its connection's user).
fn dead_letter_properties(
    props: &BasicProperties,
    queue: &str,
    reason: &str,
) -> amqprs::BasicProperties {
    let mut copy = amqprs_properties(props);
    let mut headers = copy.headers().cloned().unwrap_or_default();
    for (name, value) in [(DEAD_REASON_HEADER, reason), (ORIGINAL_QUEUE_HEADER, queue)] {
        if let Ok(name) = name.try_into() {
            headers.insert(name, publish::text(value));
        }
    }
    copy.with_headers(headers).with_delivery_mode(PERSISTENT);
    copy
}

/// A delivery's properties as amqprs writes them: headers of every type (a long string
/// that is not UTF-8 as the byte array it is), content type and encoding, ids, type, app
/// id, timestamp, priority, delivery mode; not `expiration` nor `user_id`.
fn amqprs_properties(props: &BasicProperties) -> amqprs::BasicProperties {
    let mut copy = amqprs::BasicProperties::default();
    if let Some(headers) = props.headers() {
        copy.with_headers(field_table(headers));
    }
    type Setter =
        for<'a> fn(&'a mut amqprs::BasicProperties, &str) -> &'a mut amqprs::BasicProperties;
    let texts: [(&Option<lapin::types::ShortString>, Setter); 7] = [
        (
            props.content_type(),
            amqprs::BasicProperties::with_content_type,
        ),
        (
            props.content_encoding(),
            amqprs::BasicProperties::with_content_encoding,
        ),
        (
            props.correlation_id(),
            amqprs::BasicProperties::with_correlation_id,
        ),
        (props.reply_to(), amqprs::BasicProperties::with_reply_to),
        (props.message_id(), amqprs::BasicProperties::with_message_id),
        (props.kind(), amqprs::BasicProperties::with_message_type),
        (props.app_id(), amqprs::BasicProperties::with_app_id),
    ];
    for (value, set) in texts {
        if let Some(value) = value {
            set(&mut copy, value.as_str());
        }
    }
    if let Some(v) = *props.priority() {
        copy.with_priority(v);
    }
    if let Some(v) = *props.timestamp() {
        copy.with_timestamp(v);
    }
    if let Some(v) = *props.delivery_mode() {
        copy.with_delivery_mode(v);
    }
    copy
}

/// A header table as amqprs writes it (values it cannot carry left out).
fn field_table(table: &FieldTable) -> amqprs::FieldTable {
    let mut copy = amqprs::FieldTable::new();
    for (name, value) in table.inner() {
        if let (Ok(name), Some(value)) = (name.as_str().try_into(), field_value(value)) {
            copy.insert(name, value);
        }
    }
    copy
}

/// A header value as amqprs writes it; a long string that is not UTF-8 becomes the
/// byte array it is. `None` for what does not fit an AMQP field (a string over 255
/// bytes where a short string is asked, an array over 4 GiB).
fn field_value(value: &AMQPValue) -> Option<amqprs::FieldValue> {
    use amqprs::FieldValue as F;
    Some(match value {
        AMQPValue::Boolean(v) => F::t(*v),
        AMQPValue::ShortShortInt(v) => F::b(*v),
        AMQPValue::ShortShortUInt(v) => F::B(*v),
        AMQPValue::ShortInt(v) => F::s(*v),
        AMQPValue::ShortUInt(v) => F::u(*v),
        AMQPValue::LongInt(v) => F::I(*v),
        AMQPValue::LongUInt(v) => F::i(*v),
        AMQPValue::LongLongInt(v) => F::l(*v),
        AMQPValue::Float(v) => F::f(*v),
        AMQPValue::Double(v) => F::d(*v),
        // AMQP's decimal is a scale and 32 bits; the two clients differ on their sign.
        AMQPValue::DecimalValue(d) => F::D(amqprs::DecimalValue::new(
            d.scale,
            i32::from_ne_bytes(d.value.to_ne_bytes()),
        )),
        AMQPValue::ShortString(s) => F::S(s.as_str().try_into().ok()?),
        AMQPValue::LongString(s) => match std::str::from_utf8(s.as_bytes()) {
            Ok(text) => F::S(text.try_into().ok()?),
            Err(_) => F::x(s.as_bytes().to_vec().try_into().ok()?),
        },
        AMQPValue::FieldArray(values) => F::A(
            values
                .as_slice()
                .iter()
                .filter_map(field_value)
                .collect::<Vec<_>>()
                .try_into()
                .ok()?,
        ),
        AMQPValue::Timestamp(v) => F::T(*v),
        AMQPValue::FieldTable(table) => F::F(field_table(table)),
        AMQPValue::ByteArray(bytes) => F::x(bytes.as_slice().to_vec().try_into().ok()?),
        AMQPValue::Void => F::V,
    })
}

/// The [`Message`] view of a delivery, read as every other queue's
/// ([`publish::message_of`]): a long string that is not UTF-8 as lossy text, header
/// types Weft does not write left out.
fn message_of(data: &[u8], props: &BasicProperties) -> Message {
    publish::message_of(data.to_vec(), &amqprs_properties(props))
}

#[cfg(test)]
mod tests {
    use super::*;
    use lapin::types::LongString;

    #[test]
    fn a_dead_letter_copy_keeps_what_its_publisher_sent_but_its_expiry_and_user() {
        let mut nested = FieldTable::default();
        nested.insert("depth".into(), AMQPValue::LongInt(2));
        let mut headers = FieldTable::default();
        headers.insert(
            "x-raw".into(),
            AMQPValue::LongString(LongString::from(vec![b'a', 0xff])),
        );
        headers.insert("x-flag".into(), AMQPValue::Boolean(true));
        headers.insert(
            "x-list".into(),
            AMQPValue::FieldArray(
                vec![
                    AMQPValue::LongInt(1),
                    AMQPValue::LongString(LongString::from("two")),
                ]
                .into(),
            ),
        );
        headers.insert("x-nested".into(), AMQPValue::FieldTable(nested));
        let props = BasicProperties::default()
            .with_headers(headers)
            .with_content_type("text/plain".into())
            .with_content_encoding("gzip".into())
            .with_message_id("m-1".into())
            .with_correlation_id("c-1".into())
            .with_type("order.placed".into())
            .with_app_id("shop".into())
            .with_timestamp(1_700_000_000)
            .with_priority(3)
            .with_expiration("60000".into())
            .with_user_id("shop-publisher".into());
        let copy = dead_letter_properties(&props, "ns.starts", "not JSON");
        assert_eq!(copy.content_type().map(String::as_str), Some("text/plain"));
        assert_eq!(copy.content_encoding().map(String::as_str), Some("gzip"));
        assert_eq!(copy.message_id().map(String::as_str), Some("m-1"));
        assert_eq!(copy.correlation_id().map(String::as_str), Some("c-1"));
        assert_eq!(
            copy.message_type().map(String::as_str),
            Some("order.placed")
        );
        assert_eq!(copy.app_id().map(String::as_str), Some("shop"));
        assert_eq!(copy.timestamp(), Some(1_700_000_000));
        assert_eq!(copy.priority(), Some(3));
        assert_eq!(copy.delivery_mode(), Some(PERSISTENT));
        assert_eq!(copy.expiration(), None, "the copy must not expire");
        assert_eq!(
            copy.user_id(),
            None,
            "the broker checks it against our user"
        );
        let headers = copy.headers().expect("headers");
        let get = |name: &str| {
            let name: amqprs::FieldName = name.try_into().unwrap();
            headers.as_ref().get(&name).cloned()
        };
        assert!(
            matches!(get("x-raw"), Some(amqprs::FieldValue::x(_))),
            "bytes stay bytes: {:?}",
            get("x-raw")
        );
        assert!(matches!(get("x-flag"), Some(amqprs::FieldValue::t(true))));
        assert!(matches!(get("x-list"), Some(amqprs::FieldValue::A(_))));
        assert!(matches!(get("x-nested"), Some(amqprs::FieldValue::F(_))));
        assert_eq!(
            get(DEAD_REASON_HEADER).map(|v| v.to_string()),
            Some("not JSON".into())
        );
        assert_eq!(
            get(ORIGINAL_QUEUE_HEADER).map(|v| v.to_string()),
            Some("ns.starts".into())
        );
    }

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
