//! The decider's persistence on PostgreSQL (see [`crate::store::runs`]): the whole
//! commit is ONE statement of data-modifying CTEs, one round trip.

use async_trait::async_trait;
use serde_json::Value;
use sqlx::Row;
use uuid::Uuid;

use super::commit_sql::{self, Shape};
use super::PgStore;
use crate::messages::AttributesOf;
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
        let cancelled: Vec<Uuid> = all(batches, |b| &b.cancelled_timers)
            .into_iter()
            .copied()
            .collect();
        let shape = Shape::of([
            !new.is_empty(),
            !upd.is_empty(),
            !ev.is_empty(),
            !tk.is_empty(),
            !ob.is_empty(),
            !tm.is_empty(),
            !oc.is_empty(),
            !hooks.is_empty(),
            !ck.is_empty(),
            !ended.is_empty() || !cancelled.is_empty(),
            !st.is_empty(),
        ]);
        if shape.is_empty() {
            return Ok(());
        }
        let refs = |r: &RunRecord| Value::from(r.failed_task_refs.clone());
        let mut conn = self.held.commits.take().await?;
        let result = sqlx::query(commit_sql::statement(shape))
            // new runs: $1..$17
            .bind(col!(new, |r| r.run_id))
            .bind(col!(new, |r| r.workflow_id.as_str()))
            .bind(col!(new, |r| r.workflow_name.as_str()))
            .bind(col!(new, |r| r.workflow_version))
            .bind(col!(new, |r| r.status.as_str()))
            .bind(col!(new, |r| r.sub_status.as_str()))
            .bind(col!(new, |r| &r.input))
            .bind(col!(new, |r| r.output.as_ref()))
            .bind(col!(new, |r| &r.variables))
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
            .bind(col!(upd, |(r, _)| r.output.as_ref()))
            .bind(col!(upd, |(r, _)| &r.variables))
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
            .bind(col!(ev, |e| sqlx::types::Json(AttributesOf(&e.event))))
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
            .bind(col!(tk, |t| &t.input))
            .bind(col!(tk, |t| t.output.as_ref()))
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
            // tasks' callbacks: $95
            .bind(col!(tk, |t| t.callback_after_seconds))
            // runs' signals kept for a task not reached yet (NULL: none): $96, $97
            .bind(col!(new, |r| r.pending_signals.as_ref()))
            .bind(col!(upd, |(r, _)| r.pending_signals.as_ref()))
            // timers made moot: $98
            .bind(&cancelled)
            // tasks' domains (NULL: none, nearly always): $99
            .bind(col!(tk, |t| t.domain.as_deref()))
            .execute(&mut *conn)
            .await;
        conn.keep_if_sound(&result);
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

    async fn fail_unreadable_run(&self, workflow_id: &str, reason: &str) -> Result<bool> {
        let failed = sqlx::query(
            "UPDATE runs SET status = 'FAILED', sub_status = 'FAILED', reason = $2,
                 end_time = now(), update_time = now()
             WHERE workflow_id = $1 AND is_current AND status = 'RUNNING'",
        )
        .bind(workflow_id)
        .bind(reason)
        .execute(&self.pool)
        .await?;
        Ok(failed.rows_affected() > 0)
    }
}

/// SQLSTATE raised by `weft_check_versions` (migration 0001).
const VERSION_MOVED: &str = "WFT01";
