//! The registry's rows (`task_check`) on SQLite. Batches are written one row per
//! statement inside one `BEGIN IMMEDIATE` transaction (statements are cheap in-process);
//! deadlines are computed in Rust, by this process's clock.
//!
//! The scan cannot lock its candidates across the liveness probe: it reads them, asks
//! the probe, then re-checks each in its write transaction (still RUNNING and still past
//! its deadline) before timing it out, so an end or a heartbeat written meanwhile wins.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, TimeZone, Utc};
use rusqlite::{params, OptionalExtension};
use sqlx::{QueryBuilder, Sqlite, SqliteConnection};
use uuid::Uuid;

use super::outbox::{minus, plus, MAX_BINDS};
use super::writer::{id, ts, ts_opt};
use super::SqliteStore;
use crate::messages::{AttemptStarted, ClaimAttempt};
use crate::registry::limits::{AttemptLimits, Gate, Window};
use crate::registry::rows::{
    claim_outcome, deferred, stored, BeatWrite, CheckRow, ClaimOutcome, End, Limited, LimitedClaim,
    ScanCandidate, ScanOutcome, ScanScope, Stored, StoredRow, CHECK_COLUMNS,
};
use crate::registry::scan::{judge, reason, timeout_messages, Sorted};
use crate::registry::TaskCheck;
use crate::store::backend::{LivenessProbe, RegistryStore};
use crate::topology::Names;
use crate::{Error, Result};

const STORED_COLUMNS: &str = "task_id, attempt, status, stop_reason, timeout_seconds";

/// A refused claim's row, with what the limited path needs: `(status, stop_reason,
/// timeout_seconds, task_name, concurrency_limit, rate_limit, rate_window_seconds)`.
type LimitRow = (
    String,
    Option<String>,
    i64,
    String,
    Option<i32>,
    Option<i32>,
    Option<i32>,
);

/// `secs` seconds after `at` (`None` when `secs` is 0: not watched).
fn deadline(at: DateTime<Utc>, secs: i64) -> Option<DateTime<Utc>> {
    (secs > 0).then(|| plus(at, Duration::from_secs(secs.unsigned_abs())))
}

/// The row of one attempt, read back inside a transaction.
async fn read_stored(conn: &mut SqliteConnection, task_id: Uuid, attempt: i32) -> Result<Stored> {
    let row: StoredRow = sqlx::query_as(&format!(
        "SELECT {STORED_COLUMNS} FROM task_check WHERE task_id = ? AND attempt = ?"
    ))
    .bind(task_id)
    .bind(attempt)
    .fetch_one(&mut *conn)
    .await?;
    stored(row)
}

/// Writes heartbeats of RUNNING attempts: last heartbeat (never moved backwards),
/// deadline = last heartbeat + timeout, details. Returns the attempts written.
async fn write_beats(conn: &mut SqliteConnection, beats: &[BeatWrite]) -> Result<u64> {
    let now = Utc::now();
    let mut written = HashSet::new();
    for b in beats {
        let beat_at = match b.at_ms {
            Some(ms) => Utc
                .timestamp_millis_opt(ms)
                .single()
                .ok_or_else(|| Error::Decode(format!("heartbeat time {ms} ms")))?,
            None => now,
        };
        let row: Option<(Option<DateTime<Utc>>, i64)> = sqlx::query_as(
            "SELECT last_heartbeat_at, timeout_seconds FROM task_check
             WHERE task_id = ? AND attempt = ? AND status = 'RUNNING'",
        )
        .bind(b.task_id)
        .bind(b.attempt)
        .fetch_optional(&mut *conn)
        .await?;
        let Some((last, timeout_seconds)) = row else {
            continue;
        };
        let last = last.map_or(beat_at, |l| l.max(beat_at));
        sqlx::query(
            "UPDATE task_check SET last_heartbeat_at = ?3, expires_at = ?4,
                 details = COALESCE(json(?5), details), updated_at = ?6
             WHERE task_id = ?1 AND attempt = ?2",
        )
        .bind(b.task_id)
        .bind(b.attempt)
        .bind(last)
        .bind(deadline(last, timeout_seconds))
        .bind(b.details.as_deref())
        .bind(now)
        .execute(&mut *conn)
        .await?;
        written.insert((b.task_id, b.attempt));
    }
    Ok(written.len() as u64)
}

