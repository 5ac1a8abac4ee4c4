//! A run's state as the fold of its history. The decider keeps it in memory between
//! commands (keyed by version) and rebuilds it from `history_events` on a miss.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use serde_json::{json, Map, Value};
use uuid::Uuid;
use weft::dsl::{TaskType, WorkflowDef};
use weft::messages::Event;
use weft::store::runs::{RunRecord, StoredEvent, TaskRecord};

use crate::task_index::TaskIndex;

/// Conductor's name for "no domain" in `taskToDomain`.
pub const NO_DOMAIN: &str = "NO_DOMAIN";

/// Workflow status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunStatus {
    /// In progress.
    Running,
    /// Finished successfully.
    Completed,
    /// Finished with a failure.
    Failed,
    /// Ended by a TERMINATE task or an operator.
    Terminated,
    /// Ran out of time.
    TimedOut,
}

impl RunStatus {
    /// Conductor's name.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "RUNNING",
            RunStatus::Completed => "COMPLETED",
            RunStatus::Failed => "FAILED",
            RunStatus::Terminated => "TERMINATED",
            RunStatus::TimedOut => "TIMED_OUT",
        }
    }
}

/// Task status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskStatus {
    /// Published to its queue, waiting for a worker.
    Scheduled,
    /// A worker took it.
    InProgress,
    /// Done.
    Completed,
    /// An optional task failed; the run went on.
    CompletedWithErrors,
    /// Failed.
    Failed,
    /// Failed, no retry allowed.
    FailedWithTerminalError,
    /// Ran out of time (`timeoutSeconds`); retried like a failure.
    TimedOut,
    /// Given up without a result: still waiting when its run ended (a failed branch, a
    /// terminate, a timeout), or still running at a reset's cut (then it runs again).
    Canceled,
    /// Skipped by an operator; the run goes on as if it had completed.
    Skipped,
}

impl TaskStatus {
    /// Conductor's name.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Scheduled => "SCHEDULED",
            TaskStatus::InProgress => "IN_PROGRESS",
            TaskStatus::Completed => "COMPLETED",
            TaskStatus::CompletedWithErrors => "COMPLETED_WITH_ERRORS",
            TaskStatus::Failed => "FAILED",
            TaskStatus::FailedWithTerminalError => "FAILED_WITH_TERMINAL_ERROR",
            TaskStatus::TimedOut => "TIMED_OUT",
            TaskStatus::Canceled => "CANCELED",
            TaskStatus::Skipped => "SKIPPED",
        }
    }

    /// Whether a worker result is still awaited.
    pub fn is_pending(self) -> bool {
        matches!(self, TaskStatus::Scheduled | TaskStatus::InProgress)
    }
}

/// One task of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskState {
    /// Id.
    pub task_id: Uuid,
    /// Reference name.
    pub task_ref: String,
    /// Type.
    pub task_type: String,
    /// Definition name.
    pub task_name: String,
    /// Schedule order.
    pub seq: i32,
    /// Attempt.
    pub attempt: i32,
    /// Loop iteration (from 1) inside a DO_WHILE body; 0 elsewhere.
    pub iteration: i32,
    /// Status.
    pub status: TaskStatus,
    /// Input.
    pub input: Value,
    /// Output.
    pub output: Option<Value>,
    /// Failure reason.
    pub reason: Option<String>,
    /// The kind of the last failure, as the worker named it.
    pub error_kind: Option<String>,
    /// Worker.
    pub worker_id: Option<String>,
    /// Times.
    pub scheduled_time: DateTime<Utc>,
    /// Worker start.
    pub start_time: Option<DateTime<Utc>>,
    /// End.
    pub end_time: Option<DateTime<Utc>>,
    /// Last change.
    pub update_time: DateTime<Utc>,
    /// CANCELED for good (its child run was terminated), not at a reset's cut.
    pub canceled_for_good: bool,
    /// Conductor's `callbackAfterSeconds`: how long the task stays out of its queue
    /// (a retry's back-off, a worker's postponement); 0 once it is due.
    pub callback_after_seconds: i64,
    /// How long after its scheduling its message went to its queue, in milliseconds
    /// (a retry's back-off with its jitter).
    pub dispatch_delay_ms: i64,
    /// The durable timer that holds its message back while it waits out a callback
    /// (one per wait, so that a timer fired and not yet deleted is never taken for the
    /// next one); `None` when its message went to its queue at once.
    pub dispatch_timer: Option<Uuid>,
    /// The domain of a worker's task (docs/domains.md).
    pub domain: Option<String>,
}

impl TaskState {
    /// The child run a SUB_WORKFLOW task started (`subWorkflowId` of its output).
    pub fn child_workflow_id(&self) -> Option<&str> {
        self.output
            .as_ref()
            .and_then(|o| o.get("subWorkflowId"))
            .and_then(Value::as_str)
    }
}

/// The id of the timer that hands task `task_id` to its queue after the wait the event
/// `event_id` began.
pub(crate) fn dispatch_timer_id(task_id: Uuid, event_id: i64) -> Uuid {
    Uuid::new_v5(&task_id, format!("dispatch:{event_id}").as_bytes())
}

