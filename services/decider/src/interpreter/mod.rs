//! The DSL interpreter: a pure function of a run's state (the fold of its history and
//! its frozen definition) to the decisions that move it forward. No I/O, no clock, no
//! randomness: the same history always yields the same decisions (ids are name-based
//! UUIDs of the run and the task's position; a branch taken is recorded in the
//! switch task's output, so a script is evaluated once, not on every replay).
//!
//! The definition is walked as a tree (`walk.rs`): a list of tasks runs in order; a
//! SWITCH/DECISION runs the branch it selected; a FORK_JOIN runs its branches side by
//! side and is done when all are; JOIN, SET_VARIABLE and TERMINATE are executed by the
//! decider itself and complete at once.

mod activity;
mod branch;
mod dynamic;
mod exclusive;
mod looping;
pub mod policy;
mod system;
mod system_policy;
pub use system::wait_timer_id;
pub mod waiting;
mod walk;

#[cfg(test)]
mod constructs_tests;
#[cfg(test)]
mod system_tests;
#[cfg(test)]
mod tests;

use chrono::{DateTime, Utc};
use serde_json::{Map, Value};
use uuid::Uuid;
use weft::messages::{
    ChildWorkflowStarted, Event, TaskCompleted, TaskFailed, TaskScheduled, TaskSkipped,
    TaskTimedOut, TimerStarted, VariablesUpdated, WorkflowCompleted, WorkflowFailed,
    WorkflowTerminated, WorkflowTimedOut,
};

use crate::state::{RunState, RunStatus};

/// What the decider concludes from a run's state.
/// The definition a SUB_WORKFLOW task's child run starts with.
#[derive(Debug, Clone, PartialEq)]
pub enum ChildDefinition {
    /// Frozen into the parent's definition when the parent started.
    Frozen(Box<weft::dsl::WorkflowDef>),
    /// A registered definition named only when the task is scheduled (a dynamic fork's
    /// branch, a name read from an earlier task's output): the engine reads it then, as
    /// Conductor resolves `subWorkflowParam` when it schedules the task.
    Registered {
        /// Its name.
        name: String,
        /// Its version; the latest when `None`.
        version: Option<i32>,
    },
}

