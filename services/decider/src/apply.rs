//! Turning a command into the events it causes, given the run's state. Pure: the
//! caller supplies ids and time. A command that no longer applies (a duplicate, a
//! result for an attempt that is not current, a result after the run ended) is
//! `Ignored` with the reason, never an error: redelivery must change nothing twice.

use serde_json::{Map, Value};
use weft::messages::{
    ActivityCompleted, ActivityFailed, ChildWorkflowEnded, Command, Event, Operation,
    TaskCallbackReset, TaskCanceled, TaskCompleted, TaskFailed, TaskPostponed, TaskStarted,
    TaskTimedOut, Terminate, VariablesUpdated, WorkflowPaused, WorkflowResumed, WorkflowTerminated,
};

use crate::state::{RunState, RunStatus, TaskStatus};

/// The outcome of applying a command to an existing run.
#[derive(Debug, Clone, PartialEq)]
pub enum Applied {
    /// New events to append.
    Events(Vec<Event>),
    /// Nothing to do, and why.
    Ignored(String),
    /// An operator command that does not apply: the operator is told `status` (400, 404
    /// or 409) and why.
    Rejected {
        /// HTTP status for the operator.
        status: u16,
        /// Why, naming the state or the field.
        message: String,
    },
    /// A reset that applies: the engine builds the successor run from the history.
    Reset(ResetPlan),
    /// A retry that resumes sub-workflow tasks, for a run that failed with a child:
    /// the child is retried instead (and passes it down in turn); its retry resumes
    /// this run.
    PassDown {
        /// The child to retry.
        child_workflow_id: String,
        /// The retry to send it.
        reset: weft::messages::Reset,
    },
    /// A retry passed down to this run, which has nothing to retry: the parent that
    /// passed it down is retried instead (Conductor's fallback). The verdict is that
    /// retry's.
    FallBack {
        /// The parent to retry.
        workflow_id: String,
        /// The retry to send it.
        reset: weft::messages::Reset,
        /// Why this run could not take the retry.
        why: String,
    },
}

/// A validated reset: where the successor run's history is cut.
#[derive(Debug, Clone, PartialEq)]
pub struct ResetPlan {
    /// The first task the successor runs again (the cut is just before its first
    /// scheduling); `None`: only the run's start is kept (restart of a run that never
    /// scheduled anything).
    pub cut_task: Option<uuid::Uuid>,
    /// Its reference name (the first task of the definition for an empty restart).
    pub task_ref: String,
    /// Its loop iteration.
    pub iteration: i32,
    /// A retry in place: the successor keeps the whole history but the run's end, and
    /// these tasks get one more attempt (`cut_task` is then unused).
    pub retried: Option<Vec<weft::messages::TaskAt>>,
    /// With `retried`: the SUB_WORKFLOW task whose child was retried, which waits for
    /// it again instead of running again.
    pub resumed: Option<weft::messages::TaskAt>,
}

