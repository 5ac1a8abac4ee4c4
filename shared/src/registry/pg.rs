//! The registry's PostgreSQL statements (`task_check`, migration 0004). Every write
//! that touches many attempts is one statement over arrays (UNNEST), so a batch of
//! heartbeats costs one round trip.

use chrono::{DateTime, Utc};
use sqlx::{PgExecutor, PgPool};
use uuid::Uuid;

use super::model::{AttemptStatus, TaskCheck};
use crate::messages::{AttemptRef, AttemptStarted};
use crate::{Error, Result};

/// An attempt's status as stored.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Stored {
    pub task_id: Uuid,
    pub attempt: i32,
    pub status: AttemptStatus,
    pub reason: Option<String>,
    pub timeout_seconds: i64,
}

type StoredRow = (Uuid, i32, String, Option<String>, i64);

fn stored((task_id, attempt, status, reason, timeout_seconds): StoredRow) -> Result<Stored> {
    let status = AttemptStatus::parse(&status)
        .ok_or_else(|| Error::Decode(format!("task_check.status {status:?}")))?;
    Ok(Stored {
        task_id,
        attempt,
        status,
        reason,
        timeout_seconds,
    })
}

/// Registers a started attempt as RUNNING with a deadline of now + timeout (database
/// clock). An existing row keeps its status (a redelivered start changes nothing; a stop
/// or result that came first is not undone) but gets the attempt's details filled in.
/// Returns the row's status afterwards.
pub(crate) async fn insert_started(pool: &PgPool, s: &AttemptStarted) -> Result<Stored> {
    let mut rows = insert_started_many(pool, std::slice::from_ref(s)).await?;
    rows.pop()
        .ok_or_else(|| crate::Error::Decode("the registration returned no row".into()))
}

/// [`insert_started`] for many attempts in one statement (the last registration of an
/// attempt repeated in `started` wins). One row per distinct attempt, in no order.
pub(crate) async fn insert_started_many(
    pool: &PgPool,
    started: &[AttemptStarted],
) -> Result<Vec<Stored>> {
    // ON CONFLICT cannot touch a row twice in one statement.
    let mut seen = std::collections::HashSet::new();
    let unique: Vec<&AttemptStarted> = started
        .iter()
        .rev()
        .filter(|s| seen.insert((s.attempt.task_id, s.attempt.attempt)))
        .collect();
    let col = |f: fn(&AttemptStarted) -> String| unique.iter().map(|s| f(s)).collect::<Vec<_>>();
    let rows: Vec<StoredRow> = sqlx::query_as(
        "INSERT INTO task_check AS c (task_id, attempt, workflow_id, run_id, task_name, task_ref,
             worker_id, reply_to, status, input_bytes, timeout_seconds, started_at,
             last_heartbeat_at, expires_at)
         SELECT task_id, attempt, workflow_id, run_id, task_name, task_ref, worker_id,
             reply_to, 'RUNNING', input_bytes, timeout_seconds, started_at, now(),
             CASE WHEN timeout_seconds > 0 THEN now() + make_interval(secs => timeout_seconds) END
         FROM UNNEST($1::uuid[], $2::int[], $3::text[], $4::uuid[], $5::text[], $6::text[],
             $7::text[], $8::text[], $9::bigint[], $10::bigint[], $11::timestamptz[])
             AS x(task_id, attempt, workflow_id, run_id, task_name, task_ref, worker_id,
                  reply_to, input_bytes, timeout_seconds, started_at)
         ON CONFLICT (task_id, attempt) DO UPDATE SET
             workflow_id = EXCLUDED.workflow_id, run_id = EXCLUDED.run_id,
             task_name = EXCLUDED.task_name, task_ref = EXCLUDED.task_ref,
             worker_id = EXCLUDED.worker_id, reply_to = EXCLUDED.reply_to,
             input_bytes = EXCLUDED.input_bytes, timeout_seconds = EXCLUDED.timeout_seconds,
             started_at = EXCLUDED.started_at
         RETURNING task_id, attempt, status, stop_reason, timeout_seconds",
    )
    .bind(unique.iter().map(|s| s.attempt.task_id).collect::<Vec<_>>())
    .bind(unique.iter().map(|s| s.attempt.attempt).collect::<Vec<_>>())
    .bind(col(|s| s.workflow_id.clone()))
    .bind(unique.iter().map(|s| s.run_id).collect::<Vec<_>>())
    .bind(col(|s| s.task_name.clone()))
    .bind(col(|s| s.task_ref.clone()))
    .bind(col(|s| s.worker_id.clone()))
    .bind(col(|s| s.reply_to.clone()))
    .bind(unique.iter().map(|s| s.input_bytes).collect::<Vec<_>>())
    .bind(
        unique
            .iter()
            .map(|s| s.response_timeout_seconds.max(0))
            .collect::<Vec<_>>(),
    )
    .bind(unique.iter().map(|s| s.started_at).collect::<Vec<_>>())
    .fetch_all(pool)
    .await?;
    rows.into_iter().map(stored).collect()
}

