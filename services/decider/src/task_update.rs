//! Task results and signals given through the REST API (docs/task-updates.md). The
//! gateway cannot know whether one still applies — a worker's result, a timeout, a skip
//! or a reset may be ahead of it in the run's queue — so the decider judges each here,
//! in the run's order, and the gateway answers with the verdict: applied, kept (a signal
//! for a task not reached yet), or refused with the state that refused it.

use serde_json::{json, Value};
use weft::dsl::{TaskType, WorkflowTask};
use weft::messages::{
    Event, Signal, TaskCompleted, TaskFailed, TaskPostponed, TaskUpdateStatus, UpdateTask,
};

use crate::apply::{conflict, require_running, Applied};
use crate::state::{find_task, RunState, TaskState};

/// Applies `update` to the run `state`: to the task it names when that task still waits
/// for a result; a signal (`hold`) for a WAIT, HUMAN or asynchronous EVENT task the run
/// has not reached yet is kept until that task consumes it. Anything else is refused:
/// 404 for a ref the definition does not have, 409 naming the state found, 400 for a
/// status the task's type does not take.
pub fn update_task(state: &RunState, update: &UpdateTask) -> Applied {
    if let Some(refused) = require_running(state, "a task update") {
        return refused;
    }
    let task_ref = update.task_ref.as_str();
    if let Some(run_id) = update.run_id.filter(|r| *r != state.run_id) {
        return conflict(format!(
            "task {task_ref} is of run {run_id}, which a reset replaced (the current run is {})",
            state.run_id
        ));
    }
    let task = match update.task_id {
        Some(id) => match state.task(id) {
            Some(t) => Some(t),
            None => {
                return refused(
                    404,
                    format!("task {id} is not a task of workflow {}", state.workflow_id),
                )
            }
        },
        None => state.latest(task_ref),
    };
    if let Some(t) = task.filter(|t| t.status.is_pending()) {
        return update_pending(state, t, update);
    }
    let node = find_task(&state.definition.tasks, task_ref);
    if update.hold && update.status == TaskUpdateStatus::Completed {
        let kept = match node {
            // Reached once already: only a loop reaches it again.
            Some(n) => keeps_signals(n) && (task.is_none() || in_loop(state, task_ref)),
            // A dynamic fork's tasks are named when it runs.
            None => has_dynamic_fork(&state.definition.tasks),
        };
        if kept {
            return Applied::Events(vec![Event::SignalReceived(Signal {
                name: task_ref.to_owned(),
                payload: update.output.clone(),
            })]);
        }
    }
    match (task, node) {
        (Some(t), _) => conflict(format!(
            "task {task_ref} is {}: it takes no more updates",
            t.status.as_str()
        )),
        (None, Some(n)) if update.hold && keeps_signals(n) => conflict(format!(
            "task {task_ref} ({}) waits for its timer, not for a signal, and is not reached yet",
            n.kind
        )),
        (None, Some(n)) if update.hold => conflict(format!(
            "task {task_ref} ({}) is not scheduled yet; a signal is kept for later only for a WAIT, HUMAN or asynchronous EVENT task",
            n.kind
        )),
        (None, Some(n)) => conflict(format!(
            "task {task_ref} ({}) is not scheduled yet",
            n.kind
        )),
        (None, None) => refused(
            404,
            format!(
                "taskRef: workflow {} ({}) has no task {task_ref:?}",
                state.workflow_id, state.definition.name
            ),
        ),
    }
}