/// A task that ended waits again (a JOIN or a SUB_WORKFLOW task, after a retry).
fn reopen(t: &mut TaskState, at: DateTime<Utc>) {
    t.status = TaskStatus::InProgress;
    t.reason = None;
    t.error_kind = None;
    t.canceled_for_good = false;
    t.end_time = None;
    t.update_time = at;
}

/// A durable timer set by a task.
#[derive(Debug, Clone, PartialEq)]
pub struct TimerState {
    /// The timer.
    pub timer_id: Uuid,
    /// The task waiting for it.
    pub task_id: Uuid,
    /// When it is due.
    pub fire_at: DateTime<Utc>,
    /// Whether it came due.
    pub fired: bool,
}

/// A run: the fold of its events.
#[derive(Debug, Clone, PartialEq)]
pub struct RunState {
    /// Run id.
    pub run_id: Uuid,
    /// Workflow id.
    pub workflow_id: String,
    /// The frozen definition.
    pub definition: WorkflowDef,
    /// Input.
    pub input: Value,
    /// Correlation id.
    pub correlation_id: Option<String>,
    /// Parent workflow.
    pub parent_workflow_id: Option<String>,
    /// The parent's run and SUB_WORKFLOW task, told when this run ends.
    pub parent: Option<weft::messages::ParentLink>,
    /// DO_WHILE iteration cap, recorded when the run started.
    pub max_loop_iterations: i32,
    /// FORK_JOIN_DYNAMIC branch cap, recorded when the run started.
    pub max_fork_branches: usize,
    /// Size limit of the run's variables as JSON, in bytes, recorded when it started.
    pub max_variables_bytes: usize,
    /// The start request's trace context.
    pub traceparent: Option<String>,
    /// Conductor's priority (0–99) its activity tasks are queued with.
    pub priority: i32,
    /// Conductor's `taskToDomain`: task name (or `*`) → domain (docs/domains.md).
    pub task_to_domain: weft::messages::TaskDomains,
    /// Status.
    pub status: RunStatus,
    /// Durable timers set by the run's tasks.
    pub timers: Vec<TimerState>,
    /// Signals received, in order (`(name, payload)`); WAIT tasks consume them by name.
    pub signals: Vec<(String, Value)>,
    /// Skips requested for tasks not reached yet, in order; each is used once.
    pub pending_skips: Vec<weft::messages::SkipRequested>,
    /// Paused by an operator: no new task is scheduled until resumed.
    pub paused: bool,
    /// The run a reset continued from, and the task it went back to.
    pub reset_from: Option<(Uuid, String)>,
    /// The input the reset's task runs with when it runs again (Conductor's rerun
    /// `taskInput`): its ref, its loop iteration, the input.
    pub reset_task_input: Option<(String, i32, Value)>,
    /// Tasks a retry in place gave one more attempt, not scheduled yet (each is used by
    /// its next scheduling).
    pub retry_grants: Vec<weft::messages::TaskAt>,
    /// When the run was last retried in place: a task's total time counts from its first
    /// attempt since.
    pub retried_at: Option<DateTime<Utc>>,
    /// Retried in place and nothing scheduled since: the next round schedules in the
    /// order of the attempts it replaces.
    pub retry_round: bool,
    /// Waiting for the rollback hooks its reset fired: nothing is scheduled until the
    /// dispatcher reports them settled (docs/hooks.md).
    pub rolling_back: bool,
    /// Workflow variables (the definition's, updated by SET_VARIABLE).
    pub variables: Map<String, Value>,
    /// Output once completed.
    pub output: Option<Value>,
    /// Failure reason.
    pub reason: Option<String>,
    /// Refs that failed the run.
    pub failed_task_refs: Vec<String>,
    /// Tasks in schedule order (`seq` = index); appended only by [`RunState::apply`],
    /// which keeps [`RunState::index`] with them.
    pub tasks: Vec<TaskState>,
    /// The tasks by id, by reference name and iteration, and those pending.
    pub(crate) index: TaskIndex,
    /// Number of events applied (= last event id).
    pub version: i64,
    /// Start.
    pub start_time: DateTime<Utc>,
    /// End.
    pub end_time: Option<DateTime<Utc>>,
    /// Last change.
    pub update_time: DateTime<Utc>,
}

/// A history that does not fold: a bug or a corrupted store, never a user error.
#[derive(Debug, thiserror::Error)]
pub enum FoldError {
    /// The first event is not `WorkflowStarted`, or a second one appears.
    #[error("history of run {0} does not start with exactly one WorkflowStarted")]
    BadStart(Uuid),
    /// An event names a task the run never scheduled.
    #[error("event {event_id} of run {run_id} names unknown task {task_id}")]
    UnknownTask {
        /// Run.
        run_id: Uuid,
        /// Event.
        event_id: i64,
        /// Task.
        task_id: Uuid,
    },
}

