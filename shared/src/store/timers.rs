//! Durable timers: a delayed outbox. A writer (the decider) inserts a timer row in the
//! same transaction as the events that need it (retry back-off, WAIT durations,
//! timeouts); the row carries an already-encoded message and the time it is due. The
//! history service publishes each row once `fire_at` has passed — by the database's
//! clock, one clock for every replica (DESIGN.md §3.6) — then deletes it.
//!
//! Publish and delete share one transaction whose `FOR UPDATE SKIP LOCKED` keeps
//! several firers off the same rows. A crash after the publish and before the commit
//! leaves the row, which is published again later: a duplicate, which idempotent
//! consumers absorb; a row is never lost and never published before it is due.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::outbox::publish_all;
use crate::bus::Bus;
use crate::topology::Names;
use crate::{Envelope, Error, Result};

pub use super::pg::timers::{cancel_for_run, insert, DUE_TIMERS_QUERY};

/// A message to publish at (not before) `fire_at`.
#[derive(Debug, Clone)]
pub struct TimerRecord {
    /// Row id (UUIDv7, made by the writer).
    pub id: Uuid,
    /// The workflow the timer belongs to.
    pub workflow_id: String,
    /// The run it belongs to, if any; [`cancel_for_run`] removes a run's timers.
    pub run_id: Option<Uuid>,
    /// When it is due.
    pub fire_at: DateTime<Utc>,
    /// Target exchange.
    pub exchange: String,
    /// Routing key.
    pub routing_key: String,
    /// Encoded envelope.
    pub body: Vec<u8>,
    /// W3C trace context to carry along.
    pub traceparent: Option<String>,
}

impl TimerRecord {
    /// Encodes `envelope` for `exchange`/`routing_key`, due at `fire_at`.
    pub fn new(
        workflow_id: impl Into<String>,
        run_id: Option<Uuid>,
        fire_at: DateTime<Utc>,
        exchange: impl Into<String>,
        routing_key: impl Into<String>,
        envelope: &Envelope,
        traceparent: Option<String>,
    ) -> Result<Self> {
        Ok(Self {
            id: crate::ids::new_id(),
            workflow_id: workflow_id.into(),
            run_id,
            fire_at,
            exchange: exchange.into(),
            routing_key: routing_key.into(),
            body: envelope.to_bytes()?,
            traceparent,
        })
    }

    /// A command for the decider, due at `fire_at`: published to the commands exchange
    /// with the shard key of the envelope's workflow (its workflow and run ids are the
    /// timer's).
    pub fn command(
        names: &Names,
        fire_at: DateTime<Utc>,
        envelope: &Envelope,
        traceparent: Option<String>,
    ) -> Result<Self> {
        Self::new(
            envelope.workflow_id.clone(),
            envelope.run_id,
            fire_at,
            names.commands_exchange(),
            names.command_key_for(&envelope.workflow_id),
            envelope,
            traceparent,
        )
    }
}

/// What one firing round did.
#[derive(Debug, Default)]
pub struct FireReport {
    /// For each published timer: how late its publish was confirmed, i.e. the database's
    /// clock when the round selected it minus `fire_at`, plus the round's elapsed time.
    pub lateness: Vec<Duration>,
    /// Timers whose publish failed, with the error; their rows stay and fire later.
    pub failed: Vec<(Uuid, Error)>,
}

impl FireReport {
    /// Timers published (and deleted) in this round.
    pub fn fired(&self) -> usize {
        self.lateness.len()
    }
}

/// One span per timer being fired, with the traceparent to publish it with. Each firing
/// is a span of the trace that set the timer, so the run's trace shows the history
/// service between the decision that set it and the one it wakes. The spans are dropped
/// once the publishes are confirmed.
fn firing_spans<'a>(
    due: impl Iterator<Item = (Uuid, Option<&'a str>)>,
) -> Vec<(tracing::Span, Option<String>)> {
    due.map(|(id, parent)| {
        let span = tracing::info_span!("history.timer_fired", timer_id = %id);
        crate::telemetry::set_parent(&span, parent);
        let traceparent = span
            .in_scope(crate::telemetry::current_traceparent)
            .or_else(|| parent.map(str::to_owned));
        (span, traceparent)
    })
    .collect()
}

/// A due timer as a backend reads it.
#[derive(sqlx::FromRow)]
pub(super) struct DueTimer {
    pub id: Uuid,
    pub fire_at: DateTime<Utc>,
    pub exchange: String,
    pub routing_key: String,
    pub body: Vec<u8>,
    pub traceparent: Option<String>,
}

/// Publishes `due` (concurrently, confirmed, each in its [`firing_spans`] span) and
/// reports each timer's lateness — `now`, the store's clock when they were read, minus
/// its `fire_at`, plus the time since `started` — or its failure. Returns the report and
/// the ids published, whose rows the backend deletes.
pub(super) async fn fire(
    bus: &Bus,
    due: &[DueTimer],
    now: DateTime<Utc>,
    started: Instant,
) -> (FireReport, Vec<Uuid>) {
    let spans = firing_spans(due.iter().map(|t| (t.id, t.traceparent.as_deref())));
    let results = publish_all(
        bus,
        due.iter().zip(&spans).map(|(t, (_, traceparent))| {
            (
                t.exchange.as_str(),
                t.routing_key.as_str(),
                t.body.as_slice(),
                None,
                traceparent.as_deref(),
            )
        }),
    )
    .await;
    drop(spans);
    let elapsed = started.elapsed();
    let mut report = FireReport::default();
    let mut sent = Vec::with_capacity(due.len());
    for (timer, result) in due.iter().zip(results) {
        match result {
            Ok(()) => {
                sent.push(timer.id);
                let overdue = (now - timer.fire_at).to_std().unwrap_or_default();
                report.lateness.push(overdue + elapsed);
            }
            Err(e) => report.failed.push((timer.id, e)),
        }
    }
    (report, sent)
}
