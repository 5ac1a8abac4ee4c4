//! The bus, DESIGN.md §4: over RabbitMQ (amqprs), or in process for `weft dev`
//! (docs/bus-in-process.md).
//!
//! [`Bus`] is a cheap-to-clone facade over a [`Transport`]; what does not depend on the
//! broker lives here once: envelopes and their headers (trace context, publish time),
//! decoding deliveries (an undecodable body goes to the DLQ), the consumer loops with
//! their concurrency and shutdown, panics in handlers, request timeouts. Every queue Weft
//! declares has a dead-letter queue `<queue>.dlq`; poison messages land there with the
//! reason in the `x-weft-dead-reason` header and never block their queue.
//!
//! Layout: `transport` the seam, `message` building outgoing messages, `consume` and
//! `batch` the consumer loops, `dispose` what happens to a delivery once handled, `get`
//! pulling one message, `rpc` request/reply ([`Bus::call`], [`Bus::reply`]); `amqp` the
//! RabbitMQ transport, `local` the in-process one.

mod amqp;
mod backoff;
mod batch;
mod consume;
mod dispose;
mod get;
mod local;
mod message;
pub mod priority;
mod rpc;
pub mod together;
mod transport;
mod watch;

use std::future::Future;
use std::sync::{Arc, OnceLock};

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::admin::{CounterFamily, Metrics};
use crate::topology::Names;
use crate::{Envelope, Error, Result};

pub use dispose::guarded;
pub use get::Taken;
pub use transport::{Acker, ExchangeKind, HeaderValue, Inbound, Message, Subscription, Transport};
pub use watch::LINGER as DOORBELL_LINGER;

/// Header carrying the reason a message was dead-lettered by Weft.
pub const DEAD_REASON_HEADER: &str = "x-weft-dead-reason";
/// Header carrying the queue a dead-lettered message was taken from.
pub const ORIGINAL_QUEUE_HEADER: &str = "x-weft-original-queue";
/// AMQP header carrying the W3C trace context.
pub const TRACEPARENT_HEADER: &str = "traceparent";

/// How long a publish waits for the broker's confirm: the broker confirms in well under
/// this; past it the connection is presumed dead.
pub const CONFIRM_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// The `type` of an encoded envelope; `None` when the body is not one.
pub fn envelope_kind(body: &[u8]) -> Option<String> {
    message::envelope_head(body).kind
}

/// AMQP names (exchanges, queues, routing keys) are short strings of at most 255 bytes.
const MAX_NAME_LEN: usize = 255;

/// Refuses a name the broker could not carry (the AMQP client would panic on it).
pub(crate) fn check_name(what: &str, name: &str) -> Result<()> {
    if name.len() > MAX_NAME_LEN {
        return Err(Error::Bus(format!(
            "{what} {name:?} is longer than {MAX_NAME_LEN} bytes"
        )));
    }
    Ok(())
}

/// A cheap-to-clone handle on the bus (a RabbitMQ connection, or the in-process broker).
#[derive(Clone, Debug)]
pub struct Bus {
    transport: Arc<dyn Transport>,
    /// Messages sent, by envelope type and delivery mode (`weft_bus_published_total`),
    /// once [`Bus::count_publishes`] gave it a registry. Shared by every clone.
    published: Arc<OnceLock<CounterFamily>>,
    /// Consumers that wake callers waiting for a queue's next message (`watch`).
    doorbells: Arc<watch::Doorbells>,
}

/// How a consumer takes messages.
#[derive(Debug, Clone, Copy)]
pub struct ConsumeOptions {
    /// Unacknowledged messages the broker may push (basic.qos).
    pub prefetch: u16,
    /// Handlers running at once; 1 keeps the queue's order.
    pub concurrency: usize,
}

/// A decoded message handed to a handler.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// The decoded envelope.
    pub envelope: Envelope,
    /// W3C trace context from the AMQP headers.
    pub traceparent: Option<String>,
    /// The broker delivered this message before.
    pub redelivered: bool,
    /// The queue it came from.
    pub queue: String,
    /// Where the sender wants a reply ([`Bus::reply`]), when it is a request.
    pub reply_to: Option<String>,
    /// The request's correlation id, echoed in the reply.
    pub correlation_id: Option<String>,
}

