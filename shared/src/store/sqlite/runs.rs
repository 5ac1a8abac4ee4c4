//! The decider's persistence on SQLite: load a run's history, and commit a batch in ONE
//! write transaction (`BEGIN IMMEDIATE`) of plain statements, each updated run checked
//! against the version it was loaded at. See `store::pg::runs` for PostgreSQL's
//! single-statement version; the effects are the same.

use async_trait::async_trait;
use serde_json::Value;
use sqlx::{Row, SqliteConnection};
use uuid::Uuid;

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
    /// hook deliveries — batch after batch. On any error the transaction is rolled back:
    /// nothing is written.
    async fn commit_all(&self, batches: &[&CommitBatch]) -> Result<()> {
        let mut tx = self.write_tx().await?;
        let mut written = Ok(());
        for batch in batches {
            written = write_batch(&mut tx, batch).await;
            if written.is_err() {
                break;
            }
        }
        match written {
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

/// Every write of `batch`, in the caller's transaction.
async fn write_batch(conn: &mut SqliteConnection, batch: &CommitBatch) -> Result<()> {
    let refs = |refs: &[String]| serde_json::to_string(refs);
    for (r, expected) in &batch.updated_runs {
        let done = sqlx::query(
            "UPDATE runs SET status = ?, sub_status = ?, output = ?, variables = ?, reason = ?,
                 failed_task_refs = ?, end_time = ?, update_time = ?, version = ?,
                 is_current = ?
             WHERE run_id = ? AND version = ?",
        )
        .bind(&r.status)
        .bind(&r.sub_status)
        .bind(&r.output)
        .bind(&r.variables)
        .bind(&r.reason)
        .bind(refs(&r.failed_task_refs)?)
        .bind(r.end_time)
        .bind(r.update_time)
        .bind(r.version)
        .bind(r.is_current)
        .bind(r.run_id)
        .bind(expected)
        .execute(&mut *conn)
        .await?;
        if done.rows_affected() != 1 {
            return Err(Error::VersionConflict {
                run_id: r.run_id,
                expected: *expected,
            });
        }
    }
    for r in &batch.new_runs {
        sqlx::query(
            "INSERT INTO runs (run_id, workflow_id, workflow_name, workflow_version, status,
                 sub_status, input, output, variables, correlation_id, parent_workflow_id,
                 reason, failed_task_refs, start_time, end_time, update_time, version,
                 is_current, reset_from_run_id, reset_task_ref)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(r.run_id)
        .bind(&r.workflow_id)
        .bind(&r.workflow_name)
        .bind(r.workflow_version)
        .bind(&r.status)
        .bind(&r.sub_status)
        .bind(&r.input)
        .bind(&r.output)
        .bind(&r.variables)
        .bind(&r.correlation_id)
        .bind(&r.parent_workflow_id)
        .bind(&r.reason)
        .bind(refs(&r.failed_task_refs)?)
        .bind(r.start_time)
        .bind(r.end_time)
        .bind(r.update_time)
        .bind(r.version)
        .bind(r.is_current)
        .bind(r.reset_from.as_ref().map(|(id, _)| *id))
        .bind(r.reset_from.as_ref().map(|(_, t)| t.as_str()))
        .execute(&mut *conn)
        .await?;
    }
    for e in &batch.events {
        sqlx::query(
            "INSERT INTO history_events (run_id, event_id, type, time, attributes)
             VALUES (?, ?, ?, ?, ?)",
        )
        .bind(e.run_id)
        .bind(e.event_id)
        .bind(e.event.kind())
        .bind(e.time)
        .bind(e.event.attributes())
        .execute(&mut *conn)
        .await?;
    }
    for t in &batch.tasks {
        sqlx::query(
            "INSERT INTO tasks (task_id, run_id, workflow_id, task_ref, task_type, task_name,
                 seq, iteration, attempt, status, input, output, reason, worker_id,
                 scheduled_time, start_time, end_time, update_time)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
             ON CONFLICT (task_id) DO UPDATE SET status = excluded.status,
                 output = excluded.output, reason = excluded.reason,
                 worker_id = excluded.worker_id, start_time = excluded.start_time,
                 end_time = excluded.end_time, update_time = excluded.update_time,
                 attempt = excluded.attempt",
        )
        .bind(t.task_id)
        .bind(t.run_id)
        .bind(&t.workflow_id)
        .bind(&t.task_ref)
        .bind(&t.task_type)
        .bind(&t.task_name)
        .bind(t.seq)
        .bind(t.iteration)
        .bind(t.attempt)
        .bind(&t.status)
        .bind(&t.input)
        .bind(&t.output)
        .bind(&t.reason)
        .bind(&t.worker_id)
        .bind(t.scheduled_time)
        .bind(t.start_time)
        .bind(t.end_time)
        .bind(t.update_time)
        .execute(&mut *conn)
        .await?;
    }
    super::outbox::insert(conn, &batch.outbox).await?;
    super::timers::insert(conn, &batch.timers).await?;
    let now = chrono::Utc::now();
    for o in &batch.outcomes {
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
    for d in &batch.hook_deliveries {
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
    for c in &batch.checks {
        // Scheduled attempts are created; an end applies to an attempt still open only.
        sqlx::query(
            "INSERT INTO task_check (task_id, attempt, workflow_id, run_id, task_name,
                 task_ref, reply_to, status, stop_reason, timeout_seconds, created_at,
                 updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?11)
             ON CONFLICT (task_id, attempt) DO UPDATE SET status = excluded.status,
                 stop_reason = excluded.stop_reason, updated_at = excluded.updated_at
             WHERE task_check.status IN ('SCHEDULED', 'RUNNING')
               AND excluded.status <> 'SCHEDULED'",
        )
        .bind(c.task_id)
        .bind(c.attempt)
        .bind(&c.workflow_id)
        .bind(c.run_id)
        .bind(&c.task_name)
        .bind(&c.task_ref)
        .bind(&c.reply_to)
        .bind(c.status.as_str())
        .bind(&c.reason)
        .bind(c.timeout_seconds)
        .bind(now)
        .execute(&mut *conn)
        .await?;
    }
    for run_id in &batch.ended_runs {
        sqlx::query("DELETE FROM timers WHERE run_id = ?")
            .bind(run_id)
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}
