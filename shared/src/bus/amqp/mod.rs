//! The RabbitMQ transport (amqprs).
//!
//! One [`Amqp`] owns one AMQP connection at a time and replaces it when it dies:
//! publishers reconnect on demand (bounded retries), consumers re-establish themselves
//! with back-off. Layout: `client` wraps the AMQP client for safe use (cancellation,
//! reply codes, confirms), `connection` keeps the live connection, `declare` the topology
//! (the one place queue arguments are built), `publish` confirmed publishing and the
//! mapping of [`Message`] to AMQP properties, `consume` consumer channels and ackers,
//! `get` `basic.get` on pooled channels, `rpc` direct reply-to, `outside` the start-event
//! queue (which outside publishers write to) with a second client.

mod ack_batch;
mod client;
mod connection;
mod consume;
mod declare;
mod get;
mod outside;
mod publish;
mod rpc;

use std::sync::Arc;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use super::transport::{ExchangeKind, Inbound, Message, Subscription, Transport};
use crate::topology::Names;
use crate::Result;
pub(crate) use ack_batch::{ACKS_SENT, DELIVERIES_ACKED};
use connection::Link;
pub(crate) use connection::Role;

/// The bus over RabbitMQ.
#[derive(Debug)]
pub(crate) struct Amqp {
    link: Arc<Link>,
    /// Idle channels for `basic.get`.
    get_channels: Arc<get::GetChannels>,
}

impl Amqp {
    /// Connects, retrying with back-off until connected or `shutdown`; declares the core
    /// topology (as a client: waits until the services have). A refused topology fails
    /// at once.
    pub(crate) async fn connect(
        url: &str,
        names: Names,
        role: Role,
        shutdown: &CancellationToken,
    ) -> Result<Self> {
        let link = Arc::new(Link::new(url, names, role));
        link.session_wait(shutdown).await?;
        Ok(Self {
            link,
            get_channels: Arc::default(),
        })
    }
}

#[async_trait]
impl Transport for Amqp {
    fn names(&self) -> &Names {
        &self.link.names
    }

    fn connection_name(&self) -> &str {
        &self.link.connection_name
    }

    fn is_connected(&self) -> bool {
        self.link.is_connected()
    }

    async fn declare_queue(&self, queue: &str, bindings: Vec<(String, String)>) -> Result<()> {
        self.link.declare_queue(queue, bindings).await
    }

    async fn declare_exchange(&self, exchange: &str, kind: ExchangeKind) -> Result<()> {
        self.link.declare_exchange(exchange, kind).await
    }

    async fn declare_eager_queue(&self, queue: &str) -> Result<()> {
        let binding = (self.link.names.eager_exchange(), queue.to_owned());
        self.link.declare_queue(queue, vec![binding]).await
    }

    async fn publish(&self, exchange: &str, routing_key: &str, message: Message) -> Result<()> {
        if exchange.is_empty() && routing_key.starts_with(rpc::REPLY_TO) {
            return self.link.reply(routing_key, &message).await;
        }
        let props = publish::properties(&message);
        self.link
            .publish(exchange, routing_key, &message.body, props)
            .await
    }

    async fn subscribe(
        &self,
        queue: &str,
        prefetch: u16,
        shutdown: &CancellationToken,
    ) -> Result<Box<dyn Subscription>> {
        // Consumers must not die from a refused topology: keep retrying it.
        let session = self.link.session_wait_with(shutdown, false).await?;
        if queue == self.link.names.starts_queue() {
            let subscription = outside::open(self.link.clone(), queue, prefetch, shutdown).await?;
            return Ok(Box::new(subscription));
        }
        let subscription = consume::open(self.link.clone(), &session, queue, prefetch).await?;
        Ok(Box::new(subscription))
    }

    async fn get(&self, queue: &str) -> Result<Option<Inbound>> {
        get::get(&self.link, &self.get_channels, queue).await
    }

    async fn message_count(&self, queue: &str) -> Result<u32> {
        let session = self.link.session().await.map_err(|f| f.into_error())?;
        let channel = session.channel().await?;
        let declared = declare::declare_passive(&channel, queue).await;
        channel.close().await;
        Ok(declared?)
    }

    async fn request(
        &self,
        exchange: &str,
        routing_key: &str,
        message: Message,
    ) -> Result<Message> {
        self.link.request(exchange, routing_key, message).await
    }

    async fn teardown(&self, extra_queues: &[String]) -> Result<()> {
        self.link.teardown(extra_queues).await
    }

    async fn force_disconnect(&self) {
        self.link.force_disconnect().await;
    }

    async fn flush(&self) -> Result<()> {
        // Every publish was confirmed and every ack sent; nothing is pending here.
        Ok(())
    }
}
