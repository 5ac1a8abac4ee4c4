//! Which hooks fire (docs/hooks.md), decided here, deterministically, from what the
//! decider commits: the deliveries are written in the same transaction as their cause,
//! so a hook fires exactly when its cause is committed, never twice (ids are name-based
//! on the cause) and never for a change that was rolled back.
//!
//! - **Rollback** ([`rollback`]): a reset rolls back every task execution of the old run
//!   that the new run does not keep as finished and that did some work (it ran, or a
//!   worker had it); those whose definition node declares `onRollback` fire, the most
//!   recent first — by the position of their last event in the old history, so a fork's
//!   branches unwind in the order they finished, as a saga compensates.
//! - **Lifecycle** ([`lifecycle`]): `onComplete`, `onFailure` and `onTimeout` of a task
//!   (per attempt, as the `task.*` events are) or of the workflow, fired by the lifecycle
//!   event the commit publishes.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use serde_json::{json, Map, Value};
use uuid::Uuid;
use weft::dsl::hooks::{self as decl, Hook, HookKind};
use weft::hooks::body::{delivery, Firing};
use weft::hooks::NewDelivery;
use weft::messages::{Event, LifecycleEvent, Reset};
use weft::store::runs::StoredEvent;

use crate::apply::ResetPlan;
use crate::state::{find_task, RunState, TaskState, TaskStatus};

/// The lifecycle event a reset's rollback hooks report as their cause.
pub const ROLLBACK_EVENT: &str = "workflow.reset";

/// The tasks of `old` (whose whole history is `history`) that a reset keeping the events
/// before `cut` (an index in `history`) rolls back and that declare `onRollback`, the
/// most recent first, each with its hook. One per (ref, iteration): its newest attempt.
/// (A retry in place keeps everything that ended: it rolls back only what was still
/// running when the run ended.)
pub fn rolled_back<'a>(
    old: &'a RunState,
    history: &[StoredEvent],
    cut: Option<usize>,
) -> Vec<(&'a TaskState, Hook)> {
    let mut scheduled_at = HashMap::new();
    let mut ended_at = HashMap::new();
    for (i, e) in history.iter().enumerate() {
        match &e.event {
            Event::TaskScheduled(s) => {
                scheduled_at.insert(s.task_id, i);
            }
            Event::TaskCompleted(x) => _ = ended_at.insert(x.task_id, i),
            Event::TaskFailed(x) => _ = ended_at.insert(x.task_id, i),
            Event::TaskTimedOut(x) => _ = ended_at.insert(x.task_id, i),
            Event::TaskSkipped(x) => _ = ended_at.insert(x.task_id, i),
            Event::TaskCanceled(x) => _ = ended_at.insert(x.task_id, i),
            _ => {}
        }
    }
    let Some(cut) = cut else {
        return Vec::new();
    };
    // Kept by the successor: scheduled and finished before the cut.
    let kept = |t: &TaskState| {
        scheduled_at.get(&t.task_id).is_some_and(|&s| s < cut)
            && ended_at.get(&t.task_id).is_some_and(|&e| e < cut)
    };
    let did_work = |t: &TaskState| match t.status {
        TaskStatus::Scheduled | TaskStatus::Skipped => false,
        TaskStatus::Canceled => t.start_time.is_some(),
        _ => true,
    };
    let mut seen = HashSet::new();
    let mut out: Vec<(&TaskState, Hook, usize)> = Vec::new();
    for t in old.tasks.iter().rev() {
        if kept(t) || !seen.insert((t.task_ref.as_str(), t.iteration)) || !did_work(t) {
            continue;
        }
        let Some(hook) = find_task(&old.definition.tasks, &t.task_ref)
            .and_then(|node| decl::hook(&node.extra, HookKind::OnRollback))
        else {
            continue;
        };
        // Still running at the reset: the most recent of all.
        let recency = ended_at.get(&t.task_id).copied().unwrap_or(usize::MAX);
        out.push((t, hook, recency));
    }
    out.sort_by(|a, b| b.2.cmp(&a.2).then(b.0.seq.cmp(&a.0.seq)));
    out.into_iter().map(|(t, h, _)| (t, h)).collect()
}

