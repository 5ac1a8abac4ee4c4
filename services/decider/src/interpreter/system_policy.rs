//! Retries and timeouts of the tasks the decider runs itself (LAMBDA, JSON_JQ_TRANSFORM, EVENT,
//! START_WORKFLOW, WAIT, HUMAN; an INLINE or SET_VARIABLE failure is terminal), per the
//! policy of the task's definition, as Conductor retries every failed task but its
//! built-in flow tasks. Activities (SIMPLE, HTTP, SUB_WORKFLOW) retry in `walk`.
//!
//! A retry waits out its back-off (`retryDelaySeconds`, shaped by `retryLogic`,
//! `backoffScaleFactor`, `maxRetryDelaySeconds`, `backoffJitterMs`) on a durable timer of
//! the run, as SUB_WORKFLOW's does; without one it runs in the same decision. Conductor
//! runs a synchronous system task's retry at once whatever its back-off (only its
//! asynchronous START_WORKFLOW waits it): Weft honours the delay the definition gives
//! rather than ignoring it (docs/conductor.md). Every [`IMMEDIATE_RETRIES_PER_COMMAND`]th
//! retry without a back-off goes through a timer due at once too, so that a task that
//! fails the same way every time cannot keep one command settling for ever.
//!
//! A WAIT, HUMAN or EVENT task waiting for its result keeps its `timeoutSeconds`, counted
//! from when it began (Conductor's `checkTaskTimeout` applies to every started task).

use uuid::Uuid;
use weft::dsl::{TaskType, WorkflowTask};

use super::activity::Deadline;
use super::policy::{self, Policy, TimeoutPolicy};
use super::walk::{permissive, task_failure_reason, Flow, Walker};
use super::Decision;
use crate::state::{TaskState, TaskStatus};

/// How many retries without a back-off one command may run before the next goes
/// through a timer (a command of its own).
pub const IMMEDIATE_RETRIES_PER_COMMAND: i32 = 100;

/// A failed attempt that is retried.
pub(super) enum Retry {
    /// The next attempt runs in this decision.
    Now,
    /// The next attempt waits for its back-off (this flow sets or waits for the timer).
    Later(Flow),
}

impl Walker<'_> {
    /// Whether `t`, the latest attempt of `task` (of `kind`, run by the decider), failed
    /// and is retried: a FAILED or TIMED_OUT attempt (not a terminal failure), with an
    /// attempt left under `retryCount`, an error kind the policy retries and total time
    /// left. `None`: it is over (done, or failed for good), or an operator's retry in
    /// place runs it again from scratch.
    pub(super) fn system_retry(
        &self,
        task: &WorkflowTask,
        kind: TaskType,
        t: &TaskState,
    ) -> Option<Retry> {
        if !matches!(t.status, TaskStatus::Failed | TaskStatus::TimedOut)
            || !policy::retried(kind)
            || self.state.retry_granted(t)
        {
            return None;
        }
        let policy = Policy::of(task);
        if t.attempt > policy.retry_count
            || !policy.is_retryable(t.error_kind.as_deref())
            || self.total_deadline_passed(t, &policy)
        {
            return None;
        }
        let timer_id = Uuid::new_v5(&t.task_id, b"retry");
        match self.state.timers.iter().find(|x| x.timer_id == timer_id) {
            Some(x) if x.fired => Some(Retry::Now),
            Some(_) => Some(Retry::Later(Flow::Waiting(Vec::new()))),
            None => {
                let backoff = policy.backoff(t.attempt, t.task_id);
                let sliced = t.attempt % IMMEDIATE_RETRIES_PER_COMMAND == 0;
                if backoff.delay_ms <= 0 && !sliced {
                    return Some(Retry::Now);
                }
                let delay = chrono::Duration::milliseconds(backoff.delay_ms.max(0));
                Some(Retry::Later(Flow::Waiting(vec![Decision::StartTimer {
                    timer_id,
                    task_id: t.task_id,
                    due: super::waiting::Due::After(delay),
                }])))
            }
        }
    }

    /// The latest attempt of `task` (of `kind`, run by the decider) its walk goes on
    /// from: `None` when it runs again (a retry per its policy due now, or an operator's
    /// retry in place, which runs it from scratch); `Err(flow)` while a retry waits out
    /// its back-off, or when it timed out for good (the run times out, as Conductor's,
    /// unless the task is optional or permissive).
    pub(super) fn system_latest<'t>(
        &self,
        task: &WorkflowTask,
        kind: TaskType,
        latest: Option<&'t TaskState>,
    ) -> Result<Option<&'t TaskState>, Flow> {
        let Some(t) = latest else {
            return Ok(None);
        };
        match self.system_retry(task, kind, t) {
            Some(Retry::Now) => Ok(None),
            Some(Retry::Later(flow)) => Err(flow),
            None if self.state.retry_granted(t) => Ok(None),
            None if t.status == TaskStatus::TimedOut && !task.optional && !permissive(task) => {
                Err(Flow::Stop(vec![Decision::TimeOutWorkflow {
                    reason: task_failure_reason(t.task_id, "TIMED_OUT", t.reason.as_deref()),
                }]))
            }
            None => Ok(Some(t)),
        }
    }

    /// The deadline timers of a WAIT, HUMAN or EVENT task waiting for its result
    /// ([`Walker::waiting_timeout`]); none for another type or a task not waiting.
    pub(super) fn waiting_deadlines(
        &self,
        task: &WorkflowTask,
        kind: TaskType,
        latest: Option<&TaskState>,
    ) -> Result<Vec<Decision>, Flow> {
        match latest.filter(|t| t.status.is_pending()) {
            Some(t) if matches!(kind, TaskType::Wait | TaskType::Human | TaskType::Event) => {
                self.waiting_timeout(task, t)
            }
            _ => Ok(Vec::new()),
        }
    }

    /// The attempt an evaluation of `task` (run by the decider) records now: the one
    /// after its latest when that failed and is retried now, else the first.
    pub(super) fn attempt_of(&self, task: &WorkflowTask) -> i32 {
        // A type that never retries needs no look at its past attempts.
        let Some(kind) = task.task_type().filter(|k| policy::retried(*k)) else {
            return 1;
        };
        self.state
            .latest_at(&task.task_reference_name, self.iteration)
            .filter(|t| matches!(self.system_retry(task, kind, t), Some(Retry::Now)))
            .map_or(1, |t| t.attempt + 1)
    }

    /// Whether the attempt `attempt` of `task`, failing now (not terminally), will be
    /// retried: its policy leaves one more. The run then does not fail with it.
    pub(super) fn retry_follows(&self, task: &WorkflowTask, kind: TaskType, attempt: i32) -> bool {
        policy::retried(kind) && attempt <= Policy::of(task).retry_count
    }
}