/// A message handed to a handler as it came, undecoded ([`Bus::consume_raw`]): for
/// queues that publishers outside Weft write to, whose bodies are not envelopes.
#[derive(Debug, Clone)]
pub struct RawDelivery {
    /// The body, as published.
    pub body: Vec<u8>,
    /// The AMQP `message-id` property, when the publisher set one.
    pub message_id: Option<String>,
    /// W3C trace context from the AMQP headers.
    pub traceparent: Option<String>,
    /// The broker delivered this message before.
    pub redelivered: bool,
    /// The queue it came from.
    pub queue: String,
    /// Where the publisher wants a reply ([`Bus::reply_raw`]), when it asked for one.
    pub reply_to: Option<String>,
    /// The publisher's correlation id, echoed in the reply.
    pub correlation_id: Option<String>,
    /// The application headers (a dead-lettered message's reason among them).
    pub headers: std::collections::BTreeMap<String, HeaderValue>,
}

/// What to do with a delivery once its handler returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Disposition {
    /// The effect is committed: acknowledge.
    Ack,
    /// Not done (e.g. shutting down, transient failure): give it back to the broker.
    Requeue,
    /// Never processable: move to the queue's DLQ with this reason.
    DeadLetter(String),
}

impl Bus {
    /// Connects, retrying with back-off until connected or `shutdown`; declares the core topology.
    ///
    /// Fails with [`crate::Error::ShuttingDown`] when `shutdown` fires first, and with
    /// [`crate::Error::Bus`] when the broker refuses the topology (e.g. a queue exists with
    /// other arguments), which retrying cannot fix.
    pub async fn connect(url: &str, names: Names, shutdown: CancellationToken) -> Result<Self> {
        check_namespace(&names)?;
        let transport = amqp::Amqp::connect(url, names, amqp::Role::Service, &shutdown).await?;
        Ok(Self::with_transport(Arc::new(transport)))
    }

    /// Connects as a client of the services (a worker, an event listener), retrying
    /// with back-off until connected or `shutdown`: declares none of the core topology
    /// and waits until the services have declared its exchanges (a passive check, which
    /// needs no permission). Queues it declares are its own; when the broker refuses one
    /// for want of permission, the client consumes it as the services declare it.
    ///
    /// So a client runs with credentials that reach only what it uses
    /// (docs/rabbitmq-users.md): a worker's, say, only its activity queues, the commands
    /// exchange and the default exchange.
    pub async fn connect_client(
        url: &str,
        names: Names,
        shutdown: CancellationToken,
    ) -> Result<Self> {
        check_namespace(&names)?;
        let transport = amqp::Amqp::connect(url, names, amqp::Role::Client, &shutdown).await?;
        Ok(Self::with_transport(Arc::new(transport)))
    }

    /// An in-process bus (`weft dev`): the namespace's topology in memory, no broker.
    ///
    /// With a `journal`, every persistent message is also written to the `bus_journal`
    /// table of that SQLite database before `publish` returns, and removed once
    /// acknowledged; messages left there by an earlier process are queued again first
    /// (marked redelivered). Without one, messages live in memory only. Clones of the
    /// returned `Bus` share the broker; another `Bus::in_process` is another broker.
    /// See docs/bus-in-process.md for what differs from RabbitMQ.
    pub async fn in_process(
        names: Names,
        journal: Option<crate::store::sqlite::SqliteWriter>,
    ) -> Result<Self> {
        check_namespace(&names)?;
        let transport = local::Local::start(names, journal).await?;
        Ok(Self::with_transport(Arc::new(transport)))
    }

    /// A bus over any [`Transport`].
    pub fn with_transport(transport: Arc<dyn Transport>) -> Self {
        Self {
            transport,
            published: Arc::default(),
            doorbells: Arc::default(),
        }
    }

