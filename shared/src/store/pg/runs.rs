//! The decider's persistence on PostgreSQL (see [`crate::store::runs`]): the whole
//! commit is ONE statement of data-modifying CTEs, one round trip.

use async_trait::async_trait;
use serde_json::Value;
use sqlx::Row;
use uuid::Uuid;

use super::PgStore;
use crate::store::backend::RunStore;
use crate::store::runs::{CommitBatch, EventRow, RunRecord, StoredEvent};
use crate::{Error, Result};

#[async_trait]
impl RunStore for PgStore {
    /// Loads the current run of `workflow_id`: its version and full history, oldest first.
    async fn load_current_run(&self, workflow_id: &str) -> Result<Option<(i64, Vec<StoredEvent>)>> {
        let row =
            sqlx::query("SELECT run_id, version FROM runs WHERE workflow_id = $1 AND is_current")
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
             WHERE run_id = $1 ORDER BY event_id",
        )
        .bind(run_id)
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(|r| r.into_event(run_id)).collect()
    }

    /// Commits `batch` atomically, in ONE statement (one round trip): data-modifying
    /// CTEs write the runs, events, tasks and outbox rows, and `weft_check_versions`
    /// aborts the whole statement when an updated run's version moved. Returns
    /// [`Error::VersionConflict`] then, and a unique violation when a new run collides
    /// with an existing current run; nothing is written in either case.
    async fn commit_all(&self, batches: &[&CommitBatch]) -> Result<()> {
        macro_rules! col {
            ($items:expr, $f:expr) => {
                $items.iter().copied().map($f).collect::<Vec<_>>()
            };
        }
        fn all<'a, T>(
            batches: &[&'a CommitBatch],
            part: impl Fn(&'a CommitBatch) -> &'a Vec<T>,
        ) -> Vec<&'a T> {
            batches.iter().flat_map(|b| part(b).iter()).collect()
        }
        let new = all(batches, |b| &b.new_runs);
        let upd = all(batches, |b| &b.updated_runs);
        let ev = all(batches, |b| &b.events);
        let tk = all(batches, |b| &b.tasks);
        let ob = all(batches, |b| &b.outbox);
        let tm = all(batches, |b| &b.timers);
        let oc = all(batches, |b| &b.outcomes);
        let ck = all(batches, |b| &b.checks);
        let hooks = all(batches, |b| &b.hook_deliveries);
        let st = all(batches, |b| &b.starts);
        let ended: Vec<Uuid> = all(batches, |b| &b.ended_runs)
            .into_iter()
            .copied()
            .collect();
        let refs = |r: &RunRecord| Value::from(r.failed_task_refs.clone());
        let result = sqlx::query(COMMIT_SQL)
            // new runs: $1..$17
            .bind(col!(new, |r| r.run_id))
            .bind(col!(new, |r| r.workflow_id.as_str()))
            .bind(col!(new, |r| r.workflow_name.as_str()))
            .bind(col!(new, |r| r.workflow_version))
            .bind(col!(new, |r| r.status.as_str()))
            .bind(col!(new, |r| r.sub_status.as_str()))
            .bind(col!(new, |r| r.input.clone()))
            .bind(col!(new, |r| r.output.clone()))
            .bind(col!(new, |r| r.variables.clone()))
            .bind(col!(new, |r| r.correlation_id.as_deref()))
            .bind(col!(new, |r| r.parent_workflow_id.as_deref()))
            .bind(col!(new, |r| r.reason.as_deref()))
            .bind(col!(new, refs))
            .bind(col!(new, |r| r.start_time))
            .bind(col!(new, |r| r.end_time))
            .bind(col!(new, |r| r.update_time))
            .bind(col!(new, |r| r.version))
            // updated runs: $18..$28
            .bind(col!(upd, |(r, _)| r.run_id))
            .bind(col!(upd, |(_, expected)| *expected))
            .bind(col!(upd, |(r, _)| r.status.as_str()))
            .bind(col!(upd, |(r, _)| r.sub_status.as_str()))
            .bind(col!(upd, |(r, _)| r.output.clone()))
            .bind(col!(upd, |(r, _)| r.variables.clone()))
            .bind(col!(upd, |(r, _)| r.reason.as_deref()))
            .bind(col!(upd, |(r, _)| refs(r)))
            .bind(col!(upd, |(r, _)| r.end_time))
            .bind(col!(upd, |(r, _)| r.update_time))
            .bind(col!(upd, |(r, _)| r.version))
            // events: $29..$33
            .bind(col!(ev, |e| e.run_id))
            .bind(col!(ev, |e| e.event_id))
            .bind(col!(ev, |e| e.event.kind()))
            .bind(col!(ev, |e| e.time))
            .bind(col!(ev, |e| e.event.attributes()))
            // tasks: $34..$51
            .bind(col!(tk, |t| t.task_id))
            .bind(col!(tk, |t| t.run_id))
            .bind(col!(tk, |t| t.workflow_id.as_str()))
            .bind(col!(tk, |t| t.task_ref.as_str()))
            .bind(col!(tk, |t| t.task_type.as_str()))
            .bind(col!(tk, |t| t.task_name.as_str()))
            .bind(col!(tk, |t| t.seq))
            .bind(col!(tk, |t| t.iteration))
            .bind(col!(tk, |t| t.attempt))
            .bind(col!(tk, |t| t.status.as_str()))
            .bind(col!(tk, |t| t.input.clone()))
            .bind(col!(tk, |t| t.output.clone()))
            .bind(col!(tk, |t| t.reason.as_deref()))
            .bind(col!(tk, |t| t.worker_id.as_deref()))
            .bind(col!(tk, |t| t.scheduled_time))
            .bind(col!(tk, |t| t.start_time))
            .bind(col!(tk, |t| t.end_time))
            .bind(col!(tk, |t| t.update_time))
            // outbox: $52..$56
            .bind(col!(ob, |m| m.id))
            .bind(col!(ob, |m| m.exchange.as_str()))
            .bind(col!(ob, |m| m.routing_key.as_str()))
            .bind(col!(ob, |m| m.body.as_slice()))
            .bind(col!(ob, |m| m.traceparent.as_deref()))
            // $57: how many updates must match
            .bind(upd.len() as i64)
            // timers: $58..$65
            .bind(col!(tm, |t| t.id))
            .bind(col!(tm, |t| t.workflow_id.as_str()))
            .bind(col!(tm, |t| t.run_id))
            .bind(col!(tm, |t| t.fire_at))
            .bind(col!(tm, |t| t.exchange.as_str()))
            .bind(col!(tm, |t| t.routing_key.as_str()))
            .bind(col!(tm, |t| t.body.as_slice()))
            .bind(col!(tm, |t| t.traceparent.as_deref()))
            // new runs' reset origin and currency: $66..$68; updated runs' currency: $69
            .bind(col!(new, |r| r.reset_from.as_ref().map(|(id, _)| *id)))
            .bind(col!(new, |r| r
                .reset_from
                .as_ref()
                .map(|(_, t)| t.as_str())))
            .bind(col!(new, |r| r.is_current))
            .bind(col!(upd, |(r, _)| r.is_current))
            // operation outcomes: $70..$73
            .bind(col!(oc, |o| o.request_id))
            .bind(col!(oc, |o| o.workflow_id.as_str()))
            .bind(col!(oc, |o| o.status))
            .bind(col!(oc, |o| o.body.clone()))
            // hook deliveries: $74, one jsonb array
            .bind(crate::store::hooks::deliveries_json(hooks))
            // registry rows: $75..$84
            .bind(col!(ck, |c| c.task_id))
            .bind(col!(ck, |c| c.attempt))
            .bind(col!(ck, |c| c.workflow_id.as_str()))
            .bind(col!(ck, |c| c.run_id))
            .bind(col!(ck, |c| c.task_name.as_str()))
            .bind(col!(ck, |c| c.task_ref.as_str()))
            .bind(col!(ck, |c| c.reply_to.as_str()))
            .bind(col!(ck, |c| c.status.as_str()))
            .bind(col!(ck, |c| c.reason.as_deref()))
            .bind(col!(ck, |c| c.timeout_seconds))
            // ended runs, whose timers go: $85
            .bind(&ended)
            // registry rows' limits (NULL: none, nearly always): $86..$88
            .bind(col!(ck, |c| c.limits.columns().0))
            .bind(col!(ck, |c| c.limits.columns().1))
            .bind(col!(ck, |c| c.limits.columns().2))
            // starts made by the decider: $89..$93
            .bind(col!(st, |s| s.workflow_id.as_str()))
            .bind(col!(st, |s| s.workflow_name.as_str()))
            .bind(col!(st, |s| s.workflow_version))
            .bind(col!(st, |s| s.input.clone()))
            .bind(col!(st, |s| s.correlation_id.as_deref()))
            // registry rows' eager worker (NULL: claimed by whoever takes it): $94
            .bind(col!(ck, |c| c.worker_id.as_deref()))
            .execute(&self.pool)
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(sqlx::Error::Database(db)) if db.code().as_deref() == Some(VERSION_MOVED) => {
                Err(Error::VersionConflict {
                    run_id: upd.first().map(|(r, _)| r.run_id).unwrap_or_default(),
                    expected: upd.first().map(|(_, v)| *v).unwrap_or_default(),
                })
            }
            Err(e) => Err(e.into()),
        }
    }
}

