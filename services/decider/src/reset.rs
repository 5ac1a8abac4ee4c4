//! Reset (DESIGN.md §7, docs/operations.md): a new run of the same workflow whose
//! history is the old run's prefix up to (not including) the first scheduling of the
//! target task; execution continues from it. Restart resets to the first task.
//!
//! Retry of an ended run is a reset *in place*, as Conductor's retry: the successor keeps
//! the whole history but the run's end (failed attempts included), and each failed task
//! gets one more attempt, a failed JOIN waits again; work still running when the run
//! ended is canceled and runs again, as at any cut. (A RUNNING run's retry, of an
//! optional task that failed, is a reset to that task.)
//!
//! The successor's copy of the prefix gets its own task ids (name-based on the new run
//! and the old id), so each run's task rows stay its own; timers keyed by a task id
//! (retry back-off, task timeouts) are therefore unknown in the successor and the
//! interpreter sets them anew where still needed. Work that was still running at the
//! cut (an activity, a child run, a WAIT) is recorded as canceled right after the
//! `WorkflowReset` marker, and runs again.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use uuid::Uuid;
use weft::dsl::TaskType;
use weft::messages::{
    Event, Reset, ResetTarget, RetryFallback, RollbackHookRef, TaskAt, TaskCanceled, WorkflowReset,
};
use weft::store::runs::StoredEvent;

use crate::apply::{conflict, Applied, ResetPlan};
use crate::state::{find_task, FoldError, RunState, RunStatus, TaskState, TaskStatus};

/// Validates `reset` against the run and finds where to cut.
pub fn plan(state: &RunState, reset: &Reset) -> Applied {
    // A reset redelivered after it was applied (internal resets carry no request id).
    if reset.new_run_id == state.run_id {
        return Applied::Ignored(format!(
            "reset already applied: run {} is its run",
            state.run_id
        ));
    }
    if reset.definition.is_some() && reset.target != ResetTarget::First {
        return bad_request("definition: only a restart runs on a new definition".into());
    }
    match &reset.target {
        ResetTarget::Ref {
            task_ref,
            iteration,
        } => {
            let known = find_task(&state.definition.tasks, task_ref).is_some()
                || state.latest(task_ref).is_some();
            if !known {
                return bad_request(format!(
                    "taskRef: task {task_ref:?} is not in workflow {} (version {})",
                    state.definition.name, state.definition.version
                ));
            }
            let newest =
                state.tasks.iter().rev().find(|t| {
                    &t.task_ref == task_ref && iteration.is_none_or(|i| t.iteration == i)
                });
            match newest {
                Some(t) => cut_at(state, t),
                None => bad_request(format!(
                    "taskRef: task {task_ref:?}{} was never reached in run {}",
                    iteration.map_or(String::new(), |i| format!(" (iteration {i})")),
                    state.run_id
                )),
            }
        }
        ResetTarget::TaskId { task_id } => match state.task(*task_id) {
            Some(t) => cut_at(state, t),
            None => Applied::Rejected {
                status: 404,
                message: format!(
                    "reRunFromTaskId: {task_id} is not a task of run {}",
                    state.run_id
                ),
            },
        },
        ResetTarget::LastFailed {
            resume_subworkflow_tasks,
        } => match resume_subworkflow_tasks
            .then(|| failed_child(state))
            .flatten()
        {
            Some(child_workflow_id) => Applied::PassDown {
                child_workflow_id: child_workflow_id.to_owned(),
                reset: handed_on(
                    reset,
                    None,
                    true,
                    Uuid::new_v5(&reset.new_run_id, child_workflow_id.as_bytes()),
                    Some(RetryFallback {
                        workflow_id: state.workflow_id.clone(),
                        run_id: state.run_id,
                        new_run_id: reset.new_run_id,
                    }),
                ),
            },
            None => match (retry(state), &reset.fallback) {
                // Nothing to retry here: the parent that passed the retry down is retried
                // itself, as Conductor's retry falls back to the last workflow that has a
                // failed task. Not while this run runs (retried directly, its resumption
                // of the parent on the way): the parent would start a second child.
                (
                    Applied::Rejected {
                        status: 409,
                        message,
                    },
                    Some(fallback),
                ) if state.status != RunStatus::Running => Applied::FallBack {
                    workflow_id: fallback.workflow_id.clone(),
                    why: message,
                    reset: handed_on(
                        reset,
                        Some(fallback.run_id),
                        false,
                        fallback.new_run_id,
                        None,
                    ),
                },
                (applied, _) => applied,
            },
        },
        ResetTarget::ResumeChild { child_workflow_id } => resume_child(state, child_workflow_id),
        ResetTarget::First => {
            let definition = reset.definition.as_deref().unwrap_or(&state.definition);
            let restartable = definition
                .extra
                .get("restartable")
                .and_then(serde_json::Value::as_bool)
                .unwrap_or(true);
            if !restartable && state.status == RunStatus::Completed {
                return conflict(format!(
                    "workflow {} is non-restartable: it COMPLETED and its definition says \
                     restartable: false",
                    state.workflow_id
                ));
            }
            if state.status == RunStatus::Running {
                return conflict(format!(
                    "workflow {} is {}: restart needs an ended run (terminate it first)",
                    state.workflow_id,
                    if state.paused { "PAUSED" } else { "RUNNING" }
                ));
            }
            match state.tasks.first() {
                Some(first) => cut_at(state, first),
                None => Applied::Reset(ResetPlan {
                    cut_task: None,
                    task_ref: state
                        .definition
                        .tasks
                        .first()
                        .map(|t| t.task_reference_name.clone())
                        .unwrap_or_default(),
                    iteration: 0,
                    retried: None,
                    resumed: None,
                }),
            }
        }
    }
}

