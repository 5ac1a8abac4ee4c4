//! The decider's commit statement (see [`crate::store::runs`]), made of the parts a batch
//! has: one data-modifying CTE per kind of row, and only those with rows.
//!
//! Every part costs its statement something even when its arrays are empty: PostgreSQL
//! opens and locks each target table and every one of its indexes when the statement
//! starts (`runs` alone has eleven). A sequential step's commit has four or five kinds of
//! rows out of eleven, so its statement names only those. Each shape is one SQL text,
//! made once per process and prepared once per connection; there are a handful in
//! practice. Every parameter is bound whatever the shape (`runs.rs`): a parameter the text
//! does not use is typed by its bind, so PostgreSQL accepts it.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// The CTEs of the commit statement, in the order they are written: name and body.
/// Parameters are numbered as `runs.rs` binds them.
const PARTS: [(&str, &str); 11] = [
    (
        "new_runs",
        r#"    INSERT INTO runs (run_id, workflow_id, workflow_name, workflow_version, status, sub_status,
        input, output, variables, correlation_id, parent_workflow_id, reason, failed_task_refs,
        start_time, end_time, update_time, version, is_current, reset_from_run_id,
        reset_task_ref, pending_signals)
    SELECT n.run_id, n.workflow_id, n.workflow_name, n.workflow_version, n.status, n.sub_status,
        n.input, n.output, n.variables, n.correlation_id, n.parent_workflow_id, n.reason,
        ARRAY(SELECT jsonb_array_elements_text(n.failed)), n.start_time, n.end_time,
        n.update_time, n.version, n.is_current, n.reset_from, n.reset_ref, n.pending_signals
    FROM UNNEST($1::uuid[], $2::text[], $3::text[], $4::int[], $5::text[], $6::text[],
        $7::jsonb[], $8::jsonb[], $9::jsonb[], $10::text[], $11::text[], $12::text[],
        $13::jsonb[], $14::timestamptz[], $15::timestamptz[], $16::timestamptz[], $17::bigint[],
        $66::uuid[], $67::text[], $68::bool[], $96::jsonb[])
        AS n(run_id, workflow_id, workflow_name, workflow_version, status, sub_status, input,
             output, variables, correlation_id, parent_workflow_id, reason, failed, start_time,
             end_time, update_time, version, reset_from, reset_ref, is_current,
             pending_signals)
    RETURNING 1
"#,
    ),
    (
        "updated_runs",
        r#"    UPDATE runs r SET status = u.status, sub_status = u.sub_status, output = u.output,
        variables = u.variables, reason = u.reason,
        failed_task_refs = ARRAY(SELECT jsonb_array_elements_text(u.failed)),
        end_time = u.end_time, update_time = u.update_time, version = u.version,
        is_current = u.is_current, pending_signals = u.pending_signals
    FROM UNNEST($18::uuid[], $19::bigint[], $20::text[], $21::text[], $22::jsonb[],
        $23::jsonb[], $24::text[], $25::jsonb[], $26::timestamptz[], $27::timestamptz[],
        $28::bigint[], $69::bool[], $97::jsonb[])
        AS u(run_id, expected, status, sub_status, output, variables, reason, failed, end_time,
             update_time, version, is_current, pending_signals)
    -- `= ANY` lets the planner reach the rows by primary key; the join alone was
    -- planned as a sequential scan of `runs` (the batch's size is unknown to it).
    WHERE r.run_id = ANY($18::uuid[]) AND r.run_id = u.run_id AND r.version = u.expected
    RETURNING 1
"#,
    ),
    (
        "events",
        r#"    INSERT INTO history_events (run_id, event_id, type, time, attributes)
    SELECT * FROM UNNEST($29::uuid[], $30::bigint[], $31::text[], $32::timestamptz[],
        $33::jsonb[])
    RETURNING 1
"#,
    ),
    (
        "task_rows",
        r#"    INSERT INTO tasks (task_id, run_id, workflow_id, task_ref, task_type, task_name, seq,
        iteration, attempt, status, input, output, reason, worker_id, scheduled_time,
        start_time, end_time, update_time, callback_after_seconds, domain)
    SELECT * FROM UNNEST($34::uuid[], $35::uuid[], $36::text[], $37::text[], $38::text[],
        $39::text[], $40::int[], $41::int[], $42::int[], $43::text[], $44::jsonb[],
        $45::jsonb[], $46::text[], $47::text[], $48::timestamptz[], $49::timestamptz[],
        $50::timestamptz[], $51::timestamptz[], $95::bigint[], $99::text[])
    ON CONFLICT (task_id) DO UPDATE SET status = EXCLUDED.status, output = EXCLUDED.output,
        reason = EXCLUDED.reason, worker_id = EXCLUDED.worker_id,
        start_time = EXCLUDED.start_time, end_time = EXCLUDED.end_time,
        update_time = EXCLUDED.update_time, attempt = EXCLUDED.attempt,
        callback_after_seconds = EXCLUDED.callback_after_seconds
    RETURNING 1
"#,
    ),
    (
        "outbox_rows",
        r#"    INSERT INTO outbox (id, exchange, routing_key, body, traceparent)
    SELECT * FROM UNNEST($52::uuid[], $53::text[], $54::text[], $55::bytea[], $56::text[])
    RETURNING 1
"#,
    ),
    (
        "timer_rows",
        r#"    INSERT INTO timers (id, workflow_id, run_id, fire_at, exchange, routing_key, body,
        traceparent)
    SELECT * FROM UNNEST($58::uuid[], $59::text[], $60::uuid[], $61::timestamptz[],
        $62::text[], $63::text[], $64::bytea[], $65::text[])
    -- A parked command's timer id is derived from the command's: a redelivered one parks
    -- once. A task's dispatch timer is set again to make it due sooner (resetcallbacks):
    -- a timer only ever moves earlier.
    ON CONFLICT (id) DO UPDATE SET fire_at = LEAST(timers.fire_at, EXCLUDED.fire_at)
    RETURNING 1
