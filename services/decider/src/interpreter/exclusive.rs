//! EXCLUSIVE_JOIN: after a SWITCH/DECISION whose cases each end in one of its `joinOn`
//! tasks, it completes with the output of the one that ran, by Conductor's rules
//! (`ExclusiveJoin.execute`):
//!
//! - the first `joinOn` task (in that order) that was scheduled and not skipped decides:
//!   finished successfully → the join completes with its output; finished otherwise → the
//!   join fails with the reasons of every `joinOn` task that did not succeed, joined by
//!   spaces; still running → as if none was found;
//! - none found: the first `defaultExclusiveJoinTask` scheduled and not skipped decides the
//!   same way (a failure gives its own reason and a space);
//! - nothing decided: the join stays IN_PROGRESS and is looked at again on the next round.
//!
//! A failed join fails the run, or, `optional`, ends COMPLETED_WITH_ERRORS and lets it go
//! on; it is never retried (Conductor's built-in tasks are not).

use serde_json::{json, Value};
use weft::dsl::{TaskType, WorkflowTask};

use super::policy::Policy;
use super::walk::{fail, Flow, Walker};
use super::Decision;
use crate::state::{TaskState, TaskStatus};

/// What Conductor would see of a task.
enum Seen<'s> {
    /// Not scheduled, or skipped: the next ref is looked at.
    Absent,
    /// Scheduled, running, or failed with a retry to come (Conductor schedules the retry at
    /// once, so the ref's newest task is not terminal).
    Running,
    /// Finished successfully (COMPLETED, COMPLETED_WITH_ERRORS, an optional task given up).
    Succeeded(&'s TaskState),
    /// Finished otherwise.
    Failed(&'s TaskState),
}

impl Walker<'_> {
    /// EXCLUSIVE_JOIN (see the module's documentation).
    pub(super) fn exclusive_join(&self, task: &WorkflowTask, latest: Option<&TaskState>) -> Flow {
        // A join canceled at a reset's cut waits again.
        let latest = latest.filter(|t| t.status != TaskStatus::Canceled);
        let waiting = match latest {
            None => None,
            Some(t) if t.status.is_pending() => Some(t),
            Some(t)
                if matches!(
                    t.status,
                    TaskStatus::Failed | TaskStatus::FailedWithTerminalError
                ) && !task.optional =>
            {
                let reason = t.reason.clone().unwrap_or_default();
                return fail(
                    task,
                    format!("task {:?}: {reason}", task.task_reference_name),
                );
            }
            Some(_) => return Flow::Done,
        };
        let outcome = self.exclusive_outcome(task);
        let task_ref = task.task_reference_name.clone();
        let (failed, reason) = match (outcome, waiting) {
            (None, Some(_)) => return Flow::Waiting(Vec::new()),
            (None, None) => {
                let input = self.input(task, 1);
                return Flow::Waiting(vec![self.start(task, TaskType::ExclusiveJoin, input)]);
            }
            (Some(Ok(output)), None) => {
                let input = self.input(task, 1);
                return Flow::Waiting(vec![self.complete(
                    task,
                    TaskType::ExclusiveJoin,
                    input,
                    output,
                    None,
                )]);
            }
            (Some(Ok(output)), Some(t)) => {
                return Flow::Waiting(vec![Decision::CompleteStartedTask {
                    task_id: t.task_id,
                    task_ref,
                    output,
                    errors: None,
                }])
            }
            (Some(Err(reason)), None) => {
                let input = self.input(task, 1);
                (
                    self.fail_now(task, TaskType::ExclusiveJoin, input, json!({}), &reason),
                    reason,
                )
            }
            (Some(Err(reason)), Some(t)) => (
                Decision::FailStartedTask {
                    task_id: t.task_id,
                    task_ref: task_ref.clone(),
                    reason: reason.clone(),
                    terminal: false,
                },
                reason,
            ),
        };
        if task.optional {
            return Flow::Waiting(vec![failed]);
        }
        Flow::Stop(vec![
            failed,
            Decision::FailWorkflow {
                reason: format!("task {task_ref:?}: {reason}"),
                failed_task_refs: vec![task_ref],
                output: None,
            },
        ])
    }

    /// The join's result by Conductor's rules: the output to complete with, the reason to
    /// fail with, or `None` while nothing decides it.
    fn exclusive_outcome(&self, task: &WorkflowTask) -> Option<Result<Value, String>> {
        let join_on = refs(task, "joinOn");
        for r in &join_on {
            match self.seen(r) {
                Seen::Absent => continue,
                // Conductor stops at the first scheduled one; unfinished, it falls back
                // to the defaults below.
                Seen::Running => break,
                Seen::Succeeded(t) => return Some(Ok(output_of(t))),
                Seen::Failed(_) => {
                    let reasons: Vec<String> = join_on
                        .iter()
                        .filter_map(|r| match self.seen(r) {
                            Seen::Failed(t) => Some(t.reason.clone().unwrap_or_default()),
                            _ => None,
                        })
                        .collect();
                    return Some(Err(reasons.join(" ")));
                }
            }
        }
        for r in refs(task, "defaultExclusiveJoinTask") {
            match self.seen(&r) {
                Seen::Absent => continue,
                Seen::Running => return None,
                Seen::Succeeded(t) => return Some(Ok(output_of(t))),
                Seen::Failed(t) => {
                    return Some(Err(format!("{} ", t.reason.as_deref().unwrap_or_default())))
                }
            }
        }
        None
    }

    /// The newest task of `task_ref` in this iteration, as Conductor's status rules see it.
    fn seen(&self, task_ref: &str) -> Seen<'_> {
        let Some(t) = self.state.latest_at(task_ref, self.iteration) else {
            return Seen::Absent;
        };
        match t.status {
            TaskStatus::Skipped => Seen::Absent,
            // Canceled at a reset's cut: it runs again.
            TaskStatus::Scheduled | TaskStatus::InProgress | TaskStatus::Canceled => Seen::Running,
            TaskStatus::Completed | TaskStatus::CompletedWithErrors => Seen::Succeeded(t),
            TaskStatus::Failed | TaskStatus::TimedOut if self.optional_given_up(t) => {
                Seen::Succeeded(t)
            }
            TaskStatus::Failed | TaskStatus::TimedOut if self.will_retry(t) => Seen::Running,
            TaskStatus::Failed | TaskStatus::FailedWithTerminalError | TaskStatus::TimedOut => {
                Seen::Failed(t)
            }
        }
    }

    /// Whether the walk will schedule another attempt of `t` (after its back-off).
    fn will_retry(&self, t: &TaskState) -> bool {
        let Some(node) = crate::state::find_task(&self.state.definition.tasks, &t.task_ref) else {
            return false;
        };
        let policy = Policy::of(node);
        t.attempt <= policy.retry_count
            && policy.is_retryable(t.error_kind.as_deref())
            && !self.total_deadline_passed(t, &policy)
    }
}

/// A task's output as the join's: its whole output map.
fn output_of(t: &TaskState) -> Value {
    match &t.output {
        Some(Value::Null) | None => json!({}),
        Some(output) => output.clone(),
    }
}

/// The reference names listed in `field` of `task`.
fn refs(task: &WorkflowTask, field: &str) -> Vec<String> {
    task.extra
        .get(field)
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .filter_map(|r| r.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}