impl RunState {
    /// Folds a whole history (oldest first).
    pub fn from_history(workflow_id: &str, events: &[StoredEvent]) -> Result<Self, FoldError> {
        let first = events.first().ok_or(FoldError::BadStart(Uuid::nil()))?;
        let Event::WorkflowStarted(started) = &first.event else {
            return Err(FoldError::BadStart(first.run_id));
        };
        let mut state = RunState {
            run_id: first.run_id,
            workflow_id: workflow_id.to_owned(),
            definition: started.definition.clone(),
            input: started.input.clone(),
            correlation_id: started.correlation_id.clone(),
            parent_workflow_id: started.parent_workflow_id.clone(),
            parent: started.parent.clone(),
            max_loop_iterations: started
                .max_loop_iterations
                .map_or(1_000, |n| i32::try_from(n).unwrap_or(i32::MAX)),
            max_fork_branches: started
                .max_fork_branches
                .map_or(1_000, |n| usize::try_from(n).unwrap_or(usize::MAX)),
            max_variables_bytes: started
                .max_variables_kb
                .map_or(256, |kb| kb as usize)
                .saturating_mul(1024),
            traceparent: started.traceparent.clone(),
            priority: started.priority.unwrap_or(0),
            task_to_domain: started.task_to_domain.clone(),
            status: RunStatus::Running,
            variables: started.definition.variables.clone(),
            signals: Vec::new(),
            pending_skips: Vec::new(),
            paused: false,
            reset_from: None,
            reset_task_input: None,
            retry_grants: Vec::new(),
            retried_at: None,
            retry_round: false,
            rolling_back: false,
            timers: Vec::new(),
            output: None,
            reason: None,
            failed_task_refs: Vec::new(),
            tasks: Vec::new(),
            index: TaskIndex::default(),
            version: 1,
            start_time: first.time,
            end_time: None,
            update_time: first.time,
        };
        for e in &events[1..] {
            state.apply(e)?;
        }
        Ok(state)
    }