/// How long a retry waits before its worker may take it: scheduled at once (SCHEDULED,
/// listed with Conductor's `callbackAfterSeconds`), its message held back by a durable
/// timer until the delay is over (docs/callbacks.md). Zero for a first attempt.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Backoff {
    /// The policy's delay in whole seconds, without jitter (`callbackAfterSeconds`).
    pub seconds: i64,
    /// The delay with its jitter, in milliseconds: when the message goes to the queue.
    pub delay_ms: i64,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Publish an activity task to a worker.
    ScheduleTask {
        /// The new task's id, derived from the run and its position, so that replaying
        /// a history yields the very same decision.
        task_id: Uuid,
        /// Reference name.
        task_ref: String,
        /// Type (`SIMPLE`, `HTTP`).
        task_type: String,
        /// Definition name.
        task_name: String,
        /// Resolved input.
        input: Value,
        /// Attempt number, from 1.
        attempt: i32,
        /// Loop iteration (0 outside DO_WHILE bodies).
        iteration: i32,
        /// A retry's back-off: when its worker may take it (see [`Backoff`]).
        backoff: Backoff,
    },
    /// Set a durable timer for a task (a WAIT with `duration` or `until`).
    StartTimer {
        /// The timer (name-based on the task, so replay yields the same id).
        timer_id: Uuid,
        /// The task waiting for it.
        task_id: Uuid,
        /// When it comes due.
        due: waiting::Due,
    },
    /// Start a child run for a SUB_WORKFLOW task.
    StartChild {
        /// The SUB_WORKFLOW task's id.
        task_id: Uuid,
        /// Reference name.
        task_ref: String,
        /// Definition name.
        task_name: String,
        /// Resolved input (the child's workflow input).
        input: Value,
        /// Attempt number, from 1.
        attempt: i32,
        /// Loop iteration (0 outside DO_WHILE bodies).
        iteration: i32,
        /// The child's workflow id (name-based on the task, so replay yields the same).
        child_workflow_id: String,
        /// The child's definition.
        definition: ChildDefinition,
    },
    /// An activity attempt ran out of time.
    TimeOutTask {
        /// The task.
        task_id: Uuid,
        /// Reference name.
        task_ref: String,
        /// Why.
        reason: String,
    },
    /// The run ran out of time.
    TimeOutWorkflow {
        /// Why.
        reason: String,
    },
    /// Record a task the decider runs itself over several rounds (DO_WHILE) as started.
    StartSystemTask {
        /// Id, as for scheduled tasks.
        task_id: Uuid,
        /// Reference name.
        task_ref: String,
        /// Type.
        task_type: String,
        /// Definition name.
        task_name: String,
        /// Resolved input.
        input: Value,
        /// Which attempt (from 1; a failed one retried per its policy is numbered on).
        attempt: i32,
        /// Loop iteration (0 outside DO_WHILE bodies).
        iteration: i32,
    },
    /// Complete a task started with [`Decision::StartSystemTask`].
    CompleteStartedTask {
        /// The task.
        task_id: Uuid,
        /// Reference name.
        task_ref: String,
        /// Output.
        output: Value,
        /// COMPLETED_WITH_ERRORS, and why (a JOIN whose optional tasks failed).
        errors: Option<String>,
    },
    /// Fail a task started with [`Decision::StartSystemTask`] (and with it the run).
    FailStartedTask {
        /// The task.
        task_id: Uuid,
        /// Reference name.
        task_ref: String,
        /// Why.
        reason: String,
        /// FAILED_WITH_TERMINAL_ERROR; otherwise FAILED, as Conductor shows a built-in
        /// task that failed (neither is retried: the walk decides what follows).
        terminal: bool,
    },
    /// EVENT: publish `output` as a message to `location` (with the task id as its
    /// message id, in the commit's outbox) and record the task as started; it completes
    /// when the broker has confirmed the message (the outbox then sends the run the
    /// signal [`event_published`] names), or with `async_complete` when it is completed
    /// by reference (a signal named after its ref), as in Conductor.
    PublishEvent {
        /// Id, as for scheduled tasks.
        task_id: Uuid,
        /// Reference name.
        task_ref: String,
        /// Definition name.
        task_name: String,
        /// Resolved input.
        input: Value,
        /// Which attempt (from 1; a failed one retried per its policy is numbered on).
        attempt: i32,
        /// The message: the input with the run's identity and the sink.
        output: Value,
        /// Where it goes (boxed: the decision stays small).
        location: Box<weft::event_location::EventLocation>,
        /// The task completes on a signal instead of at once.
        async_complete: bool,
        /// Loop iteration (0 outside DO_WHILE bodies).
        iteration: i32,
    },
    /// START_WORKFLOW: start `definition` as the new run `workflow_id` (its
    /// `StartWorkflow` in the commit's outbox) and record the task completed with
    /// `{workflowId}`; the run goes on without waiting for it.
    StartRun {
        /// Id, as for scheduled tasks.
        task_id: Uuid,
        /// Reference name.
        task_ref: String,
        /// Definition name.
        task_name: String,
        /// Resolved input.
        input: Value,
        /// Which attempt (from 1; a failed one retried per its policy is numbered on).
        attempt: i32,
        /// Loop iteration (0 outside DO_WHILE bodies).
        iteration: i32,
        /// The new run's workflow id (name-based on the task, so replay yields the same).
        workflow_id: String,
        /// The definition to start: frozen at the parent's start, or given inline; `None`:
        /// the engine reads the registered `name` (`version`, or the latest) (boxed:
        /// decisions stay small).
        definition: Option<Box<weft::dsl::WorkflowDef>>,
        /// The workflow to start, by name.
        name: String,
        /// Its version; the latest when `None`.
        version: Option<i32>,
        /// The new run's input.
        run_input: Value,
        /// The new run's correlation id.
        correlation_id: Option<String>,
    },
    /// Record a task the decider executes itself (SWITCH, FORK_JOIN, JOIN, SET_VARIABLE,
    /// TERMINATE) as scheduled and completed at once.
    CompleteSystemTask {
        /// Id, as for scheduled tasks.
        task_id: Uuid,
        /// Reference name.
        task_ref: String,
        /// Type.
        task_type: String,
        /// Definition name.
        task_name: String,
        /// Resolved input.
        input: Value,
        /// Which attempt (from 1; a failed one retried per its policy is numbered on).
        attempt: i32,
        /// Output.
        output: Value,
        /// Workflow variables set by the task (SET_VARIABLE).
        variables: Option<Map<String, Value>>,
        /// Loop iteration (0 outside DO_WHILE bodies).
        iteration: i32,
    },
    /// Record a task the decider executes itself as scheduled and FAILED at once (a
    /// JSON_JQ_TRANSFORM whose program failed, an EXCLUSIVE_JOIN whose task failed).
    FailSystemTask {
        /// Id, as for scheduled tasks.
        task_id: Uuid,
        /// Reference name.
        task_ref: String,
        /// Type.
        task_type: String,
        /// Definition name.
        task_name: String,
        /// Resolved input.
        input: Value,
        /// Which attempt (from 1; a failed one retried per its policy is numbered on).
        attempt: i32,
        /// Output (JSON_JQ_TRANSFORM's `error`).
        output: Value,
        /// Why (the task's `reasonForIncompletion`).
        reason: String,
        /// FAILED_WITH_TERMINAL_ERROR: no retry.
        terminal: bool,
        /// Loop iteration (0 outside DO_WHILE bodies).
        iteration: i32,
    },
    /// Record a task whose skip an operator requested before it was reached as
    /// scheduled and skipped at once.
    SkipTask {
        /// Id, as for scheduled tasks.
        task_id: Uuid,
        /// Reference name.
        task_ref: String,
        /// Type.
        task_type: String,
        /// Definition name.
        task_name: String,
        /// Input (the operator's, or the resolved one).
        input: Value,
        /// Output (the operator's).
        output: Value,
        /// Loop iteration (0 outside DO_WHILE bodies).
        iteration: i32,
    },
    /// Finish the run successfully.
    CompleteWorkflow {
        /// Shaped output.
        output: Value,
        /// Why, when a TERMINATE task completes the run.
        reason: Option<String>,
    },
    /// Finish the run with a failure.
    FailWorkflow {
        /// Why.
        reason: String,
        /// Tasks to blame.
        failed_task_refs: Vec<String>,
        /// The output the run ends with; `None`: as Conductor's, its `outputParameters`
        /// (or its last task's output) as the run stands, and the failure workflow's id
        /// (`conductor.failure_workflow`) when it has one ([`decide`] fills it in).
        output: Option<Value>,
    },
    /// End the run as TERMINATED (a TERMINATE task).
    TerminateWorkflow {
        /// Why.
        reason: String,
        /// The output the run ends with.
        output: Value,
    },
}

