//! Durable timers on PostgreSQL (see [`crate::store::timers`]): publish and delete
//! share one transaction whose `FOR UPDATE SKIP LOCKED` keeps firers off each other's
//! rows; every time is the database's clock.

use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::PgConnection;
use uuid::Uuid;

use super::PgStore;
use crate::bus::Bus;
use crate::store::backend::TimerStore;
use crate::store::timers::{fire, DueTimer, FireReport, TimerRecord};
use crate::Result;

/// The firer's query: due rows, oldest first, skipping rows another firer holds.
/// `now()` is the database's clock. Public so that a test can check its plan (it must
/// read the `fire_at` index, so its cost grows with the due timers only).
pub const DUE_TIMERS_QUERY: &str =
    "SELECT id, fire_at, exchange, routing_key, body, traceparent, now() AS db_now
     FROM timers WHERE fire_at <= now()
     ORDER BY fire_at LIMIT $1 FOR UPDATE SKIP LOCKED";

/// Inserts `timers` (one statement) inside the caller's transaction.
pub async fn insert(conn: &mut PgConnection, timers: &[TimerRecord]) -> Result<()> {
    if timers.is_empty() {
        return Ok(());
    }
    let ids: Vec<Uuid> = timers.iter().map(|t| t.id).collect();
    let workflows: Vec<&str> = timers.iter().map(|t| t.workflow_id.as_str()).collect();
    let runs: Vec<Option<Uuid>> = timers.iter().map(|t| t.run_id).collect();
    let fire_ats: Vec<DateTime<Utc>> = timers.iter().map(|t| t.fire_at).collect();
    let exchanges: Vec<&str> = timers.iter().map(|t| t.exchange.as_str()).collect();
    let keys: Vec<&str> = timers.iter().map(|t| t.routing_key.as_str()).collect();
    let bodies: Vec<&[u8]> = timers.iter().map(|t| t.body.as_slice()).collect();
    let traces: Vec<Option<&str>> = timers.iter().map(|t| t.traceparent.as_deref()).collect();
    sqlx::query(
        "INSERT INTO timers
             (id, workflow_id, run_id, fire_at, exchange, routing_key, body, traceparent)
         SELECT * FROM UNNEST($1::uuid[], $2::text[], $3::uuid[], $4::timestamptz[],
                              $5::text[], $6::text[], $7::bytea[], $8::text[])",
    )
    .bind(&ids)
    .bind(&workflows)
    .bind(&runs)
    .bind(&fire_ats)
    .bind(&exchanges)
    .bind(&keys)
    .bind(&bodies)
    .bind(&traces)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Deletes every pending timer of `run_id` (inside the caller's transaction, or on its
/// own); returns how many there were. A timer being published at that moment is locked
/// by its firer: the delete waits for it, then finds nothing left to delete.
pub async fn cancel_for_run(conn: &mut PgConnection, run_id: Uuid) -> Result<u64> {
    let done = sqlx::query("DELETE FROM timers WHERE run_id = $1")
        .bind(run_id)
        .execute(&mut *conn)
        .await?;
    Ok(done.rows_affected())
}

/// A due row as selected by [`DUE_TIMERS_QUERY`], with the database's clock.
#[derive(sqlx::FromRow)]
struct DueRow {
    #[sqlx(flatten)]
    timer: DueTimer,
    db_now: DateTime<Utc>,
}

#[async_trait]
impl TimerStore for PgStore {
    /// [`Store::fire_due_timers`], reporting each timer's lateness and each failure
    /// instead of the first error (for the firer's metrics and logs).
    async fn fire_timers(&self, bus: &Bus, limit: i64) -> Result<FireReport> {
        // Measured from before the transaction starts, so lateness is never understated:
        // `now()` in the query is the transaction's start.
        let started = Instant::now();
        let mut tx = self.pool.begin().await?;
        let rows: Vec<DueRow> = sqlx::query_as(DUE_TIMERS_QUERY)
            .bind(limit)
            .fetch_all(&mut *tx)
            .await?;
        // `now()` is the transaction's start: the same in every row.
        let Some(db_now) = rows.first().map(|r| r.db_now) else {
            tx.commit().await?;
            return Ok(FireReport::default());
        };
        let due: Vec<DueTimer> = rows.into_iter().map(|r| r.timer).collect();
        let (report, sent) = fire(bus, &due, db_now, started).await;
        if !sent.is_empty() {
            sqlx::query("DELETE FROM timers WHERE id = ANY($1)")
                .bind(&sent)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(report)
    }

    /// When the earliest pending timer is due (`None` when there is none), as the
    /// database stores it. It may already be past.
    async fn next_timer_at(&self) -> Result<Option<DateTime<Utc>>> {
        let next: Option<DateTime<Utc>> = sqlx::query_scalar("SELECT min(fire_at) FROM timers")
            .fetch_one(&self.pool)
            .await?;
        Ok(next)
    }

    /// How long until the earliest pending timer is due, by the database's clock
    /// (`Duration::ZERO` when it is already due; `None` when there is no timer). A firer
    /// sleeps this long rather than `next_timer_at() - Utc::now()`, so that a skew between
    /// its clock and the database's can neither make it spin nor oversleep.
    async fn next_timer_in(&self) -> Result<Option<Duration>> {
        let seconds: Option<f64> = sqlx::query_scalar(
            "SELECT EXTRACT(EPOCH FROM min(fire_at) - clock_timestamp())::float8 FROM timers",
        )
        .fetch_one(&self.pool)
        .await?;
        // NaN.max(0.0) is 0.0; an absurdly far timer saturates instead of panicking.
        Ok(seconds.map(|s| Duration::try_from_secs_f64(s.max(0.0)).unwrap_or(Duration::MAX)))
    }

    /// How many timers hold a message for `exchange`, by routing key.
    async fn delayed_messages(
        &self,
        exchange: &str,
    ) -> Result<std::collections::HashMap<String, u64>> {
        let rows: Vec<(String, i64)> = sqlx::query_as(
            "SELECT routing_key, count(*) FROM timers WHERE exchange = $1 GROUP BY routing_key",
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
