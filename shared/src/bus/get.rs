//! Taking one message from a queue on demand (AMQP `basic.get`), for callers that pull
//! rather than consume: the gateway's task poll hands activity tasks to HTTP workers.
//!
//! Each [`Bus::get`] opens its own channel and keeps it in the returned [`Taken`] until
//! the message is settled: acknowledging needs the channel that delivered it, and a
//! `Taken` dropped unsettled closes its channel, which gives the message back to the
//! queue (so a caller that goes away mid-way loses nothing).

use std::sync::Arc;

use lapin::message::Delivery as RawDelivery;
use lapin::options::{BasicAckOptions, BasicGetOptions, BasicNackOptions};
use lapin::Channel;

use super::connection::Link;
use super::consume::close;
use super::{dispose, Bus, Delivery, Disposition};
use crate::{Error, Result};

/// How many undecodable messages one [`Bus::get`] dead-letters before giving up for
/// this call (the queue keeps serving; the next call goes on).
const MAX_POISON_PER_GET: usize = 16;

/// One message taken from a queue and not settled yet. Dropping it unsettled gives the
/// message back to its queue.
#[derive(Debug)]
pub struct Taken {
    /// The decoded message.
    pub delivery: Delivery,
    raw: RawDelivery,
    channel: Channel,
    link: Arc<Link>,
}

impl Taken {
    /// Acknowledges the message: it leaves the queue for good.
    ///
    /// Fails when the channel or the connection went away first, in which case the broker
    /// gives the message to someone else (retrying cannot help; the message is not lost).
    pub async fn ack(self) -> Result<()> {
        let acked = self.raw.acker.ack(BasicAckOptions::default()).await;
        close(&self.channel).await;
        acked
            .map(|_| ())
            .map_err(|e| Error::Bus(format!("acknowledging a message taken from a queue: {e}")))
    }

    /// Gives the message back to its queue, for someone else to take.
    pub async fn requeue(self) {
        let options = BasicNackOptions {
            requeue: true,
            ..BasicNackOptions::default()
        };
        if let Err(e) = self.raw.acker.nack(options).await {
            // Closing the channel below requeues it anyway.
            tracing::debug!(error = %e, "requeueing a taken message failed");
        }
        close(&self.channel).await;
    }

    /// Settles the message as a consumer's handler would (ack, requeue, or move it to the
    /// queue's DLQ with the reason).
    pub async fn settle(self, disposition: Disposition) {
        let queue = self.delivery.queue.clone();
        dispose::settle(&self.link, &queue, &self.raw, disposition).await;
        close(&self.channel).await;
    }
}

impl Bus {
    /// Takes the next message of `queue`, if it has one, without waiting.
    ///
    /// A body that is not an [`crate::Envelope`] is moved to the queue's DLQ with the
    /// decode error as reason, and the next message is tried. The message stays
    /// unacknowledged until the returned [`Taken`] is settled. Fails when the broker is
    /// unreachable (retrying later can help) or the queue does not exist (declare it
    /// first).
    pub async fn get(&self, queue: &str) -> Result<Option<Taken>> {
        super::check_name("queue", queue)?;
        let session = self.link.session().await.map_err(|f| f.into_error())?;
        let channel = session
            .conn
            .create_channel()
            .await
            .map_err(|e| Error::Bus(format!("opening a channel: {e}")))?;
        for _ in 0..MAX_POISON_PER_GET {
            let got = channel
                .basic_get(queue.into(), BasicGetOptions { no_ack: false })
                .await;
            let raw = match got {
                Ok(Some(message)) => message.delivery,
                Ok(None) => {
                    close(&channel).await;
                    return Ok(None);
                }
                Err(e) => {
                    close(&channel).await;
                    return Err(Error::Bus(format!("basic.get on {queue}: {e}")));
                }
            };
            match dispose::decode(&raw, queue) {
                Ok(delivery) => {
                    return Ok(Some(Taken {
                        delivery,
                        raw,
                        channel,
                        link: self.link.clone(),
                    }))
                }
                Err(reason) => {
                    dispose::settle(&self.link, queue, &raw, Disposition::DeadLetter(reason)).await;
                }
            }
        }
        close(&channel).await;
        Ok(None)
    }
}
