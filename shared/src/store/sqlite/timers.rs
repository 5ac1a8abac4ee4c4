//! Durable timers on SQLite. The firer reads the due rows (a plain read), publishes them
//! with no transaction open (the in-process bus writes to the same file), then deletes
//! the published ones. The clock is the process's: one process owns the file.

use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::outbox::{delete_ids, until, Keyed};
use super::writer::{id, id_opt, ts};
use super::SqliteStore;
use crate::bus::Bus;
use crate::store::backend::TimerStore;
use crate::store::timers::{fire, DueTimer, FireReport, TimerRecord};
use crate::Result;

/// Inserts `timers` inside the caller's synchronous write transaction.
pub(crate) fn insert_sync<T: std::borrow::Borrow<TimerRecord>>(
    tx: &rusqlite::Transaction<'_>,
    timers: &[T],
) -> Result<()> {
    if timers.is_empty() {
        return Ok(());
    }
    let now = ts(Utc::now());
    // A parked command's timer id is derived from the command's: a redelivered one parks
    // once. A task's dispatch timer is set again to make it due sooner (resetcallbacks):
    // a timer only ever moves earlier.
    let mut insert = tx.prepare_cached(
        "INSERT INTO timers (id, workflow_id, run_id, fire_at, exchange, routing_key, body,
                             traceparent, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
         ON CONFLICT (id) DO UPDATE SET fire_at = CASE
             WHEN julianday(excluded.fire_at) < julianday(timers.fire_at)
             THEN excluded.fire_at ELSE timers.fire_at END",
    )?;
    for t in timers {
        let t = t.borrow();
        insert.execute(rusqlite::params![
            id(&t.id),
            t.workflow_id,
            id_opt(&t.run_id),
            ts(t.fire_at),
            t.exchange,
            t.routing_key,
            t.body,
            t.traceparent,
            now
        ])?;
    }
    Ok(())
}

#[async_trait]
impl TimerStore for SqliteStore {
    /// Publishes up to `limit` due timers (oldest due first, concurrently, confirmed),
    /// then deletes the published ones; failures stay for a later round.
    async fn fire_timers(&self, bus: &Bus, limit: i64) -> Result<FireReport> {
        let started = Instant::now();
        let now = Utc::now();
        let due: Vec<DueTimer> = sqlx::query_as(
            "SELECT id, fire_at, exchange, routing_key, body, traceparent
             FROM timers WHERE fire_at <= ? ORDER BY fire_at LIMIT ?",
        )
        .bind(now)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        if due.is_empty() {
            return Ok(FireReport::default());
        }
        let (report, sent) = fire(bus, &due, now, started).await;
        delete_ids(&self.writer, Keyed::Timers, &sent).await?;
        Ok(report)
    }

    /// When the earliest pending timer is due (`None` when there is none). It may
    /// already be past.
    async fn next_timer_at(&self) -> Result<Option<DateTime<Utc>>> {
        Ok(sqlx::query_scalar("SELECT min(fire_at) FROM timers")
            .fetch_one(&self.pool)
            .await?)
    }

    /// How long until the earliest pending timer is due, by this process's clock
    /// (`ZERO` when it is already due; `None` when there is no timer).
    async fn next_timer_in(&self) -> Result<Option<Duration>> {
        Ok(self.next_timer_at().await?.map(until))
    }

    /// How many timers hold a message for `exchange`, by routing key.
    async fn delayed_messages(
        &self,
        exchange: &str,
    ) -> Result<std::collections::HashMap<String, u64>> {
        let rows: Vec<(String, i64)> = sqlx::query_as(
            "SELECT routing_key, count(*) FROM timers WHERE exchange = ? GROUP BY routing_key",
        )
        .bind(exchange)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(key, n)| (key, n.max(0) as u64))
            .collect())
    }
}
