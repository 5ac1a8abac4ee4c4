//! Taking one message from a queue on demand (AMQP `basic.get`), for callers that pull
//! rather than consume: the gateway's task poll hands activity tasks to HTTP workers.
//!
//! The message stays unsettled in the returned [`Taken`] until it is settled; a `Taken`
//! dropped unsettled gives the message back to the queue (so a caller that goes away
//! mid-way loses nothing).

use super::transport::{Inbound, Message};
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
    inbound: Inbound,
}

impl Taken {
    /// Acknowledges the message: it leaves the queue for good.
    ///
    /// Fails when the channel or the connection went away first, in which case the broker
    /// gives the message to someone else (retrying cannot help; the message is not lost).
    pub async fn ack(self) -> Result<()> {
        self.inbound
            .acker
            .ack()
            .await
            .map_err(|e| Error::Bus(format!("acknowledging a message taken from a queue: {e}")))
    }

    /// Gives the message back to its queue, for someone else to take.
    pub async fn requeue(self) {
        if let Err(e) = self.inbound.acker.requeue().await {
            // Dropping the delivery's channel requeues it anyway.
            tracing::debug!(error = %e, "requeueing a taken message failed");
        }
    }

    /// Settles the message as a consumer's handler would (ack, requeue, or move it to the
    /// queue's DLQ with the reason).
    pub async fn settle(self, disposition: Disposition) {
        dispose::settle(&*self.inbound.acker, &self.delivery.queue, disposition).await;
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
        for _ in 0..MAX_POISON_PER_GET {
            let Some(inbound) = self.transport.get(queue).await? else {
                return Ok(None);
            };
            match dispose::decode(&inbound, queue) {
                Ok(delivery) => return Ok(Some(Taken { delivery, inbound })),
                Err(reason) => {
                    let poison = Disposition::DeadLetter(reason);
                    dispose::settle(&*inbound.acker, queue, poison).await;
                }
            }
        }
        Ok(None)
    }

    /// Takes the next message of `queue` as it is, undecoded, and acknowledges it; for
    /// looking into a dead-letter queue (tests, operators).
    #[doc(hidden)]
    pub async fn take_raw(&self, queue: &str) -> Result<Option<Message>> {
        super::check_name("queue", queue)?;
        let Some(inbound) = self.transport.get(queue).await? else {
            return Ok(None);
        };
        inbound.acker.ack().await?;
        Ok(Some(inbound.message))
    }
}