/// A RUNNING attempt past its deadline, as the scan reads it.
#[derive(sqlx::FromRow)]
struct CandidateRow {
    task_id: Uuid,
    attempt: i32,
    workflow_id: String,
    run_id: Option<Uuid>,
    reply_to: String,
    timeout_seconds: i64,
    last_heartbeat_at: Option<DateTime<Utc>>,
    expires_at: DateTime<Utc>,
}

/// The outcome of a claim that took attempt `s`, watched for `timeout` seconds.
fn granted(s: &AttemptStarted, timeout: i64) -> Result<ClaimOutcome> {
    claim_outcome(
        s.attempt.task_id,
        s.attempt.attempt,
        true,
        None,
        None,
        timeout,
        None,
    )
}

/// Claims each of `claims` (compare-and-set) in the caller's synchronous transaction.
fn claim_each(
    tx: &rusqlite::Transaction<'_>,
    claims: &[&ClaimAttempt],
) -> Result<Vec<ClaimOutcome>> {
    let now = Utc::now();
    let now_text = ts(now);
    let mut outcomes = Vec::with_capacity(claims.len());
    for c in claims {
        let s = &c.started;
        let granted = |timeout| granted(s, timeout);
        // The usual case in one statement: the scheduled row becomes RUNNING.
        let claimed: Option<i64> = tx
            .prepare_cached(
                "UPDATE task_check SET status = 'RUNNING', worker_id = ?3, started_at = ?4,
                     last_heartbeat_at = NULL, stop_reason = NULL, updated_at = ?5,
                     expires_at = CASE WHEN timeout_seconds > 0
                         THEN strftime('%Y-%m-%dT%H:%M:%f+00:00', ?5, '+' || timeout_seconds || ' seconds')
                     END
                 WHERE task_id = ?1 AND attempt = ?2
                   AND ((status = 'SCHEDULED' AND concurrency_limit IS NULL
                         AND rate_limit IS NULL)
                        OR (status = 'RUNNING' AND ?6))
                 RETURNING timeout_seconds",
            )?
            .query_row(
                params![
                    id(&s.attempt.task_id),
                    s.attempt.attempt,
                    s.worker_id,
                    ts(s.started_at),
                    now_text,
                    c.takeover
                ],
                |row| row.get(0),
            )
            .optional()?;
        if let Some(timeout) = claimed {
            outcomes.push(granted(timeout)?);
            continue;
        }
        let row: Option<LimitRow> = tx
            .prepare_cached(
                "SELECT status, stop_reason, timeout_seconds, task_name, concurrency_limit,
                     rate_limit, rate_window_seconds
                 FROM task_check WHERE task_id = ?1 AND attempt = ?2",
            )?
            .query_row(params![id(&s.attempt.task_id), s.attempt.attempt], |row| {
                Ok((
                    row.get(0)?,
                    row.get(1)?,
                    row.get(2)?,
                    row.get(3)?,
                    row.get(4)?,
                    row.get(5)?,
                    row.get(6)?,
                ))
            })
            .optional()?;
        let outcome = match row {
            None => {
                let timeout = s.response_timeout_seconds.max(0);
                tx.prepare_cached(
                    "INSERT INTO task_check (task_id, attempt, workflow_id, run_id,
                         task_name, task_ref, worker_id, reply_to, status, input_bytes,
                         timeout_seconds, started_at, last_heartbeat_at, expires_at,
                         created_at, updated_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 'RUNNING', ?9, ?10, ?11,
                             NULL, ?13, ?12, ?12)",
                )?
                .execute(params![
                    id(&s.attempt.task_id),
                    s.attempt.attempt,
                    s.workflow_id,
                    id(&s.run_id),
                    s.task_name,
                    s.task_ref,
                    s.worker_id,
                    s.reply_to,
                    s.input_bytes,
                    timeout,
                    ts(s.started_at),
                    now_text,
                    ts_opt(deadline(now, timeout))
                ])?;
                granted(timeout)?
            }
            Some((status, reason, timeout, task_name, conc, rate, window)) => claim_outcome(
                s.attempt.task_id,
                s.attempt.attempt,
                false,
                Some(status),
                reason,
                timeout,
                Some(Limited {
                    task_name,
                    limits: AttemptLimits::from_columns(conc, rate, window),
                }),
            )?,
        };
        outcomes.push(outcome);
    }
    Ok(outcomes)
}