    /// Applies one event after the first.
    pub fn apply(&mut self, e: &StoredEvent) -> Result<(), FoldError> {
        let at = e.time;
        self.index.begin();
        match &e.event {
            Event::WorkflowStarted(_) => return Err(FoldError::BadStart(self.run_id)),
            Event::TaskScheduled(s) => {
                self.retry_round = false;
                self.retry_grants
                    .retain(|g| g.task_ref != s.task_ref || g.iteration != s.iteration);
                self.push_task(TaskState {
                    task_id: s.task_id,
                    task_ref: s.task_ref.clone(),
                    task_type: s.task_type.clone(),
                    task_name: s.task_name.clone(),
                    seq: s.seq,
                    attempt: s.attempt,
                    iteration: s.iteration,
                    status: TaskStatus::Scheduled,
                    input: s.input.clone(),
                    output: s.output.clone(),
                    reason: None,
                    error_kind: None,
                    worker_id: None,
                    scheduled_time: at,
                    start_time: None,
                    end_time: None,
                    update_time: at,
                    canceled_for_good: false,
                    callback_after_seconds: s.callback_after_seconds,
                    dispatch_delay_ms: s.dispatch_delay_ms,
                    dispatch_timer: (s.dispatch_delay_ms > 0)
                        .then(|| dispatch_timer_id(s.task_id, e.event_id)),
                    domain: s.domain.clone(),
                })
            }
            Event::TaskStarted(s) => {
                let t = self.task_mut(e, s.task_id)?;
                if t.status == TaskStatus::Scheduled {
                    t.status = TaskStatus::InProgress;
                    t.worker_id.clone_from(&s.worker_id);
                    // Taken again after a postponement: `timeoutSeconds` still counts
                    // from the first start, as Conductor's.
                    t.start_time = t.start_time.or(Some(s.started_at));
                    t.update_time = at;
                }
            }
            Event::TaskPostponed(p) => {
                let t = self.task_mut(e, p.task_id)?;
                if t.status.is_pending() {
                    t.status = TaskStatus::Scheduled;
                    t.output = Some(p.output.clone());
                    if p.worker_id.is_some() {
                        t.worker_id.clone_from(&p.worker_id);
                    }
                    t.callback_after_seconds = p.callback_after_seconds;
                    t.dispatch_timer = (p.callback_after_seconds > 0)
                        .then(|| dispatch_timer_id(p.task_id, e.event_id));
                    t.update_time = at;
                }
            }
            Event::TaskCallbackReset(r) => {
                let t = self.task_mut(e, r.task_id)?;
                t.callback_after_seconds = 0;
                t.update_time = at;
            }
            Event::TaskCompleted(c) => {
                let t = self.task_mut(e, c.task_id)?;
                t.status = match &c.errors {
                    None => TaskStatus::Completed,
                    Some(why) => {
                        t.reason = Some(why.clone());
                        TaskStatus::CompletedWithErrors
                    }
                };
                t.output = Some(c.output.clone());
                if c.worker_id.is_some() {
                    t.worker_id.clone_from(&c.worker_id);
                }
                t.start_time = c.started_at.or(t.start_time).or(Some(at));
                t.end_time = Some(at);
                t.update_time = at;
            }
            Event::TaskFailed(f) => {
                let node = find_task(&self.definition.tasks, &f.task_ref);
                let optional = node.is_some_and(|n| n.optional);
                let policy = node.map(crate::interpreter::policy::Policy::of);
                let t = self.task_mut(e, f.task_id)?;
                // An optional task is retried like any other; only its last failure lets
                // the run go on, as COMPLETED_WITH_ERRORS.
                let retried =
                    TaskType::parse(&t.task_type).is_none_or(crate::interpreter::policy::retried);
                let exhausted = f.terminal
                    || !retried
                    || policy.as_ref().is_none_or(|p| {
                        t.attempt > p.retry_count || !p.is_retryable(f.error_kind.as_deref())
                    });
                t.error_kind.clone_from(&f.error_kind);
                t.status = match (optional && exhausted, f.terminal) {
                    (true, _) => TaskStatus::CompletedWithErrors,
                    (false, true) => TaskStatus::FailedWithTerminalError,
                    (false, false) => TaskStatus::Failed,
                };
                t.output = Some(f.output.clone());
                t.reason = Some(f.reason.clone());
                if f.worker_id.is_some() {
                    t.worker_id.clone_from(&f.worker_id);
                }
                t.start_time = f.started_at.or(t.start_time).or(Some(at));
                t.end_time = Some(at);
                t.update_time = at;
            }
            Event::WorkflowCompleted(c) => {
                self.status = RunStatus::Completed;
                self.output = Some(c.output.clone());
                self.reason.clone_from(&c.reason);
                self.end_time = Some(at);
            }
            Event::WorkflowFailed(f) => {
                self.status = RunStatus::Failed;
                self.reason = Some(f.reason.clone());
                self.output.clone_from(&f.output);
                self.failed_task_refs.clone_from(&f.failed_task_refs);
                self.end_time = Some(at);
            }
            Event::VariablesUpdated(v) => {
                for (k, val) in &v.variables {
                    self.variables.insert(k.clone(), val.clone());
                }
            }
            Event::ChildWorkflowStarted(c) => {
                let task = self.task_mut(e, c.task_id)?;
                task.output = Some(serde_json::json!({ "subWorkflowId": c.child_workflow_id }));
                task.update_time = at;
            }
            Event::TaskTimedOut(t) => {
                let task = self.task_mut(e, t.task_id)?;
                task.status = TaskStatus::TimedOut;
                task.reason = Some(t.reason.clone());
                task.end_time = Some(at);
                task.update_time = at;
            }
            Event::WorkflowTimedOut(t) => {
                self.status = RunStatus::TimedOut;
                self.reason = Some(t.reason.clone());
                self.end_time = Some(at);
            }
            Event::TimerStarted(t) => self.timers.push(TimerState {
                timer_id: t.timer_id,
                task_id: t.task_id,
                fire_at: t.fire_at,
                fired: false,
            }),
            Event::TimerFired(f) => {
                if let Some(t) = self.timers.iter_mut().find(|t| t.timer_id == f.timer_id) {
                    t.fired = true;
                }
            }
            Event::SignalReceived(sig) => {
                self.signals.push((sig.name.clone(), sig.payload.clone()));
            }
            // A record for the reader: the run has ended.
            Event::SignalsUnconsumed(_) => {}
            Event::TaskSkipped(skipped) => {
                if let Some(i) = self
                    .pending_skips
                    .iter()
                    .position(|p| p.task_ref == skipped.task_ref)
                {
                    self.pending_skips.remove(i);
                }
                let task = self.task_mut(e, skipped.task_id)?;
                task.status = TaskStatus::Skipped;
                task.output = Some(skipped.output.clone());
                task.end_time = Some(at);
                task.update_time = at;
            }
            Event::SkipRequested(request) => self.pending_skips.push(request.clone()),
            Event::TaskCanceled(canceled) => {
                let optional = canceled.for_good
                    && find_task(&self.definition.tasks, &canceled.task_ref)
                        .is_some_and(|n| n.optional);
                let task = self.task_mut(e, canceled.task_id)?;
                // An optional task canceled for good lets the run go on, as a failed one.
                task.status = if optional {
                    TaskStatus::CompletedWithErrors
                } else {
                    TaskStatus::Canceled
                };
                task.canceled_for_good = canceled.for_good;
                task.reason = Some(canceled.reason.clone());
                task.end_time = Some(at);
                task.update_time = at;
            }
            Event::WorkflowPaused(_) => self.paused = true,
            Event::WorkflowResumed(_) => self.paused = false,
            Event::WorkflowReset(reset) => {
                self.reset_from = Some((reset.previous_run_id, reset.task_ref.clone()));
                self.reset_task_input = reset
                    .task_input
                    .clone()
                    .map(|input| (reset.task_ref.clone(), reset.iteration, input));
                // The run the operator sees begins at the reset; the prefix is history.
                self.start_time = at;
                self.paused = false;
                self.rolling_back = !reset.rollback_hooks.is_empty();
                if let Some(retried) = &reset.retried {
                    self.retried_at = Some(at);
                    self.retry_round = true;
                    self.grant_retries(retried, at);
                }
                if let Some(r) = &reset.resumed {
                    if let Some(position) = self.newest_position(&r.task_ref, r.iteration) {
                        self.index.mark(position);
                        reopen(&mut self.tasks[position], at);
                    }
                }
            }
            Event::RollbackHooksDone(_) => self.rolling_back = false,
            Event::WorkflowTerminated(t) => {
                self.status = RunStatus::Terminated;
                self.reason = Some(t.reason.clone());
                self.output = Some(t.output.clone());
                self.end_time = Some(at);
            }
        }
        if self.status != RunStatus::Running {
            // A run that ended leaves nothing waiting: what was still scheduled or in
            // progress is canceled, so no task row claims to run for a finished run.
            for position in self.pending_positions() {
                self.index.mark(position);
                let t = &mut self.tasks[position];
                t.status = TaskStatus::Canceled;
                t.end_time = Some(at);
                t.update_time = at;
            }
        }
        self.index.settle(&self.tasks);
        self.version = e.event_id;
        self.update_time = at;
        Ok(())
    }

