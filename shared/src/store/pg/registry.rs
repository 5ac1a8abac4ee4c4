//! The registry's PostgreSQL statements (`task_check`, migration 0004). Every write
//! that touches many attempts is one statement over arrays (UNNEST), so a batch of
//! heartbeats costs one round trip.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::{PgExecutor, PgPool};
use uuid::Uuid;

use super::outbox;
use super::PgStore;
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

/// A claim's outcome as read back: `(task_id, attempt, claimed, status, stop_reason,
/// timeout_seconds, task_name, concurrency_limit, rate_limit, rate_window_seconds)`; the
/// status is `None` when another claim created the row meanwhile.
type ClaimRow = (
    Uuid,
    i32,
    bool,
    Option<String>,
    Option<String>,
    i64,
    Option<String>,
    Option<i32>,
    Option<i32>,
    Option<i32>,
);

/// Claims attempts for their workers (compare-and-set, one statement): a SCHEDULED
/// attempt, or a RUNNING one when the claim may take it over, becomes RUNNING with a
/// deadline of now + timeout (database clock); an attempt with no row yet (scheduled
/// before the decider wrote rows) is created RUNNING; any other is refused and read back.
/// A SCHEDULED attempt under limits is left alone and flagged for [`claim_limited`]: all
/// limits add to this statement is a condition and a few columns of rows it reads
/// anyway. One outcome per distinct attempt (the first claim of a repeated attempt is the
/// one tried; the others are refused), in no order.
async fn claim_many(
    conn: &mut sqlx::PgConnection,
    claims: &[ClaimAttempt],
) -> Result<Vec<ClaimOutcome>> {
    let mut seen = std::collections::HashSet::new();
    let unique: Vec<&ClaimAttempt> = claims
        .iter()
        .filter(|c| seen.insert((c.started.attempt.task_id, c.started.attempt.attempt)))
        .collect();
    let col =
        |f: fn(&AttemptStarted) -> String| unique.iter().map(|c| f(&c.started)).collect::<Vec<_>>();
    let rows: Vec<ClaimRow> = sqlx::query_as(
        "WITH x AS (
             SELECT * FROM UNNEST($1::uuid[], $2::int[], $3::text[], $4::uuid[], $5::text[],
                 $6::text[], $7::text[], $8::text[], $9::bigint[], $10::bigint[],
                 $11::timestamptz[], $12::bool[])
                 AS x(task_id, attempt, workflow_id, run_id, task_name, task_ref, worker_id,
                      reply_to, input_bytes, timeout_seconds, started_at, takeover)
         ), claimed AS (
             UPDATE task_check c SET status = 'RUNNING', worker_id = x.worker_id,
                 started_at = x.started_at, last_heartbeat_at = NULL, stop_reason = NULL,
                 expires_at = CASE WHEN c.timeout_seconds > 0
                     THEN now() + make_interval(secs => c.timeout_seconds) END,
                 updated_at = now()
             FROM x
             WHERE c.task_id = ANY($1::uuid[])
               AND c.task_id = x.task_id AND c.attempt = x.attempt
               AND ((c.status = 'SCHEDULED' AND c.concurrency_limit IS NULL
                     AND c.rate_limit IS NULL)
                    -- A takeover keeps the attempt RUNNING: no limit's count changes.
                    OR (c.status = 'RUNNING' AND x.takeover))
             RETURNING c.task_id, c.attempt, c.timeout_seconds
         ), created AS (
             INSERT INTO task_check (task_id, attempt, workflow_id, run_id, task_name,
                 task_ref, worker_id, reply_to, status, input_bytes, timeout_seconds,
                 started_at, last_heartbeat_at, expires_at)
             SELECT x.task_id, x.attempt, x.workflow_id, x.run_id, x.task_name, x.task_ref,
                 x.worker_id, x.reply_to, 'RUNNING', x.input_bytes, x.timeout_seconds,
                 x.started_at, NULL,
                 CASE WHEN x.timeout_seconds > 0
                     THEN now() + make_interval(secs => x.timeout_seconds) END
             FROM x
             -- An existing row (the usual case) conflicts: the update above claims it.
             ON CONFLICT (task_id, attempt) DO NOTHING
             RETURNING task_id, attempt, timeout_seconds
         )
         SELECT x.task_id, x.attempt,
             (k.task_id IS NOT NULL OR n.task_id IS NOT NULL),
             c.status, c.stop_reason,
             COALESCE(k.timeout_seconds, n.timeout_seconds, c.timeout_seconds, 0),
             c.task_name, c.concurrency_limit, c.rate_limit, c.rate_window_seconds
         FROM x
         LEFT JOIN claimed k ON k.task_id = x.task_id AND k.attempt = x.attempt
         LEFT JOIN created n ON n.task_id = x.task_id AND n.attempt = x.attempt
         -- By primary key, one row each (a join was planned as a sequential scan).
         LEFT JOIN LATERAL (SELECT status, stop_reason, timeout_seconds, task_name,
                                   concurrency_limit, rate_limit, rate_window_seconds
                            FROM task_check t
                            WHERE t.task_id = x.task_id AND t.attempt = x.attempt) c ON true",
    )
    .bind(
        unique
            .iter()
            .map(|c| c.started.attempt.task_id)
            .collect::<Vec<_>>(),
    )
    .bind(
        unique
            .iter()
            .map(|c| c.started.attempt.attempt)
            .collect::<Vec<_>>(),
    )
    .bind(col(|s| s.workflow_id.clone()))
    .bind(unique.iter().map(|c| c.started.run_id).collect::<Vec<_>>())
    .bind(col(|s| s.task_name.clone()))
    .bind(col(|s| s.task_ref.clone()))
    .bind(col(|s| s.worker_id.clone()))
    .bind(col(|s| s.reply_to.clone()))
    .bind(
        unique
            .iter()
            .map(|c| c.started.input_bytes)
            .collect::<Vec<_>>(),
    )
    .bind(
        unique
            .iter()
            .map(|c| c.started.response_timeout_seconds.max(0))
            .collect::<Vec<_>>(),
    )
    .bind(
        unique
            .iter()
            .map(|c| c.started.started_at)
            .collect::<Vec<_>>(),
    )
    .bind(unique.iter().map(|c| c.takeover).collect::<Vec<_>>())
    .fetch_all(conn)
    .await?;
    rows.into_iter()
        .map(
            |(task_id, attempt, claimed, status, reason, timeout, name, conc, rate, window)| {
                let limited = name.map(|task_name| Limited {
                    task_name,
                    limits: AttemptLimits::from_columns(conc, rate, window),
                });
                claim_outcome(task_id, attempt, claimed, status, reason, timeout, limited)
            },
        )
        .collect()
}

