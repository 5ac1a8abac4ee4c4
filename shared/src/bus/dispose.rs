//! Turning a raw AMQP delivery into a [`Delivery`] and settling it afterwards.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;

use futures_util::FutureExt;
use lapin::message::Delivery as RawDelivery;
use lapin::options::{BasicAckOptions, BasicNackOptions};
use lapin::types::{AMQPValue, LongString};
use lapin::BasicProperties;

use super::connection::Link;
use super::{Delivery, Disposition, DEAD_REASON_HEADER, ORIGINAL_QUEUE_HEADER, TRACEPARENT_HEADER};
use crate::topology::Names;
use crate::{Envelope, Result};

/// A header's value as text, whichever string type the publisher used.
fn header_text(props: &BasicProperties, name: &str) -> Option<String> {
    match props.headers().as_ref()?.inner().get(name)? {
        AMQPValue::LongString(s) => Some(String::from_utf8_lossy(s.as_bytes()).into_owned()),
        AMQPValue::ShortString(s) => Some(s.as_str().to_owned()),
        _ => None,
    }
}

/// A header's value as an integer.
fn header_int(props: &BasicProperties, name: &str) -> Option<i64> {
    match props.headers().as_ref()?.inner().get(name)? {
        AMQPValue::LongLongInt(v) => Some(*v),
        AMQPValue::LongInt(v) => Some(i64::from(*v)),
        AMQPValue::Timestamp(v) => i64::try_from(*v).ok(),
        _ => None,
    }
}

/// Decodes the envelope of `raw` (the consumer continues the trace after a `queue.wait`
/// span for the time the message spent in `queue`); the error is the reason to dead-letter it.
pub(crate) fn decode(raw: &RawDelivery, queue: &str) -> Result<Delivery, String> {
    let envelope = Envelope::from_bytes(&raw.data).map_err(|e| e.to_string())?;
    let traceparent = crate::telemetry::queue_wait(
        header_text(&raw.properties, TRACEPARENT_HEADER).as_deref(),
        header_int(&raw.properties, crate::telemetry::PUBLISHED_AT_HEADER),
        queue,
    );
    Ok(Delivery {
        envelope,
        traceparent,
        redelivered: raw.redelivered,
        queue: queue.to_owned(),
        reply_to: raw.properties.reply_to().as_ref().map(|s| s.to_string()),
        correlation_id: raw
            .properties
            .correlation_id()
            .as_ref()
            .map(|s| s.to_string()),
    })
}

/// Runs `fut`, turning a panic into an error naming it.
pub(crate) async fn guarded<Fut: Future>(fut: Fut) -> Result<Fut::Output, String> {
    AssertUnwindSafe(fut).catch_unwind().await.map_err(|panic| {
        let panic: &(dyn Any + Send) = &*panic;
        panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "non-text panic".to_owned())
    })
}

/// Copies `raw` to `<queue>.dlq` with the reason and origin in its headers (confirmed).
async fn dead_letter(link: &Link, queue: &str, raw: &RawDelivery, reason: &str) -> Result<()> {
    let mut headers = raw.properties.headers().clone().unwrap_or_default();
    headers.insert(
        DEAD_REASON_HEADER.into(),
        AMQPValue::LongString(LongString::from(reason)),
    );
    headers.insert(
        ORIGINAL_QUEUE_HEADER.into(),
        AMQPValue::LongString(LongString::from(queue)),
    );
    let props = raw
        .properties
        .clone()
        .with_delivery_mode(2)
        .with_headers(headers);
    link.publish("", &Names::dlq(queue), &raw.data, props).await
}

/// Acks, requeues or dead-letters `raw`. Failures are logged: the broker redelivers
/// whatever was not acknowledged once the channel closes.
pub(crate) async fn settle(link: &Link, queue: &str, raw: &RawDelivery, disposition: Disposition) {
    let res = match disposition {
        Disposition::Ack => raw.acker.ack(BasicAckOptions::default()).await,
        Disposition::Requeue => raw.acker.nack(requeue()).await,
        Disposition::DeadLetter(reason) => {
            tracing::warn!(%queue, %reason, "dead-lettering a message");
            match dead_letter(link, queue, raw, &reason).await {
                Ok(()) => raw.acker.ack(BasicAckOptions::default()).await,
                Err(e) => {
                    // Not in the DLQ: keep it in its queue rather than lose it.
                    tracing::error!(%queue, error = %e, "dead-lettering failed, requeueing");
                    raw.acker.nack(requeue()).await
                }
            }
        }
    };
    if let Err(e) = res {
        tracing::warn!(%queue, error = %e, "settling a delivery failed; the broker will redeliver it");
    }
}

fn requeue() -> BasicNackOptions {
    BasicNackOptions {
        requeue: true,
        ..BasicNackOptions::default()
    }
}