/// Whether the definition's `timeoutPolicy` is ALERT_ONLY: past its `timeoutSeconds` the
/// run goes on.
fn alert_only(definition: &weft::dsl::WorkflowDef) -> bool {
    definition
        .extra
        .get("timeoutPolicy")
        .and_then(Value::as_str)
        == Some("ALERT_ONLY")
}

/// Decides the next steps of `state`.
pub fn decide(state: &RunState) -> Vec<Decision> {
    // A run created by a reset waits for its rollback hooks (docs/hooks.md).
    if state.status != RunStatus::Running || state.paused || state.rolling_back {
        return Vec::new();
    }
    let mut decisions = Vec::new();
    let timeout = state.definition.timeout_seconds;
    if timeout > 0 {
        let timer_id = Uuid::new_v5(&state.run_id, b"workflow-timeout");
        match state.timers.iter().find(|t| t.timer_id == timer_id) {
            None => decisions.push(Decision::StartTimer {
                timer_id,
                task_id: Uuid::nil(),
                due: waiting::Due::After(chrono::Duration::seconds(timeout)),
            }),
            // Conductor's ALERT_ONLY: the run goes on; the timer's firing is its record.
            Some(t) if t.fired && !alert_only(&state.definition) => {
                return vec![Decision::TimeOutWorkflow {
                    reason: format!(
                        "the workflow did not finish within its timeoutSeconds ({timeout})"
                    ),
                }]
            }
            Some(_) => {}
        }
    }
    let walker = walk::Walker::new(state);
    match walker.list(&state.definition.tasks) {
        walk::Flow::Done => decisions.push(walker.permissive_failure().unwrap_or_else(|| {
            Decision::CompleteWorkflow {
                output: workflow_output(state),
                reason: None,
            }
        })),
        walk::Flow::Waiting(more) | walk::Flow::Stop(more) => decisions.extend(more),
    }
    for d in &mut decisions {
        if let Decision::FailWorkflow {
            output: o @ None, ..
        } = d
        {
            *o = Some(failure_output(state));
        }
    }
    if state.retry_round {
        in_retry_order(state, &mut decisions);
    }
    decisions
}

/// The first round after a retry in place schedules the tasks it retries in the order
/// of the attempts they replace, as Conductor's retry does (a fork's branches would
/// otherwise be walked in branch order), then anything new.
fn in_retry_order(state: &RunState, decisions: &mut [Decision]) {
    let replaced_seq = |d: &Decision| {
        let (task_ref, iteration) = match d {
            Decision::ScheduleTask {
                task_ref,
                iteration,
                ..
            }
            | Decision::StartChild {
                task_ref,
                iteration,
                ..
            } => (task_ref, *iteration),
            _ => return i32::MAX,
        };
        state
            .latest_at(task_ref, iteration)
            .map_or(i32::MAX, |t| t.seq)
    };
    decisions.sort_by_key(replaced_seq);
}