/// The newest attempt of each task in `task_ids` (unknown tasks are absent).
pub(crate) async fn load_latest(pool: &PgPool, task_ids: &[Uuid]) -> Result<Vec<Stored>> {
    let rows: Vec<StoredRow> = sqlx::query_as(
        "SELECT DISTINCT ON (task_id) task_id, attempt, status, stop_reason, timeout_seconds
         FROM task_check WHERE task_id = ANY($1)
         ORDER BY task_id, attempt DESC",
    )
    .bind(task_ids)
    .fetch_all(pool)
    .await?;
    rows.into_iter().map(stored).collect()
}

/// A heartbeat to write to PostgreSQL.
#[derive(Debug, Clone)]
pub(crate) struct BeatWrite {
    pub task_id: Uuid,
    pub attempt: i32,
    /// When (ms since the epoch, Redis clock); `None`: now, by the database clock.
    pub at_ms: Option<i64>,
    /// Progress details (JSON text) to keep; `None` keeps the stored ones.
    pub details: Option<String>,
}

/// Writes heartbeats of RUNNING attempts: last heartbeat (never moved backwards),
/// deadline = last heartbeat + timeout, details. Returns the rows written.
pub(crate) async fn write_beats(pool: impl PgExecutor<'_>, beats: &[BeatWrite]) -> Result<u64> {
    if beats.is_empty() {
        return Ok(0);
    }
    let ids: Vec<Uuid> = beats.iter().map(|b| b.task_id).collect();
    let attempts: Vec<i32> = beats.iter().map(|b| b.attempt).collect();
    let at: Vec<Option<i64>> = beats.iter().map(|b| b.at_ms).collect();
    let details: Vec<Option<&str>> = beats.iter().map(|b| b.details.as_deref()).collect();
    let done = sqlx::query(
        "UPDATE task_check AS c SET
             last_heartbeat_at = GREATEST(c.last_heartbeat_at, u.beat_at),
             expires_at = CASE WHEN c.timeout_seconds > 0 THEN
                 GREATEST(c.last_heartbeat_at, u.beat_at) + make_interval(secs => c.timeout_seconds)
             END,
             details = COALESCE(u.details::jsonb, c.details),
             updated_at = now()
         FROM (SELECT task_id, attempt, details,
                      COALESCE(to_timestamp(at_ms / 1000.0), now()) AS beat_at
               FROM UNNEST($1::uuid[], $2::int[], $3::bigint[], $4::text[])
                    AS x(task_id, attempt, at_ms, details)) AS u
         WHERE c.task_id = u.task_id AND c.attempt = u.attempt AND c.status = 'RUNNING'",
    )
    .bind(&ids)
    .bind(&attempts)
    .bind(&at)
    .bind(&details)
    .execute(pool)
    .await?;
    Ok(done.rows_affected())
}

/// Ends RUNNING attempts with `status` (and `reason`, `output_bytes`); attempts not
/// registered yet get a row in that status, so that a late registration cannot bring
/// them back to RUNNING. Attempts already ended keep their first end. Returns every
/// attempt's status afterwards.
pub(crate) async fn end(
    pool: &PgPool,
    attempts: &[AttemptRef],
    status: AttemptStatus,
    reason: Option<&str>,
    output_bytes: Option<i64>,
) -> Result<Vec<Stored>> {
    let ends: Vec<End<'_>> = attempts
        .iter()
        .map(|a| End {
            attempt: *a,
            status,
            reason,
            output_bytes,
        })
        .collect();
    end_each(pool, &ends).await
}

/// How one attempt ends.
#[derive(Debug, Clone, Copy)]
pub(crate) struct End<'a> {
    pub attempt: AttemptRef,
    pub status: AttemptStatus,
    pub reason: Option<&'a str>,
    pub output_bytes: Option<i64>,
}