    /// Counts every message this bus (and every clone of it) sends from now on in
    /// `metrics`, as `weft_bus_published_total{type, delivery}`: `type` the envelope's
    /// type, `delivery` `persistent` (confirmed) or `transient` (requests and replies).
    /// What a run costs on the broker is read off these counters (the hot-path budget
    /// test, BENCHMARKS.md). The first registry given wins.
    pub fn count_publishes(&self, metrics: &Metrics) {
        let _ = self.published.set(metrics.counter_family(
            "weft_bus_published",
            "Messages sent to the broker, by envelope type and delivery mode",
        ));
        // Consumers' acknowledgements over AMQP, one frame for many when they meet
        // (`amqp::ack_batch`): process-wide counters.
        metrics.counter_of(
            "weft_bus_ack_frames",
            "basic.ack frames sent by this process's consumers",
            &amqp::ACKS_SENT,
        );
        metrics.counter_of(
            "weft_bus_acked_deliveries",
            "Deliveries acknowledged by those frames",
            &amqp::DELIVERIES_ACKED,
        );
    }

    /// Counts one message of `kind` sent.
    fn count(&self, kind: &str, persistent: bool) {
        if let Some(family) = self.published.get() {
            let delivery = if persistent {
                "persistent"
            } else {
                "transient"
            };
            family
                .get_or_create(&vec![
                    ("type".to_owned(), kind.to_owned()),
                    ("delivery".to_owned(), delivery.to_owned()),
                ])
                .inc();
        }
    }

    /// The names of this namespace.
    pub fn names(&self) -> &Names {
        self.transport.names()
    }

    /// Whether the connection is currently up (always, in process).
    pub fn is_connected(&self) -> bool {
        self.transport.is_connected()
    }

    /// Whether a publish waits for the same writer as the store's commits (`weft dev`'s
    /// in-process bus, whose journal is written through the SQLite writer).
    pub fn publishes_through_the_store(&self) -> bool {
        self.transport.publishes_through_the_store()
    }

    /// Declares `weft.activity.<task_name>` bound to the activity exchange (idempotent).
    pub async fn declare_activity_queue(&self, task_name: &str) -> Result<()> {
        let names = self.names();
        let binding = (names.activity_exchange(), task_name.to_owned());
        self.declare(&names.activity_queue(task_name), vec![binding])
            .await
    }

    /// Declares this worker process's eager queue of `task_name` under `prefix`
    /// ([`Names::eager_prefix`]) and returns its name; fails on a bus without eager
    /// dispatch (the in-process one) and where the broker refuses it (docs/eager-dispatch.md).
    pub async fn declare_eager_queue(&self, prefix: &str, task_name: &str) -> Result<String> {
        let queue = self.names().eager_queue(prefix, task_name).ok_or_else(|| {
            Error::Config(format!(
                "no eager queue for task {task_name:?} under {prefix:?}"
            ))
        })?;
        self.transport.declare_eager_queue(&queue).await?;
        Ok(queue)
    }

    /// Declares a durable `queue` (with its DLQ and the same arguments as every Weft queue)
    /// bound to each `(exchange, routing_key)`, e.g. a listener's queue on the events
    /// exchange. Cached: repeat calls are free; re-declared after a reconnect; removed by
    /// [`Bus::teardown`].
    pub async fn declare_queue(&self, queue: &str, bindings: &[(&str, &str)]) -> Result<()> {
        let bindings = bindings
            .iter()
            .map(|(exchange, key)| ((*exchange).to_owned(), (*key).to_owned()))
            .collect();
        self.declare(queue, bindings).await
    }

    /// Declares a durable exchange of `kind` (idempotent; one that exists with another
    /// kind is an error), e.g. the source an event handler listens to. Removed by
    /// [`Bus::teardown`].
    pub async fn declare_exchange(&self, exchange: &str, kind: ExchangeKind) -> Result<()> {
        check_name("exchange", exchange)?;
        self.transport.declare_exchange(exchange, kind).await
    }

    async fn declare(&self, queue: &str, bindings: Vec<(String, String)>) -> Result<()> {
        check_name("queue", &Names::dlq(queue))?;
        for (exchange, key) in &bindings {
            check_name("exchange", exchange)?;
            check_name("routing key", key)?;
        }
        self.transport.declare_queue(queue, bindings).await
    }

    /// Checks the names, then hands `message` (an envelope of type `kind`) to the
    /// transport.
    async fn send(
        &self,
        exchange: &str,
        routing_key: &str,
        kind: &str,
        message: Message,
    ) -> Result<()> {
        check_name("exchange", exchange)?;
        check_name("routing key", routing_key)?;
        self.count(kind, message.persistent);
        self.transport.publish(exchange, routing_key, message).await
    }

