//! The in-process transport of `weft dev`: RabbitMQ's semantics as Weft uses them, in
//! memory, with an optional SQLite journal for durability (docs/bus-in-process.md).
//!
//! Layout: `broker` the state (exchanges, queues, deliveries, waiting calls), `topic`
//! AMQP topic matching, `deliver` consumers and ackers, `journal` the SQLite journal.

mod broker;
mod deliver;
mod journal;
mod topic;

use std::sync::Arc;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use super::transport::{ExchangeKind, Inbound, Message, Subscription, Transport};
use crate::topology::Names;
use crate::{Error, Result};
use broker::Core;
use journal::Journal;

/// The routing key replies are published with; the same pseudo-queue name as RabbitMQ's
/// direct reply-to (no real queue can be named `amq.*`).
const REPLY_TO: &str = "amq.rabbitmq.reply-to";

/// The in-process bus: one broker shared by every clone of its `Bus`.
#[derive(Debug)]
pub(crate) struct Local {
    core: Arc<Core>,
}

impl Local {
    /// A broker with the core topology of `names`; with a journal, the messages it holds
    /// for this namespace are queued again (redelivered) and new ones are written to it.
    pub(crate) async fn start(
        names: Names,
        journal: Option<crate::store::sqlite::SqliteWriter>,
    ) -> Result<Self> {
        let (journal, rows) = match journal {
            Some(pool) => {
                let (journal, rows) = Journal::open(pool, names.namespace()).await?;
                (Some(journal), rows)
            }
            None => (None, Vec::new()),
        };
        if !rows.is_empty() {
            tracing::info!(messages = rows.len(), "queued again from the bus journal");
        }
        let core = Arc::new(Core::new(names, journal, rows));
        tokio::spawn(expire_every(Arc::downgrade(&core)));
        Ok(Self { core })
    }
}

/// How often waiting messages are checked against their queue's expiry: an eager task
/// moves on between [`broker::EAGER_TTL`] and this much later.
const EXPIRY_TICK: std::time::Duration = std::time::Duration::from_millis(250);

/// Moves on expired messages (eager tasks whose worker did not take them) until the
/// broker is gone.
async fn expire_every(core: std::sync::Weak<Core>) {
    let mut tick = tokio::time::interval(EXPIRY_TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(core) = core.upgrade() else { return };
        let moved = core.expire();
        if moved > 0 {
            tracing::debug!(moved, "expired messages moved on");
        }
    }
}

/// Forgets a call's waiter when the call ends, whichever way (reply, timeout, dropped).
struct Registration<'a> {
    core: &'a Core,
    correlation_id: &'a str,
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        self.core.forget_call(self.correlation_id);
    }
}

#[async_trait]
impl Transport for Local {
    fn names(&self) -> &Names {
        &self.core.names
    }

    fn connection_name(&self) -> &str {
        &self.core.connection_name
    }

    fn is_connected(&self) -> bool {
        true
    }

    fn publishes_through_the_store(&self) -> bool {
        true
    }

    async fn declare_queue(&self, queue: &str, bindings: Vec<(String, String)>) -> Result<()> {
        self.core.declare(queue, &bindings)
    }

    async fn declare_exchange(&self, exchange: &str, kind: ExchangeKind) -> Result<()> {
        self.core.declare_exchange(exchange, kind)
    }

    async fn declare_eager_queue(&self, queue: &str) -> Result<()> {
        self.core.declare_eager(queue)
    }

    async fn publish(&self, exchange: &str, routing_key: &str, message: Message) -> Result<()> {
        if exchange.is_empty() && routing_key.starts_with(REPLY_TO) {
            self.core.reply(message);
            return Ok(());
        }
        let queues = self.core.route(exchange, routing_key)?;
        if queues.is_empty() {
            return Ok(()); // unroutable: dropped, as AMQP does without `mandatory`
        }
        let seqs = match (&self.core.journal, message.persistent) {
            (Some(journal), true) => journal::wait(journal.insert(&queues, &message))
                .await?
                .into_iter()
                .map(Some)
                .collect(),
            _ => vec![None; queues.len()],
        };
        self.core.enqueue(&queues, Arc::new(message), &seqs);
        Ok(())
    }

    async fn subscribe(
        &self,
        queue: &str,
        prefetch: u16,
        shutdown: &CancellationToken,
    ) -> Result<Box<dyn Subscription>> {
        if shutdown.is_cancelled() {
            return Err(Error::ShuttingDown);
        }
        let id = self.core.attach(queue)?;
        Ok(Box::new(deliver::LocalSubscription {
            core: self.core.clone(),
            queue: queue.to_owned(),
            id,
            prefetch,
        }))
    }

    async fn get(&self, queue: &str) -> Result<Option<Inbound>> {
        Ok(self
            .core
            .get(queue)?
            .map(|(tag, stored)| deliver::inbound(self.core.clone(), queue, tag, stored)))
    }

    async fn message_count(&self, queue: &str) -> Result<u32> {
        self.core.message_count(queue)
    }

    async fn request(
        &self,
        exchange: &str,
        routing_key: &str,
        mut message: Message,
    ) -> Result<Message> {
        let correlation_id = uuid::Uuid::new_v4().simple().to_string();
        let reply = self.core.expect_reply(&correlation_id);
        let _registered = Registration {
            core: &self.core,
            correlation_id: &correlation_id,
        };
        message.correlation_id = Some(correlation_id.clone());
        message.reply_to = Some(REPLY_TO.to_owned());
        self.publish(exchange, routing_key, message).await?;
        reply
            .await
            .unwrap_or_else(|_| Err(Error::Bus("reply channel dropped".into())))
    }

    async fn teardown(&self, _extra_queues: &[String]) -> Result<()> {
        // Every queue of this broker was declared through it: all of them go.
        let gone = self.core.teardown();
        if let Some(journal) = &self.core.journal {
            journal::wait(journal.forget(gone)).await?;
        }
        Ok(())
    }

    async fn force_disconnect(&self) {
        self.core.fail_calls("forced disconnect");
    }

    async fn flush(&self) -> Result<()> {
        match &self.core.journal {
            Some(journal) => journal::wait(journal.flush()).await,
            None => Ok(()),
        }
    }
}