/// Applies `command` to the existing run `state`.
pub fn apply_command(state: &RunState, command: &Command) -> Applied {
    match command {
        Command::StartWorkflow(_) => Applied::Ignored(format!(
            "workflow {} already has run {}",
            state.workflow_id, state.run_id
        )),
        Command::ActivityCompleted(c) => match check_attempt(state, c.run_id, c.task_id, c.attempt)
        {
            Err(why) => Applied::Ignored(why),
            Ok(task_ref) => Applied::Events(vec![completed(task_ref, c)]),
        },
        Command::ActivityFailed(f) => match check_attempt(state, f.run_id, f.task_id, f.attempt) {
            Err(why) => Applied::Ignored(why),
            Ok(task_ref) => Applied::Events(vec![failed(task_ref, f)]),
        },
        Command::ActivityStarted(s) => match check_attempt(state, s.run_id, s.task_id, s.attempt) {
            Err(why) => Applied::Ignored(why),
            Ok(task_ref) => match state.task(s.task_id) {
                Some(t) if t.status == TaskStatus::Scheduled => {
                    Applied::Events(vec![Event::TaskStarted(TaskStarted {
                        task_id: s.task_id,
                        task_ref,
                        worker_id: s.worker_id.clone(),
                        started_at: s.started_at,
                    })])
                }
                _ => Applied::Ignored(format!("task {task_ref} already started")),
            },
        },
        Command::ActivityPostponed(p) => {
            match check_attempt(state, p.run_id, p.task_id, p.attempt) {
                Err(why) => Applied::Ignored(why),
                Ok(task_ref) => Applied::Events(vec![Event::TaskPostponed(TaskPostponed {
                    task_id: p.task_id,
                    task_ref,
                    output: p.output.clone(),
                    worker_id: p.worker_id.clone(),
                    callback_after_seconds: p.callback_after_seconds.max(0),
                })]),
            }
        }
        Command::ResetCallbacks(op) => operation(state, op, || reset_callbacks(state)),
        Command::ChildWorkflowEnded(ended) => child_ended(state, ended),
        Command::ActivityTimedOut(t) => {
            match check_attempt(state, t.run_id, t.task_id, t.attempt) {
                Err(why) => Applied::Ignored(why),
                Ok(task_ref) => Applied::Events(vec![Event::TaskTimedOut(TaskTimedOut {
                    task_id: t.task_id,
                    task_ref,
                    reason: t.reason.clone(),
                })]),
            }
        }
        Command::Terminate(t) => operation(state, &t.op, || terminate(state, t)),
        Command::Pause(op) => operation(state, op, || pause(state)),
        Command::Resume(op) => operation(state, op, || resume(state)),
        Command::SkipTask(skip) => operation(state, &skip.op, || crate::skip::skip(state, skip)),
        Command::Reset(reset) => operation(state, &reset.op, || crate::reset::plan(state, reset)),
        // The engine's own (an EVENT task's message confirmed): recorded as it comes.
        Command::Signal(signal)
            if state.status == RunStatus::Running && signal.name.starts_with("weft:") =>
        {
            Applied::Events(vec![Event::SignalReceived(signal.clone())])
        }
        // A signal over the bus is judged as one through the REST API; nobody waits
        // for its verdict, so a refusal is only logged.
        Command::Signal(signal) if state.status == RunStatus::Running => {
            let update = weft::messages::UpdateTask {
                op: Operation::default(),
                task_ref: signal.name.clone(),
                task_id: None,
                run_id: None,
                status: weft::messages::TaskUpdateStatus::Completed,
                output: signal.payload.clone(),
                reason: None,
                worker_id: None,
                callback_after_seconds: 0,
                hold: true,
            };
            match crate::task_update::update_task(state, &update) {
                Applied::Rejected { message, .. } => Applied::Ignored(message),
                applied => applied,
            }
        }
        Command::UpdateTask(update) => operation(state, &update.op, || {
            crate::task_update::update_task(state, update)
        }),
        Command::TimerFired(fired) => {
            let known = state
                .timers
                .iter()
                .find(|t| t.timer_id == fired.timer_id && !t.fired);
            match known {
                _ if fired.run_id != state.run_id => Applied::Ignored(format!(
                    "timer of run {}, not the current one",
                    fired.run_id
                )),
                _ if state.status != RunStatus::Running => {
                    Applied::Ignored(format!("timer for a run that is {}", state.status.as_str()))
                }
                // A WAIT completed (by ref, skipped) before its timer: the commit that
                // ended it deleted the timer, and one already fired changes nothing.
                Some(t)
                    if t.timer_id == crate::interpreter::wait_timer_id(t.task_id)
                        && state
                            .task(t.task_id)
                            .is_some_and(|x| !x.status.is_pending()) =>
                {
                    Applied::Ignored(format!("timer {} of a WAIT that ended", t.timer_id))
                }
                Some(_) => Applied::Events(vec![Event::TimerFired(fired.clone())]),
                None => {
                    Applied::Ignored(format!("timer {} unknown or already fired", fired.timer_id))
                }
            }
        }
        Command::RollbackHooksDone(done) => rollback_done(state, done),
        Command::UpdateVariables(update) => operation(state, &update.op, || {
            if let Some(refused) = require_running(state, "updating variables") {
                return refused;
            }
            Applied::Events(vec![Event::VariablesUpdated(VariablesUpdated {
                variables: update.variables.clone(),
            })])
        }),
        // The engine keeps watches aside; one reaching here changes nothing.
        Command::WatchRun(_) | Command::WatchVerdict(_) => {
            Applied::Ignored("a watch changes no run".into())
        }
        Command::WithdrawOffer(_) => Applied::Ignored("a withdrawal changes no run".into()),
        Command::Continue(c) => continued(state, c),
        Command::SetAside(aside) => set_aside(state, aside),
        Command::Signal(signal) => Applied::Ignored(format!(
            "signal {:?} for a run that is {}",
            signal.name,
            state.status.as_str()
        )),
    }
}