/// Retry. An ended run (FAILED, TIMED_OUT or TERMINATED) is retried in place: each task
/// whose newest attempt failed, timed out or was canceled for good gets one more attempt,
/// and what was still running at the end runs again; Conductor's 409 when there is
/// nothing to retry (unless the run timed out as a whole). A RUNNING run with an optional
/// task that failed is reset to that task.
fn retry(state: &RunState) -> Applied {
    match state.status {
        RunStatus::Completed => conflict(format!(
            "workflow {} is COMPLETED: retry needs a FAILED, TIMED_OUT or TERMINATED run, or \
             a RUNNING one with a failed optional task",
            state.workflow_id
        )),
        RunStatus::Running => retry_optional(state),
        RunStatus::Failed | RunStatus::TimedOut | RunStatus::Terminated => retry_in_place(state),
    }
}

fn retry_in_place(state: &RunState) -> Applied {
    // A task inside a loop is retried in the loop's newest iteration only: the walk never
    // goes back to an earlier one (a permissive task that failed there stays failed).
    let mut newest_iteration: HashMap<&str, i32> = HashMap::new();
    for t in &state.tasks {
        let i = newest_iteration
            .entry(t.task_ref.as_str())
            .or_insert(t.iteration);
        *i = (*i).max(t.iteration);
    }
    let reachable = |t: &TaskState| newest_iteration.get(t.task_ref.as_str()) == Some(&t.iteration);
    let mut retried: Vec<&TaskState> = Vec::new();
    let mut runs_again_too: Option<&TaskState> = None;
    for t in newest_attempts(state).into_iter().filter(|t| reachable(t)) {
        match t.status {
            TaskStatus::Failed | TaskStatus::FailedWithTerminalError | TaskStatus::TimedOut => {
                retried.push(t)
            }
            TaskStatus::Canceled if t.canceled_for_good => retried.push(t),
            // Still pending when the run ended (canceled with it): it runs again, or (a
            // HUMAN, an EVENT) waits again.
            TaskStatus::Canceled => runs_again_too = Some(t),
            _ => {}
        }
    }
    let Some(anchor) = retried.last().copied().or(runs_again_too) else {
        if state.status != RunStatus::TimedOut {
            return conflict(
                "There are no retryable tasks! Use restart if you want to attempt entire \
                 workflow execution again."
                    .into(),
            );
        }
        return Applied::Reset(ResetPlan {
            cut_task: None,
            task_ref: state
                .tasks
                .last()
                .map(|t| t.task_ref.clone())
                .unwrap_or_default(),
            iteration: state.tasks.last().map_or(0, |t| t.iteration),
            retried: Some(Vec::new()),
            resumed: None,
        });
    };
    Applied::Reset(ResetPlan {
        cut_task: None,
        task_ref: anchor.task_ref.clone(),
        iteration: anchor.iteration,
        retried: Some(
            retried
                .iter()
                .map(|t| TaskAt {
                    task_ref: t.task_ref.clone(),
                    iteration: t.iteration,
                })
                .collect(),
        ),
        resumed: None,
    })
}

/// Whether `t` ended without success (Conductor's unsuccessful terminal task).
fn unsuccessful(t: &TaskState) -> bool {
    matches!(
        t.status,
        TaskStatus::Failed
            | TaskStatus::FailedWithTerminalError
            | TaskStatus::TimedOut
            | TaskStatus::Canceled
    )
}

/// The newest attempt of each (ref, iteration) of the run, in schedule order.
fn newest_attempts(state: &RunState) -> Vec<&TaskState> {
    let mut seen: HashSet<(&str, i32)> = HashSet::new();
    let mut newest: Vec<&TaskState> = state
        .tasks
        .iter()
        .rev()
        .filter(|t| seen.insert((t.task_ref.as_str(), t.iteration)))
        .collect();
    newest.reverse();
    newest
}