    /// Publishes a persistent message and waits for the broker's confirm.
    pub async fn publish(
        &self,
        exchange: &str,
        routing_key: &str,
        envelope: &Envelope,
    ) -> Result<()> {
        let body = envelope.to_bytes()?;
        let traceparent = crate::telemetry::current_traceparent();
        let level = envelope.priority.map_or(0, priority::level);
        let message =
            message::outgoing_with_priority(body, Some(envelope.id), traceparent.as_deref(), level);
        self.send(exchange, routing_key, &envelope.kind, message)
            .await
    }

    /// Publishes pre-encoded bytes (the outbox, timers), persistent, confirmed. A traced
    /// message (`traceparent` given) gets a `bus.publish` span, child of the span that
    /// produced it, which the consumer's side continues — when this process exports
    /// traces ([`crate::telemetry::exporting`]); otherwise it carries `traceparent` as is.
    pub async fn publish_bytes(
        &self,
        exchange: &str,
        routing_key: &str,
        body: &[u8],
        traceparent: Option<&str>,
    ) -> Result<()> {
        self.publish_with_id(exchange, routing_key, body, None, traceparent)
            .await
    }

    /// [`Bus::publish_bytes`] with the message id `id` when the body is not an envelope
    /// (whose own id is the message id): an EVENT task's message carries its task id, as
    /// in Conductor, so that consumers can tell a repeat from a new message.
    pub async fn publish_with_id(
        &self,
        exchange: &str,
        routing_key: &str,
        body: &[u8],
        id: Option<uuid::Uuid>,
        traceparent: Option<&str>,
    ) -> Result<()> {
        let head = message::envelope_head(body);
        let id = head.id.or(id);
        let kind = head.kind.as_deref().unwrap_or("raw");
        let level = head.priority.map_or(0, priority::level);
        // The `bus.publish` span exists for the trace's exporter: without one it would be
        // made and dropped unseen for every message (a tenth of the decider's CPU with
        // every event switched on), so the message carries its producer's context as is.
        let Some(parent) = traceparent.filter(|_| crate::telemetry::exporting()) else {
            let message = message::outgoing_with_priority(body.to_vec(), id, traceparent, level);
            return self.send(exchange, routing_key, kind, message).await;
        };
        let span = tracing::info_span!("bus.publish", exchange, routing_key);
        crate::telemetry::set_parent(&span, Some(parent));
        let traceparent = crate::telemetry::traceparent_of_span(&span);
        let message = message::outgoing_with_priority(
            body.to_vec(),
            id,
            traceparent.as_deref().or(Some(parent)),
            level,
        );
        self.send(exchange, routing_key, kind, message)
            .instrument(span)
            .await
    }

    /// Publishes a command to its workflow's shard.
    pub async fn publish_command(&self, envelope: &Envelope) -> Result<()> {
        let names = self.names();
        let key = names.command_key_for(&envelope.workflow_id);
        self.publish(&names.commands_exchange(), &key, envelope)
            .await
    }

    /// Consumes `queue` until `shutdown`.
    ///
    /// Runs up to `opts.concurrency` handlers at once (1 = strictly in queue order). A body
    /// that is not an [`Envelope`] goes to the DLQ with the decode error as reason. Survives
    /// connection loss by reconnecting. On `shutdown` it stops taking work, lets running
    /// handlers finish (bounded) and acknowledges nothing unfinished.
    pub fn consume<F, Fut>(
        &self,
        queue: &str,
        opts: ConsumeOptions,
        handler: F,
        shutdown: CancellationToken,
    ) -> JoinHandle<()>
    where
        F: Fn(Delivery) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Disposition> + Send + 'static,
    {
        self.spawn_consumer(queue, opts, dispose::decode, handler, shutdown)
    }

    /// Consumes `queue` as [`Bus::consume`] does, handing each message over undecoded:
    /// for queues that publishers outside Weft write to (start events), whose bodies are
    /// not envelopes and whose bad ones the handler dead-letters with its own reason.
    pub fn consume_raw<F, Fut>(
        &self,
        queue: &str,
        opts: ConsumeOptions,
        handler: F,
        shutdown: CancellationToken,
    ) -> JoinHandle<()>
    where
        F: Fn(RawDelivery) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Disposition> + Send + 'static,
    {
        self.spawn_consumer(queue, opts, dispose::raw, handler, shutdown)
    }