"#,
    ),
    (
        "outcome_rows",
        r#"    INSERT INTO operation_outcomes (request_id, workflow_id, status, body)
    SELECT * FROM UNNEST($70::uuid[], $71::text[], $72::smallint[], $73::jsonb[])
    -- A redelivered operator command was already answered: the first verdict stands.
    ON CONFLICT (request_id) DO NOTHING
    RETURNING 1
"#,
    ),
    (
        "hook_rows",
        r#"    -- Only the head of a rollback sequence is due at once (store::hooks).
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
"#,
    ),
    (
        "check_rows",
        r#"    -- The attempts' registry rows (docs/heartbeats.md): scheduled ones are created; an
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
    -- SCHEDULED over an open row is an attempt its worker gave back (Conductor's
    -- callback): free for the next claim, and no longer watched.
    ON CONFLICT (task_id, attempt) DO UPDATE SET status = EXCLUDED.status,
        stop_reason = EXCLUDED.stop_reason, updated_at = now(),
        worker_id = CASE WHEN EXCLUDED.status = 'SCHEDULED' THEN NULL ELSE c.worker_id END,
        started_at = CASE WHEN EXCLUDED.status = 'SCHEDULED' THEN NULL ELSE c.started_at END,
        expires_at = CASE WHEN EXCLUDED.status = 'SCHEDULED' THEN NULL ELSE c.expires_at END
    WHERE c.status IN ('SCHEDULED', 'RUNNING')
    RETURNING 1
"#,
    ),
    (
        "cancelled_timers",
        r#"    DELETE FROM timers WHERE run_id = ANY($85::uuid[]) OR id = ANY($98::uuid[])
    RETURNING 1
"#,
    ),
    (
        "start_rows",
        r#"    -- A command published twice makes one start: the first row stands.
    INSERT INTO workflow_starts (workflow_id, workflow_name, workflow_version, input,
        correlation_id)
    SELECT * FROM UNNEST($89::text[], $90::text[], $91::int[], $92::jsonb[], $93::text[])
    ON CONFLICT (workflow_id) DO NOTHING
    RETURNING 1
"#,
    ),
];