/// A continuation of the run's settle: nothing to record, the interpreter goes on
/// deciding (docs/decider.md, "Long settles in slices").
fn continued(state: &RunState, c: &weft::messages::Continue) -> Applied {
    if c.run_id != state.run_id {
        return Applied::Ignored(format!(
            "continuation of run {}, not the current one",
            c.run_id
        ));
    }
    if state.status != RunStatus::Running {
        return Applied::Ignored(format!(
            "continuation of a run that is {}",
            state.status.as_str()
        ));
    }
    Applied::Events(Vec::new())
}

/// One of the run's commands was set aside: the run ends FAILED, saying why, so that
/// the failure is seen (its lifecycle event, hooks, a parent) instead of the run waiting
/// for an effect that never comes.
fn set_aside(state: &RunState, aside: &weft::messages::SetAside) -> Applied {
    if state.status != RunStatus::Running {
        return Applied::Ignored(format!(
            "command {} set aside for a run that is {}",
            aside.message_id,
            state.status.as_str()
        ));
    }
    Applied::Events(vec![Event::WorkflowFailed(
        weft::messages::WorkflowFailed {
            reason: aside.reason.clone(),
            failed_task_refs: Vec::new(),
            output: Some(crate::interpreter::failure_output(state)),
        },
    )])
}

/// The rollback hooks of the reset that created the run are settled: it goes on, or,
/// when an awaited hook ran out of attempts, the reset fails: the run ends FAILED with
/// the dispatcher's reason, which names the hook (docs/hooks.md).
fn rollback_done(state: &RunState, done: &weft::messages::RollbackHooksDone) -> Applied {
    if done.run_id != state.run_id {
        return Applied::Ignored(format!(
            "rollback hooks of run {}, not the current one",
            done.run_id
        ));
    }
    if state.status != RunStatus::Running || !state.rolling_back {
        return Applied::Ignored(format!(
            "run {} is not waiting for rollback hooks",
            state.run_id
        ));
    }
    let mut events = vec![Event::RollbackHooksDone(done.clone())];
    if !done.ok {
        events.push(Event::WorkflowFailed(weft::messages::WorkflowFailed {
            reason: format!(
                "reset failed: {}",
                done.reason
                    .as_deref()
                    .unwrap_or("an awaited rollback hook failed")
            ),
            failed_task_refs: Vec::new(),
            output: Some(crate::interpreter::failure_output(state)),
        }));
    }
    Applied::Events(events)
}

/// An operator command aimed at a run that a reset replaced since the operator looked
/// is refused: two operators resetting at once, one wins and the other is told.
fn operation(state: &RunState, op: &Operation, apply: impl FnOnce() -> Applied) -> Applied {
    match op.expected_run_id {
        Some(expected) if expected != state.run_id => conflict(format!(
            "run {expected} is no longer the current run of workflow {} (now {})",
            state.workflow_id, state.run_id
        )),
        _ => apply(),
    }
}

/// A 409 naming why.
pub(crate) fn conflict(message: String) -> Applied {
    Applied::Rejected {
        status: 409,
        message,
    }
}

/// The run must be running (or paused) for `what`.
pub(crate) fn require_running(state: &RunState, what: &str) -> Option<Applied> {
    (state.status != RunStatus::Running).then(|| {
        conflict(format!(
            "workflow {} is {}: {what} needs a RUNNING or PAUSED run",
            state.workflow_id,
            state.status.as_str()
        ))
    })
}