    fn spawn_consumer<D, F, Fut>(
        &self,
        queue: &str,
        opts: ConsumeOptions,
        decode: consume::Decode<D>,
        handler: F,
        shutdown: CancellationToken,
    ) -> JoinHandle<()>
    where
        D: Send + 'static,
        F: Fn(D) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Disposition> + Send + 'static,
    {
        let transport = self.transport.clone();
        let queue = queue.to_owned();
        tokio::spawn(consume::run(
            transport,
            queue,
            opts,
            decode,
            Arc::new(handler),
            shutdown,
        ))
    }

    /// Publishes `body` as it is (JSON from outside Weft's envelopes), persistent and
    /// confirmed, with `message_id` when given: what an outside publisher does, for
    /// `weft dev`'s in-process bus and tests.
    pub async fn publish_raw(
        &self,
        exchange: &str,
        routing_key: &str,
        body: &[u8],
        message_id: Option<&str>,
    ) -> Result<()> {
        let mut message = message::outgoing(body.to_vec(), None, None);
        message.message_id = message_id.map(str::to_owned);
        self.send(exchange, routing_key, "raw", message).await
    }

    /// Consumes `queue` in batches of what is already buffered (up to `max_batch`),
    /// one batch at a time, for group commit.
    ///
    /// The handler returns one [`Disposition`] per delivery, in the same order; missing
    /// ones are treated as [`Disposition::Requeue`].
    pub fn consume_batches<F, Fut>(
        &self,
        queue: &str,
        prefetch: u16,
        max_batch: usize,
        handler: F,
        shutdown: CancellationToken,
    ) -> JoinHandle<()>
    where
        F: Fn(Vec<Delivery>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Vec<Disposition>> + Send + 'static,
    {
        let transport = self.transport.clone();
        let queue = queue.to_owned();
        let max_batch = max_batch.max(1);
        tokio::spawn(batch::run(
            transport,
            queue,
            prefetch,
            max_batch,
            Arc::new(handler),
            shutdown,
        ))
    }

    /// Deletes every queue and exchange of the namespace that this process declared (command
    /// queues, heartbeat, queues declared through this `Bus`, their DLQs, the three
    /// exchanges) plus `extra_queues` and their DLQs. Missing queues are not an error.
    pub async fn teardown(&self, extra_queues: &[String]) -> Result<()> {
        self.transport.teardown(extra_queues).await
    }

    /// Messages ready in `queue`, not counting those delivered and not settled yet.
    /// Fails when the queue does not exist.
    pub async fn message_count(&self, queue: &str) -> Result<u32> {
        check_name("queue", queue)?;
        self.transport.message_count(queue).await
    }

    /// Waits until every acknowledgement so far is durable: written to the journal of an
    /// in-process bus (which writes them in groups, after the fact); a no-op on RabbitMQ.
    /// Call it before exiting to spare the next start redeliveries.
    pub async fn flush(&self) -> Result<()> {
        self.transport.flush().await
    }

    /// The AMQP connection name this `Bus` announces to the broker (unique per `Bus`;
    /// clones share it).
    #[doc(hidden)]
    pub fn connection_name(&self) -> &str {
        self.transport.connection_name()
    }

    /// Closes the current connection from the client side, as a test of recovery. In
    /// process: fails the calls waiting for a reply, as a lost reply channel would;
    /// consumers and published messages are untouched.
    #[doc(hidden)]
    pub async fn force_disconnect(&self) {
        self.transport.force_disconnect().await;
    }
}

/// Refuses a namespace whose longest names the broker could not carry.
fn check_namespace(names: &Names) -> Result<()> {
    let longest = [
        Names::dlq(&names.command_queue(names.shards().saturating_sub(1))),
        Names::dlq(&names.heartbeat_queue()),
        Names::dlq(&names.starts_queue()),
        names.commands_exchange(),
    ];
    for name in &longest {
        check_name("name", name).map_err(|e| Error::Config(format!("namespace: {e}")))?;
    }
    Ok(())
}
