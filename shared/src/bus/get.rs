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
    /// `None` once settled.
    inbound: Option<Inbound>,
    /// Held until settled when a doorbell pushed it (`watch`): the doorbell closes its
    /// channel only once its message is settled.
    lease: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl Taken {
    /// A message a doorbell pushed, holding `lease` until settled.
    pub(crate) fn leased(
        delivery: Delivery,
        inbound: Inbound,
        lease: tokio::sync::OwnedSemaphorePermit,
    ) -> Self {
        Self {
            delivery,
            inbound: Some(inbound),
            lease: Some(lease),
        }
    }

    /// The message to settle; a `Taken` is settled once, by a method taking it whole.
    fn inbound(&mut self) -> Inbound {
        self.inbound.take().expect("a Taken is settled once")
    }

    /// Acknowledges the message: it leaves the queue for good.
    ///
    /// Fails when the channel or the connection went away first, in which case the broker
    /// gives the message to someone else (retrying cannot help; the message is not lost).
    pub async fn ack(mut self) -> Result<()> {
        self.inbound()
            .acker
            .ack()
            .await
            .map_err(|e| Error::Bus(format!("acknowledging a message taken from a queue: {e}")))
    }

    /// Gives the message back to its queue, for someone else to take.
    pub async fn requeue(mut self) {
        if let Err(e) = self.inbound().acker.requeue().await {
            // Dropping the delivery's channel requeues it anyway.
            tracing::debug!(error = %e, "requeueing a taken message failed");
        }
    }

    /// Settles the message as a consumer's handler would (ack, requeue, or move it to the
    /// queue's DLQ with the reason).
    pub async fn settle(mut self, disposition: Disposition) {
        let inbound = self.inbound();
        dispose::settle(&*inbound.acker, &self.delivery.queue, disposition).await;
    }
}

impl Drop for Taken {
    fn drop(&mut self) {
        // A pushed message's consumer gets nothing more until it is settled: give it
        // back now rather than when the doorbell closes (a poll whose client went away).
        let (Some(inbound), Some(lease)) = (self.inbound.take(), self.lease.take()) else {
            return;
        };
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Err(e) = inbound.acker.requeue().await {
                    tracing::debug!(error = %e, "requeueing a dropped message failed");
                }
                drop(lease);
            });
        }
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
                Ok(delivery) => {
                    return Ok(Some(Taken {
                        delivery,
                        inbound: Some(inbound),
                        lease: None,
                    }))
                }
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
