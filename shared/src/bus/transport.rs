//! The seam between the bus's shared logic and a broker.
//!
//! [`super::Bus`] keeps everything that does not depend on the broker (envelopes, trace
//! headers, decoding and dead-lettering undecodable bodies, the consumer loops, panics
//! in handlers, request timeouts); a [`Transport`] only moves messages: it publishes,
//! hands out deliveries with their [`Acker`], answers `basic.get`, and carries requests
//! and their replies. Two implementations: RabbitMQ through amqprs (`amqp`) and the
//! in-process broker of `weft dev` (`local`).

use std::collections::BTreeMap;
use std::fmt::Debug;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::topology::Names;
use crate::Result;

/// A header value. Weft only writes text and integers; a transport maps other types it
/// receives to one of these or leaves them out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum HeaderValue {
    /// A string (AMQP long or short string).
    Text(String),
    /// An integer (AMQP long, long-long or timestamp).
    Int(i64),
}

/// How an exchange declared with [`Transport::declare_exchange`] routes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExchangeKind {
    /// The routing key equals the binding key.
    Direct,
    /// AMQP topic patterns (`*` one word, `#` any number).
    Topic,
}

/// A message as a transport carries it: the body and the properties Weft uses.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// The encoded body (an [`crate::Envelope`] in JSON, unless someone sent garbage).
    #[serde(skip)]
    pub body: Vec<u8>,
    /// Application headers (trace context, publish time, dead-letter reason).
    #[serde(default)]
    pub headers: BTreeMap<String, HeaderValue>,
    /// The envelope's id, when known.
    #[serde(default)]
    pub message_id: Option<String>,
    /// Kept across a broker restart (written to disk or to the journal) when `true`.
    #[serde(default)]
    pub persistent: bool,
    /// Where a request wants its reply.
    #[serde(default)]
    pub reply_to: Option<String>,
    /// The request's correlation id, echoed in the reply.
    #[serde(default)]
    pub correlation_id: Option<String>,
    /// The broker's priority, 0 (the default) to [`super::priority::MAX_LEVEL`]: on an
    /// activity queue a higher one is handed out first.
    #[serde(default)]
    pub priority: u8,
}

impl Message {
    /// A header's value when it is text.
    pub fn header_text(&self, name: &str) -> Option<&str> {
        match self.headers.get(name)? {
            HeaderValue::Text(s) => Some(s),
            HeaderValue::Int(_) => None,
        }
    }

    /// A header's value when it is an integer.
    pub fn header_int(&self, name: &str) -> Option<i64> {
        match self.headers.get(name)? {
            HeaderValue::Int(v) => Some(*v),
            HeaderValue::Text(_) => None,
        }
    }
}

/// Settles one delivery. Each delivery is settled at most once; one dropped unsettled
/// goes back to its queue (at the latest when its consumer or channel closes).
#[async_trait]
pub trait Acker: Send + Sync + Debug {
    /// The effect is committed: the message leaves its queue for good.
    async fn ack(&self) -> Result<()>;
    /// Gives the message back to its queue, marked redelivered.
    async fn requeue(&self) -> Result<()>;
    /// Moves the message from `queue` to `<queue>.dlq`, adding the
    /// [`super::DEAD_REASON_HEADER`] (`reason`) and [`super::ORIGINAL_QUEUE_HEADER`]
    /// headers. On error the message was not moved and is still unsettled.
    async fn dead_letter(&self, queue: &str, reason: &str) -> Result<()>;
}

/// A message taken from a queue, not settled yet.
#[derive(Debug)]
pub struct Inbound {
    /// The message.
    pub message: Message,
    /// The broker delivered this message before.
    pub redelivered: bool,
    /// Settles it.
    pub acker: Box<dyn Acker>,
}