/// A failed run's output, as Conductor's: what it would have completed with as it stands
/// (`outputParameters`, or its last task's output), and, when its definition names a
/// failure workflow, that run's id as `conductor.failure_workflow`.
pub(crate) fn failure_output(state: &RunState) -> Value {
    with_failure_workflow(state, workflow_output(state))
}

/// `output` with the id of the failure workflow the failed run starts, when its
/// definition names one (`conductor.failure_workflow`, as Conductor adds it).
pub(crate) fn with_failure_workflow(state: &RunState, mut output: Value) -> Value {
    if state
        .definition
        .extra
        .contains_key(weft::dsl::FAILURE_WORKFLOW_DEFINITION)
    {
        if let Value::Object(map) = &mut output {
            map.insert(
                "conductor.failure_workflow".into(),
                Value::String(failure_workflow_id(state.run_id)),
            );
        }
    }
    output
}

/// The workflow id of the failure workflow a failed run `run_id` starts (name-based, so a
/// replay names the same).
pub(crate) fn failure_workflow_id(run_id: Uuid) -> String {
    Uuid::new_v5(&run_id, b"failure-workflow").to_string()
}

/// `outputParameters` resolved; without them, Conductor's rule: the last task's output.
pub(crate) fn workflow_output(state: &RunState) -> Value {
    let def = &state.definition;
    if def.output_parameters.is_empty() {
        return state
            .tasks
            .last()
            .and_then(|t| t.output.clone())
            .unwrap_or_else(|| Value::Object(Map::new()));
    }
    let roots = weft::dsl::expr::known_roots(def.output_parameters.values());
    weft::dsl::expr::resolve(
        &Value::Object(def.output_parameters.clone()),
        &state.expression_context_of(roots.as_deref()),
    )
}

/// The signal that tells a run its EVENT task's message was confirmed by the broker:
/// published after that message by the outbox (raw messages go first), its payload the
/// message, which becomes the task's output.
pub fn event_published(task_id: Uuid) -> String {
    format!("weft:event-published:{task_id}")
}

