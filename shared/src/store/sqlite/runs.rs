//! The decider's persistence on SQLite: load a run's history, and commit batches in ONE
//! synchronous write transaction (`BEGIN IMMEDIATE`, [`super::writer`]) of prepared
//! statements, each updated run checked against the version it was loaded at. See `store::pg::runs` for PostgreSQL's
//! single-statement version; the effects are the same.

use async_trait::async_trait;
use rusqlite::params;
use serde_json::Value;
use sqlx::Row;
use uuid::Uuid;

use super::writer::{id, id_opt, json, json_opt, ts, ts_opt};
use super::SqliteStore;
use crate::store::backend::RunStore;
use crate::store::runs::{CommitBatch, EventRow, StoredEvent};
use crate::{Error, Result};

#[async_trait]
impl RunStore for SqliteStore {
    /// Loads the current run of `workflow_id`: its version and full history, oldest first.
    async fn load_current_run(&self, workflow_id: &str) -> Result<Option<(i64, Vec<StoredEvent>)>> {
        let row =
            sqlx::query("SELECT run_id, version FROM runs WHERE workflow_id = ? AND is_current")
                .bind(workflow_id)
                .fetch_optional(&self.pool)
                .await?;
        let Some(row) = row else { return Ok(None) };
        let run_id: Uuid = row.try_get("run_id")?;
        let version: i64 = row.try_get("version")?;
        let events = self.run_events(run_id).await?;
        Ok(Some((version, events)))
    }

    /// The whole history of run `run_id`, oldest first.
    async fn run_events(&self, run_id: Uuid) -> Result<Vec<StoredEvent>> {
        let rows: Vec<EventRow> = sqlx::query_as(
            "SELECT event_id, time, type, attributes FROM history_events
             WHERE run_id = ? ORDER BY event_id",
        )
        .bind(run_id)
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(|r| r.into_event(run_id)).collect()
    }

    /// Commits `batch` atomically in one `BEGIN IMMEDIATE` transaction. Updated runs are
    /// written first, each only if its version is still the expected one (otherwise
    /// [`Error::VersionConflict`]); then new runs (the old run of a reset is no longer
    /// current by then, so "one current run per workflow", checked per statement here,
    /// holds; a collision with another current run is the index's unique violation),
    /// events, tasks (upserted), outbox rows, timers, verdicts (the first one stands) and
    /// hook deliveries — each table once for every batch. On any error the transaction is rolled back:
    /// nothing is written.
    async fn commit_all(&self, batches: &[&CommitBatch]) -> Result<()> {
        self.writer.transaction(|tx| write_all(tx, batches)).await
    }

    async fn fail_unreadable_run(&self, workflow_id: &str, reason: &str) -> Result<bool> {
        let now = ts(chrono::Utc::now());
        self.writer
            .transaction(|tx| {
                let failed = tx.execute(
                    "UPDATE runs SET status = 'FAILED', sub_status = 'FAILED', reason = ?2,
                         end_time = ?3, update_time = ?3
                     WHERE workflow_id = ?1 AND is_current AND status = 'RUNNING'",
                    params![workflow_id, reason, now],
                )?;
                Ok(failed > 0)
            })
            .await
    }
}