#[async_trait]
impl RegistryStore for SqliteStore {
    /// Claims attempts (compare-and-set inside one `BEGIN IMMEDIATE` transaction, so
    /// claims never interleave): SCHEDULED — or RUNNING with `takeover` — becomes RUNNING
    /// with a deadline of now + timeout; an unknown attempt is created RUNNING; any other
    /// is refused and read back. The first claim of a repeated attempt is the one tried.
    async fn claim_many(&self, claims: &[ClaimAttempt]) -> Result<Vec<ClaimOutcome>> {
        let mut seen = HashSet::new();
        let unique: Vec<&ClaimAttempt> = claims
            .iter()
            .filter(|c| seen.insert((c.started.attempt.task_id, c.started.attempt.attempt)))
            .collect();
        if unique.is_empty() {
            return Ok(Vec::new());
        }
        self.writer.transaction(|tx| claim_each(tx, &unique)).await
    }

    /// Claims attempts of limited tasks in one `BEGIN IMMEDIATE` transaction (the single
    /// writer serializes them with every other claim): per task name, its RUNNING limited
    /// attempts are counted (partial index `task_check_limited_running`), its rate
    /// window read, [`Gate`] admits or defers each claim in order, the admitted are
    /// claimed (compare-and-set) and the window written back.
    async fn claim_limited(&self, claims: &[LimitedClaim]) -> Result<Vec<ClaimOutcome>> {
        let mut by_name: BTreeMap<&str, Vec<&LimitedClaim>> = BTreeMap::new();
        let mut seen = HashSet::new();
        for c in claims {
            let a = c.claim.started.attempt;
            if seen.insert((a.task_id, a.attempt)) {
                by_name
                    .entry(c.limited.task_name.as_str())
                    .or_default()
                    .push(c);
            }
        }
        if by_name.is_empty() {
            return Ok(Vec::new());
        }
        let mut tx = self.writer.begin().await?;
        let mut outcomes = Vec::with_capacity(seen.len());
        for (name, group) in by_name {
            let now = Utc::now();
            let running: i64 = if group.iter().any(|c| c.limited.limits.concurrency.is_some()) {
                sqlx::query_scalar(
                    "SELECT count(*) FROM task_check
                     WHERE task_name = ? AND status = 'RUNNING'
                       AND concurrency_limit IS NOT NULL",
                )
                .bind(name)
                .fetch_one(&mut *tx)
                .await?
            } else {
                0
            };
            let window: Option<(DateTime<Utc>, i32)> = sqlx::query_as(
                "SELECT window_start, claims FROM task_rate_windows WHERE task_name = ?",
            )
            .bind(name)
            .fetch_optional(&mut *tx)
            .await?;
            let mut gate = Gate::new(
                now.timestamp_millis(),
                running,
                window.map(|(start, claims)| Window {
                    start_ms: start.timestamp_millis(),
                    claims,
                }),
            );
            for c in group {
                if let Err(deferral) = gate.admit(&c.limited.limits) {
                    outcomes.push(deferred(c, deferral));
                    continue;
                }
                let s = &c.claim.started;
                let claimed: Option<i64> = sqlx::query_scalar(
                    "UPDATE task_check SET status = 'RUNNING', worker_id = ?3, started_at = ?4,
                         last_heartbeat_at = NULL, stop_reason = NULL, updated_at = ?5,
                         expires_at = CASE WHEN timeout_seconds > 0
                             THEN strftime('%Y-%m-%dT%H:%M:%f+00:00', ?5, '+' || timeout_seconds || ' seconds')
                         END
                     WHERE task_id = ?1 AND attempt = ?2 AND status = 'SCHEDULED'
                     RETURNING timeout_seconds",
                )
                .bind(s.attempt.task_id)
                .bind(s.attempt.attempt)
                .bind(&s.worker_id)
                .bind(s.started_at)
                .bind(now)
                .fetch_optional(&mut *tx)
                .await?;
                let outcome = match claimed {
                    Some(timeout) => granted(s, timeout)?,
                    None => {
                        // Stopped or ended since the first step read it.
                        gate.release(&c.limited.limits);
                        let row: Option<(String, Option<String>, i64)> = sqlx::query_as(
                            "SELECT status, stop_reason, timeout_seconds FROM task_check
                             WHERE task_id = ? AND attempt = ?",
                        )
                        .bind(s.attempt.task_id)
                        .bind(s.attempt.attempt)
                        .fetch_optional(&mut *tx)
                        .await?;
                        let (status, reason, timeout) =
                            row.map_or((None, None, 0), |(s, r, t)| (Some(s), r, t));
                        claim_outcome(
                            s.attempt.task_id,
                            s.attempt.attempt,
                            false,
                            status,
                            reason,
                            timeout,
                            None,
                        )?
                    }
                };
                outcomes.push(outcome);
            }
            if let Some(w) = gate.window_to_store() {
                let start = DateTime::<Utc>::from_timestamp_millis(w.start_ms)
                    .ok_or_else(|| Error::Decode(format!("rate window start {} ms", w.start_ms)))?;
                sqlx::query(
                    "INSERT INTO task_rate_windows (task_name, window_start, claims)
                     VALUES (?1, ?2, ?3)
                     ON CONFLICT (task_name) DO UPDATE SET
                         window_start = excluded.window_start, claims = excluded.claims",
                )
                .bind(name)
                .bind(start)
                .bind(w.claims)
                .execute(&mut *tx)
                .await?;
            }
        }
        tx.commit().await?;
        Ok(outcomes)
    }