    /// A retry in place: a failed JOIN waits again (its failed tasks are retried); every
    /// other task listed gets one more attempt.
    fn grant_retries(&mut self, retried: &[weft::messages::TaskAt], at: DateTime<Utc>) {
        for r in retried {
            let join = self
                .newest_position(&r.task_ref, r.iteration)
                .filter(|&position| {
                    matches!(
                        TaskType::parse(&self.tasks[position].task_type),
                        Some(TaskType::Join | TaskType::ExclusiveJoin)
                    )
                });
            match join {
                Some(position) => {
                    self.index.mark(position);
                    reopen(&mut self.tasks[position], at);
                }
                None => self.retry_grants.push(r.clone()),
            }
        }
    }

    /// Whether a retry in place gave `t`'s task one more attempt, not scheduled yet.
    pub fn retry_granted(&self, t: &TaskState) -> bool {
        self.retry_grants
            .iter()
            .any(|g| g.task_ref == t.task_ref && g.iteration == t.iteration)
    }

    /// Appends a task scheduled, indexed.
    fn push_task(&mut self, task: TaskState) {
        if !self.index.covers(&self.tasks) {
            self.reindex();
        }
        self.index.push(self.tasks.len(), &task);
        self.tasks.push(task);
    }

    /// Rebuilds the index from the tasks: only a state whose tasks were appended by hand
    /// (a test's) needs it.
    fn reindex(&mut self) {
        self.index = TaskIndex::default();
        for (position, task) in self.tasks.iter().enumerate() {
            self.index.push(position, task);
        }
        self.index.settle(&self.tasks);
    }

    /// The task with id `task_id`, marked as changed by the event being applied.
    fn task_mut(&mut self, e: &StoredEvent, task_id: Uuid) -> Result<&mut TaskState, FoldError> {
        let position = self.position(task_id).ok_or(FoldError::UnknownTask {
            run_id: self.run_id,
            event_id: e.event_id,
            task_id,
        })?;
        self.index.mark(position);
        Ok(&mut self.tasks[position])
    }

    /// The position of the task with id `task_id`.
    fn position(&self, task_id: Uuid) -> Option<usize> {
        if self.index.covers(&self.tasks) {
            self.index.position(task_id)
        } else {
            self.tasks.iter().rposition(|t| t.task_id == task_id)
        }
    }

    /// The position of the newest task with `task_ref` in iteration `iteration`.
    fn newest_position(&self, task_ref: &str, iteration: i32) -> Option<usize> {
        if self.index.covers(&self.tasks) {
            self.index.newest_at(task_ref, iteration)
        } else {
            self.tasks
                .iter()
                .rposition(|t| t.iteration == iteration && t.task_ref == task_ref)
        }
    }

    /// Positions of the tasks scheduled or in progress, oldest first.
    fn pending_positions(&self) -> Vec<usize> {
        if self.index.covers(&self.tasks) {
            self.index.pending().collect()
        } else {
            (0..self.tasks.len())
                .filter(|&p| self.tasks[p].status.is_pending())
                .collect()
        }
    }

    /// The tasks scheduled or in progress, oldest first.
    pub fn pending_tasks(&self) -> Vec<&TaskState> {
        self.pending_positions()
            .into_iter()
            .map(|p| &self.tasks[p])
            .collect()
    }

    /// The tasks the last event applied ended: pending before it, no longer after
    /// (completed, failed, canceled with the run…), oldest first.
    pub fn ended_by_last_event(&self) -> Vec<&TaskState> {
        let mut ended: Vec<usize> = self.index.ended().to_vec();
        ended.sort_unstable();
        ended.into_iter().map(|p| &self.tasks[p]).collect()
    }

    /// The newest task with `task_ref`.
    pub fn latest(&self, task_ref: &str) -> Option<&TaskState> {
        if self.index.covers(&self.tasks) {
            self.index.newest(task_ref).map(|p| &self.tasks[p])
        } else {
            self.tasks.iter().rev().find(|t| t.task_ref == task_ref)
        }
    }

    /// The newest task with `task_ref` in loop iteration `iteration` (0 outside loops).
    pub fn latest_at(&self, task_ref: &str, iteration: i32) -> Option<&TaskState> {
        self.newest_position(task_ref, iteration)
            .map(|p| &self.tasks[p])
    }

    /// The newest task with `task_ref` in the highest iteration any of its tasks ran in.
    pub fn highest_iteration_of(&self, task_ref: &str) -> Option<&TaskState> {
        if self.index.covers(&self.tasks) {
            self.index.highest(task_ref).map(|p| &self.tasks[p])
        } else {
            let highest = self
                .tasks
                .iter()
                .filter(|t| t.task_ref == task_ref)
                .map(|t| t.iteration)
                .max()?;
            self.latest_at(task_ref, highest)
        }
    }

