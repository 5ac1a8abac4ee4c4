//! The outbox on SQLite. Rows are inserted in the writer's transaction ([`insert`]),
//! published after its commit, then deleted directly (no janitor: one process, one
//! writer). No transaction is held across a publish: the rows are read, published, and
//! the confirmed ones deleted in a short write of their own.

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use rusqlite::params;
use sqlx::{QueryBuilder, Sqlite, SqliteConnection};
use uuid::Uuid;

use super::writer::{id, ts, SqliteWriter};
use super::SqliteStore;
use crate::bus::Bus;
use crate::store::backend::OutboxStore;
use crate::store::outbox::{
    outgoing, publish_messages, publish_raw_first, Janitor, OutboxMessage, OutboxRow,
};
use crate::Result;

/// Most bound parameters per statement (SQLite allows 32766).
pub(super) const MAX_BINDS: usize = 10_000;

/// `at + d`, saturating at the largest representable time.
pub(super) fn plus(at: DateTime<Utc>, d: Duration) -> DateTime<Utc> {
    chrono::Duration::from_std(d)
        .ok()
        .and_then(|d| at.checked_add_signed(d))
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// `at - d`, saturating at the smallest representable time.
pub(super) fn minus(at: DateTime<Utc>, d: Duration) -> DateTime<Utc> {
    chrono::Duration::from_std(d)
        .ok()
        .and_then(|d| at.checked_sub_signed(d))
        .unwrap_or(DateTime::<Utc>::MIN_UTC)
}

/// How long from now until `at` (`ZERO` when it is past).
pub(super) fn until(at: DateTime<Utc>) -> Duration {
    (at - Utc::now()).to_std().unwrap_or(Duration::ZERO)
}

/// Inserts `messages` inside the caller's (write) transaction.
pub(crate) async fn insert<M: std::borrow::Borrow<OutboxMessage>>(
    conn: &mut SqliteConnection,
    messages: &[M],
) -> Result<()> {
    let now = Utc::now();
    for chunk in messages.chunks(MAX_BINDS / 6) {
        let mut q = QueryBuilder::<Sqlite>::new(
            "INSERT INTO outbox (id, exchange, routing_key, body, traceparent, created_at) ",
        );
        q.push_values(chunk, |mut row, m| {
            let m = m.borrow();
            row.push_bind(m.id)
                .push_bind(m.exchange.as_str())
                .push_bind(m.routing_key.as_str())
                .push_bind(m.body.as_slice())
                .push_bind(m.traceparent.as_deref())
                .push_bind(now);
        });
        q.build().execute(&mut *conn).await?;
    }
    Ok(())
}

/// Inserts `messages` inside the caller's synchronous write transaction.
pub(crate) fn insert_sync<M: std::borrow::Borrow<OutboxMessage>>(
    tx: &rusqlite::Transaction<'_>,
    messages: &[M],
) -> Result<()> {
    if messages.is_empty() {
        return Ok(());
    }
    let now = ts(Utc::now());
    let mut insert = tx.prepare_cached(
        "INSERT INTO outbox (id, exchange, routing_key, body, traceparent, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?;
    for m in messages {
        let m = m.borrow();
        insert.execute(params![
            id(&m.id),
            m.exchange,
            m.routing_key,
            m.body,
            m.traceparent,
            now
        ])?;
    }
    Ok(())
}

/// Deletes the rows of `table` (`outbox` or `timers`) whose `id` is among `ids`, in one
/// write of their own; returns how many.
pub(super) async fn delete_ids(writer: &SqliteWriter, table: Keyed, ids: &[Uuid]) -> Result<u64> {
    if ids.is_empty() {
        return Ok(0);
    }
    writer
        .transaction(|tx| {
            let mut delete = tx.prepare_cached(match table {
                Keyed::Outbox => "DELETE FROM outbox WHERE id = ?1",
                Keyed::Timers => "DELETE FROM timers WHERE id = ?1",
            })?;
            let mut deleted = 0;
            for u in ids {
                deleted += delete.execute([id(u)])? as u64;
            }
            Ok(deleted)
        })
        .await
}

/// The tables whose rows [`delete_ids`] deletes by id.
#[derive(Debug, Clone, Copy)]
pub(super) enum Keyed {
    Outbox,
    Timers,
}

#[async_trait]
impl OutboxStore for SqliteStore {
    /// Publishes committed outbox messages (confirmed, concurrently), then deletes the
    /// rows of the confirmed ones; a failed publish leaves its row for the sweeper.
    async fn publish_outbox(&self, bus: &Bus, messages: &[OutboxMessage]) -> Result<()> {
        let (sent, published) = publish_messages(bus, messages).await;
        self.janitor.forget(sent);
        published
    }

    fn forget_outbox(&self, ids: Vec<Uuid>) {
        self.janitor.forget(ids);
    }

    /// Re-publishes rows older than `older_than` (left by a crash between commit and
    /// publish), at most `limit` per call, oldest id first; returns how many were
    /// published. The confirmed rows are deleted, then the first failure (if any) is
    /// returned; a failed row stays for the next sweep.
    async fn sweep_outbox(&self, bus: &Bus, older_than: Duration, limit: i64) -> Result<usize> {
        let cutoff = minus(Utc::now(), older_than);
        let rows: Vec<OutboxRow> = sqlx::query_as(
            "SELECT id, exchange, routing_key, body, traceparent FROM outbox
             WHERE created_at < ? ORDER BY id LIMIT ?",
        )
        .bind(cutoff)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        // A row whose publish fails stays for the next sweep without holding back the
        // others (see `publish_raw_first` for the raw messages' order).
        let swept = rows.iter().map(outgoing);
        let (sent, failure) = publish_raw_first(swept, |(exchange, key, body, id, trace)| {
            bus.publish_with_id(exchange, key, body, id, trace)
        })
        .await;
        delete_ids(&self.writer, Keyed::Outbox, &sent).await?;
        failure.map(|()| sent.len())
    }
}

/// The janitor of a SQLite outbox: deletes on the writing connection, many rows a turn.
pub(super) fn janitor(writer: SqliteWriter) -> Janitor {
    Janitor::spawn(move |ids: Vec<Uuid>| {
        let writer = writer.clone();
        Box::pin(async move { delete_ids(&writer, Keyed::Outbox, &ids).await.map(drop) })
    })
}
