//! The decider's persistence on SQLite: load a run's history, and commit batches in ONE
//! write transaction (`BEGIN IMMEDIATE`) of multi-row statements (one per table), each
//! updated run checked against the version it was loaded at. See `store::pg::runs` for PostgreSQL's
//! single-statement version; the effects are the same.

use async_trait::async_trait;
use serde_json::Value;
use sqlx::{QueryBuilder, Row, Sqlite, SqliteConnection};
use uuid::Uuid;

use super::outbox::MAX_BINDS;
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
        let mut tx = self.write_tx().await?;
        match write_all(&mut tx, batches).await {
            Ok(()) => {
                tx.commit().await?;
                Ok(())
            }
            Err(e) => {
                // Dropping the transaction would roll back too; say it explicitly, and
                // report the write's error rather than the rollback's.
                let _ = tx.rollback().await;
                Err(e)
            }
        }
    }
}

/// Rows per multi-row statement: under [`MAX_BINDS`] parameters for the widest table.
const ROWS: usize = MAX_BINDS / 20;

/// Every write of `batches`, in the caller's transaction: one multi-row statement per
/// table (per [`ROWS`] rows), not one per row.
async fn write_all(conn: &mut SqliteConnection, batches: &[&CommitBatch]) -> Result<()> {
    fn all<'a, T>(
        batches: &[&'a CommitBatch],
        part: impl Fn(&'a CommitBatch) -> &'a Vec<T>,
    ) -> Vec<&'a T> {
        batches.iter().flat_map(|b| part(b).iter()).collect()
    }
    let refs = |refs: &[String]| serde_json::to_string(refs);
    let now = chrono::Utc::now();

    // Updated runs first: the old run of a reset is no longer current when its successor
    // is inserted. Each only at the version it was loaded at.
    let updated = all(batches, |b| &b.updated_runs);
    for chunk in updated.chunks(ROWS) {
        let mut q = QueryBuilder::<Sqlite>::new(
            "WITH u (run_id, expected, status, sub_status, output, variables, reason,
                     failed_task_refs, end_time, update_time, version, is_current) AS (",
        );
        let mut failed = Vec::with_capacity(chunk.len());
        for (r, _) in chunk {
            failed.push(refs(&r.failed_task_refs)?);
        }
        q.push_values(
            chunk.iter().zip(&failed),
            |mut row, ((r, expected), failed)| {
                row.push_bind(r.run_id)
                    .push_bind(*expected)
                    .push_bind(&r.status)
                    .push_bind(&r.sub_status)
                    .push_bind(&r.output)
                    .push_bind(&r.variables)
                    .push_bind(&r.reason)
                    .push_bind(failed)
                    .push_bind(r.end_time)
                    .push_bind(r.update_time)
                    .push_bind(r.version)
                    .push_bind(r.is_current);
            },
        );
        q.push(
            ") UPDATE runs SET status = u.status, sub_status = u.sub_status, output = u.output,
                 variables = u.variables, reason = u.reason,
                 failed_task_refs = u.failed_task_refs, end_time = u.end_time,
                 update_time = u.update_time, version = u.version, is_current = u.is_current
             FROM u WHERE runs.run_id = u.run_id AND runs.version = u.expected",
        );
        let done = q.build().execute(&mut *conn).await?;
        if done.rows_affected() != chunk.len() as u64 {
            // Which one moved matters little: the decider reloads every run of the batch.
            let (r, expected) = chunk[0];
            return Err(Error::VersionConflict {
                run_id: r.run_id,
                expected: *expected,
            });
        }
    }
    let new = all(batches, |b| &b.new_runs);
    for chunk in new.chunks(ROWS) {
        let mut failed = Vec::with_capacity(chunk.len());
        for r in chunk {
            failed.push(refs(&r.failed_task_refs)?);
        }
        let mut q = QueryBuilder::<Sqlite>::new(
            "INSERT INTO runs (run_id, workflow_id, workflow_name, workflow_version, status,
                 sub_status, input, output, variables, correlation_id, parent_workflow_id,
                 reason, failed_task_refs, start_time, end_time, update_time, version,
                 is_current, reset_from_run_id, reset_task_ref) ",
        );
        q.push_values(chunk.iter().zip(&failed), |mut row, (r, failed)| {
            row.push_bind(r.run_id)
                .push_bind(&r.workflow_id)
                .push_bind(&r.workflow_name)
                .push_bind(r.workflow_version)
                .push_bind(&r.status)
                .push_bind(&r.sub_status)
                .push_bind(&r.input)
                .push_bind(&r.output)
                .push_bind(&r.variables)
                .push_bind(&r.correlation_id)
                .push_bind(&r.parent_workflow_id)
                .push_bind(&r.reason)
                .push_bind(failed)
                .push_bind(r.start_time)
                .push_bind(r.end_time)
                .push_bind(r.update_time)
                .push_bind(r.version)
                .push_bind(r.is_current)
                .push_bind(r.reset_from.as_ref().map(|(id, _)| *id))
                .push_bind(r.reset_from.as_ref().map(|(_, t)| t.as_str()));
        });
        q.build().execute(&mut *conn).await?;
    }
    let events = all(batches, |b| &b.events);
    for chunk in events.chunks(ROWS) {
        let mut q = QueryBuilder::<Sqlite>::new(
            "INSERT INTO history_events (run_id, event_id, type, time, attributes) ",
        );
        q.push_values(chunk, |mut row, e| {
            row.push_bind(e.run_id)
                .push_bind(e.event_id)
                .push_bind(e.event.kind())
                .push_bind(e.time)
                .push_bind(e.event.attributes());
        });
        q.build().execute(&mut *conn).await?;
    }
    let tasks = all(batches, |b| &b.tasks);
    for chunk in tasks.chunks(ROWS) {
        let mut q = QueryBuilder::<Sqlite>::new(
            "INSERT INTO tasks (task_id, run_id, workflow_id, task_ref, task_type, task_name,
                 seq, iteration, attempt, status, input, output, reason, worker_id,
                 scheduled_time, start_time, end_time, update_time) ",
        );
        q.push_values(chunk, |mut row, t| {
            row.push_bind(t.task_id)
                .push_bind(t.run_id)
                .push_bind(&t.workflow_id)
                .push_bind(&t.task_ref)
                .push_bind(&t.task_type)
                .push_bind(&t.task_name)
                .push_bind(t.seq)
                .push_bind(t.iteration)
                .push_bind(t.attempt)
                .push_bind(&t.status)
                .push_bind(&t.input)
                .push_bind(&t.output)
                .push_bind(&t.reason)
                .push_bind(&t.worker_id)
                .push_bind(t.scheduled_time)
                .push_bind(t.start_time)
                .push_bind(t.end_time)
                .push_bind(t.update_time);
        });
        q.push(
            " ON CONFLICT (task_id) DO UPDATE SET status = excluded.status,
                 output = excluded.output, reason = excluded.reason,
                 worker_id = excluded.worker_id, start_time = excluded.start_time,
                 end_time = excluded.end_time, update_time = excluded.update_time,
                 attempt = excluded.attempt",
        );
        q.build().execute(&mut *conn).await?;
    }
    super::outbox::insert(conn, &all(batches, |b| &b.outbox)).await?;
    super::timers::insert(conn, &all(batches, |b| &b.timers)).await?;
    for o in all(batches, |b| &b.outcomes) {
        // A redelivered operator command was already answered: the first verdict stands.
        sqlx::query(
            "INSERT INTO operation_outcomes (request_id, workflow_id, status, body, created_at)
             VALUES (?, ?, ?, ?, ?)
             ON CONFLICT (request_id) DO NOTHING",
        )
        .bind(o.request_id)
        .bind(&o.workflow_id)
        .bind(o.status)
        .bind(&o.body)
        .bind(now)
        .execute(&mut *conn)
        .await?;
    }
    for d in all(batches, |b| &b.hook_deliveries) {
        // Only the head of a rollback sequence is due at once (store::hooks).
        let due = match d.group_seq {
            None | Some(0) => Some(now),
            Some(_) => None,
        };
        sqlx::query(
            "INSERT INTO hook_deliveries (id, workflow_id, run_id, hook, event, task_ref,
                 task_id, iteration, url, headers, body, signature, blocking, group_seq,
                 next_attempt_at, traceparent, created_at, updated_at)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
             ON CONFLICT (id) DO NOTHING",
        )
        .bind(d.id)
        .bind(&d.workflow_id)
        .bind(d.run_id)
        .bind(&d.hook)
        .bind(&d.event)
        .bind(&d.task_ref)
        .bind(d.task_id)
        .bind(d.iteration)
        .bind(&d.url)
        .bind(Value::Object(d.headers.clone()))
        .bind(&d.body)
        .bind(&d.signature)
        .bind(d.blocking)
        .bind(d.group_seq)
        .bind(due)
        .bind(&d.traceparent)
        .bind(now)
        .bind(now)
        .execute(&mut *conn)
        .await?;
    }
    let checks = all(batches, |b| &b.checks);
    for chunk in checks.chunks(ROWS) {
        // Scheduled attempts are created; an end applies to an attempt still open only.
        let mut q = QueryBuilder::<Sqlite>::new(
            "INSERT INTO task_check (task_id, attempt, workflow_id, run_id, task_name,
                 task_ref, reply_to, status, stop_reason, timeout_seconds, created_at,
                 updated_at, concurrency_limit, rate_limit, rate_window_seconds, worker_id,
                 started_at, expires_at) ",
        );
        q.push_values(chunk, |mut row, c| {
            // An eager attempt is created RUNNING, claimed for its worker.
            let eager = c.worker_id.is_some();
            let expires_at = (eager && c.timeout_seconds > 0)
                .then(|| now + chrono::Duration::seconds(c.timeout_seconds));
            row.push_bind(c.task_id)
                .push_bind(c.attempt)
                .push_bind(&c.workflow_id)
                .push_bind(c.run_id)
                .push_bind(&c.task_name)
                .push_bind(&c.task_ref)
                .push_bind(&c.reply_to)
                .push_bind(c.status.as_str())
                .push_bind(&c.reason)
                .push_bind(c.timeout_seconds)
                .push_bind(now)
                .push_bind(now)
                .push_bind(c.limits.columns().0)
                .push_bind(c.limits.columns().1)
                .push_bind(c.limits.columns().2)
                .push_bind(&c.worker_id)
                .push_bind(eager.then_some(now))
                .push_bind(expires_at);
        });
        q.push(
            " ON CONFLICT (task_id, attempt) DO UPDATE SET status = excluded.status,
                 stop_reason = excluded.stop_reason, updated_at = excluded.updated_at
             WHERE task_check.status IN ('SCHEDULED', 'RUNNING')
               AND excluded.status <> 'SCHEDULED'",
        );
        q.build().execute(&mut *conn).await?;
    }
    for start in all(batches, |b| &b.starts) {
        // A command published twice makes one start: the first row stands.
        sqlx::query(
            "INSERT INTO workflow_starts (workflow_id, workflow_name, workflow_version, input,
                 correlation_id, created_at)
             VALUES (?, ?, ?, ?, ?, ?)
             ON CONFLICT (workflow_id) DO NOTHING",
        )
        .bind(&start.workflow_id)
        .bind(&start.workflow_name)
        .bind(start.workflow_version)
        .bind(&start.input)
        .bind(&start.correlation_id)
        .bind(now)
        .execute(&mut *conn)
        .await?;
    }
    let ended = all(batches, |b| &b.ended_runs);
    for chunk in ended.chunks(MAX_BINDS) {
        let mut q = QueryBuilder::<Sqlite>::new("DELETE FROM timers WHERE run_id IN (");
        let mut list = q.separated(", ");
        for run_id in chunk {
            list.push_bind(**run_id);
        }
        q.push(")");
        q.build().execute(&mut *conn).await?;
    }
    Ok(())
}