    /// Signals received that no task consumed yet, oldest first: of each name, those
    /// beyond the number of tasks of that ref completed (a WAIT, HUMAN or asynchronous
    /// EVENT task consumes the first signal of its name that an earlier execution of its
    /// ref did not). The engine's own signals (`weft:` names) are left out.
    pub fn pending_signals(&self) -> Vec<&(String, Value)> {
        let mut consumed: HashMap<&str, usize> = HashMap::new();
        let mut pending = Vec::new();
        for signal in &self.signals {
            let name = signal.0.as_str();
            if name.starts_with("weft:") {
                continue;
            }
            let taken = consumed.entry(name).or_insert_with(|| {
                self.tasks
                    .iter()
                    .filter(|t| t.task_ref == name && t.status == TaskStatus::Completed)
                    .count()
            });
            if *taken > 0 {
                *taken -= 1;
            } else {
                pending.push(signal);
            }
        }
        pending
    }

    /// The domain a worker's task named `task_name` goes to: its entry in the run's
    /// `taskToDomain`, else the `*` entry; none for `NO_DOMAIN` (docs/domains.md).
    pub fn domain_of(&self, task_name: &str) -> Option<String> {
        if self.task_to_domain.is_empty() {
            return None;
        }
        self.task_to_domain
            .get(task_name)
            .or_else(|| self.task_to_domain.get("*"))
            .filter(|d| !d.is_empty() && *d != NO_DOMAIN)
            .cloned()
    }

    /// The branches the dynamic fork `fork` recorded when it was reached (none before).
    pub fn forked_branches(&self, fork: &TaskState) -> std::sync::Arc<[weft::dsl::WorkflowTask]> {
        let indexed = self.index.covers(&self.tasks)
            && self
                .tasks
                .get(fork.seq as usize)
                .is_some_and(|t| t.task_id == fork.task_id);
        match indexed {
            true => self.index.forked(fork.seq as usize).unwrap_or_default(),
            false => crate::task_index::recorded_branches(fork),
        }
    }

    /// The task with id `task_id`.
    pub fn task(&self, task_id: Uuid) -> Option<&TaskState> {
        self.position(task_id).map(|p| &self.tasks[p])
    }

    /// The document `${...}` expressions are resolved against.
    pub fn expression_context(&self) -> Value {
        self.expression_context_of(None)
    }

    /// [`Self::expression_context`] with only the members named in `roots` (from
    /// `weft::dsl::expr::known_roots`), or all of them with `None`: what a template
    /// reads, without copying every task's input and output for each one resolved.
    pub fn expression_context_of(&self, roots: Option<&[String]>) -> Value {
        let wanted = |name: &str| roots.is_none_or(|roots| roots.iter().any(|r| r == name));
        let entry = |t: &TaskState| json!({ "input": t.input, "output": t.output.clone().unwrap_or(Value::Null) });
        let mut ctx = Map::new();
        match roots {
            // Each root's newest task: what a pass over them all, the newest winning,
            // would leave.
            Some(roots) => {
                for root in roots {
                    if let Some(t) = self.latest(root) {
                        ctx.insert(root.clone(), entry(t));
                    }
                }
            }
            None => {
                for t in &self.tasks {
                    ctx.insert(t.task_ref.clone(), entry(t));
                }
            }
        }
        if !wanted("workflow") {
            return Value::Object(ctx);
        }
        ctx.insert(
            "workflow".into(),
            json!({
                "input": self.input,
                "variables": Value::Object(self.variables.clone()),
                "workflowId": self.workflow_id,
                "runId": self.run_id,
                "correlationId": self.correlation_id,
                "workflowType": self.definition.name,
                "version": self.definition.version,
            }),
        );
        Value::Object(ctx)
    }

