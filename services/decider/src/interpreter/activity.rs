//! Activities: SIMPLE, HTTP (and DYNAMIC, as the SIMPLE task it names) handed to workers,
//! and SUB_WORKFLOW, whose attempt is a child run — scheduled, timed out per their
//! policy's deadlines and retried after its back-off.

use serde_json::Value;
use uuid::Uuid;
use weft::dsl::{expr, TaskType, WorkflowTask};

use super::policy::{Policy, TimeoutPolicy};
use super::waiting::Due;
use super::walk::{fail, permissive, task_failure_reason, Flow, Walker};
use super::{ChildDefinition, Decision};
use crate::state::{TaskState, TaskStatus};

/// Where a task's deadline stands.
pub(super) enum Deadline {
    /// Not set yet: this decision sets it.
    Set(Box<Decision>),
    /// Set, not due.
    Pending,
    /// Due: the task ran out of time.
    Passed,
}

impl Walker<'_> {
    /// SIMPLE and HTTP: scheduled on a worker queue; timed out per `timeoutSeconds` and
    /// retried per `retryCount` after the back-off of the task's policy (on a durable
    /// timer when the delay is not zero).
    pub(super) fn activity(
        &self,
        task: &WorkflowTask,
        kind: TaskType,
        latest: Option<&TaskState>,
    ) -> Flow {
        let policy = Policy::of(task);
        // A task canceled at a reset's cut runs again, from its first attempt; one canceled
        // for good (its child run was terminated) does not.
        let latest = latest.filter(|t| t.status != TaskStatus::Canceled || t.canceled_for_good);
        let mut backoff = super::Backoff::default();
        let attempt = match latest {
            // Conductor's `startDelay`: the first attempt waits that long in its queue, as a
            // callback (SCHEDULED, `callbackAfterSeconds`; docs/callbacks.md).
            None if kind != TaskType::SubWorkflow => {
                let seconds = start_delay_seconds(task);
                backoff = super::Backoff {
                    seconds,
                    delay_ms: seconds.saturating_mul(1_000),
                };
                1
            }
            None => 1,
            // A retry in place: one more attempt, at once, whatever the policy says.
            Some(t) if self.state.retry_granted(t) => t.attempt + 1,
            Some(t) => match t.status {
                TaskStatus::Scheduled | TaskStatus::InProgress => {
                    return self.running(task, t, &policy)
                }
                // Conductor's CANCELED task that is not retried: the run is terminated,
                // unless the task is permissive (optional ones are COMPLETED_WITH_ERRORS).
                TaskStatus::Canceled if t.canceled_for_good && !permissive(task) => {
                    return Flow::Stop(vec![Decision::TerminateWorkflow {
                        reason: task_failure_reason(t.task_id, "TERMINATED", t.reason.as_deref()),
                        output: super::workflow_output(self.state),
                    }])
                }
                TaskStatus::Completed
                | TaskStatus::CompletedWithErrors
                | TaskStatus::Skipped
                | TaskStatus::Canceled => return Flow::Done,
                // Out of total time (`totalTimeoutSeconds`, over every attempt and back-off):
                // no more retries; an optional task lets the run go on.
                TaskStatus::Failed | TaskStatus::TimedOut
                    if self.total_deadline_passed(t, &policy) =>
                {
                    if task.optional || permissive(task) {
                        return Flow::Done;
                    }
                    return Flow::Stop(vec![Decision::TimeOutWorkflow {
                        reason: format!(
                            "task {:?} did not finish within totalTimeoutSeconds ({}) over {} attempt(s)",
                            t.task_ref, policy.total_timeout_seconds, t.attempt
                        ),
                    }]);
                }
                TaskStatus::Failed | TaskStatus::TimedOut
                    if t.attempt <= policy.retry_count
                        && policy.is_retryable(t.error_kind.as_deref()) =>
                {
                    let timer_id = Uuid::new_v5(&t.task_id, b"retry");
                    let timer = self.state.timers.iter().find(|x| x.timer_id == timer_id);
                    match timer {
                        // A back-off timer (a child's, or set before retries were
                        // scheduled at once): the retry comes when it fires.
                        Some(x) if !x.fired => return Flow::Waiting(Vec::new()),
                        Some(_) => {}
                        // A worker's retry is scheduled at once and handed out after
                        // its back-off, as Conductor's (SCHEDULED, callbackAfterSeconds).
                        None if kind != TaskType::SubWorkflow => {
                            backoff = policy.backoff(t.attempt, t.task_id);
                        }
                        None => {
                            let delay = policy.retry_delay(t.attempt);
                            if delay > chrono::Duration::zero() {
                                return Flow::Waiting(vec![Decision::StartTimer {
                                    timer_id,
                                    task_id: t.task_id,
                                    due: Due::After(delay),
                                }]);
                            }
                        }
                    }
                    t.attempt + 1
                }
                // An optional task that ran out of time and of retries: the run goes on;
                // a permissive one's branch goes on, and its JOIN or the run's end fails.
                TaskStatus::TimedOut if task.optional || permissive(task) => return Flow::Done,
                TaskStatus::Failed | TaskStatus::FailedWithTerminalError if permissive(task) => {
                    return Flow::Done
                }
                // Conductor's reasons, naming the status the run ends with.
                TaskStatus::TimedOut => {
                    return Flow::Stop(vec![Decision::TimeOutWorkflow {
                        reason: task_failure_reason(t.task_id, "TIMED_OUT", t.reason.as_deref()),
                    }])
                }
                TaskStatus::Failed | TaskStatus::FailedWithTerminalError => {
                    return fail(
                        task,
                        task_failure_reason(t.task_id, "FAILED", t.reason.as_deref()),
                    )
                }
            },
        };
        let task_id = self.task_id(task, attempt);
        let input = self.input(task, attempt);
        if kind == TaskType::SubWorkflow {
            let definition = match self.child_definition(task, attempt) {
                Ok(definition) => definition,
                Err(why) => {
                    return fail(task, format!("task {:?}: {why}", task.task_reference_name))
                }
            };
            return Flow::Waiting(vec![Decision::StartChild {
                task_id,
                task_ref: task.task_reference_name.clone(),
                task_name: task.name.clone(),
                input,
                attempt,
                iteration: self.iteration,
                child_workflow_id: Uuid::new_v5(&task_id, b"child").to_string(),
                definition,
            }]);
        }
        Flow::Waiting(vec![Decision::ScheduleTask {
            task_id,
            task_ref: task.task_reference_name.clone(),
            task_type: kind.as_str().to_owned(),
            task_name: task.name.clone(),
            input,
            attempt,
            iteration: self.iteration,
            backoff,
        }])
    }

    /// An attempt waiting for or held by a worker, against its deadlines (all absolute,
    /// from stored times): `pollTimeoutSeconds` from scheduling until a worker takes it,
    /// `timeoutSeconds` from the worker's start, and `totalTimeoutSeconds` from the first
    /// attempt's scheduling across retries. Each is a durable timer set once.
    fn running(&self, task: &WorkflowTask, t: &TaskState, policy: &Policy) -> Flow {
        let mut decisions = Vec::new();
        if let Some((timer_id, due)) = self.total_deadline(t, policy) {
            match self.deadline(t, timer_id, due) {
                Deadline::Set(d) => decisions.push(*d),
                Deadline::Pending => {}
                // ALERT_ONLY: the deadline is only reported (the timer's firing is in
                // the history); the attempt goes on.
                Deadline::Passed if policy.timeout_policy == TimeoutPolicy::AlertOnly => {}
                // The attempt times out; the next walk sees it out of total time: no
                // retry, and the run times out unless the task is optional.
                Deadline::Passed => {
                    return Flow::Waiting(vec![Decision::TimeOutTask {
                        task_id: t.task_id,
                        task_ref: task.task_reference_name.clone(),
                        reason: format!(
                            "attempt {} did not finish within totalTimeoutSeconds ({}) over {} attempt(s)",
                            t.attempt, policy.total_timeout_seconds, t.attempt
                        ),
                    }]);
                }
            }
        }
        // A SUB_WORKFLOW begins when its child starts, in the decision that schedules it.
        let started = t.start_time.or_else(|| {
            (t.task_type == TaskType::SubWorkflow.as_str()).then_some(t.scheduled_time)
        });
        let (seconds, name, from, what): (i64, &[u8], _, _) = match started {
            // Not taken by a worker yet: schedule-to-start, from when it was handed to
            // its queue (a retry waits out its back-off first).
            None => (
                policy.poll_timeout_seconds,
                b"poll-timeout",
                t.scheduled_time + chrono::Duration::milliseconds(t.dispatch_delay_ms),
                "was not taken by a worker within pollTimeoutSeconds",
            ),
            Some(started) => (
                policy.timeout_seconds,
                b"timeout",
                started,
                "did not finish within timeoutSeconds",
            ),
        };
        if seconds == 0 {
            return Flow::Waiting(decisions);
        }
        let timer_id = Uuid::new_v5(&t.task_id, name);
        match self.deadline(t, timer_id, from + chrono::Duration::seconds(seconds)) {
            Deadline::Set(d) => {
                decisions.push(*d);
                Flow::Waiting(decisions)
            }
            Deadline::Pending => Flow::Waiting(decisions),
            Deadline::Passed => {
                let reason = format!("attempt {} {what} ({seconds})", t.attempt);
                let timed_out = Decision::TimeOutTask {
                    task_id: t.task_id,
                    task_ref: task.task_reference_name.clone(),
                    reason: reason.clone(),
                };
                match policy.timeout_policy {
                    TimeoutPolicy::AlertOnly => Flow::Waiting(decisions),
                    TimeoutPolicy::Retry => Flow::Waiting(vec![timed_out]),
                    TimeoutPolicy::TimeOutWorkflow => Flow::Stop(vec![
                        timed_out,
                        Decision::TimeOutWorkflow {
                            reason: format!("task {:?} timed out: {reason}", t.task_ref),
                        },
                    ]),
                }
            }
        }
    }

    /// The `totalTimeoutSeconds` deadline of `t`'s task (its timer and due time), counted
    /// from the first attempt's scheduling in this iteration; `None` without one.
    pub(super) fn total_deadline(
        &self,
        t: &TaskState,
        policy: &Policy,
    ) -> Option<(Uuid, chrono::DateTime<chrono::Utc>)> {
        if policy.total_timeout_seconds <= 0 {
            return None;
        }
        // A copy canceled at a reset's cut is not an attempt of this run: the task ran
        // again from attempt 1, and its budget counts from there. After a retry in place
        // it counts from the retried attempt.
        let since = self.state.retried_at.filter(|at| t.scheduled_time >= *at);
        let first = self
            .state
            .tasks
            .iter()
            .find(|x| {
                x.task_ref == t.task_ref
                    && x.iteration == t.iteration
                    && x.status != TaskStatus::Canceled
                    && since.is_none_or(|at| x.scheduled_time >= at)
            })
            .unwrap_or(t);
        Some((
            Uuid::new_v5(&first.task_id, b"total-timeout"),
            first.scheduled_time + chrono::Duration::seconds(policy.total_timeout_seconds),
        ))
    }

    /// Whether `t`'s task has run out of total time (its deadline timer fired).
    pub(super) fn total_deadline_passed(&self, t: &TaskState, policy: &Policy) -> bool {
        policy.timeout_policy != TimeoutPolicy::AlertOnly
            && self.total_deadline(t, policy).is_some_and(|(timer_id, _)| {
                self.state
                    .timers
                    .iter()
                    .any(|x| x.timer_id == timer_id && x.fired)
            })
    }

    /// Where the deadline timer `timer_id` of `t` stands.
    pub(super) fn deadline(
        &self,
        t: &TaskState,
        timer_id: Uuid,
        due: chrono::DateTime<chrono::Utc>,
    ) -> Deadline {
        match self.state.timers.iter().find(|x| x.timer_id == timer_id) {
            None => Deadline::Set(Box::new(Decision::StartTimer {
                timer_id,
                task_id: t.task_id,
                due: Due::At(due),
            })),
            Some(x) if !x.fired => Deadline::Pending,
            Some(_) => Deadline::Passed,
        }
    }

    /// A SUB_WORKFLOW's child definition: `subWorkflowParam.workflowDefinition`, written
    /// inline or embedded by the gateway at start from the registered definition. When
    /// there is none (a dynamic fork's branch, a name an earlier task's output gives), the
    /// param is resolved now, as Conductor does when it schedules the task: the definition
    /// an expression gives (`workflowDefinition: "${...}"`), or the registered one its
    /// name and version name, which the engine reads.
    fn child_definition(
        &self,
        task: &WorkflowTask,
        attempt: i32,
    ) -> Result<ChildDefinition, String> {
        let written = task
            .extra
            .get("subWorkflowParam")
            .filter(|p| p.is_object())
            .ok_or("subWorkflowParam is missing")?;
        let resolved;
        let param = match written.get("workflowDefinition") {
            Some(d) if d.is_object() => written,
            _ => {
                resolved = expr::resolve(written, &self.context(task, attempt));
                &resolved
            }
        };
        if let Some(inline) = param.get("workflowDefinition").filter(|d| d.is_object()) {
            return weft::dsl::parse_definition(inline)
                .map(|d| ChildDefinition::Frozen(Box::new(d)))
                .map_err(|e| format!("child definition: {e}"));
        }
        let name = param
            .get("name")
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|n| !n.is_empty() && !n.contains("${"))
            .ok_or_else(|| format!("subWorkflowParam.name names no workflow: {}", param["name"]))?;
        let version = match param.get("version") {
            None | Some(Value::Null) => None,
            Some(v) => Some(
                v.as_i64()
                    .or_else(|| v.as_str().and_then(|s| s.trim().parse().ok()))
                    .and_then(|n| i32::try_from(n).ok())
                    .filter(|n| *n > 0)
                    .ok_or_else(|| format!("subWorkflowParam.version {v} is not a version"))?,
            ),
        };
        Ok(ChildDefinition::Registered {
            name: name.to_owned(),
            version,
        })
    }
}

/// A task's `startDelay` (Conductor's, in seconds; 0 when absent), within what
/// registration takes.
fn start_delay_seconds(task: &WorkflowTask) -> i64 {
    task.extra
        .get("startDelay")
        .and_then(Value::as_i64)
        .unwrap_or(0)
        .clamp(0, weft::dsl::validate::MAX_START_DELAY_SECONDS)
}
