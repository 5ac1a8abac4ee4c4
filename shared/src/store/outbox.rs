//! The transactional outbox: messages are inserted in the same transaction as the
//! state change that caused them, published after the commit, then deleted. A crash
//! between commit and publish leaves the row behind for the history service's sweeper.

use uuid::Uuid;

use crate::bus::together::{self, Publisher, Together};
use crate::bus::Bus;
use crate::{Envelope, Result};

pub use super::pg::outbox::insert;

/// A message waiting in the outbox.
#[derive(Debug, Clone)]
pub struct OutboxMessage {
    /// Row id (UUIDv7, made here so that no round trip is needed to learn it).
    pub id: Uuid,
    /// Target exchange.
    pub exchange: String,
    /// Routing key.
    pub routing_key: String,
    /// Encoded envelope.
    pub body: Vec<u8>,
    /// W3C trace context to carry along.
    pub traceparent: Option<String>,
    /// The body is not an envelope (an EVENT task's message). Such messages go out, and
    /// are confirmed, before the envelopes committed with them: a command that says one
    /// was sent (the EVENT task's completion) never overtakes it.
    pub raw: bool,
}

impl OutboxMessage {
    /// A message whose body is not an envelope (an EVENT task's), with the row id `id`,
    /// which is also its message id.
    pub fn raw(
        exchange: String,
        routing_key: String,
        id: Uuid,
        body: Vec<u8>,
        traceparent: Option<String>,
    ) -> Self {
        Self {
            id,
            exchange,
            routing_key,
            body,
            traceparent,
            raw: true,
        }
    }

    /// Encodes `envelope` for `exchange`/`routing_key`.
    pub fn new(
        exchange: String,
        routing_key: String,
        envelope: &Envelope,
        traceparent: Option<String>,
    ) -> Result<Self> {
        Ok(Self {
            id: crate::ids::new_id(),
            exchange,
            routing_key,
            body: envelope.to_bytes()?,
            traceparent,
            raw: false,
        })
    }
}

/// A pre-encoded message: `(exchange, routing_key, body, message id unless the body is
/// an envelope, traceparent)`.
pub(super) type Outgoing<'a> = (&'a str, &'a str, &'a [u8], Option<Uuid>, Option<&'a str>);

/// Publishes `messages` concurrently (persistent, confirmed); one result per message, in
/// order, so that the caller forgets exactly the rows that were confirmed. Shared by the
/// outbox and the timers.
pub(super) async fn publish_all<'a>(
    bus: &Bus,
    messages: impl IntoIterator<Item = Outgoing<'a>>,
) -> Vec<Result<()>> {
    let publishes = messages
        .into_iter()
        .map(|(exchange, key, body, id, trace)| {
            bus.publish_with_id(exchange, key, body, id, trace)
        });
    futures_util::future::join_all(publishes).await
}

/// Publishes outbox messages (confirmed, concurrently). Returns the ids of the
/// confirmed ones, whose rows the backend then deletes once their commit succeeded
/// (`OutboxStore::forget_outbox`), and the first failure: a failed message's row stays
/// for the sweeper.
pub async fn publish_messages(bus: &Bus, messages: &[OutboxMessage]) -> (Vec<Uuid>, Result<()>) {
    let rows = messages.iter().map(|m| {
        (
            m.exchange.as_str(),
            m.routing_key.as_str(),
            m.body.as_slice(),
            Some(m.id),
            m.traceparent.as_deref(),
        )
    });
    publish_raw_first(rows, |(exchange, key, body, id, trace)| {
        bus.publish_with_id(exchange, key, body, id, trace)
    })
    .await
}

/// An outbox row as both sweepers read it: `(id, exchange, routing_key, body,
/// traceparent)`.
pub(super) type OutboxRow = (Uuid, String, String, Vec<u8>, Option<String>);

/// A swept row as [`publish_raw_first`] takes it.
pub(super) fn outgoing(row: &OutboxRow) -> Outgoing<'_> {
    let (id, exchange, key, body, trace) = row;
    (exchange, key, body, Some(*id), trace.as_deref())
}

