//! Consuming over AMQP: one channel per consumer with its prefetch (basic.qos), and the
//! ackers that settle what the broker delivered.

use std::sync::Arc;

use amqprs::channel::{
    BasicAckArguments, BasicCancelArguments, BasicConsumeArguments, BasicNackArguments,
    BasicQosArguments, ConsumerMessage,
};
use amqprs::BasicProperties;
use async_trait::async_trait;
use tokio::sync::mpsc::UnboundedReceiver;

use super::ack_batch::{AckBatcher, Outcome, SendAck};
use super::client::{AmqpError, Chan};
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
) -> Result<AmqpSubscription, AmqpError> {
    let channel = session.channel().await?;
    let consumed = async {
        channel
            .call(|c| async move {
                c.basic_qos(BasicQosArguments::new(0, prefetch, false))
                    .await
            })
            .await?;
        let args = BasicConsumeArguments::new(queue, "")
            .manual_ack(true)
            .finish();
        channel
            .call(|c| async move { c.basic_consume_rx(args).await })
            .await
    };
    let (tag, deliveries) = match consumed.await {
        Ok(consumer) => consumer,
        Err(e) => {
            channel.close().await;
            return Err(e);
        }
    };
    tracing::debug!(%queue, %tag, "consumer open");
    Ok(AmqpSubscription {
        link,
        channel,
        tag,
        deliveries,
        acks: AckBatcher::new(),
    })
}

/// A consumer on its own channel.
pub(crate) struct AmqpSubscription {
    link: Arc<Link>,
    channel: Chan,
    tag: String,
    deliveries: UnboundedReceiver<ConsumerMessage>,
    /// Its deliveries' acknowledgements, sent together when they meet.
    acks: Arc<AckBatcher>,
}

#[async_trait]
impl Subscription for AmqpSubscription {
    async fn next(&mut self) -> Result<Inbound, String> {
        let Some(raw) = self.deliveries.recv().await else {
            return Err(
                match (self.channel.is_open(), self.channel.closed_by_broker()) {
                    (true, _) => "the broker cancelled the consumer".into(),
                    (false, Some(why)) => {
                        format!("the broker closed the consumer's channel: {why}")
                    }
                    (false, None) => "the consumer's channel closed".into(),
                },
            );
        };
        let (Some(deliver), Some(props), Some(body)) =
            (raw.deliver, raw.basic_properties, raw.content)
        else {
            return Err("the client handed over an incomplete delivery".into());
        };
        let tag = deliver.delivery_tag();
        self.acks.delivered(tag);
        let delivery = Delivery {
            channel: self.channel.clone(),
            tag,
            props,
        };
        let settle = Settle::Consumed(self.acks.clone());
        Ok(inbound(
            self.link.clone(),
            delivery,
            body,
            deliver.redelivered(),
            settle,
        ))
    }

    async fn cancel(&mut self) {
        let args = BasicCancelArguments::new(&self.tag);
        if let Err(e) = self
            .channel
            .call(|c| async move { c.basic_cancel(args).await })
            .await
        {
            tracing::debug!(error = %e, "cancelling the consumer failed");
        }
    }

    async fn close(self: Box<Self>) {
        self.channel.close().await;
    }
}

/// One delivery of a channel: what settles it and what a dead-letter copy keeps.
pub(crate) struct Delivery {
    pub(crate) channel: Chan,
    pub(crate) tag: u64,
    pub(crate) props: BasicProperties,
}

impl SendAck for Delivery {
    async fn send_ack(&self, multiple: bool) -> Outcome {
        let args = BasicAckArguments::new(self.tag, multiple);
        self.channel
            .send(|c| async move { c.basic_ack(args).await })
            .await
            .map(|()| true)
            .map_err(|e| e.to_string())
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

/// Wraps a delivery, settled as `settle` says.
pub(crate) fn inbound(
    link: Arc<Link>,
    delivery: Delivery,
    body: Vec<u8>,
    redelivered: bool,
    settle: Settle,
) -> Inbound {
    let message = publish::message_of(body, &delivery.props);
    Inbound {
        acker: Box::new(AmqpAcker {
            link,
            body: message.body.clone(),
            delivery: Arc::new(delivery),
            settle,
        }),
        message,
        redelivered,
    }
}

/// Settles one AMQP delivery on the channel that delivered it.
struct AmqpAcker {
    link: Arc<Link>,
    delivery: Arc<Delivery>,
    /// The body as it came, for a dead-letter copy.
    body: Vec<u8>,
    settle: Settle,
}

impl std::fmt::Debug for AmqpAcker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AmqpAcker")
            .field("delivery_tag", &self.delivery.tag)
            .finish_non_exhaustive()
    }
}

impl AmqpAcker {
    /// The delivery is settled (by whatever means).
    async fn done(&self) {
        match &self.settle {
            Settle::Consumed(acks) => acks.settled_alone(self.delivery.tag),
            Settle::Taken(own) => own.release().await,
        }
    }
}

#[async_trait]
impl Acker for AmqpAcker {
    async fn ack(&self) -> Result<()> {
        let res = match &self.settle {
            Settle::Consumed(acks) => acks.ack(self.delivery.tag, self.delivery.clone()).await,
            Settle::Taken(_) => {
                let res = self.delivery.send_ack(false).await;
                self.done().await;
                res
            }
        };
        settled(res, "acknowledge")
    }

    async fn requeue(&self) -> Result<()> {
        let args = BasicNackArguments::new(self.delivery.tag, false, true);
        let res = self
            .delivery
            .channel
            .send(|c| async move { c.basic_nack(args).await })
            .await
            .map(|()| true)
            .map_err(|e| e.to_string());
        self.done().await;
        settled(res, "requeue")
    }

    /// Copies the message to `<queue>.dlq` (confirmed, with all its original properties),
    /// then acks it.
    async fn dead_letter(&self, queue: &str, reason: &str) -> Result<()> {
        let mut props = self.delivery.props.clone();
        let mut headers = props.headers().cloned().unwrap_or_default();
        for (name, value) in [(DEAD_REASON_HEADER, reason), (ORIGINAL_QUEUE_HEADER, queue)] {
            if let Ok(name) = name.try_into() {
                headers.insert(name, publish::text(value));
            }
        }
        props.with_delivery_mode(PERSISTENT).with_headers(headers);
        self.link
            .publish("", &Names::dlq(queue), &self.body, props)
            .await?;
        self.ack().await
    }
}

impl SendAck for Arc<Delivery> {
    async fn send_ack(&self, multiple: bool) -> Outcome {
        self.as_ref().send_ack(multiple).await
    }
}

/// A settlement that was not sent (the delivery's channel is closed: the broker gives
/// the message to someone else) did not happen, and must not be taken as done (a task
/// poll would hand out a task the broker hands out again).
pub(crate) fn settled(res: Outcome, what: &str) -> Result<()> {
    match res {
        Ok(true) => Ok(()),
        Ok(false) => Err(crate::Error::Bus(format!(
            "could not {what} the delivery: its channel is closed or it was settled already"
        ))),
        Err(e) => Err(crate::Error::Bus(format!(
            "could not {what} the delivery: {e}"
        ))),
    }
}