/// [`end`] with a status, reason and size per attempt, in one statement (the first end
/// of an attempt repeated in `ends` wins). Returns the rows as they are afterwards.
pub(crate) async fn end_each(pool: &PgPool, ends: &[End<'_>]) -> Result<Vec<Stored>> {
    let mut seen = std::collections::HashSet::new();
    let unique: Vec<&End<'_>> = ends
        .iter()
        .filter(|e| seen.insert((e.attempt.task_id, e.attempt.attempt)))
        .collect();
    let ids: Vec<Uuid> = unique.iter().map(|e| e.attempt.task_id).collect();
    let nums: Vec<i32> = unique.iter().map(|e| e.attempt.attempt).collect();
    let statuses: Vec<&str> = unique.iter().map(|e| e.status.as_str()).collect();
    let reasons: Vec<Option<&str>> = unique.iter().map(|e| e.reason).collect();
    let sizes: Vec<Option<i64>> = unique.iter().map(|e| e.output_bytes).collect();
    let mut tx = pool.begin().await?;
    sqlx::query(
        "INSERT INTO task_check AS c (task_id, attempt, status, stop_reason, output_bytes)
         SELECT task_id, attempt, status, stop_reason, output_bytes
         FROM UNNEST($1::uuid[], $2::int[], $3::text[], $4::text[], $5::bigint[])
             AS x(task_id, attempt, status, stop_reason, output_bytes)
         ON CONFLICT (task_id, attempt) DO UPDATE SET
             status = EXCLUDED.status, stop_reason = EXCLUDED.stop_reason,
             output_bytes = EXCLUDED.output_bytes, updated_at = now()
         WHERE c.status = 'RUNNING'",
    )
    .bind(&ids)
    .bind(&nums)
    .bind(&statuses)
    .bind(&reasons)
    .bind(&sizes)
    .execute(&mut *tx)
    .await?;
    let rows: Vec<StoredRow> = sqlx::query_as(
        "SELECT c.task_id, c.attempt, c.status, c.stop_reason, c.timeout_seconds
         FROM task_check c JOIN UNNEST($1::uuid[], $2::int[]) AS x(task_id, attempt)
           ON c.task_id = x.task_id AND c.attempt = x.attempt",
    )
    .bind(&ids)
    .bind(&nums)
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
    rows.into_iter().map(stored).collect()
}

/// `task_check` as read, before its status is parsed.
#[derive(sqlx::FromRow)]
struct CheckRow {
    task_id: Uuid,
    attempt: i32,
    workflow_id: String,
    run_id: Option<Uuid>,
    task_name: String,
    task_ref: String,
    worker_id: Option<String>,
    status: String,
    stop_reason: Option<String>,
    input_bytes: i64,
    output_bytes: Option<i64>,
    details: Option<serde_json::Value>,
    timeout_seconds: i64,
    started_at: Option<DateTime<Utc>>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    last_heartbeat_at: Option<DateTime<Utc>>,
    expires_at: Option<DateTime<Utc>>,
}

/// The newest attempt's row of a task.
pub(crate) async fn get(pool: &PgPool, task_id: Uuid) -> Result<Option<TaskCheck>> {
    let row: Option<CheckRow> = sqlx::query_as(
        "SELECT task_id, attempt, workflow_id, run_id, task_name, task_ref, worker_id,
                status, stop_reason, input_bytes, output_bytes, details, timeout_seconds,
                started_at, created_at, updated_at, last_heartbeat_at, expires_at
         FROM task_check WHERE task_id = $1 ORDER BY attempt DESC LIMIT 1",
    )
    .bind(task_id)
    .fetch_optional(pool)
    .await?;
    let Some(r) = row else { return Ok(None) };
    Ok(Some(TaskCheck {
        status: AttemptStatus::parse(&r.status)
            .ok_or_else(|| Error::Decode(format!("task_check.status {:?}", r.status)))?,
        task_id: r.task_id,
        attempt: r.attempt,
        workflow_id: r.workflow_id,
        run_id: r.run_id,
        task_name: r.task_name,
        task_ref: r.task_ref,
        worker_id: r.worker_id,
        stop_reason: r.stop_reason,
        input_bytes: r.input_bytes,
        output_bytes: r.output_bytes,
        details: r.details,
        timeout_seconds: r.timeout_seconds,
        started_at: r.started_at,
        created_at: r.created_at,
        updated_at: r.updated_at,
        last_heartbeat_at: r.last_heartbeat_at,
        expires_at: r.expires_at,
    }))
}