/// For a retry that resumes sub-workflow tasks: the child of the ended run's first
/// unsuccessful task when that is a SUB_WORKFLOW task (or a loop, whose first
/// unsuccessful SUB_WORKFLOW task then counts), as Conductor picks it.
fn failed_child(state: &RunState) -> Option<&str> {
    if !matches!(
        state.status,
        RunStatus::Failed | RunStatus::TimedOut | RunStatus::Terminated
    ) {
        return None;
    }
    let is = |t: &TaskState, kind: TaskType| TaskType::parse(&t.task_type) == Some(kind);
    let newest = newest_attempts(state);
    let first = *newest.iter().find(|t| unsuccessful(t))?;
    let sub_workflow = if is(first, TaskType::DoWhile) {
        *newest
            .iter()
            .find(|t| unsuccessful(t) && is(t, TaskType::SubWorkflow))?
    } else {
        first
    };
    if !is(sub_workflow, TaskType::SubWorkflow) {
        return None;
    }
    sub_workflow.child_workflow_id()
}

/// The retry `reset` handed on to another run (a child it passes down to, or the parent
/// it falls back on): the operator's request id goes along, so that whichever run takes it
/// records the verdict the operator waits for; `expected_run_id` guards a parent retried
/// meanwhile; `resume` passes it down again.
fn handed_on(
    reset: &Reset,
    expected_run_id: Option<Uuid>,
    resume: bool,
    new_run_id: Uuid,
    fallback: Option<RetryFallback>,
) -> Reset {
    Reset {
        op: weft::messages::Operation {
            request_id: reset.op.request_id,
            expected_run_id,
        },
        target: ResetTarget::LastFailed {
            resume_subworkflow_tasks: resume,
        },
        new_run_id,
        reason: reset.reason.clone(),
        workflow_input: None,
        task_input: None,
        definition: None,
        fallback,
    }
}

/// A child of the run was retried in place: when the run ended and the SUB_WORKFLOW task
/// that started that child is its newest attempt and ended unsuccessfully, the run is
/// retried in place with that task waiting for the child again (Conductor's retry
/// updating the parents). Otherwise nothing changes: the run went on without the child
/// (an optional task), or retried the task with a new child since.
fn resume_child(state: &RunState, child_workflow_id: &str) -> Applied {
    if !matches!(
        state.status,
        RunStatus::Failed | RunStatus::TimedOut | RunStatus::Terminated
    ) {
        return Applied::Ignored(format!(
            "child {child_workflow_id} retried; workflow {} is {}: nothing to resume",
            state.workflow_id,
            state.status.as_str()
        ));
    }
    let task = newest_attempts(state)
        .into_iter()
        .find(|t| t.child_workflow_id() == Some(child_workflow_id) && unsuccessful(t));
    let Some(task) = task else {
        return Applied::Ignored(format!(
            "child {child_workflow_id} retried; no task of run {} waits for it",
            state.run_id
        ));
    };
    let at = TaskAt {
        task_ref: task.task_ref.clone(),
        iteration: task.iteration,
    };
    Applied::Reset(ResetPlan {
        cut_task: None,
        task_ref: at.task_ref.clone(),
        iteration: at.iteration,
        retried: Some(Vec::new()),
        resumed: Some(at),
    })
}

/// A RUNNING run's retry: back to the newest optional task that failed for good.
fn retry_optional(state: &RunState) -> Applied {
    // Only the newest execution of a (ref, iteration) counts: an attempt that failed and
    // was retried successfully is not a failure of the run.
    let last_failed = state.tasks.iter().rev().find(|t| {
        t.status == TaskStatus::CompletedWithErrors
            && state
                .latest_at(&t.task_ref, t.iteration)
                .is_some_and(|newest| newest.task_id == t.task_id)
    });
    match last_failed {
        Some(t) => cut_at(state, t),
        None => conflict(format!(
            "workflow {} is RUNNING: retry needs a FAILED, TIMED_OUT or TERMINATED run, or a \
             RUNNING one with a failed optional task",
            state.workflow_id
        )),
    }
}

/// The plan that re-runs `task`'s (ref, iteration) from its first attempt.
fn cut_at(state: &RunState, task: &TaskState) -> Applied {
    let first = state
        .tasks
        .iter()
        .find(|t| t.task_ref == task.task_ref && t.iteration == task.iteration)
        .unwrap_or(task);
    Applied::Reset(ResetPlan {
        cut_task: Some(first.task_id),
        task_ref: first.task_ref.clone(),
        iteration: first.iteration,
        retried: None,
        resumed: None,
    })
}

fn bad_request(message: String) -> Applied {
    Applied::Rejected {
        status: 400,
        message,
    }
}