/// Which of [`PARTS`] a commit has rows for, one bit each in their order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub(super) struct Shape(u16);

impl Shape {
    /// The shape whose parts are those for which `present` holds, in [`PARTS`]' order:
    /// new runs, updated runs, events, tasks, outbox, timers, outcomes, hook deliveries,
    /// registry rows, ended runs, starts.
    pub(super) fn of(present: [bool; 11]) -> Self {
        Self(
            present
                .iter()
                .enumerate()
                .filter(|(_, p)| **p)
                .fold(0, |bits, (i, _)| bits | 1 << i),
        )
    }

    /// No part has rows: there is nothing to write.
    pub(super) fn is_empty(self) -> bool {
        self.0 == 0
    }

    fn has(self, part: usize) -> bool {
        self.0 & (1 << part) != 0
    }
}

/// Index of `updated_runs` in [`PARTS`]: its count is checked against the batch's.
const UPDATED_RUNS: usize = 1;

/// The statement of `shape` (not empty), made once per shape.
pub(super) fn statement(shape: Shape) -> &'static str {
    static MADE: OnceLock<Mutex<HashMap<Shape, &'static str>>> = OnceLock::new();
    let made = MADE.get_or_init(Default::default);
    let mut made = made.lock().unwrap_or_else(|e| e.into_inner());
    made.entry(shape)
        .or_insert_with(|| Box::leak(write(shape).into_boxed_str()))
}

fn write(shape: Shape) -> String {
    let present: Vec<&(&str, &str)> = PARTS
        .iter()
        .enumerate()
        .filter(|(i, _)| shape.has(*i))
        .map(|(_, part)| part)
        .collect();
    let ctes: Vec<String> = present
        .iter()
        .map(|(name, body)| format!("{name} AS (\n{body})"))
        .collect();
    // Data-modifying CTEs run whether or not they are read; the counts are read so that
    // a part that wrote nothing is visible to a reader of the plan, and the version
    // check aborts the statement when an updated run's version moved.
    let mut columns: Vec<String> = Vec::new();
    if shape.has(UPDATED_RUNS) {
        columns.push("weft_check_versions((SELECT count(*) FROM updated_runs), $57)".into());
    }
    columns.extend(
        present
            .iter()
            .filter(|(name, _)| *name != PARTS[UPDATED_RUNS].0)
            .map(|(name, _)| format!("(SELECT count(*) FROM {name})")),
    );
    format!("WITH {}\nSELECT {}", ctes.join(", "), columns.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shape_names_its_parts_only_and_checks_versions_only_with_updates() {
        let mut present = [false; 11];
        present[2] = true; // events
        present[8] = true; // registry rows
        let sql = statement(Shape::of(present));
        assert!(sql.starts_with("WITH events AS ("), "{sql}");
        assert!(sql.contains("check_rows AS ("), "{sql}");
        assert!(!sql.contains("INSERT INTO runs"), "{sql}");
        assert!(!sql.contains("weft_check_versions"), "{sql}");

        present[UPDATED_RUNS] = true;
        let sql = statement(Shape::of(present));
        assert!(sql.contains("weft_check_versions((SELECT count(*) FROM updated_runs), $57)"));
        assert!(
            std::ptr::eq(sql, statement(Shape::of(present))),
            "made once"
        );

        let every = statement(Shape::of([true; 11]));
        for (name, _) in PARTS {
            assert!(every.contains(&format!("{name} AS (")), "{name}");
        }
        assert!(Shape::of([false; 11]).is_empty());
    }
}
