//! The decider's persistence: load a run's history, and commit a batch of state
//! changes (events, run rows, task rows, outbox) in one transaction with an
//! optimistic version check per run.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{PgConnection, Row};
use uuid::Uuid;

use super::outbox::{self, OutboxMessage};
use super::Store;
use crate::messages::Event;
use crate::{Error, Result};

/// The materialised row of a run (`runs`).
#[derive(Debug, Clone, PartialEq)]
pub struct RunRecord {
    /// The run.
    pub run_id: Uuid,
    /// Its workflow.
    pub workflow_id: String,
    /// Definition name.
    pub workflow_name: String,
    /// Definition version.
    pub workflow_version: i32,
    /// RUNNING, COMPLETED, FAILED, …
    pub status: String,
    /// The business sub-status (QUEUING, RUNNING, COMPLETED, …).
    pub sub_status: String,
    /// Workflow input.
    pub input: Value,
    /// Workflow output, once shaped.
    pub output: Option<Value>,
    /// Workflow variables.
    pub variables: Value,
    /// Caller's correlation id.
    pub correlation_id: Option<String>,
    /// Parent workflow of a child run.
    pub parent_workflow_id: Option<String>,
    /// Why the run failed or ended.
    pub reason: Option<String>,
    /// Refs whose failure failed the run.
    pub failed_task_refs: Vec<String>,
    /// When the run started.
    pub start_time: DateTime<Utc>,
    /// When it ended.
    pub end_time: Option<DateTime<Utc>>,
    /// Last change.
    pub update_time: DateTime<Utc>,
    /// Number of history events (the concurrency token).
    pub version: i64,
}

/// A task row (`tasks`).
#[derive(Debug, Clone, PartialEq)]
pub struct TaskRecord {
    /// The task.
    pub task_id: Uuid,
    /// Its run.
    pub run_id: Uuid,
    /// Its workflow.
    pub workflow_id: String,
    /// Reference name.
    pub task_ref: String,
    /// Type.
    pub task_type: String,
    /// Definition name.
    pub task_name: String,
    /// Schedule order.
    pub seq: i32,
    /// Loop iteration (0 outside loops).
    pub iteration: i32,
    /// Attempt, from 1.
    pub attempt: i32,
    /// SCHEDULED, IN_PROGRESS, COMPLETED, …
    pub status: String,
    /// Resolved input.
    pub input: Value,
    /// Output.
    pub output: Option<Value>,
    /// Failure reason.
    pub reason: Option<String>,
    /// Who ran it.
    pub worker_id: Option<String>,
    /// When scheduled.
    pub scheduled_time: DateTime<Utc>,
    /// When a worker started it.
    pub start_time: Option<DateTime<Utc>>,
    /// When it ended.
    pub end_time: Option<DateTime<Utc>>,
    /// Last change.
    pub update_time: DateTime<Utc>,
}

/// One stored history event.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredEvent {
    /// The run.
    pub run_id: Uuid,
    /// 1-based position in the run's history.
    pub event_id: i64,
    /// When it happened.
    pub time: DateTime<Utc>,
    /// The event.
    pub event: Event,
}

/// Everything one decider transaction writes.
#[derive(Debug, Default)]
pub struct CommitBatch {
    /// Runs created by this batch.
    pub new_runs: Vec<RunRecord>,
    /// Runs changed by this batch, each with the version it was loaded at.
    pub updated_runs: Vec<(RunRecord, i64)>,
    /// New history events.
    pub events: Vec<StoredEvent>,
    /// Task rows to insert or update.
    pub tasks: Vec<TaskRecord>,
    /// Messages to publish after the commit.
    pub outbox: Vec<OutboxMessage>,
}

impl CommitBatch {
    /// Whether there is nothing to write.
    pub fn is_empty(&self) -> bool {
        self.new_runs.is_empty() && self.updated_runs.is_empty() && self.events.is_empty()
    }
}

impl Store {
    /// Loads the current run of `workflow_id`: its version and full history, oldest first.
    pub async fn load_current_run(
        &self,
        workflow_id: &str,
    ) -> Result<Option<(i64, Vec<StoredEvent>)>> {
        let row =
            sqlx::query("SELECT run_id, version FROM runs WHERE workflow_id = $1 AND is_current")
                .bind(workflow_id)
                .fetch_optional(&self.pool)
                .await?;
        let Some(row) = row else { return Ok(None) };
        let run_id: Uuid = row.try_get("run_id")?;
        let version: i64 = row.try_get("version")?;
        let rows = sqlx::query(
            "SELECT event_id, time, type, attributes FROM history_events
             WHERE run_id = $1 ORDER BY event_id",
        )
        .bind(run_id)
        .fetch_all(&self.pool)
        .await?;
        let mut events = Vec::with_capacity(rows.len());
        for r in rows {
            let kind: String = r.try_get("type")?;
            let attributes: Value = r.try_get("attributes")?;
            events.push(StoredEvent {
                run_id,
                event_id: r.try_get("event_id")?,
                time: r.try_get("time")?,
                event: Event::from_parts(&kind, attributes)?,
            });
        }
        Ok(Some((version, events)))
    }

