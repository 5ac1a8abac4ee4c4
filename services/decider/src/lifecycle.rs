//! Lifecycle events (docs/events.md): each change of a run or a task, as committed,
//! becomes a [`LifecycleEvent`] published through the outbox to the events exchange, so
//! listeners and hook dispatchers see exactly what the history says, once per change.

use chrono::{DateTime, Utc};
use weft::messages::{Event, LifecycleEvent};
use weft::store::runs::StoredEvent;

use crate::state::{RunState, TaskState};

/// The lifecycle event `stored` (already folded into `state`) is, if any.
pub fn of(state: &RunState, stored: &StoredEvent) -> Option<LifecycleEvent> {
    let run = |name: &str, reason: Option<String>| {
        Some(base(
            state,
            name,
            stored.event_id,
            stored.time,
            run_status(state),
            reason,
        ))
    };
    let task = |task_id, name: &str, reason: Option<String>| {
        let t = state.task(task_id)?;
        Some(task_event(
            state,
            t,
            name,
            stored.event_id,
            stored.time,
            reason,
        ))
    };
    match &stored.event {
        Event::WorkflowStarted(_) => run("workflow.started", None),
        Event::WorkflowCompleted(_) => run("workflow.completed", None),
        Event::WorkflowFailed(f) => run("workflow.failed", Some(f.reason.clone())),
        Event::WorkflowTimedOut(t) => run("workflow.timed_out", Some(t.reason.clone())),
        Event::WorkflowTerminated(t) => run("workflow.terminated", Some(t.reason.clone())),
        Event::WorkflowReset(r) => run(
            "workflow.reset",
            Some(format!(
                "reset to task {:?} from run {}{}",
                r.task_ref,
                r.previous_run_id,
                r.reason
                    .as_deref()
                    .map_or(String::new(), |x| format!(": {x}"))
            )),
        ),
        Event::WorkflowPaused(_) => run("workflow.paused", None),
        Event::WorkflowResumed(_) => run("workflow.resumed", None),
        Event::TaskScheduled(s) => task(s.task_id, "task.scheduled", None),
        Event::TaskStarted(s) => task(s.task_id, "task.started", None),
        Event::TaskPostponed(p) => task(p.task_id, "task.postponed", None),
        Event::TaskCompleted(c) => task(c.task_id, "task.completed", None),
        Event::TaskFailed(f) => task(f.task_id, "task.failed", Some(f.reason.clone())),
        Event::TaskTimedOut(t) => task(t.task_id, "task.timed_out", Some(t.reason.clone())),
        Event::TaskSkipped(s) => task(s.task_id, "task.skipped", None),
        Event::TaskCanceled(c) => task(c.task_id, "task.canceled", Some(c.reason.clone())),
        Event::VariablesUpdated(_)
        | Event::SignalReceived(_)
        | Event::SignalsUnconsumed(_)
        | Event::TimerStarted(_)
        | Event::TimerFired(_)
        | Event::ChildWorkflowStarted(_)
        | Event::SkipRequested(_)
        | Event::TaskCallbackReset(_)
        | Event::RollbackHooksDone(_) => None,
    }
}

/// `task.canceled` for a task its run's end canceled (no event of its own).
pub fn canceled_by_run_end(
    state: &RunState,
    task: &TaskState,
    event_id: i64,
    time: DateTime<Utc>,
    reason: String,
) -> LifecycleEvent {
    task_event(state, task, "task.canceled", event_id, time, Some(reason))
}

fn task_event(
    state: &RunState,
    t: &TaskState,
    name: &str,
    event_id: i64,
    time: DateTime<Utc>,
    reason: Option<String>,
) -> LifecycleEvent {
    let mut e = base(
        state,
        name,
        event_id,
        time,
        state.task_record(t).status,
        reason,
    );
    e.task_id = Some(t.task_id);
    e.task_ref = Some(t.task_ref.clone());
    e.task_type = Some(t.task_type.clone());
    e.attempt = Some(t.attempt);
    e.iteration = Some(t.iteration);
    e
}

fn base(
    state: &RunState,
    name: &str,
    event_id: i64,
    time: DateTime<Utc>,
    status: String,
    reason: Option<String>,
) -> LifecycleEvent {
    LifecycleEvent {
        event: name.to_owned(),
        workflow_id: state.workflow_id.clone(),
        run_id: state.run_id,
        correlation_id: state.correlation_id.clone(),
        workflow_type: state.definition.name.clone(),
        event_id,
        task_id: None,
        task_ref: None,
        task_type: None,
        attempt: None,
        iteration: None,
        status,
        reason,
        time,
    }
}

fn run_status(state: &RunState) -> String {
    if state.paused && state.status == crate::state::RunStatus::Running {
        "PAUSED".to_owned()
    } else {
        state.status.as_str().to_owned()
    }
}