/// The history events a decision becomes; `seq` is the run's next task position and
/// `now` the time the events are written (a relative timer becomes absolute here).
pub fn events_for(decision: Decision, seq: i32, now: DateTime<Utc>) -> Vec<Event> {
    match decision {
        Decision::StartChild {
            task_id,
            task_ref,
            task_name,
            input,
            attempt,
            iteration,
            child_workflow_id,
            definition: _,
        } => vec![
            Event::TaskScheduled(TaskScheduled {
                task_id,
                task_ref,
                task_type: weft::dsl::TaskType::SubWorkflow.as_str().to_owned(),
                task_name,
                seq,
                attempt,
                input,
                iteration,
                output: None,
                callback_after_seconds: 0,
                dispatch_delay_ms: 0,
                domain: None,
            }),
            Event::ChildWorkflowStarted(ChildWorkflowStarted {
                task_id,
                child_workflow_id,
            }),
        ],
        Decision::TimeOutTask {
            task_id,
            task_ref,
            reason,
        } => vec![Event::TaskTimedOut(TaskTimedOut {
            task_id,
            task_ref,
            reason,
        })],
        Decision::TimeOutWorkflow { reason } => {
            vec![Event::WorkflowTimedOut(WorkflowTimedOut { reason })]
        }
        Decision::StartTimer {
            timer_id,
            task_id,
            due,
        } => vec![Event::TimerStarted(TimerStarted {
            timer_id,
            task_id,
            fire_at: due.at(now),
        })],
        Decision::ScheduleTask {
            task_id,
            task_ref,
            task_type,
            task_name,
            input,
            attempt,
            iteration,
            backoff,
        } => vec![Event::TaskScheduled(TaskScheduled {
            task_id,
            task_ref,
            task_type,
            task_name,
            seq,
            attempt,
            input,
            iteration,
            output: None,
            callback_after_seconds: backoff.seconds,
            dispatch_delay_ms: backoff.delay_ms,
            domain: None,
        })],
        Decision::StartSystemTask {
            task_id,
            task_ref,
            task_type,
            task_name,
            input,
            attempt,
            iteration,
        } => vec![Event::TaskScheduled(TaskScheduled {
            task_id,
            task_ref,
            task_type,
            task_name,
            seq,
            attempt,
            input,
            iteration,
            output: None,
            callback_after_seconds: 0,
            dispatch_delay_ms: 0,
            domain: None,
        })],
        Decision::PublishEvent {
            task_id,
            task_ref,
            task_name,
            input,
            attempt,
            output,
            async_complete,
            iteration,
            location: _,
        } => {
            // IN_PROGRESS, showing its message as Conductor's does: it completes once
            // the message is confirmed (see `event_published`), or, asynchronous, when
            // completed by reference.
            let _ = async_complete;
            vec![Event::TaskScheduled(TaskScheduled {
                task_id,
                task_ref,
                task_type: weft::dsl::TaskType::Event.as_str().to_owned(),
                task_name,
                seq,
                attempt,
                input,
                iteration,
                output: Some(output),
                callback_after_seconds: 0,
                dispatch_delay_ms: 0,
                domain: None,
            })]
        }
        Decision::StartRun {
            task_id,
            task_ref,
            task_name,
            input,
            attempt,
            iteration,
            workflow_id,
            ..
        } => events_for(
            Decision::CompleteSystemTask {
                task_id,
                task_ref,
                task_type: weft::dsl::TaskType::StartWorkflow.as_str().to_owned(),
                task_name,
                input,
                attempt,
                output: serde_json::json!({ "workflowId": workflow_id }),
                variables: None,
                iteration,
            },
            seq,
            now,
        ),
        Decision::CompleteStartedTask {
            task_id,
            task_ref,
            output,
            errors,
        } => vec![Event::TaskCompleted(TaskCompleted {
            task_id,
            task_ref,
            output,
            worker_id: None,
            started_at: None,
            errors,
        })],
        Decision::FailStartedTask {
            task_id,
            task_ref,
            reason,
            terminal,
        } => vec![Event::TaskFailed(TaskFailed {
            error_kind: None,
            task_id,
            task_ref,
            reason,
            terminal,
            output: Value::Null,
            worker_id: None,
            started_at: None,
        })],
        Decision::FailSystemTask {
            task_id,
            task_ref,
            task_type,
            task_name,
            input,
            attempt,
            output,
            reason,
            terminal,
            iteration,
        } => vec![
            Event::TaskScheduled(TaskScheduled {
                task_id,
                task_ref: task_ref.clone(),
                task_type,
                task_name,
                seq,
                attempt,
                input,
                iteration,
                output: None,
                callback_after_seconds: 0,
                dispatch_delay_ms: 0,
                domain: None,
            }),
            Event::TaskFailed(TaskFailed {
                error_kind: None,
                task_id,
                task_ref,
                reason,
                terminal,
                output,
                worker_id: None,
                started_at: None,
            }),
        ],
        Decision::CompleteSystemTask {
            task_id,
            task_ref,
            task_type,
            task_name,
            input,
            attempt,
            output,
            variables,
            iteration,
        } => {
            let mut events = vec![
                Event::TaskScheduled(TaskScheduled {
                    task_id,
                    task_ref: task_ref.clone(),
                    task_type,
                    task_name,
                    seq,
                    attempt,
                    input,
                    iteration,
                    output: None,
                    callback_after_seconds: 0,
                    dispatch_delay_ms: 0,
                    domain: None,
                }),
                Event::TaskCompleted(TaskCompleted {
                    task_id,
                    task_ref,
                    output,
                    worker_id: None,
                    started_at: None,
                    errors: None,
                }),
            ];
            if let Some(variables) = variables {
                events.push(Event::VariablesUpdated(VariablesUpdated { variables }));
            }
            events
        }
        Decision::SkipTask {
            task_id,
            task_ref,
            task_type,
            task_name,
            input,
            output,
            iteration,
        } => vec![
            Event::TaskScheduled(TaskScheduled {
                task_id,
                task_ref: task_ref.clone(),
                task_type,
                task_name,
                seq,
                attempt: 1,
                input,
                iteration,
                output: None,
                callback_after_seconds: 0,
                dispatch_delay_ms: 0,
                domain: None,
            }),
            Event::TaskSkipped(TaskSkipped {
                task_id,
                task_ref,
                output,
            }),
        ],
        Decision::CompleteWorkflow { output, reason } => {
            vec![Event::WorkflowCompleted(WorkflowCompleted {
                output,
                reason,
            })]
        }
        Decision::FailWorkflow {
            reason,
            failed_task_refs,
            output,
        } => vec![Event::WorkflowFailed(WorkflowFailed {
            reason,
            failed_task_refs,
            output,
        })],
        Decision::TerminateWorkflow { reason, output } => {
            vec![Event::WorkflowTerminated(WorkflowTerminated {
                reason,
                output,
            })]
        }
    }
}