    /// The newest attempt of each task in `task_ids` (unknown tasks are absent).
    async fn load_latest(&self, task_ids: &[Uuid]) -> Result<Vec<Stored>> {
        let mut out = Vec::with_capacity(task_ids.len());
        for chunk in task_ids.chunks(MAX_BINDS) {
            let mut q = QueryBuilder::<Sqlite>::new(format!(
                "SELECT {STORED_COLUMNS} FROM (
                     SELECT {STORED_COLUMNS}, row_number() OVER (
                         PARTITION BY task_id ORDER BY attempt DESC) AS newest
                     FROM task_check WHERE task_id IN ("
            ));
            let mut list = q.separated(", ");
            for id in chunk {
                list.push_bind(*id);
            }
            q.push(")) WHERE newest = 1");
            let rows: Vec<StoredRow> = q.build_query_as().fetch_all(&self.pool).await?;
            for row in rows {
                out.push(stored(row)?);
            }
        }
        Ok(out)
    }

    async fn write_beats(&self, beats: &[BeatWrite]) -> Result<u64> {
        if beats.is_empty() {
            return Ok(0);
        }
        let mut tx = self.writer.begin().await?;
        let written = write_beats(&mut tx, beats).await?;
        tx.commit().await?;
        Ok(written)
    }

    /// Ends attempts (the first end of an attempt repeated in `ends` wins; an ended
    /// attempt keeps its first end; an attempt not registered yet gets a row in its end
    /// status). Returns the rows as they are afterwards.
    async fn end_each(&self, ends: &[End<'_>]) -> Result<Vec<Stored>> {
        let mut seen = HashSet::new();
        let unique: Vec<&End<'_>> = ends
            .iter()
            .filter(|e| seen.insert((e.attempt.task_id, e.attempt.attempt)))
            .collect();
        if unique.is_empty() {
            return Ok(Vec::new());
        }
        let now = Utc::now();
        let mut tx = self.writer.begin().await?;
        let mut rows = Vec::with_capacity(unique.len());
        for e in unique {
            sqlx::query(
                "INSERT INTO task_check (task_id, attempt, status, stop_reason, output_bytes,
                     created_at, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6)
                 ON CONFLICT (task_id, attempt) DO UPDATE SET
                     status = excluded.status, stop_reason = excluded.stop_reason,
                     output_bytes = excluded.output_bytes, updated_at = excluded.updated_at
                 WHERE task_check.status IN ('SCHEDULED', 'RUNNING')",
            )
            .bind(e.attempt.task_id)
            .bind(e.attempt.attempt)
            .bind(e.status.as_str())
            .bind(e.reason)
            .bind(e.output_bytes)
            .bind(now)
            .execute(&mut *tx)
            .await?;
            rows.push(read_stored(&mut tx, e.attempt.task_id, e.attempt.attempt).await?);
        }
        tx.commit().await?;
        Ok(rows)
    }

    /// The newest attempt's row of a task.
    async fn task_check(&self, task_id: Uuid) -> Result<Option<TaskCheck>> {
        let row: Option<CheckRow> = sqlx::query_as(&format!(
            "SELECT {CHECK_COLUMNS}
             FROM task_check WHERE task_id = ? ORDER BY attempt DESC LIMIT 1"
        ))
        .bind(task_id)
        .fetch_optional(&self.pool)
        .await?;
        row.map(CheckRow::into_check).transpose()
    }

    /// Reads up to `limit` RUNNING attempts past their deadline (oldest deadline first),
    /// asks `probe` about them with no transaction open, then in one write transaction
    /// writes the heartbeats of the live ones and times out the expired ones that are
    /// still RUNNING and past their deadline, with their `ActivityTimedOut` in the outbox.
    async fn scan_expired(
        &self,
        names: &Names,
        limit: i64,
        write_interval: Duration,
        probe: LivenessProbe<'_>,
        scope: ScanScope<'_>,
    ) -> Result<ScanOutcome> {
        let now = Utc::now();
        // A confirmation reads its few attempts by key; a scan the expired ones in order.
        let rows: Vec<CandidateRow> = match scope.only() {
            Some(ids) => {
                let mut rows = Vec::with_capacity(ids.len());
                for id in ids {
                    rows.extend(
                        sqlx::query_as::<_, CandidateRow>(
                            "SELECT task_id, attempt, workflow_id, run_id, reply_to,
                                    timeout_seconds, last_heartbeat_at, expires_at
                             FROM task_check
                             WHERE task_id = ? AND status = 'RUNNING'
                               AND expires_at IS NOT NULL AND expires_at < ?",
                        )
                        .bind(id)
                        .bind(now)
                        .fetch_all(&self.pool)
                        .await?,
                    );
                }
                rows
            }
            None => {
                sqlx::query_as(
                    "SELECT task_id, attempt, workflow_id, run_id, reply_to, timeout_seconds,
                            last_heartbeat_at, expires_at
                     FROM task_check
                     WHERE status = 'RUNNING' AND expires_at IS NOT NULL AND expires_at < ?
                     ORDER BY expires_at LIMIT ?",
                )
                .bind(now)
                .bind(limit)
                .fetch_all(&self.pool)
                .await?
            }
        };
        let surely = minus(now, write_interval);
        let candidates: Vec<ScanCandidate> = rows
            .into_iter()
            .map(|r| ScanCandidate {
                task_id: r.task_id,
                attempt: r.attempt,
                workflow_id: r.workflow_id,
                run_id: r.run_id,
                reply_to: r.reply_to,
                timeout_seconds: r.timeout_seconds,
                last_heartbeat_ms: r.last_heartbeat_at.map(|t| t.timestamp_millis()),
                surely_passed: r.expires_at < surely,
            })
            .filter(|c| scope.covers(c))
            .collect();
        let mut outcome = ScanOutcome::read(candidates.len());
        if candidates.is_empty() {
            return Ok(outcome);
        }
        let Sorted {
            alive,
            expired: maybe_expired,
            deferred,
        } = judge(candidates, probe).await;
        outcome.report.deferred = deferred;
        let now = Utc::now();
        let mut tx = self.writer.begin().await?;
        write_beats(&mut tx, &alive).await?;
        outcome.report.extended = alive.len();
        if matches!(scope, ScanScope::Suspect) {
            tx.commit().await?;
            outcome.suspected(&maybe_expired);
            return Ok(outcome);
        }
        let mut expired = Vec::with_capacity(maybe_expired.len());
        for c in maybe_expired {
            // Not locked since it was read: it may have ended or beaten meanwhile.
            let done = sqlx::query(
                "UPDATE task_check SET status = 'TIMED_OUT', stop_reason = ?3, updated_at = ?4
                 WHERE task_id = ?1 AND attempt = ?2 AND status = 'RUNNING'
                   AND expires_at IS NOT NULL AND expires_at < ?4",
            )
            .bind(c.task_id)
            .bind(c.attempt)
            .bind(reason(c.timeout_seconds))
            .bind(now)
            .execute(&mut *tx)
            .await?;
            match done.rows_affected() {
                0 => outcome.report.deferred += 1,
                _ => expired.push(c),
            }
        }
        if !expired.is_empty() {
            outcome.messages = timeout_messages(names, &expired)?;
            super::outbox::insert(&mut tx, &outcome.messages).await?;
        }
        tx.commit().await?;
        outcome.timed_out(&expired);
        Ok(outcome)
    }

    /// Deletes up to `batch` ended attempts last changed more than `retention` ago.
    async fn purge_task_checks(&self, retention: Duration, batch: i64) -> Result<u64> {
        let done = sqlx::query(
            "DELETE FROM task_check WHERE (task_id, attempt) IN (
                 SELECT task_id, attempt FROM task_check
                 WHERE status NOT IN ('RUNNING', 'SCHEDULED') AND updated_at < ? LIMIT ?)",
        )
        .bind(minus(Utc::now(), retention))
        .bind(batch)
        .execute(&mut *self.writer.sqlx().await?)
        .await?;
        Ok(done.rows_affected())
    }
}