impl Walker<'_> {
    /// The `timeoutSeconds` of a WAIT, HUMAN or EVENT task `t` waiting for its result,
    /// counted from when it began, as Conductor's `checkTaskTimeout` counts a started
    /// task's, and its `totalTimeoutSeconds`, counted from its first attempt. `Ok`: the
    /// deadline timers this decision sets (none when there is none, or none due);
    /// `Err(flow)`: one is due, and the policy says what follows (RETRY: TIMED_OUT,
    /// retried per `retryCount` while total time is left; TIME_OUT_WF: the run times out;
    /// ALERT_ONLY: the timer's firing in history is the record, and the task waits on).
    pub(super) fn waiting_timeout(
        &self,
        task: &WorkflowTask,
        t: &TaskState,
    ) -> Result<Vec<Decision>, Flow> {
        let policy = Policy::of(task);
        let mut deadlines = Vec::new();
        if let Some((timer_id, due)) = self.total_deadline(t, &policy) {
            match self.deadline(t, timer_id, due) {
                Deadline::Set(timer) => deadlines.push(*timer),
                Deadline::Pending => {}
                Deadline::Passed => {
                    let reason = format!(
                        "attempt {} did not finish within totalTimeoutSeconds ({}) over {} attempt(s)",
                        t.attempt, policy.total_timeout_seconds, t.attempt
                    );
                    self.timed_out(task, t, &policy, reason)?;
                }
            }
        }
        let seconds = policy.timeout_seconds;
        if seconds > 0 {
            let timer_id = Uuid::new_v5(&t.task_id, b"timeout");
            let due = t.scheduled_time + chrono::Duration::seconds(seconds);
            match self.deadline(t, timer_id, due) {
                Deadline::Set(timer) => deadlines.push(*timer),
                Deadline::Pending => {}
                Deadline::Passed => {
                    let reason = format!(
                        "attempt {} did not finish within timeoutSeconds ({seconds})",
                        t.attempt
                    );
                    self.timed_out(task, t, &policy, reason)?;
                }
            }
        }
        Ok(deadlines)
    }

    /// `t` is past a deadline: what its `timeoutPolicy` makes of it (`Ok`: ALERT_ONLY,
    /// nothing).
    fn timed_out(
        &self,
        task: &WorkflowTask,
        t: &TaskState,
        policy: &Policy,
        reason: String,
    ) -> Result<(), Flow> {
        let timed_out = Decision::TimeOutTask {
            task_id: t.task_id,
            task_ref: task.task_reference_name.clone(),
            reason: reason.clone(),
        };
        match policy.timeout_policy {
            TimeoutPolicy::AlertOnly => Ok(()),
            TimeoutPolicy::Retry => Err(Flow::Waiting(vec![timed_out])),
            TimeoutPolicy::TimeOutWorkflow => Err(Flow::Stop(vec![
                timed_out,
                Decision::TimeOutWorkflow {
                    reason: format!("task {:?} timed out: {reason}", t.task_ref),
                },
            ])),
        }
    }
}