fn terminate(state: &RunState, t: &Terminate) -> Applied {
    if let Some(refused) = require_running(state, "terminate") {
        return refused;
    }
    Applied::Events(vec![Event::WorkflowTerminated(WorkflowTerminated {
        reason: t.reason.clone(),
        output: state.output.clone().unwrap_or(Value::Object(Map::new())),
    })])
}

/// Conductor's `resetcallbacks`: every worker's task that waits out a callback (a
/// retry's back-off, a postponement) is due at once.
fn reset_callbacks(state: &RunState) -> Applied {
    if let Some(refused) = require_running(state, "resetting callbacks") {
        return refused;
    }
    Applied::Events(
        state
            .tasks
            .iter()
            .filter(|t| {
                t.status == TaskStatus::Scheduled
                    && t.callback_after_seconds > 0
                    && crate::state::is_activity(&t.task_type)
            })
            .map(|t| {
                Event::TaskCallbackReset(TaskCallbackReset {
                    task_id: t.task_id,
                    task_ref: t.task_ref.clone(),
                })
            })
            .collect(),
    )
}

fn pause(state: &RunState) -> Applied {
    if let Some(refused) = require_running(state, "pause") {
        return refused;
    }
    if state.paused {
        return conflict(format!("workflow {} is already PAUSED", state.workflow_id));
    }
    Applied::Events(vec![Event::WorkflowPaused(WorkflowPaused {})])
}

fn resume(state: &RunState) -> Applied {
    if state.status != RunStatus::Running || !state.paused {
        let status = if state.status == RunStatus::Running {
            "RUNNING"
        } else {
            state.status.as_str()
        };
        return conflict(format!(
            "workflow {} is {status}: only a PAUSED run can be resumed",
            state.workflow_id
        ));
    }
    Applied::Events(vec![Event::WorkflowResumed(WorkflowResumed {})])
}

/// The result must be for the current run, a task that waits for it, and its attempt.
fn check_attempt(
    state: &RunState,
    run_id: uuid::Uuid,
    task_id: uuid::Uuid,
    attempt: i32,
) -> Result<String, String> {
    if run_id != state.run_id {
        return Err(format!(
            "result for run {run_id}, current run is {}",
            state.run_id
        ));
    }
    if state.status != RunStatus::Running {
        return Err(format!("run is {}", state.status.as_str()));
    }
    let task = state
        .task(task_id)
        .ok_or_else(|| format!("unknown task {task_id}"))?;
    if task.attempt != attempt {
        return Err(format!(
            "attempt {attempt} is not current ({})",
            task.attempt
        ));
    }
    if !task.status.is_pending() {
        return Err(format!(
            "task {} is already {}",
            task.task_ref,
            task.status.as_str()
        ));
    }
    Ok(task.task_ref.clone())
}