/// The successor run's history: the old run's prefix before `plan`'s cut (with the
/// successor's task ids and `workflow_input` if given), the `WorkflowReset` marker, and a
/// `TaskCanceled` for each task that was still running at the cut. The marker lists the
/// `rollback_hooks` the reset fired; the run waits for them (docs/hooks.md).
pub fn successor_history(
    old: &[StoredEvent],
    plan: &ResetPlan,
    reset: &Reset,
    workflow_id: &str,
    now: DateTime<Utc>,
    rollback_hooks: Vec<RollbackHookRef>,
) -> Result<(RunState, Vec<StoredEvent>), FoldError> {
    let new_run_id = reset.new_run_id;
    let previous_run_id = old.first().map_or(Uuid::nil(), |e| e.run_id);
    let cut = cut_index(old, plan).unwrap_or(1).max(1);
    let mut events: Vec<StoredEvent> = old[..cut.min(old.len())]
        .iter()
        .map(|e| {
            let mut event = e.event.clone();
            rekey(&mut event, new_run_id);
            if let Event::WorkflowStarted(started) = &mut event {
                if let Some(input) = &reset.workflow_input {
                    started.input = input.clone();
                }
                if let Some(definition) = &reset.definition {
                    started.definition = (**definition).clone();
                }
            }
            StoredEvent {
                run_id: new_run_id,
                event_id: e.event_id,
                time: e.time,
                event,
            }
        })
        .collect();
    let mut state = RunState::from_history(workflow_id, &events)?;
    let mut push = |state: &mut RunState, event: Event| -> Result<(), FoldError> {
        let stored = StoredEvent {
            run_id: new_run_id,
            event_id: state.version + 1,
            time: now,
            event,
        };
        state.apply(&stored)?;
        events.push(stored);
        Ok(())
    };
    push(
        &mut state,
        Event::WorkflowReset(WorkflowReset {
            previous_run_id,
            task_ref: plan.task_ref.clone(),
            iteration: plan.iteration,
            reason: reset.reason.clone(),
            rollback_hooks,
            task_input: reset.task_input.clone(),
            retried: plan.retried.clone(),
            resumed: plan.resumed.clone(),
        }),
    )?;
    let resumed = |t: &TaskState| {
        plan.resumed
            .as_ref()
            .is_some_and(|r| r.task_ref == t.task_ref && r.iteration == t.iteration)
    };
    let running: Vec<(Uuid, String)> = state
        .tasks
        .iter()
        .filter(|t| t.status.is_pending() && runs_again(&t.task_type) && !resumed(t))
        .map(|t| (t.task_id, t.task_ref.clone()))
        .collect();
    for (task_id, task_ref) in running {
        push(
            &mut state,
            Event::TaskCanceled(TaskCanceled {
                task_id,
                task_ref,
                reason: format!(
                    "still running when run {previous_run_id} was reset to {:?}; runs again",
                    plan.task_ref
                ),
                for_good: false,
            }),
        )?;
    }
    Ok((state, events))
}

/// Where `plan` cuts the old run's `history`: the events before this index are kept.
/// `None`: only the run's start (a restart of a run that never scheduled anything).
pub fn cut_index(history: &[StoredEvent], plan: &ResetPlan) -> Option<usize> {
    if plan.retried.is_some() {
        return Some(
            history
                .iter()
                .rposition(|e| e.event.ends_run())
                .unwrap_or(history.len()),
        );
    }
    let cut = plan.cut_task?;
    history
        .iter()
        .position(|e| matches!(&e.event, Event::TaskScheduled(s) if s.task_id == cut))
}

/// Pending tasks of these types are redone after a reset; the others (a loop, a dynamic
/// fork's join) are containers whose progress is their children's.
fn runs_again(task_type: &str) -> bool {
    matches!(
        TaskType::parse(task_type),
        Some(TaskType::Simple | TaskType::Http | TaskType::SubWorkflow | TaskType::Wait)
    )
}

/// Gives the copied event the successor's task id.
fn rekey(event: &mut Event, new_run_id: Uuid) {
    let id = match event {
        Event::TaskScheduled(e) => &mut e.task_id,
        Event::TaskStarted(e) => &mut e.task_id,
        Event::TaskCompleted(e) => &mut e.task_id,
        Event::TaskFailed(e) => &mut e.task_id,
        Event::TaskTimedOut(e) => &mut e.task_id,
        Event::TaskSkipped(e) => &mut e.task_id,
        Event::TaskCanceled(e) => &mut e.task_id,
        Event::TaskPostponed(e) => &mut e.task_id,
        Event::TaskCallbackReset(e) => &mut e.task_id,
        Event::ChildWorkflowStarted(e) => &mut e.task_id,
        Event::TimerStarted(e) if !e.task_id.is_nil() => &mut e.task_id,
        _ => return,
    };
    *id = weft::ids::kept_task_id(new_run_id, *id);
}