/// The rollback deliveries of `reset` (planned as `plan`) of run `old`, in firing order,
/// for the run the reset creates.
pub fn rollback(
    old: &RunState,
    history: &[StoredEvent],
    plan: &ResetPlan,
    reset: &Reset,
    now: DateTime<Utc>,
) -> Vec<NewDelivery> {
    let secret = decl::secret(&old.definition.extra);
    rolled_back(old, history, crate::reset::cut_index(history, plan))
        .into_iter()
        .enumerate()
        .map(|(i, (t, hook))| {
            let firing = Firing {
                kind: HookKind::OnRollback,
                event: ROLLBACK_EVENT,
                workflow_id: &old.workflow_id,
                run_id: reset.new_run_id,
                cause: t.task_id.to_string(),
                task: Some((&t.task_ref, t.task_id, t.iteration)),
                group_seq: Some(i32::try_from(i).unwrap_or(i32::MAX)),
            };
            let mut doc = run_document(old, reset.new_run_id, now, reset.reason.clone());
            doc.insert("previousRunId".into(), old.run_id.to_string().into());
            doc.insert("resetTo".into(), plan.task_ref.clone().into());
            doc.insert("task".into(), task_document(old, t));
            delivery(&hook, secret.as_deref(), &firing, doc)
        })
        .collect()
}

/// The delivery of the `onComplete`, `onFailure` or `onTimeout` hook that `event` (a
/// lifecycle event of `state`'s run, just committed) fires, if its task or workflow
/// declares one.
pub fn lifecycle(state: &RunState, event: &LifecycleEvent) -> Option<NewDelivery> {
    let kind = match event.event.as_str() {
        "task.completed" | "workflow.completed" => HookKind::OnComplete,
        "task.failed" | "workflow.failed" => HookKind::OnFailure,
        "task.timed_out" | "workflow.timed_out" => HookKind::OnTimeout,
        _ => return None,
    };
    let task = event.task_id.and_then(|id| state.task(id));
    let hook = match (&event.task_ref, task) {
        (Some(task_ref), Some(_)) => {
            decl::hook(&find_task(&state.definition.tasks, task_ref)?.extra, kind)?
        }
        (None, _) => decl::hook(&state.definition.extra, kind)?,
        (Some(_), None) => return None,
    };
    let firing = Firing {
        kind,
        event: &event.event,
        workflow_id: &state.workflow_id,
        run_id: state.run_id,
        cause: format!("{}:{}", event.event_id, event.task_id.unwrap_or_default()),
        task: task.map(|t| (t.task_ref.as_str(), t.task_id, t.iteration)),
        group_seq: None,
    };
    let mut doc = run_document(state, state.run_id, event.time, event.reason.clone());
    if let Some(t) = task {
        doc.insert("task".into(), task_document(state, t));
    }
    let secret = decl::secret(&state.definition.extra);
    Some(delivery(&hook, secret.as_deref(), &firing, doc))
}

/// The run's part of an event document.
fn run_document(
    state: &RunState,
    run_id: Uuid,
    time: DateTime<Utc>,
    reason: Option<String>,
) -> Map<String, Value> {
    let record = state.record();
    let doc = json!({
        "workflowId": state.workflow_id,
        "runId": run_id,
        "workflowType": state.definition.name,
        "correlationId": state.correlation_id,
        "time": time,
        "reason": reason,
        "workflow": {
            "status": record.status,
            "input": state.input,
            "output": state.output,
            "variables": Value::Object(state.variables.clone()),
        },
    });
    match doc {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

/// A task's part of an event document.
fn task_document(state: &RunState, t: &TaskState) -> Value {
    json!({
        "taskRef": t.task_ref,
        "taskId": t.task_id,
        "taskType": t.task_type,
        "taskName": t.task_name,
        "attempt": t.attempt,
        "iteration": t.iteration,
        "status": state.task_record(t).status,
        "input": t.input,
        "output": t.output,
        "reason": t.reason,
    })
}