/// A child run ended: its SUB_WORKFLOW task completes with the child's output, or fails
/// with the child's reason (and is retried per its policy).
fn child_ended(state: &RunState, ended: &ChildWorkflowEnded) -> Applied {
    let p = &ended.parent;
    let (task_id, task_ref) = match check_attempt_of(state, p.run_id, p.task_id) {
        Ok(task_ref) => (p.task_id, task_ref),
        // The child was retried and this run (a retry in place of the one that started
        // it) waits for it again under the task's new id: the child's id says which.
        Err(why) => match state.tasks.iter().rev().find(|t| {
            t.status.is_pending() && t.child_workflow_id() == Some(&ended.child_workflow_id)
        }) {
            Some(t) if state.status == RunStatus::Running => (t.task_id, t.task_ref.clone()),
            _ => return Applied::Ignored(why),
        },
    };
    let mut output = match &ended.output {
        Value::Object(map) => map.clone(),
        Value::Null => Map::new(),
        other => Map::from_iter([("output".to_owned(), other.clone())]),
    };
    output.insert(
        "subWorkflowId".into(),
        Value::String(ended.child_workflow_id.clone()),
    );
    // A child terminated (by an operator, or its own TERMINATE task) cancels its task, as
    // Conductor's SubWorkflow does: the parent is terminated in turn, unless the task is
    // optional or permissive.
    if ended.status == "TERMINATED" {
        return Applied::Events(vec![Event::TaskCanceled(TaskCanceled {
            task_id,
            task_ref,
            reason: ended.reason.clone().unwrap_or_else(|| {
                format!("child workflow {} was terminated", ended.child_workflow_id)
            }),
            for_good: true,
        })]);
    }
    let event = if ended.status == "COMPLETED" {
        Event::TaskCompleted(TaskCompleted {
            task_id,
            task_ref,
            output: Value::Object(output),
            worker_id: None,
            started_at: None,
            errors: None,
        })
    } else {
        Event::TaskFailed(TaskFailed {
            error_kind: Some(format!("child:{}", ended.status)),
            task_id,
            task_ref,
            reason: format!(
                "child workflow {} ended {}: {}",
                ended.child_workflow_id,
                ended.status,
                ended.reason.as_deref().unwrap_or("no reason given")
            ),
            terminal: false,
            output: Value::Object(output),
            worker_id: None,
            started_at: None,
        })
    };
    Applied::Events(vec![event])
}

/// The ref of the pending task `task_id` of the current run `run_id`.
fn check_attempt_of(
    state: &RunState,
    run_id: uuid::Uuid,
    task_id: uuid::Uuid,
) -> Result<String, String> {
    let attempt = state
        .task(task_id)
        .map(|t| t.attempt)
        .ok_or_else(|| format!("unknown task {task_id}"))?;
    check_attempt(state, run_id, task_id, attempt)
}

fn completed(task_ref: String, c: &ActivityCompleted) -> Event {
    Event::TaskCompleted(TaskCompleted {
        task_id: c.task_id,
        task_ref,
        output: c.output.clone(),
        worker_id: c.worker_id.clone(),
        started_at: c.started_at,
        errors: None,
    })
}

fn failed(task_ref: String, f: &ActivityFailed) -> Event {
    Event::TaskFailed(TaskFailed {
        error_kind: f.error_kind.clone(),
        task_id: f.task_id,
        task_ref,
        reason: f.reason.clone(),
        terminal: f.terminal,
        output: f.output.clone(),
        worker_id: f.worker_id.clone(),
        started_at: f.started_at,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use uuid::Uuid;

    use super::*;
    use crate::history_builder::HistoryBuilder;

    fn one_task() -> HistoryBuilder {
        HistoryBuilder::started(
            json!({"name": "w", "tasks": [{"name": "a", "taskReferenceName": "a"}]}),
            json!({}),
        )
        .scheduled("a", "a", json!({}))
    }

    fn result(state: &RunState, attempt: i32) -> Command {
        Command::ActivityCompleted(ActivityCompleted {
            task_id: state.tasks[0].task_id,
            run_id: state.run_id,
            attempt,
            output: json!({"ok": true}),
            worker_id: None,
            started_at: None,
            eager: None,
        })
    }

    #[test]
    fn result_for_pending_attempt_becomes_task_completed() {
        let state = one_task().state();
        match apply_command(&state, &result(&state, 1)) {
            Applied::Events(events) => assert!(matches!(&events[..], [Event::TaskCompleted(_)])),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn duplicate_result_is_ignored() {
        let h = one_task().completed("a", json!({}));
        let state = h.state();
        assert!(matches!(
            apply_command(&state, &result(&state, 1)),
            Applied::Ignored(_)
        ));
    }

    #[test]
    fn stale_attempt_and_foreign_run_are_ignored() {
        let state = one_task().state();
        assert!(matches!(
            apply_command(&state, &result(&state, 2)),
            Applied::Ignored(_)
        ));
        let mut other = state.clone();
        other.run_id = Uuid::from_u128(99);
        assert!(matches!(
            apply_command(&other, &result(&state, 1)),
            Applied::Ignored(_)
        ));
    }
}