/// Every write of `batches`, in the caller's synchronous transaction: a prepared
/// statement per table, executed once per row.
fn write_all(tx: &rusqlite::Transaction<'_>, batches: &[&CommitBatch]) -> Result<()> {
    fn all<'a, T>(
        batches: &[&'a CommitBatch],
        part: impl Fn(&'a CommitBatch) -> &'a Vec<T>,
    ) -> Vec<&'a T> {
        batches.iter().flat_map(|b| part(b).iter()).collect()
    }
    let refs = |refs: &[String]| serde_json::to_string(refs);
    let now = chrono::Utc::now();
    let now_text = ts(now);

    // Updated runs first: the old run of a reset is no longer current when its successor
    // is inserted. Each only at the version it was loaded at.
    let updated = all(batches, |b| &b.updated_runs);
    if !updated.is_empty() {
        let mut update = tx.prepare_cached(
            "UPDATE runs SET status = ?3, sub_status = ?4, output = ?5, variables = ?6,
                 reason = ?7, failed_task_refs = ?8, end_time = ?9, update_time = ?10,
                 version = ?11, is_current = ?12, pending_signals = ?13
             WHERE run_id = ?1 AND version = ?2",
        )?;
        for (r, expected) in updated {
            let changed = update.execute(params![
                id(&r.run_id),
                expected,
                r.status,
                r.sub_status,
                json_opt(&r.output),
                json(&r.variables),
                r.reason,
                refs(&r.failed_task_refs)?,
                ts_opt(r.end_time),
                ts(r.update_time),
                r.version,
                r.is_current,
                json_opt(&r.pending_signals)
            ])?;
            if changed != 1 {
                return Err(Error::VersionConflict {
                    run_id: r.run_id,
                    expected: *expected,
                });
            }
        }
    }
    let new = all(batches, |b| &b.new_runs);
    if !new.is_empty() {
        let mut insert = tx.prepare_cached(
            "INSERT INTO runs (run_id, workflow_id, workflow_name, workflow_version, status,
                 sub_status, input, output, variables, correlation_id, parent_workflow_id,
                 reason, failed_task_refs, start_time, end_time, update_time, version,
                 is_current, reset_from_run_id, reset_task_ref, pending_signals)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16,
                 ?17, ?18, ?19, ?20, ?21)",
        )?;
        for r in new {
            insert.execute(params![
                id(&r.run_id),
                r.workflow_id,
                r.workflow_name,
                r.workflow_version,
                r.status,
                r.sub_status,
                json(&r.input),
                json_opt(&r.output),
                json(&r.variables),
                r.correlation_id,
                r.parent_workflow_id,
                r.reason,
                refs(&r.failed_task_refs)?,
                ts(r.start_time),
                ts_opt(r.end_time),
                ts(r.update_time),
                r.version,
                r.is_current,
                r.reset_from.as_ref().map(|(run, _)| id(run)),
                r.reset_from.as_ref().map(|(_, t)| t.as_str()),
                json_opt(&r.pending_signals)
            ])?;
        }
    }
    let events = all(batches, |b| &b.events);
    if !events.is_empty() {
        let mut insert = tx.prepare_cached(
            "INSERT INTO history_events (run_id, event_id, type, time, attributes)
             VALUES (?1, ?2, ?3, ?4, ?5)",
        )?;
        for e in events {
            insert.execute(params![
                id(&e.run_id),
                e.event_id,
                e.event.kind(),
                ts(e.time),
                e.event.attributes_text()
            ])?;
        }
    }
    let tasks = all(batches, |b| &b.tasks);
    if !tasks.is_empty() {
        let mut upsert = tx.prepare_cached(
            "INSERT INTO tasks (task_id, run_id, workflow_id, task_ref, task_type, task_name,
                 seq, iteration, attempt, status, input, output, reason, worker_id,
                 scheduled_time, start_time, end_time, update_time, callback_after_seconds,
                 domain)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16,
                 ?17, ?18, ?19, ?20)
             ON CONFLICT (task_id) DO UPDATE SET status = excluded.status,
                 output = excluded.output, reason = excluded.reason,
                 worker_id = excluded.worker_id, start_time = excluded.start_time,
                 end_time = excluded.end_time, update_time = excluded.update_time,
                 attempt = excluded.attempt,
                 callback_after_seconds = excluded.callback_after_seconds",
        )?;
        for t in tasks {
            upsert.execute(params![
                id(&t.task_id),
                id(&t.run_id),
                t.workflow_id,
                t.task_ref,
                t.task_type,
                t.task_name,
                t.seq,
                t.iteration,
                t.attempt,
                t.status,
                json(&t.input),
                json_opt(&t.output),
                t.reason,
                t.worker_id,
                ts(t.scheduled_time),
                ts_opt(t.start_time),
                ts_opt(t.end_time),
                ts(t.update_time),
                t.callback_after_seconds,
                t.domain
            ])?;
        }
    }
    super::outbox::insert_sync(tx, &all(batches, |b| &b.outbox))?;
    super::timers::insert_sync(tx, &all(batches, |b| &b.timers))?;
    let outcomes = all(batches, |b| &b.outcomes);
    if !outcomes.is_empty() {
        // A redelivered operator command was already answered: the first verdict stands.
        let mut insert = tx.prepare_cached(
            "INSERT INTO operation_outcomes (request_id, workflow_id, status, body, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (request_id) DO NOTHING",
        )?;
        for o in outcomes {
            insert.execute(params![
                id(&o.request_id),
                o.workflow_id,
                o.status,
                json(&o.body),
                now_text
            ])?;
        }
    }
    let deliveries = all(batches, |b| &b.hook_deliveries);
    if !deliveries.is_empty() {
        let mut insert = tx.prepare_cached(
            "INSERT INTO hook_deliveries (id, workflow_id, run_id, hook, event, task_ref,
                 task_id, iteration, url, headers, body, signature, blocking, group_seq,
                 next_attempt_at, traceparent, created_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16,
                 ?17, ?17)
             ON CONFLICT (id) DO NOTHING",
        )?;
        for d in deliveries {
            // Only the head of a rollback sequence is due at once (store::hooks).
            let due = match d.group_seq {
                None | Some(0) => Some(now_text.as_str()),
                Some(_) => None,
            };
            insert.execute(params![
                id(&d.id),
                d.workflow_id,
                id(&d.run_id),
                d.hook,
                d.event,
                d.task_ref,
                id_opt(&d.task_id),
                d.iteration,
                d.url,
                json(&Value::Object(d.headers.clone())),
                d.body,
                d.signature,
                d.blocking,
                d.group_seq,
                due,
                d.traceparent,
                now_text
            ])?;
        }
    }
    let checks = all(batches, |b| &b.checks);
    if !checks.is_empty() {
        // Scheduled attempts are created; an end applies to an attempt still open only.
        let mut upsert = tx.prepare_cached(
            "INSERT INTO task_check (task_id, attempt, workflow_id, run_id, task_name,
                 task_ref, reply_to, status, stop_reason, timeout_seconds, created_at,
                 updated_at, concurrency_limit, rate_limit, rate_window_seconds, worker_id,
                 started_at, expires_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?11, ?12, ?13, ?14, ?15,
                 ?16, ?17)
             ON CONFLICT (task_id, attempt) DO UPDATE SET status = excluded.status,
                 stop_reason = excluded.stop_reason, updated_at = excluded.updated_at,
                 worker_id = CASE WHEN excluded.status = 'SCHEDULED' THEN NULL
                     ELSE task_check.worker_id END,
                 started_at = CASE WHEN excluded.status = 'SCHEDULED' THEN NULL
                     ELSE task_check.started_at END,
                 expires_at = CASE WHEN excluded.status = 'SCHEDULED' THEN NULL
                     ELSE task_check.expires_at END
             WHERE task_check.status IN ('SCHEDULED', 'RUNNING')",
        )?;
        for c in checks {
            // An eager attempt is created RUNNING, claimed for its worker.
            let eager = c.worker_id.is_some();
            let expires_at = (eager && c.timeout_seconds > 0)
                .then(|| ts(now + chrono::Duration::seconds(c.timeout_seconds)));
            let (concurrency, rate, window) = c.limits.columns();
            upsert.execute(params![
                id(&c.task_id),
                c.attempt,
                c.workflow_id,
                id(&c.run_id),
                c.task_name,
                c.task_ref,
                c.reply_to,
                c.status.as_str(),
                c.reason,
                c.timeout_seconds,
                now_text,
                concurrency,
                rate,
                window,
                c.worker_id,
                eager.then_some(now_text.as_str()),
                expires_at
            ])?;
        }
    }
    let starts = all(batches, |b| &b.starts);
    if !starts.is_empty() {
        // A command published twice makes one start: the first row stands.
        let mut insert = tx.prepare_cached(
            "INSERT INTO workflow_starts (workflow_id, workflow_name, workflow_version, input,
                 correlation_id, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)
             ON CONFLICT (workflow_id) DO NOTHING",
        )?;
        for start in starts {
            insert.execute(params![
                start.workflow_id,
                start.workflow_name,
                start.workflow_version,
                json(&start.input),
                start.correlation_id,
                now_text
            ])?;
        }
    }
    let ended = all(batches, |b| &b.ended_runs);
    if !ended.is_empty() {
        let mut delete = tx.prepare_cached("DELETE FROM timers WHERE run_id = ?1")?;
        for run_id in ended {
            delete.execute([id(run_id)])?;
        }
    }
    let cancelled = all(batches, |b| &b.cancelled_timers);
    if !cancelled.is_empty() {
        let mut delete = tx.prepare_cached("DELETE FROM timers WHERE id = ?1")?;
        for timer_id in cancelled {
            delete.execute([id(timer_id)])?;
        }
    }
    Ok(())
}
