//! The in-process broker's state: exchanges with their bindings, queues with their ready
//! and unacknowledged messages and their consumers, and the calls waiting for a reply.
//!
//! Everything sits behind one mutex held only for in-memory work (never across an
//! `.await`); consumers wait on their queue's [`Notify`], woken whenever what they wait
//! for may have changed (a message arrived or came back, a prefetch slot freed, the
//! active consumer left, the queue went away).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::{oneshot, Notify};

use super::journal::{Journal, Pending, Row};
use super::topic;
use crate::bus::transport::{ExchangeKind, HeaderValue, Message};
use crate::bus::{DEAD_REASON_HEADER, ORIGINAL_QUEUE_HEADER};
use crate::topology::Names;
use crate::{Error, Result};

/// The owner of deliveries taken with `basic.get` (consumers are numbered from 1).
pub(crate) const GET_OWNER: u64 = 0;

/// A message in a queue.
#[derive(Debug, Clone)]
pub(crate) struct Stored {
    /// The message, shared by every queue it was routed to.
    pub(crate) message: Arc<Message>,
    /// It was delivered before.
    pub(crate) redelivered: bool,
    /// Its journal row, when journaled.
    pub(crate) seq: Option<i64>,
    /// When it entered its queue (a message given back keeps it, as RabbitMQ keeps a
    /// requeued message's expiry).
    pub(crate) since: Instant,
}

/// How long an eagerly dispatched task waits in its worker's queue before it goes on to
/// its task's shared queue (the same as RabbitMQ's `x-message-ttl` on eager queues).
pub(crate) const EAGER_TTL: Duration = Duration::from_secs(5);

/// Where the ready messages of a queue go once they waited longer than `ttl` (a
/// worker's eager queue: docs/eager-dispatch.md), as RabbitMQ's message TTL with a
/// dead-letter exchange and key.
#[derive(Debug, Clone)]
struct Expiry {
    ttl: Duration,
    exchange: String,
    key: String,
}

/// How an exchange routes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Direct,
    Topic,
}

#[derive(Debug)]
struct Exchange {
    kind: Kind,
    /// `(queue, binding key)`, each once.
    bindings: Vec<(String, String)>,
}

#[derive(Debug, Default)]
struct Queue {
    /// Only the first consumer attached receives (command shards).
    single_active: bool,
    ready: VecDeque<Stored>,
    /// Delivered and not settled, by delivery tag: `(owner, message)`.
    unacked: BTreeMap<u64, (u64, Stored)>,
    /// Unsettled deliveries per consumer, for the prefetch bound.
    owned: HashMap<u64, usize>,
    /// Attached consumers, oldest first.
    consumers: Vec<u64>,
    notify: Arc<Notify>,
    /// Where its messages go when they wait too long; `None`: they wait.
    expiry: Option<Expiry>,
}

impl Queue {
    fn new(single_active: bool) -> Self {
        Self {
            single_active,
            ..Self::default()
        }
    }

    /// Takes delivery `tag` out of the unsettled ones.
    fn unsettle(&mut self, tag: u64) -> Option<Stored> {
        let (owner, stored) = self.unacked.remove(&tag)?;
        if let Some(count) = self.owned.get_mut(&owner) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.owned.remove(&owner);
            }
        }
        Some(stored)
    }

    /// Adds a message as a RabbitMQ priority queue does: after every message of its
    /// priority or higher, before the lower ones (FIFO within a level).
    fn push(&mut self, stored: Stored) {
        let at = match stored.message.priority {
            0 => self.ready.len(),
            p => self
                .ready
                .iter()
                .position(|s| s.message.priority < p)
                .unwrap_or(self.ready.len()),
        };
        self.ready.insert(at, stored);
        self.notify.notify_waiters();
    }

    /// Takes out the ready messages that waited longer than the queue's expiry allows.
    fn expired(&mut self, now: Instant) -> Vec<Stored> {
        let Some(expiry) = &self.expiry else {
            return Vec::new();
        };
        let (gone, kept): (VecDeque<Stored>, VecDeque<Stored>) = std::mem::take(&mut self.ready)
            .into_iter()
            .partition(|s| now.duration_since(s.since) >= expiry.ttl);
        self.ready = kept;
        gone.into()
    }

    /// Puts messages back at the front of the queue, in their order, marked redelivered.
    fn give_back(&mut self, messages: Vec<Stored>) {
        for mut stored in messages.into_iter().rev() {
            stored.redelivered = true;
            self.ready.push_front(stored);
        }
        self.notify.notify_waiters();
    }
}