    /// The business sub-status: QUEUING while a task waits for a worker.
    pub fn sub_status(&self) -> &'static str {
        match self.status {
            RunStatus::Completed => "COMPLETED",
            RunStatus::Failed => "FAILED",
            RunStatus::Terminated => "TERMINATED",
            RunStatus::TimedOut => "TIMED_OUT",
            // RUNNING while a worker has a task; QUEUING while tasks only wait for one.
            RunStatus::Running if self.rolling_back => "ROLLING_BACK",
            RunStatus::Running => {
                let pending = self.pending_tasks();
                let activities = || pending.iter().filter(|t| is_activity(&t.task_type));
                if activities().any(|t| t.status == TaskStatus::InProgress) {
                    "RUNNING"
                } else if activities().any(|t| t.status == TaskStatus::Scheduled) {
                    "QUEUING"
                } else {
                    "RUNNING"
                }
            }
        }
    }

    /// The `runs` row.
    pub fn record(&self) -> RunRecord {
        RunRecord {
            run_id: self.run_id,
            workflow_id: self.workflow_id.clone(),
            workflow_name: self.definition.name.clone(),
            workflow_version: self.definition.version,
            status: if self.paused && self.status == RunStatus::Running {
                "PAUSED".to_owned()
            } else {
                self.status.as_str().to_owned()
            },
            sub_status: self.sub_status().to_owned(),
            input: self.input.clone(),
            output: self.output.clone(),
            variables: Value::Object(self.variables.clone()),
            correlation_id: self.correlation_id.clone(),
            parent_workflow_id: self.parent_workflow_id.clone(),
            reason: self.reason.clone(),
            failed_task_refs: self.failed_task_refs(),
            start_time: self.start_time,
            end_time: self.end_time,
            update_time: self.update_time,
            version: self.version,
            is_current: true,
            reset_from: self.reset_from.clone(),
            pending_signals: self.pending_signals_json(),
        }
    }

    /// The event to record before `event` when it ends the run while signals are kept
    /// for a task it never reached: the history says what the run was told and did not
    /// use.
    pub fn unconsumed_at_end(&self, event: &Event) -> Option<Event> {
        if !event.ends_run() {
            return None;
        }
        let signals: Vec<weft::messages::Signal> = self
            .pending_signals()
            .into_iter()
            .map(|(name, payload)| weft::messages::Signal {
                name: name.clone(),
                payload: payload.clone(),
            })
            .collect();
        (!signals.is_empty()).then_some(Event::SignalsUnconsumed(
            weft::messages::SignalsUnconsumed { signals },
        ))
    }

    /// [`Self::pending_signals`] as the run's row keeps them: `[{name, payload}]`, or
    /// `None` when there are none (nearly always).
    fn pending_signals_json(&self) -> Option<Value> {
        if self.signals.is_empty() {
            return None;
        }
        let pending = self.pending_signals();
        (!pending.is_empty()).then(|| {
            pending
                .into_iter()
                .map(|(name, payload)| json!({ "name": name, "payload": payload }))
                .collect()
        })
    }

    /// Conductor's `failedReferenceTaskNames`: the tasks the run failed on, and, once it
    /// ended, every task with a FAILED or FAILED_WITH_TERMINAL_ERROR attempt (a run that
    /// completed after retries names them too).
    fn failed_task_refs(&self) -> Vec<String> {
        let mut refs = self.failed_task_refs.clone();
        if self.status != RunStatus::Running {
            for t in &self.tasks {
                let failed = matches!(
                    t.status,
                    TaskStatus::Failed | TaskStatus::FailedWithTerminalError
                );
                if failed && !refs.contains(&t.task_ref) {
                    refs.push(t.task_ref.clone());
                }
            }
        }
        refs
    }

    /// The iteration (from 1) the body of the DO_WHILE task `t` is in: the highest of its
    /// body's tasks scheduled since the loop started; 0 before the first. Of each body
    /// ref, its task of the highest iteration when scheduled since, else its newest (a
    /// loop run again, inside another, begins below the iterations of its last run).
    pub fn loop_iteration(&self, t: &TaskState) -> i32 {
        let Some(node) = find_task(&self.definition.tasks, &t.task_ref) else {
            return 0;
        };
        let since = |x: &&TaskState| x.seq > t.seq;
        subtree_refs(node.loop_over.as_deref().unwrap_or_default())
            .into_iter()
            .filter_map(|r| {
                self.highest_iteration_of(r)
                    .filter(since)
                    .or_else(|| self.latest(r).filter(since))
            })
            .map(|x| x.iteration)
            .max()
            .unwrap_or(0)
    }

    /// The `tasks` row of `t`.
    pub fn task_record(&self, t: &TaskState) -> TaskRecord {
        TaskRecord {
            task_id: t.task_id,
            run_id: self.run_id,
            workflow_id: self.workflow_id.clone(),
            task_ref: t.task_ref.clone(),
            task_type: t.task_type.clone(),
            task_name: t.task_name.clone(),
            seq: t.seq,
            iteration: t.iteration,
            attempt: t.attempt,
            status: if t.status.is_pending() && !is_activity(&t.task_type) {
                // A loop being iterated, a WAIT waiting: in progress in the decider, not
                // waiting for a worker.
                "IN_PROGRESS".to_owned()
            } else {
                t.status.as_str().to_owned()
            },
            input: t.input.clone(),
            output: if t.status.is_pending() && t.task_type == TaskType::DoWhile.as_str() {
                // Conductor's DO_WHILE shows the iteration it is in while it runs.
                Some(json!({ "iteration": self.loop_iteration(t) }))
            } else {
                t.output.clone()
            },
            reason: t.reason.clone(),
            worker_id: t.worker_id.clone(),
            scheduled_time: t.scheduled_time,
            start_time: t.start_time,
            callback_after_seconds: t.callback_after_seconds,
            domain: t.domain.clone(),
            end_time: t.end_time,
            update_time: t.update_time,
        }
    }
}

