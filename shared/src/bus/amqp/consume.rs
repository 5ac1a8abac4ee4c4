//! Consuming over AMQP: one channel per consumer with its prefetch (basic.qos), and the
//! ackers that settle what the broker delivered.

use std::sync::Arc;

use async_trait::async_trait;
use futures_util::StreamExt;
use lapin::message::Delivery as RawDelivery;
use lapin::options::{
    BasicAckOptions, BasicCancelOptions, BasicConsumeOptions, BasicNackOptions, BasicQosOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString};
use lapin::{Channel, Consumer};

use super::ack_batch::AckBatcher;
use super::connection::{Link, Session};
use super::get::OwnChannel;
use super::publish::{self, PERSISTENT};
use crate::bus::transport::{Acker, Inbound, Subscription};
use crate::bus::{DEAD_REASON_HEADER, ORIGINAL_QUEUE_HEADER};
use crate::topology::Names;
use crate::Result;

/// Opens a channel with `prefetch` and starts consuming `queue` on it.
pub(crate) async fn open(
    link: Arc<Link>,
    session: &Session,
    queue: &str,
    prefetch: u16,
) -> lapin::Result<AmqpSubscription> {
    let channel = session.conn.create_channel().await?;
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
    tracing::debug!(%queue, tag = %consumer.tag(), "consumer open");
    Ok(AmqpSubscription {
        link,
        channel,
        consumer,
        acks: AckBatcher::new(),
    })
}

/// Closes the channel, which hands every unacknowledged message back to the queue.
pub(crate) async fn close(channel: &Channel) {
    if channel.status().connected() {
        if let Err(e) = channel.close(200, "OK".into()).await {
            tracing::debug!(error = %e, "closing a channel failed");
        }
    }
}

/// A consumer on its own channel.
pub(crate) struct AmqpSubscription {
    link: Arc<Link>,
    channel: Channel,
    consumer: Consumer,
    /// Its deliveries' acknowledgements, sent together when they meet.
    acks: Arc<AckBatcher>,
}

#[async_trait]
impl Subscription for AmqpSubscription {
    async fn next(&mut self) -> Result<Inbound, String> {
        match self.consumer.next().await {
            Some(Ok(raw)) => {
                self.acks.delivered(raw.delivery_tag);
                let settle = Settle::Consumed(self.acks.clone());
                Ok(inbound(self.link.clone(), raw, settle))
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
        close(&self.channel).await;
    }
}

/// How a delivery is settled, by where it came from.
pub(crate) enum Settle {
    /// Pushed to a consumer: acknowledged with the others of its channel that meet it
    /// (`ack_batch`).
    Consumed(Arc<AckBatcher>),
    /// Taken by a `basic.get` on a channel of its own, given back to its pool once the
    /// delivery is settled.
    Taken(OwnChannel),
}

/// Wraps a raw delivery, settled as `settle` says.
pub(crate) fn inbound(link: Arc<Link>, raw: RawDelivery, settle: Settle) -> Inbound {
    Inbound {
        message: publish::message_of(&raw.data, &raw.properties),
        redelivered: raw.redelivered,
        acker: Box::new(AmqpAcker { link, raw, settle }),
    }
}

/// Settles one AMQP delivery on the channel that delivered it.
struct AmqpAcker {
    link: Arc<Link>,
    raw: RawDelivery,
    settle: Settle,
}

impl std::fmt::Debug for AmqpAcker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AmqpAcker")
            .field("delivery_tag", &self.raw.delivery_tag)
            .finish_non_exhaustive()
    }
}

impl AmqpAcker {
    /// The delivery is settled (by whatever means).
    async fn done(&self) {
        match &self.settle {
            Settle::Consumed(acks) => acks.settled_alone(self.raw.delivery_tag),
            Settle::Taken(own) => own.release().await,
        }
    }
}

#[async_trait]
impl Acker for AmqpAcker {
    async fn ack(&self) -> Result<()> {
        let res = match &self.settle {
            Settle::Consumed(acks) => acks
                .ack(self.raw.delivery_tag, self.raw.acker.clone())
                .await
                .map_err(crate::Error::Bus),
            Settle::Taken(_) => {
                let res = self.raw.acker.ack(BasicAckOptions::default()).await;
                self.done().await;
                res.map_err(crate::Error::from)
            }
        };
        settled(res, "acknowledge")
    }

    async fn requeue(&self) -> Result<()> {
        let options = BasicNackOptions {
            requeue: true,
            ..BasicNackOptions::default()
        };
        let res = self.raw.acker.nack(options).await;
        self.done().await;
        settled(res.map_err(crate::Error::from), "requeue")
    }

    /// Copies the message to `<queue>.dlq` (confirmed, with all its original properties),
    /// then acks it.
    async fn dead_letter(&self, queue: &str, reason: &str) -> Result<()> {
        let mut headers = self.raw.properties.headers().clone().unwrap_or_default();
        headers.insert(
            DEAD_REASON_HEADER.into(),
            AMQPValue::LongString(LongString::from(reason)),
        );
        headers.insert(
            ORIGINAL_QUEUE_HEADER.into(),
            AMQPValue::LongString(LongString::from(queue)),
        );
        let props = self
            .raw
            .properties
            .clone()
            .with_delivery_mode(PERSISTENT)
            .with_headers(headers);
        self.link
            .publish("", &Names::dlq(queue), &self.raw.data, props)
            .await?;
        self.ack().await
    }
}

/// lapin answers `Ok(false)` when it did not send the settlement: the delivery's channel
/// was closed (the broker gives the message to someone else) or it was settled before.
/// Either way the caller's settlement did not happen, and must not be taken as done
/// (a task poll would hand out a task the broker hands out again).
fn settled(res: Result<bool>, what: &str) -> Result<()> {
    match res? {
        true => Ok(()),
        false => Err(crate::Error::Bus(format!(
            "could not {what} the delivery: its channel is closed or it was settled already"
        ))),
    }
}