/// SQLSTATE raised by `weft_check_versions` (migration 0001).
const VERSION_MOVED: &str = "WFT01";

/// The decider's whole commit as one statement; see [`Store::commit`].
const COMMIT_SQL: &str = r#"
WITH new_runs AS (
    INSERT INTO runs (run_id, workflow_id, workflow_name, workflow_version, status, sub_status,
        input, output, variables, correlation_id, parent_workflow_id, reason, failed_task_refs,
        start_time, end_time, update_time, version, is_current, reset_from_run_id,
        reset_task_ref)
    SELECT n.run_id, n.workflow_id, n.workflow_name, n.workflow_version, n.status, n.sub_status,
        n.input, n.output, n.variables, n.correlation_id, n.parent_workflow_id, n.reason,
        ARRAY(SELECT jsonb_array_elements_text(n.failed)), n.start_time, n.end_time,
        n.update_time, n.version, n.is_current, n.reset_from, n.reset_ref
    FROM UNNEST($1::uuid[], $2::text[], $3::text[], $4::int[], $5::text[], $6::text[],
        $7::jsonb[], $8::jsonb[], $9::jsonb[], $10::text[], $11::text[], $12::text[],
        $13::jsonb[], $14::timestamptz[], $15::timestamptz[], $16::timestamptz[], $17::bigint[],
        $66::uuid[], $67::text[], $68::bool[])
        AS n(run_id, workflow_id, workflow_name, workflow_version, status, sub_status, input,
             output, variables, correlation_id, parent_workflow_id, reason, failed, start_time,
             end_time, update_time, version, reset_from, reset_ref, is_current)
    RETURNING 1
), updated_runs AS (
    UPDATE runs r SET status = u.status, sub_status = u.sub_status, output = u.output,
        variables = u.variables, reason = u.reason,
        failed_task_refs = ARRAY(SELECT jsonb_array_elements_text(u.failed)),
        end_time = u.end_time, update_time = u.update_time, version = u.version,
        is_current = u.is_current
    FROM UNNEST($18::uuid[], $19::bigint[], $20::text[], $21::text[], $22::jsonb[],
        $23::jsonb[], $24::text[], $25::jsonb[], $26::timestamptz[], $27::timestamptz[],
        $28::bigint[], $69::bool[])
        AS u(run_id, expected, status, sub_status, output, variables, reason, failed, end_time,
             update_time, version, is_current)
    -- `= ANY` lets the planner reach the rows by primary key; the join alone was
    -- planned as a sequential scan of `runs` (the batch's size is unknown to it).
    WHERE r.run_id = ANY($18::uuid[]) AND r.run_id = u.run_id AND r.version = u.expected
    RETURNING 1
), events AS (
    INSERT INTO history_events (run_id, event_id, type, time, attributes)
    SELECT * FROM UNNEST($29::uuid[], $30::bigint[], $31::text[], $32::timestamptz[],
        $33::jsonb[])
    RETURNING 1
), task_rows AS (
    INSERT INTO tasks (task_id, run_id, workflow_id, task_ref, task_type, task_name, seq,
        iteration, attempt, status, input, output, reason, worker_id, scheduled_time,
        start_time, end_time, update_time)
    SELECT * FROM UNNEST($34::uuid[], $35::uuid[], $36::text[], $37::text[], $38::text[],
        $39::text[], $40::int[], $41::int[], $42::int[], $43::text[], $44::jsonb[],
        $45::jsonb[], $46::text[], $47::text[], $48::timestamptz[], $49::timestamptz[],
        $50::timestamptz[], $51::timestamptz[])
    ON CONFLICT (task_id) DO UPDATE SET status = EXCLUDED.status, output = EXCLUDED.output,
        reason = EXCLUDED.reason, worker_id = EXCLUDED.worker_id,
        start_time = EXCLUDED.start_time, end_time = EXCLUDED.end_time,
        update_time = EXCLUDED.update_time, attempt = EXCLUDED.attempt
    RETURNING 1
), outbox_rows AS (
    INSERT INTO outbox (id, exchange, routing_key, body, traceparent)
    SELECT * FROM UNNEST($52::uuid[], $53::text[], $54::text[], $55::bytea[], $56::text[])
    RETURNING 1
), timer_rows AS (
    INSERT INTO timers (id, workflow_id, run_id, fire_at, exchange, routing_key, body,
        traceparent)
    SELECT * FROM UNNEST($58::uuid[], $59::text[], $60::uuid[], $61::timestamptz[],
        $62::text[], $63::text[], $64::bytea[], $65::text[])
    -- A parked command's timer id is derived from the command's: a redelivered one parks once.
    ON CONFLICT (id) DO NOTHING
    RETURNING 1
), outcome_rows AS (
    INSERT INTO operation_outcomes (request_id, workflow_id, status, body)
    SELECT * FROM UNNEST($70::uuid[], $71::text[], $72::smallint[], $73::jsonb[])
    -- A redelivered operator command was already answered: the first verdict stands.
    ON CONFLICT (request_id) DO NOTHING
    RETURNING 1
), hook_rows AS (
    -- Only the head of a rollback sequence is due at once (store::hooks).
    INSERT INTO hook_deliveries (id, workflow_id, run_id, hook, event, task_ref, task_id,
        iteration, url, headers, body, signature, blocking, group_seq, next_attempt_at,
        traceparent)
    SELECT d.id, d.workflow_id, d.run_id, d.hook, d.event, d.task_ref, d.task_id,
        d.iteration, d.url, d.headers, d.body, d.signature, d.blocking, d.group_seq,
        CASE WHEN d.group_seq IS NULL OR d.group_seq = 0 THEN now() END, d.traceparent
    FROM jsonb_to_recordset($74::jsonb) AS d(id uuid, workflow_id text, run_id uuid,
        hook text, event text, task_ref text, task_id uuid, iteration int, url text,
        headers jsonb, body text, signature text, blocking bool, group_seq int,
        traceparent text)
    ON CONFLICT (id) DO NOTHING
    RETURNING 1
), check_rows AS (
    -- The attempts' registry rows (docs/heartbeats.md): scheduled ones are created; an
    -- end applies to an attempt still open only (a scanner's timeout stays).
    -- An attempt dispatched eagerly is created RUNNING, claimed for its worker
    -- (docs/eager-dispatch.md).
    INSERT INTO task_check AS c (task_id, attempt, workflow_id, run_id, task_name, task_ref,
        reply_to, status, stop_reason, timeout_seconds, concurrency_limit, rate_limit,
        rate_window_seconds, worker_id, started_at, expires_at)
    SELECT x.task_id, x.attempt, x.workflow_id, x.run_id, x.task_name, x.task_ref,
        x.reply_to, x.status, x.stop_reason, x.timeout_seconds, x.concurrency_limit,
        x.rate_limit, x.rate_window_seconds, x.worker_id,
        CASE WHEN x.worker_id IS NOT NULL THEN now() END,
        CASE WHEN x.worker_id IS NOT NULL AND x.timeout_seconds > 0
            THEN now() + make_interval(secs => x.timeout_seconds) END
    FROM UNNEST($75::uuid[], $76::int[], $77::text[], $78::uuid[], $79::text[],
        $80::text[], $81::text[], $82::text[], $83::text[], $84::bigint[], $86::int[],
        $87::int[], $88::int[], $94::text[])
        AS x(task_id, attempt, workflow_id, run_id, task_name, task_ref, reply_to, status,
             stop_reason, timeout_seconds, concurrency_limit, rate_limit,
             rate_window_seconds, worker_id)
    ON CONFLICT (task_id, attempt) DO UPDATE SET status = EXCLUDED.status,
        stop_reason = EXCLUDED.stop_reason, updated_at = now()
    WHERE c.status IN ('SCHEDULED', 'RUNNING') AND EXCLUDED.status <> 'SCHEDULED'
    RETURNING 1
), cancelled_timers AS (
    DELETE FROM timers WHERE run_id = ANY($85::uuid[])
    RETURNING 1
), start_rows AS (
    -- A command published twice makes one start: the first row stands.
    INSERT INTO workflow_starts (workflow_id, workflow_name, workflow_version, input,
        correlation_id)
    SELECT * FROM UNNEST($89::text[], $90::text[], $91::int[], $92::jsonb[], $93::text[])
    ON CONFLICT (workflow_id) DO NOTHING
    RETURNING 1
)
SELECT weft_check_versions((SELECT count(*) FROM updated_runs), $57),
    (SELECT count(*) FROM check_rows), (SELECT count(*) FROM cancelled_timers),
    (SELECT count(*) FROM outcome_rows),
    (SELECT count(*) FROM new_runs), (SELECT count(*) FROM events),
    (SELECT count(*) FROM task_rows), (SELECT count(*) FROM outbox_rows),
    (SELECT count(*) FROM timer_rows), (SELECT count(*) FROM hook_rows),
    (SELECT count(*) FROM start_rows)
"#;