#[cfg(test)]
impl RunState {
    /// Panics unless every lookup the index answers agrees with a pass over the tasks.
    pub(crate) fn assert_index_agrees(&self) {
        assert!(
            self.index.covers(&self.tasks),
            "the index covers every task"
        );
        for t in &self.tasks {
            let scan = |f: &dyn Fn(&TaskState) -> bool| self.tasks.iter().rposition(f);
            assert_eq!(
                self.position(t.task_id),
                scan(&|x| x.task_id == t.task_id),
                "position of {}",
                t.task_id
            );
            assert_eq!(
                self.newest_position(&t.task_ref, t.iteration),
                scan(&|x| x.task_ref == t.task_ref && x.iteration == t.iteration),
                "newest {} in iteration {}",
                t.task_ref,
                t.iteration
            );
            assert_eq!(
                self.latest(&t.task_ref).map(|x| x.seq),
                self.tasks
                    .iter()
                    .rev()
                    .find(|x| x.task_ref == t.task_ref)
                    .map(|x| x.seq),
                "newest {}",
                t.task_ref
            );
            let highest = self
                .tasks
                .iter()
                .filter(|x| x.task_ref == t.task_ref)
                .map(|x| x.iteration)
                .max();
            assert_eq!(
                self.highest_iteration_of(&t.task_ref).map(|x| x.iteration),
                highest,
                "highest iteration of {}",
                t.task_ref
            );
        }
        for t in &self.tasks {
            assert_eq!(
                self.forked_branches(t),
                crate::task_index::recorded_branches(t),
                "branches of {}",
                t.task_ref
            );
        }
        let pending: Vec<i32> = self.pending_tasks().iter().map(|t| t.seq).collect();
        let scanned: Vec<i32> = self
            .tasks
            .iter()
            .filter(|t| t.status.is_pending())
            .map(|t| t.seq)
            .collect();
        assert_eq!(pending, scanned, "the pending tasks");
        for t in self.pending_tasks() {
            let Some(node) = find_task(&self.definition.tasks, &t.task_ref) else {
                continue;
            };
            let body = subtree_refs(node.loop_over.as_deref().unwrap_or_default());
            let scanned = self
                .tasks
                .iter()
                .filter(|x| x.seq > t.seq && body.contains(&x.task_ref.as_str()))
                .map(|x| x.iteration)
                .max()
                .unwrap_or(0);
            assert_eq!(
                self.loop_iteration(t),
                scanned,
                "iteration of {}",
                t.task_ref
            );
        }
    }
}

/// The node of `tasks` (searched depth-first through branches and loop bodies) whose
/// reference name is `task_ref`.
pub fn find_task<'a>(
    tasks: &'a [weft::dsl::WorkflowTask],
    task_ref: &str,
) -> Option<&'a weft::dsl::WorkflowTask> {
    tasks.iter().find_map(|t| {
        if t.task_reference_name == task_ref {
            Some(t)
        } else {
            t.children()
                .into_iter()
                .find_map(|list| find_task(list, task_ref))
        }
    })
}

/// The reference names of `tasks` and of every task nested in them.
pub(crate) fn subtree_refs(tasks: &[weft::dsl::WorkflowTask]) -> Vec<&str> {
    let mut refs = Vec::new();
    for t in tasks {
        refs.push(t.task_reference_name.as_str());
        for list in t.children() {
            refs.extend(subtree_refs(list));
        }
    }
    refs
}

/// Whether tasks of this type are run by workers (as opposed to the decider).
pub(crate) fn is_activity(task_type: &str) -> bool {
    weft::dsl::TaskType::parse(task_type).is_some_and(|k| k.is_activity())
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};
    use weft::dsl::expr;

    use crate::history_builder::HistoryBuilder;

    /// Resolving a template against the members its expressions name gives what the
    /// whole context gives, and templates whose roots are unknown get the whole one.
    #[test]
    fn a_context_of_the_known_roots_resolves_as_the_whole_one() {
        let definition = json!({
            "name": "ctx", "version": 1,
            "tasks": [
                {"name": "a", "taskReferenceName": "t1", "type": "SIMPLE"},
                {"name": "b", "taskReferenceName": "t2", "type": "SIMPLE"}
            ]
        });
        let state = HistoryBuilder::started(definition, json!({"k": "x", "n": [1, 2], "key": "a"}))
            .scheduled("t1", "a", json!({"in": 1}))
            .completed("t1", json!({"a": {"x": 7}, "list": [{"v": 1}, {"v": 2}]}))
            .scheduled("t2", "b", json!({"in": 2}))
            .failed("t2", "boom")
            .scheduled("t2", "b", json!({"in": 3}))
            .completed("t2", json!({"second": true}))
            .state();
        let templates = [
            json!({"x": "${workflow.input.k}", "y": "${t1.output.a.x}"}),
            json!({"whole": "${t1.output}", "input": "${t2.input}", "latest": "${t2.output.second}"}),
            json!({"bracket": "${$['t1'].output.list[1].v}", "dollar": "${$.workflow.input.n[0]}"}),
            json!({"nested": "${t1.output.${workflow.input.key}}", "text": "id ${workflow.workflowId}!"}),
            json!({"missing": "${nope.output}", "plain": 3, "list": ["${t1.input.in}", {"d": "${t2.input}"}]}),
            json!({"wild": "${*.output}"}),
            json!({"deep": "${$..x}"}),
            json!({"filter": "${$.t1.output.list[?(@.v > 1)].v}"}),
            json!({"var": "${workflow.variables}", "name": "${workflow.workflowType}"}),
        ];
        let whole = state.expression_context();
        for template in templates {
            let Value::Object(map) = &template else {
                unreachable!()
            };
            let roots = expr::known_roots(map.values());
            let part = state.expression_context_of(roots.as_deref());
            assert_eq!(
                expr::resolve(&template, &part),
                expr::resolve(&template, &whole),
                "{template} with roots {roots:?}"
            );
        }
        assert_eq!(
            expr::known_roots([&json!("${t1.output} ${workflow.input.${t2.output.k}}")]),
            Some(vec![
                "t1".to_owned(),
                "workflow".to_owned(),
                "t2".to_owned()
            ])
        );
        assert_eq!(expr::known_roots([&json!("${*.output}")]), None);
        assert_eq!(expr::known_roots([&json!("${$..x}")]), None);
    }
}