#[derive(Debug, Default)]
struct State {
    exchanges: HashMap<String, Exchange>,
    queues: HashMap<String, Queue>,
    next_tag: u64,
    next_consumer: u64,
}

impl State {
    /// Creates `queue` (and, unless it is one, its DLQ) if missing.
    fn ensure_queue(&mut self, queue: &str, single_active: bool) {
        if !queue.ends_with(".dlq") {
            self.queues
                .entry(Names::dlq(queue))
                .or_insert_with(|| Queue::new(false));
        }
        self.queues
            .entry(queue.to_owned())
            .or_insert_with(|| Queue::new(single_active));
    }

    /// The queues a message published to `exchange` with `key` goes to (each once).
    fn route(&self, exchange: &str, key: &str) -> Result<Vec<String>> {
        if exchange.is_empty() {
            // The default exchange: the queue named by the key, if any.
            return Ok(self
                .queues
                .contains_key(key)
                .then(|| key.to_owned())
                .into_iter()
                .collect());
        }
        let found = self
            .exchanges
            .get(exchange)
            .ok_or_else(|| not_found("exchange", exchange))?;
        let mut queues: Vec<String> = found
            .bindings
            .iter()
            .filter(|(_, binding)| match found.kind {
                Kind::Direct => binding == key,
                Kind::Topic => topic::matches(binding, key),
            })
            .map(|(queue, _)| queue.clone())
            .collect();
        queues.sort();
        queues.dedup();
        Ok(queues)
    }

    fn bind(&mut self, exchange: &str, queue: &str, key: &str) -> Result<()> {
        let exchange = self
            .exchanges
            .get_mut(exchange)
            .ok_or_else(|| not_found("exchange", exchange))?;
        let binding = (queue.to_owned(), key.to_owned());
        if !exchange.bindings.contains(&binding) {
            exchange.bindings.push(binding);
        }
        Ok(())
    }
}

fn not_found(what: &str, name: &str) -> Error {
    Error::Bus(format!(
        "NOT_FOUND - no {what} '{name}' in the in-process bus"
    ))
}

/// What a consumer gets when it asks for a message.
pub(crate) enum Take {
    /// A delivery, with its tag.
    Got(u64, Stored),
    /// Nothing for this consumer now (empty, prefetch reached, not the active one).
    Wait,
    /// The consumer is gone (cancelled, or its queue deleted); the reason.
    Gone(String),
}

/// A call waiting for its reply.
type Waiter = oneshot::Sender<Result<Message>>;

/// The shared state of one in-process broker (every clone of its `Bus`).
#[derive(Debug)]
pub(crate) struct Core {
    pub(crate) names: Names,
    pub(crate) connection_name: String,
    pub(crate) journal: Option<Journal>,
    state: Mutex<State>,
    calls: Mutex<HashMap<String, Waiter>>,
}

