//! The outbox on PostgreSQL (see [`crate::store::outbox`]): rows inserted in the
//! writer's transaction ([`insert`]), published after its commit, then deleted by the
//! [`janitor`] off the hot path.

use std::time::Duration;

use async_trait::async_trait;
use sqlx::PgConnection;
use uuid::Uuid;

use super::PgStore;
use crate::bus::Bus;
use crate::store::backend::OutboxStore;
use crate::store::outbox::{
    outgoing, publish_messages, publish_raw_first, Janitor, OutboxMessage, OutboxRow,
};
use crate::Result;

/// Inserts `messages` inside the caller's transaction.
pub async fn insert(conn: &mut PgConnection, messages: &[OutboxMessage]) -> Result<()> {
    if messages.is_empty() {
        return Ok(());
    }
    let ids: Vec<Uuid> = messages.iter().map(|m| m.id).collect();
    let exchanges: Vec<&str> = messages.iter().map(|m| m.exchange.as_str()).collect();
    let keys: Vec<&str> = messages.iter().map(|m| m.routing_key.as_str()).collect();
    let bodies: Vec<&[u8]> = messages.iter().map(|m| m.body.as_slice()).collect();
    let traces: Vec<Option<&str>> = messages.iter().map(|m| m.traceparent.as_deref()).collect();
    sqlx::query(
        "INSERT INTO outbox (id, exchange, routing_key, body, traceparent)
         SELECT * FROM UNNEST($1::uuid[], $2::text[], $3::text[], $4::bytea[], $5::text[])",
    )
    .bind(&ids)
    .bind(&exchanges)
    .bind(&keys)
    .bind(&bodies)
    .bind(&traces)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// The janitor of a PostgreSQL outbox: one statement per batch of ids. Rows a sweeper
/// holds are skipped, not waited for: it deletes them itself when it commits, and
/// waiting behind its publishes would let the other rows grow old enough to be swept
/// (published) once more.
pub(crate) fn janitor(pool: sqlx::PgPool) -> Janitor {
    // One delete at a time, on a connection kept between them (docs/decider.md, "Held
    // connections").
    let held = std::sync::Arc::new(super::held::Held::new(pool, 1));
    Janitor::spawn(move |ids: Vec<Uuid>| {
        let held = held.clone();
        Box::pin(async move {
            let mut conn = held.take().await?;
            let deleted = sqlx::query(
                "DELETE FROM outbox WHERE id IN (
                     SELECT id FROM outbox WHERE id = ANY($1) FOR UPDATE SKIP LOCKED)",
            )
            .bind(&ids)
            .execute(&mut *conn)
            .await;
            conn.keep_if_sound(&deleted);
            deleted?;
            Ok(())
        })
    })
}

#[async_trait]
impl OutboxStore for PgStore {
    /// Publishes committed outbox messages (confirmed); their rows are then deleted in
    /// the background. Messages are published concurrently; a failure leaves the rows
    /// for the sweeper.
    async fn publish_outbox(&self, bus: &Bus, messages: &[OutboxMessage]) -> Result<()> {
        let (sent, published) = publish_messages(bus, messages).await;
        self.janitor.forget(sent);
        published
    }

    fn forget_outbox(&self, ids: Vec<Uuid>) {
        self.janitor.forget(ids);
    }

    /// Re-publishes rows older than `older_than` (left by a crash between commit and
    /// publish), at most `limit` per call; returns how many were published.
    /// `SKIP LOCKED` lets several sweepers run without publishing a row twice at once.
    async fn sweep_outbox(&self, bus: &Bus, older_than: Duration, limit: i64) -> Result<usize> {
        let mut tx = self.pool.begin().await?;
        let rows: Vec<OutboxRow> = sqlx::query_as(
            "SELECT id, exchange, routing_key, body, traceparent FROM outbox
             WHERE created_at < now() - make_interval(secs => $1)
             ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED",
        )
        .bind(older_than.as_secs_f64())
        .bind(limit)
        .fetch_all(&mut *tx)
        .await?;
        // Concurrently: the rows stay locked until the commit, and the janitor skips them.
        // A row whose publish fails stays for the next sweep; the confirmed ones go
        // (otherwise each sweep would publish them again for as long as one row of the
        // batch fails).
        let eager_exchange = bus.names().eager_exchange();
        let swept = rows.iter().map(outgoing);
        let (sent, failure) = publish_raw_first(swept, |(exchange, key, body, id, trace)| {
            let eager = exchange == eager_exchange;
            async move {
                match bus.publish_with_id(exchange, key, body, id, trace).await {
                    Err(e) if eager => eager_task_elsewhere(bus, body, trace, e).await,
                    other => other,
                }
            }
        })
        .await;
        sqlx::query("DELETE FROM outbox WHERE id = ANY($1)")
            .bind(&sent)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        failure.map(|()| sent.len())
    }
}

/// An eager task whose worker's queue refuses it (the queue's node is down: its worker
/// reconnected elsewhere under another name, and the queue takes nothing until that node
/// is back) goes to `<ns>.eager.expired`, as if it had expired there: the decider sends
/// it on to its shared queue, where any worker takes it over (docs/eager-dispatch.md).
/// Retrying the eager queue would leave its run waiting for as long as the node is away.
async fn eager_task_elsewhere(
    bus: &Bus,
    body: &[u8],
    traceparent: Option<&str>,
    refused: crate::Error,
) -> Result<()> {
    let expired = bus.names().eager_expired_queue();
    tracing::warn!(error = %refused, queue = %expired, "an eager task's queue refused it; sending it the way of an expired one");
    bus.publish_bytes("", &expired, body, traceparent).await
}
