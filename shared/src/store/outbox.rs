//! The transactional outbox: messages are inserted in the same transaction as the
//! state change that caused them, published after the commit, then deleted. A crash
//! between commit and publish leaves the row behind for the history service's sweeper.

use std::time::Duration;

use sqlx::PgConnection;

use super::Store;
use crate::bus::Bus;
use crate::{Envelope, Result};

/// A message waiting in the outbox.
#[derive(Debug, Clone)]
pub struct OutboxMessage {
    /// Row id (0 before insertion).
    pub id: i64,
    /// Target exchange.
    pub exchange: String,
    /// Routing key.
    pub routing_key: String,
    /// Encoded envelope.
    pub body: Vec<u8>,
    /// W3C trace context to carry along.
    pub traceparent: Option<String>,
}

impl OutboxMessage {
    /// Encodes `envelope` for `exchange`/`routing_key`.
    pub fn new(
        exchange: String,
        routing_key: String,
        envelope: &Envelope,
        traceparent: Option<String>,
    ) -> Result<Self> {
        Ok(Self {
            id: 0,
            exchange,
            routing_key,
            body: envelope.to_bytes()?,
            traceparent,
        })
    }
}

/// `(id, exchange, routing_key, body, traceparent)` as read back by the sweeper.
type OutboxRow = (i64, String, String, Vec<u8>, Option<String>);

/// Inserts `messages` inside the caller's transaction; sets their ids.
pub async fn insert(conn: &mut PgConnection, messages: &mut [OutboxMessage]) -> Result<()> {
    if messages.is_empty() {
        return Ok(());
    }
    let exchanges: Vec<&str> = messages.iter().map(|m| m.exchange.as_str()).collect();
    let keys: Vec<&str> = messages.iter().map(|m| m.routing_key.as_str()).collect();
    let bodies: Vec<&[u8]> = messages.iter().map(|m| m.body.as_slice()).collect();
    let traces: Vec<Option<&str>> = messages.iter().map(|m| m.traceparent.as_deref()).collect();
    let ids: Vec<i64> = sqlx::query_scalar(
        "INSERT INTO outbox (exchange, routing_key, body, traceparent)
         SELECT * FROM UNNEST($1::text[], $2::text[], $3::bytea[], $4::text[])
         RETURNING id",
    )
    .bind(&exchanges)
    .bind(&keys)
    .bind(&bodies)
    .bind(&traces)
    .fetch_all(&mut *conn)
    .await?;
    for (m, id) in messages.iter_mut().zip(ids) {
        m.id = id;
    }
    Ok(())
}

impl Store {
    /// Publishes committed outbox messages (confirmed) and deletes their rows.
    /// Messages are published concurrently; a failure leaves the rows for the sweeper.
    pub async fn publish_outbox(&self, bus: &Bus, messages: &[OutboxMessage]) -> Result<()> {
        if messages.is_empty() {
            return Ok(());
        }
        let publishes = messages.iter().map(|m| {
            bus.publish_bytes(
                &m.exchange,
                &m.routing_key,
                &m.body,
                m.traceparent.as_deref(),
            )
        });
        let results = futures_util::future::join_all(publishes).await;
        let sent: Vec<i64> = messages
            .iter()
            .zip(&results)
            .filter(|(_, r)| r.is_ok())
            .map(|(m, _)| m.id)
            .collect();
        if !sent.is_empty() {
            sqlx::query("DELETE FROM outbox WHERE id = ANY($1)")
                .bind(&sent)
                .execute(&self.pool)
                .await?;
        }
        results.into_iter().collect::<Result<Vec<()>>>()?;
        Ok(())
    }

    /// Re-publishes rows older than `older_than` (left by a crash between commit and
    /// publish), at most `limit` per call; returns how many were published.
    /// `SKIP LOCKED` lets several sweepers run without publishing a row twice at once.
    pub async fn sweep_outbox(&self, bus: &Bus, older_than: Duration, limit: i64) -> Result<usize> {
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
        let mut sent = Vec::with_capacity(rows.len());
        for (id, exchange, key, body, trace) in &rows {
            bus.publish_bytes(exchange, key, body, trace.as_deref())
                .await?;
            sent.push(*id);
        }
        sqlx::query("DELETE FROM outbox WHERE id = ANY($1)")
            .bind(&sent)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(sent.len())
    }
}