/// Publishes outbox rows with `publish`, concurrently, raw messages (EVENT tasks') first:
/// the envelopes only once every raw one is confirmed, so the command committed with an
/// EVENT task's message (the one completing the task) never overtakes it; a failed raw
/// message holds them all back. Returns the ids of the confirmed rows (each row's
/// [`Outgoing`] id) and the first failure; a failed row stays for the sweeper, the
/// confirmed ones need not be sent again. Used after a commit and by both sweepers.
pub(super) async fn publish_raw_first<'a, F, Fut>(
    rows: impl IntoIterator<Item = Outgoing<'a>>,
    publish: F,
) -> (Vec<Uuid>, Result<()>)
where
    F: Fn(Outgoing<'a>) -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    let (envelopes, raw): (Vec<Outgoing<'a>>, Vec<Outgoing<'a>>) =
        rows.into_iter().partition(|row| is_envelope(row.2));
    let mut sent = Vec::with_capacity(envelopes.len() + raw.len());
    let mut failure = None;
    for group in [raw, envelopes] {
        if failure.is_some() {
            break;
        }
        let outcomes = futures_util::future::join_all(group.iter().map(|row| publish(*row))).await;
        for (row, published) in group.iter().zip(outcomes) {
            match published {
                Ok(()) => sent.extend(row.3),
                Err(e) => {
                    failure.get_or_insert(e);
                }
            }
        }
    }
    (sent, failure.map_or(Ok(()), Err))
}

/// Publishes outbox messages through `together` (each with what meets it at its
/// destination: [`crate::bus::together`]). Returns, as [`publish_messages`] does, the ids
/// of the confirmed ones and the first failure; a message not confirmed keeps its row for
/// the sweeper. Only for envelopes (a raw message is never sent inside another).
pub async fn publish_together<P: Publisher>(
    together: &Together<P>,
    messages: Vec<OutboxMessage>,
) -> (Vec<Uuid>, Result<()>) {
    let ids: Vec<Uuid> = messages.iter().map(|m| m.id).collect();
    let answers = together.send_all(
        messages
            .into_iter()
            .map(|m| together::Outgoing {
                exchange: m.exchange,
                routing_key: m.routing_key,
                body: m.body,
                traceparent: m.traceparent,
            })
            .collect(),
    );
    let mut sent = Vec::with_capacity(ids.len());
    let mut first = Ok(());
    for (id, answer) in ids.into_iter().zip(answers) {
        match answer.await {
            Ok(()) => sent.push(id),
            Err(e) => {
                if first.is_ok() {
                    first = Err(e);
                }
            }
        }
    }
    (sent, first)
}

/// Whether an outbox row's body is an envelope (raw rows are published first, see
/// [`OutboxMessage::raw`]).
fn is_envelope(body: &[u8]) -> bool {
    crate::bus::envelope_kind(body).is_some()
}

/// Most ids a janitor deletes in one go.
const JANITOR_BATCH: usize = 10_000;

/// Deletes the rows of published outbox messages, many at a time, off the hot path: the
/// ids published while a delete runs wait and go with the next one. A row whose delete
/// is lost (crash, database error) is published once more by the sweeper; consumers are
/// idempotent, so that costs a duplicate, never a wrong state.
#[derive(Debug, Clone)]
pub(crate) struct Janitor {
    tx: tokio::sync::mpsc::UnboundedSender<Vec<Uuid>>,
}

impl Janitor {
    /// Starts the janitor task, deleting with `delete`; it ends when every handle is
    /// dropped.
    pub(crate) fn spawn<F>(delete: F) -> Self
    where
        F: Fn(Vec<Uuid>) -> futures_util::future::BoxFuture<'static, Result<()>> + Send + 'static,
    {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Vec<Uuid>>();
        tokio::spawn(async move {
            while let Some(mut ids) = rx.recv().await {
                while ids.len() < JANITOR_BATCH {
                    match rx.try_recv() {
                        Ok(more) => ids.extend(more),
                        Err(_) => break,
                    }
                }
                let count = ids.len();
                if let Err(e) = delete(ids).await {
                    tracing::warn!(error = %e, count, "outbox cleanup failed; the sweeper will re-publish those rows");
                }
            }
        });
        Self { tx }
    }

    /// Queues the rows of published messages for deletion.
    pub(crate) fn forget(&self, ids: Vec<Uuid>) {
        if !ids.is_empty() {
            // Only fails when the runtime is shutting down: the sweeper covers that.
            let _ = self.tx.send(ids);
        }
    }
}