    /// Commits `batch` atomically. Returns [`Error::VersionConflict`] (and writes
    /// nothing) when another writer moved one of the updated runs.
    pub async fn commit(&self, batch: &mut CommitBatch) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        insert_runs(&mut tx, &batch.new_runs).await?;
        update_runs(&mut tx, &batch.updated_runs).await?;
        insert_events(&mut tx, &batch.events).await?;
        upsert_tasks(&mut tx, &batch.tasks).await?;
        outbox::insert(&mut tx, &mut batch.outbox).await?;
        tx.commit().await?;
        Ok(())
    }
}

async fn insert_runs(conn: &mut PgConnection, runs: &[RunRecord]) -> Result<()> {
    for r in runs {
        sqlx::query(
            "INSERT INTO runs (run_id, workflow_id, workflow_name, workflow_version, status,
                sub_status, input, output, variables, correlation_id, parent_workflow_id, reason,
                failed_task_refs, start_time, end_time, update_time, version, is_current)
             VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17,TRUE)",
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
        .bind(&r.failed_task_refs)
        .bind(r.start_time)
        .bind(r.end_time)
        .bind(r.update_time)
        .bind(r.version)
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}

async fn update_runs(conn: &mut PgConnection, runs: &[(RunRecord, i64)]) -> Result<()> {
    for (r, expected) in runs {
        let done = sqlx::query(
            "UPDATE runs SET status = $3, sub_status = $4, output = $5, variables = $6,
                reason = $7, failed_task_refs = $8, end_time = $9, update_time = $10, version = $11
             WHERE run_id = $1 AND version = $2",
        )
        .bind(r.run_id)
        .bind(expected)
        .bind(&r.status)
        .bind(&r.sub_status)
        .bind(&r.output)
        .bind(&r.variables)
        .bind(&r.reason)
        .bind(&r.failed_task_refs)
        .bind(r.end_time)
        .bind(r.update_time)
        .bind(r.version)
        .execute(&mut *conn)
        .await?;
        if done.rows_affected() != 1 {
            return Err(Error::VersionConflict {
                run_id: r.run_id,
                expected: *expected,
            });
        }
    }
    Ok(())
}

async fn insert_events(conn: &mut PgConnection, events: &[StoredEvent]) -> Result<()> {
    if events.is_empty() {
        return Ok(());
    }
    let run_ids: Vec<Uuid> = events.iter().map(|e| e.run_id).collect();
    let ids: Vec<i64> = events.iter().map(|e| e.event_id).collect();
    let kinds: Vec<&str> = events.iter().map(|e| e.event.kind()).collect();
    let times: Vec<DateTime<Utc>> = events.iter().map(|e| e.time).collect();
    let attrs: Vec<Value> = events.iter().map(|e| e.event.attributes()).collect();
    sqlx::query(
        "INSERT INTO history_events (run_id, event_id, type, time, attributes)
         SELECT * FROM UNNEST($1::uuid[], $2::bigint[], $3::text[], $4::timestamptz[], $5::jsonb[])",
    )
    .bind(&run_ids)
    .bind(&ids)
    .bind(&kinds)
    .bind(&times)
    .bind(&attrs)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

async fn upsert_tasks(conn: &mut PgConnection, tasks: &[TaskRecord]) -> Result<()> {
    if tasks.is_empty() {
        return Ok(());
    }
    macro_rules! col {
        ($f:expr) => {
            tasks.iter().map($f).collect::<Vec<_>>()
        };
    }
    sqlx::query(
        "INSERT INTO tasks (task_id, run_id, workflow_id, task_ref, task_type, task_name, seq,
            iteration, attempt, status, input, output, reason, worker_id, scheduled_time,
            start_time, end_time, update_time)
         SELECT * FROM UNNEST($1::uuid[], $2::uuid[], $3::text[], $4::text[], $5::text[],
            $6::text[], $7::int[], $8::int[], $9::int[], $10::text[], $11::jsonb[], $12::jsonb[],
            $13::text[], $14::text[], $15::timestamptz[], $16::timestamptz[], $17::timestamptz[],
            $18::timestamptz[])
         ON CONFLICT (task_id) DO UPDATE SET status = EXCLUDED.status, output = EXCLUDED.output,
            reason = EXCLUDED.reason, worker_id = EXCLUDED.worker_id,
            start_time = EXCLUDED.start_time, end_time = EXCLUDED.end_time,
            update_time = EXCLUDED.update_time, attempt = EXCLUDED.attempt",
    )
    .bind(col!(|t| t.task_id))
    .bind(col!(|t| t.run_id))
    .bind(col!(|t| t.workflow_id.as_str()))
    .bind(col!(|t| t.task_ref.as_str()))
    .bind(col!(|t| t.task_type.as_str()))
    .bind(col!(|t| t.task_name.as_str()))
    .bind(col!(|t| t.seq))
    .bind(col!(|t| t.iteration))
    .bind(col!(|t| t.attempt))
    .bind(col!(|t| t.status.as_str()))
    .bind(col!(|t| t.input.clone()))
    .bind(col!(|t| t.output.clone()))
    .bind(col!(|t| t.reason.as_deref()))
    .bind(col!(|t| t.worker_id.as_deref()))
    .bind(col!(|t| t.scheduled_time))
    .bind(col!(|t| t.start_time))
    .bind(col!(|t| t.end_time))
    .bind(col!(|t| t.update_time))
    .execute(&mut *conn)
    .await?;
    Ok(())
}
