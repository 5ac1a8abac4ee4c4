//! Durable timers on SQLite. The firer reads the due rows (a plain read), publishes them
//! with no transaction open (the in-process bus writes to the same file), then deletes
//! the published ones. The clock is the process's: one process owns the file.

use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::{QueryBuilder, Sqlite, SqliteConnection};

use super::outbox::{delete_ids, until, MAX_BINDS};
use super::SqliteStore;
use crate::bus::Bus;
use crate::store::backend::TimerStore;
use crate::store::timers::{fire, DueTimer, FireReport, TimerRecord};
use crate::Result;

/// Inserts `timers` inside the caller's (write) transaction.
pub(crate) async fn insert<T: std::borrow::Borrow<TimerRecord>>(
    conn: &mut SqliteConnection,
    timers: &[T],
) -> Result<()> {
    let now = Utc::now();
    for chunk in timers.chunks(MAX_BINDS / 9) {
        let mut q = QueryBuilder::<Sqlite>::new(
            "INSERT INTO timers (id, workflow_id, run_id, fire_at, exchange, routing_key, body,
                                 traceparent, created_at) ",
        );
        q.push_values(chunk, |mut row, t| {
            let t = t.borrow();
            row.push_bind(t.id)
                .push_bind(t.workflow_id.as_str())
                .push_bind(t.run_id)
                .push_bind(t.fire_at)
                .push_bind(t.exchange.as_str())
                .push_bind(t.routing_key.as_str())
                .push_bind(t.body.as_slice())
                .push_bind(t.traceparent.as_deref())
                .push_bind(now);
        });
        // A parked command's timer id is derived from the command's: a redelivered one
        // parks once.
        q.push(" ON CONFLICT (id) DO NOTHING");
        q.build().execute(&mut *conn).await?;
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
        delete_ids(&self.writer, "timers", &sent).await?;
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
}