/// The update of a task that waits for one.
fn update_pending(state: &RunState, t: &TaskState, update: &UpdateTask) -> Applied {
    let kind = TaskType::parse(&t.task_type);
    let output = output_of(&update.output);
    let worker_id = update.worker_id.clone().or_else(|| t.worker_id.clone());
    let failed = |terminal: bool| {
        Event::TaskFailed(TaskFailed {
            error_kind: None,
            task_id: t.task_id,
            task_ref: t.task_ref.clone(),
            reason: update
                .reason
                .clone()
                .filter(|r| !r.is_empty())
                .unwrap_or_else(|| format!("{} by the task API", update.status.as_str())),
            terminal,
            output: output.clone(),
            worker_id: worker_id.clone(),
            started_at: t.start_time,
        })
    };
    let completed = || {
        Event::TaskCompleted(TaskCompleted {
            task_id: t.task_id,
            task_ref: t.task_ref.clone(),
            output: output.clone(),
            worker_id: worker_id.clone(),
            started_at: t.start_time,
            errors: None,
        })
    };
    let event = match (kind, update.status) {
        (_, TaskUpdateStatus::Failed) if takes_results(kind) => failed(false),
        (_, TaskUpdateStatus::FailedWithTerminalError) if takes_results(kind) => failed(true),
        (Some(TaskType::Simple | TaskType::Http), TaskUpdateStatus::Completed) => completed(),
        (Some(TaskType::Simple | TaskType::Http), TaskUpdateStatus::Postponed) => {
            Event::TaskPostponed(TaskPostponed {
                task_id: t.task_id,
                task_ref: t.task_ref.clone(),
                output,
                worker_id,
                callback_after_seconds: update.callback_after_seconds.max(0),
            })
        }
        // A WAIT on its timer completes now; the timer's firing later changes nothing.
        (Some(TaskType::Wait), TaskUpdateStatus::Completed) if has_timer(state, t) => completed(),
        // Recorded as the signal it consumes, so that signals and the completions that
        // consumed them stay in step; completed now, even while the run is paused.
        (_, TaskUpdateStatus::Completed) if consumes_signals(state, t) => {
            let signal = Event::SignalReceived(Signal {
                name: t.task_ref.clone(),
                payload: update.output.clone(),
            });
            return Applied::Events(vec![signal, completed()]);
        }
        (_, TaskUpdateStatus::Postponed) if takes_results(kind) => {
            return refused(
                400,
                format!(
                    "status: a {} task is not handed out to workers; IN_PROGRESS with callbackAfterSeconds does not apply to it",
                    t.task_type
                ),
            )
        }
        (Some(TaskType::SubWorkflow), _) => {
            return conflict(format!(
                "task {} (SUB_WORKFLOW) ends with its child workflow, not through the task API",
                t.task_ref
            ))
        }
        _ => {
            return conflict(format!(
                "task {} ({}) is {} and ends by itself, not through the task API",
                t.task_ref,
                t.task_type,
                t.status.as_str()
            ))
        }
    };
    Applied::Events(vec![event])
}

/// Whether tasks of `kind` take results through the task API: workers' tasks, and the
/// tasks that wait for one (WAIT, HUMAN, asynchronous EVENT).
fn takes_results(kind: Option<TaskType>) -> bool {
    matches!(
        kind,
        Some(
            TaskType::Simple | TaskType::Http | TaskType::Wait | TaskType::Human | TaskType::Event
        )
    )
}

/// Whether the pending `t` completes with the next signal of its name: a WAIT without a
/// timer, a HUMAN task, an EVENT task with `asyncComplete` (the walk consumes it).
fn consumes_signals(state: &RunState, t: &TaskState) -> bool {
    let node = find_task(&state.definition.tasks, &t.task_ref);
    match TaskType::parse(&t.task_type) {
        Some(TaskType::Wait) => !has_timer(state, t),
        Some(TaskType::Human) => true,
        Some(TaskType::Event) => node.is_some_and(is_async_event),
        _ => false,
    }
}

/// Whether the node's task, when the run reaches it, consumes a signal kept for it.
fn keeps_signals(node: &WorkflowTask) -> bool {
    match TaskType::parse(&node.kind) {
        Some(TaskType::Wait) => {
            !(node.input_parameters.get("duration").is_some()
                || node.input_parameters.get("until").is_some())
        }
        Some(TaskType::Human) => true,
        Some(TaskType::Event) => is_async_event(node),
        _ => false,
    }
}

fn is_async_event(node: &WorkflowTask) -> bool {
    node.extra
        .get("asyncComplete")
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

/// Whether `t` waits on a durable timer of its own (a WAIT with `duration` or `until`).
fn has_timer(state: &RunState, t: &TaskState) -> bool {
    state.timers.iter().any(|x| x.task_id == t.task_id)
}

/// Whether `task_ref` is in the body of a DO_WHILE (reached again at each iteration).
fn in_loop(state: &RunState, task_ref: &str) -> bool {
    fn inside(tasks: &[WorkflowTask], task_ref: &str, looped: bool) -> bool {
        tasks.iter().any(|t| {
            (looped && t.task_reference_name == task_ref)
                || t.children().into_iter().any(|list| {
                    inside(
                        list,
                        task_ref,
                        looped || TaskType::parse(&t.kind) == Some(TaskType::DoWhile),
                    )
                })
        })
    }
    inside(&state.definition.tasks, task_ref, false)
}

/// Whether `tasks` has a dynamic fork anywhere (its tasks' refs are known only when it
/// runs).
fn has_dynamic_fork(tasks: &[WorkflowTask]) -> bool {
    tasks.iter().any(|t| {
        TaskType::parse(&t.kind) == Some(TaskType::ForkJoinDynamic)
            || t.children().into_iter().any(has_dynamic_fork)
    })
}

/// A task's output from an update's: an object as it is, `{}` for null, anything else
/// under `payload` (as a WAIT takes a signal's payload).
fn output_of(value: &Value) -> Value {
    match value {
        Value::Object(_) => value.clone(),
        Value::Null => json!({}),
        other => json!({ "payload": other }),
    }
}

fn refused(status: u16, message: String) -> Applied {
    Applied::Rejected { status, message }
}