/// The key space of the task-name locks (the first key of the two-key advisory lock;
/// sqlx's migrator uses the one-key form, a separate space).
const LIMITS_LOCK_SPACE: i32 = 0x5745_4c31; // "WEL1"

/// What a limited claim reads under its task name's lock: the clock, the name's RUNNING
/// attempts under a concurrency limit (`$2`: when any claim has one; through the partial
/// index `task_check_limited_running`, which holds those rows only) and its rate window.
/// Checked with EXPLAIN by the heartbeat service's tests.
pub const GATE_SQL: &str = "SELECT clock_timestamp(),
     CASE WHEN $2 THEN (SELECT count(*) FROM task_check
                        WHERE task_name = $1 AND status = 'RUNNING'
                          AND concurrency_limit IS NOT NULL)
          ELSE 0 END,
     (SELECT window_start FROM task_rate_windows WHERE task_name = $1),
     (SELECT claims FROM task_rate_windows WHERE task_name = $1)";

/// `(now, running limited attempts of the name, window start, window claims)`, read
/// under the name's lock.
type GateRow = (DateTime<Utc>, i64, Option<DateTime<Utc>>, Option<i32>);

/// Claims attempts of limited tasks (the second step of a claim, see
/// [`RegistryStore::claim_limited`]): one transaction per task name, holding the name's
/// advisory lock (`pg_advisory_xact_lock`), so that limited claims of a name on every
/// heartbeat replica and gateway are judged one group at a time against the state the
/// previous group committed. Under the lock: the name's RUNNING limited attempts are
/// counted through the partial index `task_check_limited_running`, its rate window is
/// read, [`Gate`] admits or defers each claim in order, the admitted are claimed
/// (compare-and-set, as in [`claim_many`]) and the window is written back. Attempts
/// end without the lock (the decider's commit, the scanner): that only frees room.
async fn claim_limited(pool: &PgPool, claims: &[LimitedClaim]) -> Result<Vec<ClaimOutcome>> {
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
    let mut outcomes = Vec::with_capacity(seen.len());
    for (name, group) in by_name {
        outcomes.extend(claim_name(pool, name, &group).await?);
    }
    Ok(outcomes)
}