impl Core {
    /// A broker with the core topology of `names` (DESIGN.md §4) and the messages found
    /// in the journal queued again, marked redelivered.
    pub(crate) fn new(names: Names, journal: Option<Journal>, rows: Vec<Row>) -> Self {
        let mut state = State::default();
        let exchanges = [
            (names.commands_exchange(), Kind::Direct),
            (names.activity_exchange(), Kind::Direct),
            (names.eager_exchange(), Kind::Direct),
            (names.events_exchange(), Kind::Topic),
            (names.starts_exchange(), Kind::Topic),
        ];
        for (name, kind) in exchanges {
            let exchange = Exchange {
                kind,
                bindings: Vec::new(),
            };
            state.exchanges.insert(name, exchange);
        }
        for k in 0..names.shards() {
            let queue = names.command_queue(k);
            state.ensure_queue(&queue, true);
            // Cannot fail: the commands exchange was just declared.
            if let Err(e) = state.bind(&names.commands_exchange(), &queue, &Names::shard_key(k)) {
                tracing::error!(error = %e, "binding a command shard");
            }
        }
        state.ensure_queue(&names.heartbeat_queue(), false);
        state.ensure_queue(&names.eager_expired_queue(), false);
        state.ensure_queue(&names.starts_queue(), false);
        // Cannot fail: the starts exchange was just declared.
        if let Err(e) = state.bind(&names.starts_exchange(), &names.starts_queue(), "#") {
            tracing::error!(error = %e, "binding the start-event queue");
        }
        let now = Instant::now();
        for row in rows {
            // A queue declared by an earlier process: back without its bindings until
            // its owner declares it again (as services do at start). An eager queue's
            // owner is gone with that process: its tasks move on once they expire.
            match names.eager_task(&row.queue) {
                Some(task) => {
                    let expiry = Self::eager_expiry(&names, task);
                    state
                        .queues
                        .entry(row.queue.clone())
                        .or_insert_with(|| Queue::new(false))
                        .expiry = Some(expiry);
                }
                None => state.ensure_queue(&row.queue, false),
            }
            if let Some(queue) = state.queues.get_mut(&row.queue) {
                queue.ready.push_back(Stored {
                    message: Arc::new(row.message),
                    redelivered: true,
                    seq: Some(row.seq),
                    since: now,
                });
            }
        }
        let connection_name = format!(
            "weft-in-process/{}/{}",
            names.namespace(),
            uuid::Uuid::new_v4().simple()
        );
        Self {
            names,
            connection_name,
            journal,
            state: Mutex::new(state),
            calls: Mutex::new(HashMap::new()),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // The state stays consistent between statements: a panic elsewhere while the
        // lock was held leaves nothing half-done that matters.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn calls(&self) -> MutexGuard<'_, HashMap<String, Waiter>> {
        self.calls.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Declares an exchange (idempotent; an existing one of another kind is an error).
    pub(crate) fn declare_exchange(&self, name: &str, kind: ExchangeKind) -> Result<()> {
        let kind = match kind {
            ExchangeKind::Direct => Kind::Direct,
            ExchangeKind::Topic => Kind::Topic,
        };
        let mut state = self.state();
        match state.exchanges.get(name) {
            Some(existing) if existing.kind != kind => Err(crate::Error::Bus(format!(
                "exchange {name} exists as {:?}, not {kind:?}",
                existing.kind
            ))),
            Some(_) => Ok(()),
            None => {
                let exchange = Exchange {
                    kind,
                    bindings: Vec::new(),
                };
                state.exchanges.insert(name.to_owned(), exchange);
                Ok(())
            }
        }
    }

    /// Declares a work queue and its DLQ and binds it (idempotent).
    pub(crate) fn declare(&self, queue: &str, bindings: &[(String, String)]) -> Result<()> {
        let mut state = self.state();
        if let Some((exchange, _)) = bindings
            .iter()
            .find(|(exchange, _)| !state.exchanges.contains_key(exchange))
        {
            return Err(not_found("exchange", exchange));
        }
        state.ensure_queue(queue, false);
        for (exchange, key) in bindings {
            state.bind(exchange, queue, key)?;
        }
        Ok(())
    }

    /// Where an eager queue of `task` sends what waited too long: the task's shared
    /// queue, through the activity exchange.
    fn eager_expiry(names: &Names, task: &str) -> Expiry {
        Expiry {
            ttl: EAGER_TTL,
            exchange: names.activity_exchange(),
            key: task.to_owned(),
        }
    }

    /// Declares a worker process's eager queue (`<ns>.eager.<instance>.<task>`, no DLQ),
    /// bound to the eager exchange with its own name; what waits in it longer than
    /// [`EAGER_TTL`] goes on to its task's shared queue ([`Core::expire`]).
    pub(crate) fn declare_eager(&self, queue: &str) -> Result<()> {
        let task = self.names.eager_task(queue).ok_or_else(|| {
            Error::Bus(format!("{queue} is not an eager queue of this namespace"))
        })?;
        let expiry = Self::eager_expiry(&self.names, task);
        let mut state = self.state();
        state
            .queues
            .entry(queue.to_owned())
            .or_insert_with(|| Queue::new(false))
            .expiry = Some(expiry);
        state.bind(&self.names.eager_exchange(), queue, queue)
    }

    /// Moves on the ready messages that waited too long in queues with an expiry (to
    /// the queues their dead-letter exchange and key route to; dropped when none), and
    /// their journal rows with them; how many moved.
    pub(crate) fn expire(&self) -> usize {
        let now = Instant::now();
        let mut state = self.state();
        let mut moved = Vec::new();
        for q in state.queues.values_mut() {
            let expired = q.expired(now);
            if let (Some(expiry), false) = (&q.expiry, expired.is_empty()) {
                moved.extend(expired.into_iter().map(|s| (expiry.clone(), s)));
            }
        }
        let count = moved.len();
        for (expiry, stored) in moved {
            let targets = state
                .route(&expiry.exchange, &expiry.key)
                .unwrap_or_default();
            // A task's shared queue is one queue: its journal row follows it there. A
            // copy to any further queue lives in memory only.
            let mut seq = stored.seq;
            match (&self.journal, seq, targets.first()) {
                (Some(journal), Some(row), Some(target)) => {
                    // Sent under the lock: an ack taken from the target reaches the
                    // journal after the move. Nobody waits for the move's outcome: lost
                    // in a crash, the row is found in the eager queue again and moves on.
                    drop(journal.relocate(row, target, &stored.message));
                }
                (Some(journal), Some(row), None) => journal.delete(row),
                _ => {}
            }
            for target in targets {
                if let Some(q) = state.queues.get_mut(&target) {
                    q.push(Stored {
                        message: stored.message.clone(),
                        redelivered: stored.redelivered,
                        seq: seq.take(),
                        since: now,
                    });
                }
            }
        }
        count
    }

    /// The queues a message published to `exchange` with `key` goes to (each once).
    pub(crate) fn route(&self, exchange: &str, key: &str) -> Result<Vec<String>> {
        self.state().route(exchange, key)
    }

    /// Appends `message` to each of `queues` (with its journal row, if any). A queue
    /// deleted since routing drops its copy.
    pub(crate) fn enqueue(&self, queues: &[String], message: Arc<Message>, seqs: &[Option<i64>]) {
        let mut state = self.state();
        let now = Instant::now();
        for (queue, seq) in queues.iter().zip(seqs) {
            match state.queues.get_mut(queue) {
                Some(q) => q.push(Stored {
                    message: message.clone(),
                    redelivered: false,
                    seq: *seq,
                    since: now,
                }),
                None => {
                    if let (Some(journal), Some(seq)) = (&self.journal, seq) {
                        journal.delete(*seq);
                    }
                }
            }
        }
    }

    /// Attaches a new consumer to `queue`; its id.
    pub(crate) fn attach(&self, queue: &str) -> Result<u64> {
        let mut state = self.state();
        state.next_consumer += 1;
        let id = state.next_consumer;
        let q = state
            .queues
            .get_mut(queue)
            .ok_or_else(|| not_found("queue", queue))?;
        q.consumers.push(id);
        Ok(id)
    }

    /// What wakes the consumers of `queue`; `None` once it is deleted.
    pub(crate) fn notifier(&self, queue: &str) -> Option<Arc<Notify>> {
        self.state().queues.get(queue).map(|q| q.notify.clone())
    }

    /// The next message of `queue` for `consumer`, within its prefetch (0: no bound).
    pub(crate) fn take(&self, queue: &str, consumer: u64, prefetch: u16) -> Take {
        let mut state = self.state();
        let State {
            queues, next_tag, ..
        } = &mut *state;
        let Some(q) = queues.get_mut(queue) else {
            return Take::Gone(format!("queue {queue} was deleted"));
        };
        if !q.consumers.contains(&consumer) {
            return Take::Gone("the consumer was cancelled".to_owned());
        }
        if q.single_active && q.consumers.first() != Some(&consumer) {
            return Take::Wait;
        }
        let owned = q.owned.get(&consumer).copied().unwrap_or(0);
        if prefetch != 0 && owned >= usize::from(prefetch) {
            return Take::Wait;
        }
        let Some(stored) = q.ready.pop_front() else {
            return Take::Wait;
        };
        *next_tag += 1;
        q.unacked.insert(*next_tag, (consumer, stored.clone()));
        *q.owned.entry(consumer).or_default() += 1;
        Take::Got(*next_tag, stored)
    }

    /// `basic.get`: the next ready message of `queue`, whoever consumes it.
    pub(crate) fn get(&self, queue: &str) -> Result<Option<(u64, Stored)>> {
        let mut state = self.state();
        let State {
            queues, next_tag, ..
        } = &mut *state;
        let q = queues
            .get_mut(queue)
            .ok_or_else(|| not_found("queue", queue))?;
        let Some(stored) = q.ready.pop_front() else {
            return Ok(None);
        };
        *next_tag += 1;
        q.unacked.insert(*next_tag, (GET_OWNER, stored.clone()));
        Ok(Some((*next_tag, stored)))
    }

    /// Ready messages of `queue`.
    pub(crate) fn message_count(&self, queue: &str) -> Result<u32> {
        let state = self.state();
        let q = state
            .queues
            .get(queue)
            .ok_or_else(|| not_found("queue", queue))?;
        Ok(u32::try_from(q.ready.len()).unwrap_or(u32::MAX))
    }

    fn unsettled(queue: &str, tag: u64) -> Error {
        Error::Bus(format!(
            "delivery {tag} of {queue} is not outstanding (settled, or its consumer closed)"
        ))
    }

    /// Acknowledges delivery `tag`: gone for good (and from the journal).
    pub(crate) fn ack(&self, queue: &str, tag: u64) -> Result<()> {
        let mut state = self.state();
        let q = state
            .queues
            .get_mut(queue)
            .ok_or_else(|| not_found("queue", queue))?;
        let stored = q.unsettle(tag).ok_or_else(|| Self::unsettled(queue, tag))?;
        q.notify.notify_waiters();
        if let (Some(journal), Some(seq)) = (&self.journal, stored.seq) {
            journal.delete(seq);
        }
        Ok(())
    }

    /// Gives delivery `tag` back to the front of its queue, marked redelivered.
    pub(crate) fn requeue(&self, queue: &str, tag: u64) -> Result<()> {
        let mut state = self.state();
        let q = state
            .queues
            .get_mut(queue)
            .ok_or_else(|| not_found("queue", queue))?;
        let stored = q.unsettle(tag).ok_or_else(|| Self::unsettled(queue, tag))?;
        q.give_back(vec![stored]);
        Ok(())
    }

    /// Moves delivery `tag` to the end of `<queue>.dlq` with the reason and origin in its
    /// headers; the pending journal move, when it is journaled.
    pub(crate) fn dead_letter(
        &self,
        queue: &str,
        tag: u64,
        reason: &str,
    ) -> Result<Option<Pending<()>>> {
        let mut state = self.state();
        let q = state
            .queues
            .get_mut(queue)
            .ok_or_else(|| not_found("queue", queue))?;
        let stored = q.unsettle(tag).ok_or_else(|| Self::unsettled(queue, tag))?;
        q.notify.notify_waiters();
        let mut message = Message::clone(&stored.message);
        message.headers.insert(
            DEAD_REASON_HEADER.to_owned(),
            HeaderValue::Text(reason.to_owned()),
        );
        message.headers.insert(
            ORIGINAL_QUEUE_HEADER.to_owned(),
            HeaderValue::Text(queue.to_owned()),
        );
        message.persistent = true;
        let dlq = Names::dlq(queue);
        // Sent while the lock is held so that an ack of the moved message, taken from the
        // DLQ, reaches the journal after the move.
        let moved = match (&self.journal, stored.seq) {
            (Some(journal), Some(seq)) => Some(journal.relocate(seq, &dlq, &message)),
            _ => None,
        };
        let dead = state.queues.entry(dlq).or_insert_with(|| Queue::new(false));
        dead.ready.push_back(Stored {
            message: Arc::new(message),
            redelivered: false,
            seq: stored.seq,
            since: Instant::now(),
        });
        dead.notify.notify_waiters();
        Ok(moved)
    }

    /// Stops delivering to `consumer` (another one of a single-active queue takes over);
    /// what it holds stays with it until settled or detached.
    pub(crate) fn cancel(&self, queue: &str, consumer: u64) {
        let mut state = self.state();
        if let Some(q) = state.queues.get_mut(queue) {
            q.consumers.retain(|c| *c != consumer);
            q.notify.notify_waiters();
        }
    }

    /// Removes `consumer` and gives back what it holds unsettled, in order, to the front.
    pub(crate) fn detach(&self, queue: &str, consumer: u64) {
        let mut state = self.state();
        let Some(q) = state.queues.get_mut(queue) else {
            return;
        };
        q.consumers.retain(|c| *c != consumer);
        let held: Vec<u64> = q
            .unacked
            .iter()
            .filter(|(_, (owner, _))| *owner == consumer)
            .map(|(tag, _)| *tag)
            .collect();
        let back: Vec<Stored> = held.into_iter().filter_map(|t| q.unsettle(t)).collect();
        q.give_back(back);
    }

    /// Deletes every queue (with its messages) and the exchanges; the queues deleted.
    pub(crate) fn teardown(&self) -> Vec<String> {
        let mut state = self.state();
        state.exchanges.clear();
        let gone: Vec<(String, Queue)> = state.queues.drain().collect();
        drop(state);
        let mut names = Vec::with_capacity(gone.len());
        for (name, queue) in gone {
            // Wakes its consumers, who find it gone.
            queue.notify.notify_waiters();
            names.push(name);
        }
        names.sort();
        names
    }

    /// Registers a call waiting for the reply with `correlation_id`.
    pub(crate) fn expect_reply(&self, correlation_id: &str) -> oneshot::Receiver<Result<Message>> {
        let (tx, rx) = oneshot::channel();
        self.calls().insert(correlation_id.to_owned(), tx);
        rx
    }

    /// Forgets a call (answered, timed out or dropped).
    pub(crate) fn forget_call(&self, correlation_id: &str) {
        self.calls().remove(correlation_id);
    }

    /// Hands a reply to its call; one nobody waits for any more is dropped.
    pub(crate) fn reply(&self, message: Message) {
        let Some(id) = message.correlation_id.clone() else {
            tracing::debug!("a reply without correlation id; dropping it");
            return;
        };
        if let Some(waiter) = self.calls().remove(&id) {
            let _ = waiter.send(Ok(message));
        }
    }

    /// Fails every waiting call, as a lost reply channel does.
    pub(crate) fn fail_calls(&self, why: &str) {
        let waiters: Vec<Waiter> = self.calls().drain().map(|(_, w)| w).collect();
        for waiter in waiters {
            let _ = waiter.send(Err(Error::Bus(format!("reply channel lost: {why}"))));
        }
    }
}