/// One consumer on one queue.
#[async_trait]
pub trait Subscription: Send {
    /// The next delivery, waiting for one. Must be cancellation safe (it is raced against
    /// shutdown): a delivery is taken only by a call that returns it. `Err` (the reason)
    /// when the consumer was lost (channel closed, cancelled by the broker, queue
    /// deleted); the caller starts a new subscription.
    async fn next(&mut self) -> Result<Inbound, String>;
    /// Stops receiving (AMQP `basic.cancel`); unsettled deliveries stay with this consumer.
    async fn cancel(&mut self);
    /// Ends the consumer: every delivery it still holds unsettled goes back to the queue.
    async fn close(self: Box<Self>);
}

/// The transport-specific primitives behind a [`super::Bus`].
///
/// Names given to these methods have been checked (at most 255 bytes) by the `Bus`.
#[async_trait]
pub trait Transport: Send + Sync + Debug {
    /// The names of this namespace.
    fn names(&self) -> &Names;
    /// A name unique to this transport instance (the AMQP connection name).
    fn connection_name(&self) -> &str;
    /// Whether the broker is reachable right now.
    fn is_connected(&self) -> bool;
    /// Whether a publish waits for the same writer as the store's commits (the
    /// in-process bus journals each message through the SQLite writer): then publishing
    /// while a commit runs gains nothing, it only queues behind it.
    fn publishes_through_the_store(&self) -> bool {
        false
    }
    /// Declares a work queue with its DLQ, bound to each `(exchange, routing key)`
    /// (idempotent; new bindings are added).
    async fn declare_queue(&self, queue: &str, bindings: Vec<(String, String)>) -> Result<()>;
    /// Declares a worker process's eager queue of one task (`<ns>.eager.<instance>.<task>`,
    /// docs/eager-dispatch.md) bound to the eager exchange with its own name: what waits
    /// in it too long goes on toward the task's activity queue (on RabbitMQ through
    /// `<ns>.eager.expired` and the decider; in process straight there), and it goes away
    /// unused. A
    /// transport that cannot do that (no message expiry) refuses; the worker then goes
    /// without eager dispatch.
    async fn declare_eager_queue(&self, queue: &str) -> Result<()> {
        Err(crate::Error::Config(format!(
            "this bus has no eager dispatch (queue {queue})"
        )))
    }
    /// Declares a durable exchange (idempotent; an existing one of another kind is an
    /// error). Removed by `teardown`.
    async fn declare_exchange(&self, exchange: &str, kind: ExchangeKind) -> Result<()>;
    /// Routes `message` through `exchange` (`""`: the queue named `routing_key`) and
    /// returns once the broker holds it (persistent ones durably). A message no queue is
    /// bound for is dropped without error, as AMQP does without `mandatory`. A reply
    /// (`""` with a request's `reply_to` as the key) returns once sent: it is transient,
    /// and a lost one is its caller's timeout.
    async fn publish(&self, exchange: &str, routing_key: &str, message: Message) -> Result<()>;
    /// Starts consuming `queue` with at most `prefetch` unsettled deliveries (0: no
    /// bound), waiting for the broker unless `shutdown` fires
    /// ([`crate::Error::ShuttingDown`]).
    async fn subscribe(
        &self,
        queue: &str,
        prefetch: u16,
        shutdown: &CancellationToken,
    ) -> Result<Box<dyn Subscription>>;
    /// Takes the next ready message of `queue` without waiting (AMQP `basic.get`).
    /// Fails when the queue does not exist.
    async fn get(&self, queue: &str) -> Result<Option<Inbound>>;
    /// Messages ready in `queue` (not counting those delivered and unsettled). Fails
    /// when the queue does not exist.
    async fn message_count(&self, queue: &str) -> Result<u32>;
    /// Publishes `message` as a request (the transport sets `reply_to` and a fresh
    /// `correlation_id`) and waits for the reply, without a time limit of its own.
    async fn request(&self, exchange: &str, routing_key: &str, message: Message)
        -> Result<Message>;
    /// Deletes the namespace's queues, their DLQs and its exchanges; see
    /// [`super::Bus::teardown`].
    async fn teardown(&self, extra_queues: &[String]) -> Result<()>;
    /// Drops the connection as a test of recovery.
    async fn force_disconnect(&self);
    /// Waits until every settlement so far is durable.
    async fn flush(&self) -> Result<()>;
}