/// [`claim_limited`] for the claims of one task name, in one transaction.
async fn claim_name(
    pool: &PgPool,
    name: &str,
    group: &[&LimitedClaim],
) -> Result<Vec<ClaimOutcome>> {
    let mut tx = pool.begin().await?;
    // Its own statement: the reads below must see what the lock's previous holder
    // committed, so they take their snapshot after it is granted.
    sqlx::query("SELECT pg_advisory_xact_lock($1, hashtext($2))")
        .bind(LIMITS_LOCK_SPACE)
        .bind(name)
        .execute(&mut *tx)
        .await?;
    let count = group.iter().any(|c| c.limited.limits.concurrency.is_some());
    let (now, running, start, claims): GateRow = sqlx::query_as(GATE_SQL)
        .bind(name)
        .bind(count)
        .fetch_one(&mut *tx)
        .await?;
    let window = start.zip(claims).map(|(start, claims)| Window {
        start_ms: start.timestamp_millis(),
        claims,
    });
    let mut gate = Gate::new(now.timestamp_millis(), running, window);
    let mut outcomes = Vec::with_capacity(group.len());
    let mut admitted = Vec::new();
    for c in group {
        match gate.admit(&c.limited.limits) {
            Ok(()) => admitted.push(*c),
            Err(deferral) => outcomes.push(deferred(c, deferral)),
        }
    }
    if !admitted.is_empty() {
        let ids: Vec<Uuid> = admitted
            .iter()
            .map(|c| c.claim.started.attempt.task_id)
            .collect();
        let attempts: Vec<i32> = admitted
            .iter()
            .map(|c| c.claim.started.attempt.attempt)
            .collect();
        let workers: Vec<&str> = admitted
            .iter()
            .map(|c| c.claim.started.worker_id.as_str())
            .collect();
        let started: Vec<DateTime<Utc>> = admitted
            .iter()
            .map(|c| c.claim.started.started_at)
            .collect();
        let claimed: Vec<(Uuid, i32, i64)> = sqlx::query_as(
            "UPDATE task_check c SET status = 'RUNNING', worker_id = x.worker_id,
                 started_at = x.started_at, last_heartbeat_at = NULL, stop_reason = NULL,
                 expires_at = CASE WHEN c.timeout_seconds > 0
                     THEN now() + make_interval(secs => c.timeout_seconds) END,
                 updated_at = now()
             FROM UNNEST($1::uuid[], $2::int[], $3::text[], $4::timestamptz[])
                 AS x(task_id, attempt, worker_id, started_at)
             WHERE c.task_id = ANY($1::uuid[])
               AND c.task_id = x.task_id AND c.attempt = x.attempt
               AND c.status = 'SCHEDULED'
             RETURNING c.task_id, c.attempt, c.timeout_seconds",
        )
        .bind(&ids)
        .bind(&attempts)
        .bind(&workers)
        .bind(&started)
        .fetch_all(&mut *tx)
        .await?;
        let got: HashMap<(Uuid, i32), i64> = claimed
            .into_iter()
            .map(|(id, attempt, timeout)| ((id, attempt), timeout))
            .collect();
        for c in admitted {
            let a = c.claim.started.attempt;
            match got.get(&(a.task_id, a.attempt)) {
                Some(&timeout) => outcomes.push(claim_outcome(
                    a.task_id, a.attempt, true, None, None, timeout, None,
                )?),
                None => {
                    // Stopped or ended since the first step read it.
                    gate.release(&c.limited.limits);
                    let row: Option<(String, Option<String>, i64)> = sqlx::query_as(
                        "SELECT status, stop_reason, timeout_seconds FROM task_check
                         WHERE task_id = $1 AND attempt = $2",
                    )
                    .bind(a.task_id)
                    .bind(a.attempt)
                    .fetch_optional(&mut *tx)
                    .await?;
                    let (status, reason, timeout) =
                        row.map_or((None, None, 0), |(s, r, t)| (Some(s), r, t));
                    outcomes.push(claim_outcome(
                        a.task_id, a.attempt, false, status, reason, timeout, None,
                    )?);
                }
            }
        }
    }
    if let Some(w) = gate.window_to_store() {
        let start = DateTime::<Utc>::from_timestamp_millis(w.start_ms)
            .ok_or_else(|| Error::Decode(format!("rate window start {} ms", w.start_ms)))?;
        sqlx::query(
            "INSERT INTO task_rate_windows (task_name, window_start, claims)
             VALUES ($1, $2, $3)
             ON CONFLICT (task_name) DO UPDATE SET
                 window_start = EXCLUDED.window_start, claims = EXCLUDED.claims",
        )
        .bind(name)
        .bind(start)
        .bind(w.claims)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(outcomes)
}

/// The newest attempt of each task in `task_ids` (unknown tasks are absent).
async fn load_latest(pool: &PgPool, task_ids: &[Uuid]) -> Result<Vec<Stored>> {
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

/// Writes heartbeats of RUNNING attempts: last heartbeat (never moved backwards),
/// deadline = last heartbeat + timeout, details. Returns the rows written.
async fn write_beats(pool: impl PgExecutor<'_>, beats: &[BeatWrite]) -> Result<u64> {
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
         WHERE c.task_id = ANY($1::uuid[])
           AND c.task_id = u.task_id AND c.attempt = u.attempt AND c.status = 'RUNNING'",
    )
    .bind(&ids)
    .bind(&attempts)
    .bind(&at)
    .bind(&details)
    .execute(pool)
    .await?;
    Ok(done.rows_affected())
}

/// [`end`] with a status, reason and size per attempt, in one statement (the first end
/// of an attempt repeated in `ends` wins). Returns the rows as they are afterwards.
async fn end_each(pool: &PgPool, ends: &[End<'_>]) -> Result<Vec<Stored>> {
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
         WHERE c.status IN ('SCHEDULED', 'RUNNING')",
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

/// The newest attempt's row of a task.
async fn get(pool: &PgPool, task_id: Uuid) -> Result<Option<TaskCheck>> {
    let row: Option<CheckRow> = sqlx::query_as(&format!(
        "SELECT {CHECK_COLUMNS}
         FROM task_check WHERE task_id = $1 ORDER BY attempt DESC LIMIT 1"
    ))
    .bind(task_id)
    .fetch_optional(pool)
    .await?;
    row.map(CheckRow::into_check).transpose()
}

/// The scanner's query, also shown with EXPLAIN ANALYZE by the benchmark.
pub const SCAN_SQL: &str =
    "SELECT task_id, attempt, workflow_id, run_id, reply_to, timeout_seconds,
        (extract(epoch FROM last_heartbeat_at) * 1000)::bigint,
        expires_at < now() - make_interval(secs => $2)
 FROM task_check
 WHERE status = 'RUNNING' AND expires_at IS NOT NULL AND expires_at < now()
   AND ($3::uuid[] IS NULL OR task_id = ANY($3::uuid[]))
 ORDER BY expires_at
 LIMIT $1
 FOR UPDATE SKIP LOCKED";

/// A row of [`SCAN_SQL`].
type CandidateRow = (
    Uuid,
    i32,
    String,
    Option<Uuid>,
    String,
    i64,
    Option<i64>,
    bool,
);

#[async_trait]
impl RegistryStore for PgStore {
    async fn claim_many(&self, claims: &[ClaimAttempt]) -> Result<Vec<ClaimOutcome>> {
        let mut conn = self.held.claims.take().await?;
        let outcome = claim_many(&mut conn, claims).await;
        conn.keep_if_sound_after(&outcome);
        outcome
    }

    async fn claim_limited(&self, claims: &[LimitedClaim]) -> Result<Vec<ClaimOutcome>> {
        claim_limited(&self.pool, claims).await
    }

    async fn load_latest(&self, task_ids: &[Uuid]) -> Result<Vec<Stored>> {
        load_latest(&self.pool, task_ids).await
    }

    async fn write_beats(&self, beats: &[BeatWrite]) -> Result<u64> {
        write_beats(&self.pool, beats).await
    }

    async fn end_each(&self, ends: &[End<'_>]) -> Result<Vec<Stored>> {
        end_each(&self.pool, ends).await
    }

    async fn task_check(&self, task_id: Uuid) -> Result<Option<TaskCheck>> {
        get(&self.pool, task_id).await
    }

    /// Reads the candidates through the partial index `task_check_running_expiry` and
    /// locks them `FOR UPDATE SKIP LOCKED`, so several scanners never take the same
    /// attempt.
    async fn scan_expired(
        &self,
        names: &Names,
        limit: i64,
        write_interval: Duration,
        probe: LivenessProbe<'_>,
        scope: ScanScope<'_>,
    ) -> Result<ScanOutcome> {
        let mut tx = self.pool.begin().await?;
        let rows: Vec<CandidateRow> = sqlx::query_as(SCAN_SQL)
            .bind(limit)
            .bind(write_interval.as_secs_f64())
            .bind(scope.only())
            .fetch_all(&mut *tx)
            .await?;
        let candidates: Vec<ScanCandidate> = rows
            .into_iter()
            .map(candidate)
            .filter(|c| scope.covers(c))
            .collect();
        let mut outcome = ScanOutcome::read(candidates.len());
        if candidates.is_empty() {
            // End the transaction here: dropped, its rollback would only run once its
            // connection is next used, and the rows it locked (a confirmation's other
            // attempts of the same task) would stay locked — skipped — until then.
            tx.commit().await?;
            return Ok(outcome);
        }
        let Sorted {
            alive,
            expired,
            deferred,
        } = judge(candidates, probe).await;
        outcome.report.deferred = deferred;
        write_beats(&mut *tx, &alive).await?;
        outcome.report.extended = alive.len();
        if matches!(scope, ScanScope::Suspect) {
            tx.commit().await?;
            outcome.suspected(&expired);
            return Ok(outcome);
        }
        if !expired.is_empty() {
            let ids: Vec<Uuid> = expired.iter().map(|c| c.task_id).collect();
            let attempts: Vec<i32> = expired.iter().map(|c| c.attempt).collect();
            let reasons: Vec<String> = expired.iter().map(|c| reason(c.timeout_seconds)).collect();
            sqlx::query(
                "UPDATE task_check AS c SET status = 'TIMED_OUT', stop_reason = x.reason,
                     updated_at = now()
                 FROM UNNEST($1::uuid[], $2::int[], $3::text[]) AS x(task_id, attempt, reason)
                 WHERE c.task_id = ANY($1::uuid[])
                   AND c.task_id = x.task_id AND c.attempt = x.attempt",
            )
            .bind(&ids)
            .bind(&attempts)
            .bind(&reasons)
            .execute(&mut *tx)
            .await?;
            outcome.messages = timeout_messages(names, &expired)?;
            outbox::insert(&mut tx, &outcome.messages).await?;
        }
        tx.commit().await?;
        outcome.timed_out(&expired);
        Ok(outcome)
    }

    async fn purge_task_checks(&self, retention: Duration, batch: i64) -> Result<u64> {
        let done = sqlx::query(
            "DELETE FROM task_check WHERE (task_id, attempt) IN (
                 SELECT task_id, attempt FROM task_check
                 WHERE status NOT IN ('RUNNING', 'SCHEDULED') AND updated_at < now() - make_interval(secs => $1)
                 LIMIT $2)",
        )
        .bind(retention.as_secs_f64())
        .bind(batch)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected())
    }
}

fn candidate(
    (task_id, attempt, workflow_id, run_id, reply_to, timeout_seconds, last, surely): CandidateRow,
) -> ScanCandidate {
    ScanCandidate {
        task_id,
        attempt,
        workflow_id,
        run_id,
        reply_to,
        timeout_seconds,
        last_heartbeat_ms: last,
        surely_passed: surely,
    }
}
