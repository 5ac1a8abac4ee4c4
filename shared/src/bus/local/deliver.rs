//! Consumers of the in-process broker and the ackers of what they take.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use async_trait::async_trait;

use super::broker::{Core, Stored, Take};
use super::journal;
use crate::bus::transport::{Acker, Inbound, Subscription};
use crate::{Error, Result};

/// Wraps delivery `tag` of `queue`.
pub(crate) fn inbound(core: Arc<Core>, queue: &str, tag: u64, stored: Stored) -> Inbound {
    Inbound {
        message: stored.message.as_ref().clone(),
        redelivered: stored.redelivered,
        acker: Box::new(LocalAcker {
            core,
            queue: queue.to_owned(),
            tag,
            settled: AtomicBool::new(false),
        }),
    }
}

/// One consumer attached to a queue. Dropping it (closing, or its task aborted) gives
/// back what it holds unsettled.
pub(crate) struct LocalSubscription {
    pub(crate) core: Arc<Core>,
    pub(crate) queue: String,
    pub(crate) id: u64,
    pub(crate) prefetch: u16,
}

#[async_trait]
impl Subscription for LocalSubscription {
    async fn next(&mut self) -> Result<Inbound, String> {
        loop {
            let Some(notify) = self.core.notifier(&self.queue) else {
                return Err(format!("queue {} was deleted", self.queue));
            };
            // Registered before looking, so that a change between the look and the wait
            // still wakes us.
            let notified = notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            match self.core.take(&self.queue, self.id, self.prefetch) {
                Take::Got(tag, stored) => {
                    return Ok(inbound(self.core.clone(), &self.queue, tag, stored))
                }
                Take::Gone(why) => return Err(why),
                Take::Wait => notified.await,
            }
        }
    }

    async fn cancel(&mut self) {
        self.core.cancel(&self.queue, self.id);
    }

    async fn close(self: Box<Self>) {
        drop(self);
    }
}

impl Drop for LocalSubscription {
    fn drop(&mut self) {
        self.core.detach(&self.queue, self.id);
    }
}

/// Settles one delivery; dropped unsettled, it gives the message back to the queue.
#[derive(Debug)]
struct LocalAcker {
    core: Arc<Core>,
    queue: String,
    tag: u64,
    settled: AtomicBool,
}

impl LocalAcker {
    /// Marks the delivery settled; fails if it already was.
    fn claim(&self) -> Result<()> {
        if self.settled.swap(true, Ordering::AcqRel) {
            return Err(Error::Bus(format!(
                "delivery {} of {} was settled already",
                self.tag, self.queue
            )));
        }
        Ok(())
    }
}

#[async_trait]
impl Acker for LocalAcker {
    async fn ack(&self) -> Result<()> {
        self.claim()?;
        self.core.ack(&self.queue, self.tag)
    }

    async fn requeue(&self) -> Result<()> {
        self.claim()?;
        self.core.requeue(&self.queue, self.tag)
    }

    async fn dead_letter(&self, _queue: &str, reason: &str) -> Result<()> {
        self.claim()?;
        let moved = self.core.dead_letter(&self.queue, self.tag, reason);
        let moved = match moved {
            Ok(moved) => moved,
            Err(e) => {
                // Not moved: still unsettled, as the contract says.
                self.settled.store(false, Ordering::Release);
                return Err(e);
            }
        };
        if let Some(pending) = moved {
            // Moved in memory already; a failed journal write only means the message is
            // back in its own queue after a restart (at least once).
            if let Err(e) = journal::wait(pending).await {
                tracing::warn!(queue = %self.queue, error = %e, "recording a dead-lettered message in the bus journal failed");
            }
        }
        Ok(())
    }
}

impl Drop for LocalAcker {
    fn drop(&mut self) {
        if !self.settled.load(Ordering::Acquire) {
            // Already back in the queue if its consumer closed first: nothing to do.
            let _ = self.core.requeue(&self.queue, self.tag);
        }
    }
}
