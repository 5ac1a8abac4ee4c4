//! The typed payloads of bus messages and of history events.
//!
//! Each enum is tagged by `type` (the envelope's `type`) and carries its body under
//! `payload` (or `attributes` for history events). A new shape is a new variant; old
//! variants stay decodable.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use crate::dsl::WorkflowDef;
use crate::envelope::Typed;

/// Commands consumed by the decider from `weft.commands.<shard>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
// A start carries its whole definition; messages are decoded one at a time and moved,
// never kept in bulk, so boxing it would only add noise to every constructor.
#[allow(clippy::large_enum_variant)]
#[serde(tag = "type", content = "payload")]
pub enum Command {
    /// Start a new workflow run.
    StartWorkflow(StartWorkflow),
    /// A worker finished an activity attempt successfully.
    ActivityCompleted(ActivityCompleted),
    /// A worker's activity attempt failed.
    ActivityFailed(ActivityFailed),
    /// A worker took an activity attempt (the task is IN_PROGRESS from then on).
    ActivityStarted(ActivityStarted),
    /// A worker gave an activity attempt back, to be handed out again after a delay
    /// (Conductor's IN_PROGRESS result with `callbackAfterSeconds`).
    ActivityPostponed(ActivityPostponed),
    /// A named signal for a run (completes the WAIT task whose ref is the name).
    Signal(Signal),
    /// A task's result given through the REST API (by task id or by ref) or a signal
    /// sent there: judged by the decider in the run's order, its verdict recorded under
    /// the request id (docs/task-updates.md).
    UpdateTask(UpdateTask),
    /// A durable timer of the run came due (published by the history service).
    TimerFired(TimerFired),
    /// A child run (SUB_WORKFLOW) ended.
    ChildWorkflowEnded(ChildWorkflowEnded),
    /// The heartbeat service found an attempt whose heartbeats stopped.
    ActivityTimedOut(ActivityTimedOut),
    /// An operator ends the run as TERMINATED.
    Terminate(Terminate),
    /// An operator skips a task (scheduled, in progress, or not reached yet).
    SkipTask(SkipTask),
    /// An operator resets the run to a task (reset, rerun, retry, restart).
    Reset(Reset),
    /// An operator pauses the run: no new task is scheduled until it is resumed.
    Pause(Operation),
    /// An operator resumes a paused run.
    Resume(Operation),
    /// An operator makes every task of the run that waits out a callback delay due at
    /// once (Conductor's `resetcallbacks`).
    ResetCallbacks(Operation),
    /// The hook dispatcher settled the rollback hooks a reset fired (docs/hooks.md): the
    /// run created by the reset may go on, or fails.
    RollbackHooksDone(RollbackHooksDone),
    /// An operator merges variables into the run's (Conductor's `update_variables`).
    UpdateVariables(UpdateVariables),
    /// A caller waits until the run ends or reaches a point (Conductor's synchronous
    /// execution): a transient request whose reply the decider sends once it holds. It
    /// changes nothing and is not applied like the others (docs/execute.md).
    WatchRun(WatchRun),
    /// Reply with the verdict on the operation `request_id` once it is committed
    /// (transient, answered after the batch's commit; docs/task-updates.md).
    WatchVerdict(WatchVerdict),
    /// A worker process is shutting down: the offers of its eager queues that the
    /// decider kept unused must not be taken any more (docs/eager-dispatch.md, "Spare
    /// offers"). Sent to every shard; changes no run.
    WithdrawOffer(WithdrawOffer),
    /// The decider's own: the run had more to decide than one command may settle, so it
    /// committed a slice and goes on here, behind the shard's other commands
    /// (docs/decider.md, "Long settles in slices").
    Continue(Continue),
    /// The decider's own: a command failed the same way on every attempt and was set
    /// aside (dead-lettered); its run ends FAILED with the reason (docs/decider.md,
    /// "Poison commands").
    SetAside(SetAside),
}

impl Typed for Command {
    fn kind(&self) -> &'static str {
        match self {
            Command::StartWorkflow(_) => "StartWorkflow",
            Command::ActivityCompleted(_) => "ActivityCompleted",
            Command::ActivityFailed(_) => "ActivityFailed",
            Command::ActivityStarted(_) => "ActivityStarted",
            Command::ActivityPostponed(_) => "ActivityPostponed",
            Command::Signal(_) => "Signal",
            Command::UpdateTask(_) => "UpdateTask",
            Command::TimerFired(_) => "TimerFired",
            Command::ChildWorkflowEnded(_) => "ChildWorkflowEnded",
            Command::ActivityTimedOut(_) => "ActivityTimedOut",
            Command::Terminate(_) => "Terminate",
            Command::SkipTask(_) => "SkipTask",
            Command::Reset(_) => "Reset",
            Command::Pause(_) => "Pause",
            Command::Resume(_) => "Resume",
            Command::ResetCallbacks(_) => "ResetCallbacks",
            Command::RollbackHooksDone(_) => "RollbackHooksDone",
            Command::UpdateVariables(_) => "UpdateVariables",
            Command::WatchRun(_) => "WatchRun",
            Command::WatchVerdict(_) => "WatchVerdict",
            Command::WithdrawOffer(_) => "WithdrawOffer",
            Command::Continue(_) => "Continue",
            Command::SetAside(_) => "SetAside",
        }
    }
}

impl Command {
    /// The operator request this command answers, if it carries one: the decider records
    /// the outcome under this id (see `store::operations`) so the gateway can answer the
    /// operator with what actually happened.
    pub fn request_id(&self) -> Option<Uuid> {
        match self {
            Command::Terminate(Terminate { op, .. })
            | Command::SkipTask(SkipTask { op, .. })
            | Command::Reset(Reset { op, .. })
            | Command::UpdateVariables(UpdateVariables { op, .. })
            | Command::UpdateTask(UpdateTask { op, .. })
            | Command::Pause(op)
            | Command::Resume(op)
            | Command::ResetCallbacks(op) => op.request_id,
            _ => None,
        }
    }
}

/// What every operator command carries.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Operation {
    /// The gateway's request id: the decider records the outcome under it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<Uuid>,
    /// The run the operator saw as current; when set and no longer current, the command
    /// is refused (two operators resetting at once: one wins, the other gets a conflict).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_run_id: Option<Uuid>,
}

/// Terminate a run (and its children).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Terminate {
    /// Request bookkeeping.
    #[serde(flatten)]
    pub op: Operation,
    /// Why, as shown to operators.
    pub reason: String,
}

/// Merge `variables` into the run's variables (later keys replace earlier ones).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UpdateVariables {
    /// Request bookkeeping.
    #[serde(flatten)]
    pub op: Operation,
    /// The variables to set.
    pub variables: serde_json::Map<String, Value>,
}

/// Wait for the run to end, or to block on a WAIT task without a timer, or for one of
/// `until_task_refs` to end (Conductor's `waitUntilTaskRef`): the decider replies to the
/// request with a [`RunReached`] then, or never (the caller's own deadline ends its
/// wait). Kept in the decider's memory only, until `deadline`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WatchRun {
    /// Task references whose end also answers.
    #[serde(default)]
    pub until_task_refs: Vec<String>,
    /// After this the caller no longer listens.
    pub deadline: DateTime<Utc>,
}

/// Ask for the verdict on an operation sent just before it to the same shard (the
/// gateway's wait for "accepted means applied" without probing the store): the decider
/// replies with a [`WatchReply::Verdict`] after the commit that recorded it, or not at
/// all (the caller probes `operation_outcomes` then).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WatchVerdict {
    /// The operation's request id ([`Operation::request_id`]).
    pub request_id: Uuid,
}

/// The decider's verdict on an operation, as its `operation_outcomes` row holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Verdict {
    /// The operation's request id.
    pub request_id: Uuid,
    /// 200 applied; 400, 404, 409 refused.
    pub status: i16,
    /// The answer's body (the refusal's `message`).
    pub body: Value,
}

/// A worker process's withdrawal of its eager offers ([`Command::WithdrawOffer`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WithdrawOffer {
    /// The prefix of the process's eager queues, as its offers named it.
    pub queue_prefix: String,
}

/// Go on settling the run ([`Command::Continue`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Continue {
    /// The run that committed a slice; a continuation of any other run is ignored.
    pub run_id: Uuid,
}

/// End the run FAILED because one of its commands was set aside ([`Command::SetAside`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SetAside {
    /// The set-aside command's type.
    pub command: String,
    /// The set-aside command's message id.
    pub message_id: Uuid,
    /// Why it failed, as the run's reason shows it.
    pub reason: String,
}

/// The reply to a [`WatchRun`] ([`WatchReply::RunReached`]): the run reached what the watch waited for, in a commit
/// that the store now holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunReached {
    /// The run that did.
    pub run_id: Uuid,
    /// Its status then.
    pub status: String,
    /// The task whose state answered the watch, if a task did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_ref: Option<String>,
}

/// The decider's replies to a [`WatchRun`] and a [`WatchVerdict`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "payload")]
pub enum WatchReply {
    /// The run reached what the watch waited for.
    RunReached(RunReached),
    /// The verdict on the operation a [`WatchVerdict`] named.
    Verdict(Verdict),
}

impl Typed for WatchReply {
    fn kind(&self) -> &'static str {
        match self {
            WatchReply::RunReached(_) => "RunReached",
            WatchReply::Verdict(_) => "Verdict",
        }
    }
}

/// Skip a task: it ends SKIPPED with `output` (its worker, if any, is told to stop).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SkipTask {
    /// Request bookkeeping.
    #[serde(flatten)]
    pub op: Operation,
    /// The task's reference name.
    pub task_ref: String,
    /// The skipped task's output.
    #[serde(default)]
    pub output: Value,
    /// The skipped task's input (recorded only for a task not reached yet).
    #[serde(default)]
    pub input: Value,
}

/// Reset a run to a task: a new run of the same workflow id continues from it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Reset {
    /// Request bookkeeping.
    #[serde(flatten)]
    pub op: Operation,
    /// Where to reset to.
    pub target: ResetTarget,
    /// The new run's id, chosen by the sender so it can answer with it at once.
    pub new_run_id: Uuid,
    /// Why, as shown to operators.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Replaces the workflow input of the new run (Conductor's rerun `workflowInput`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow_input: Option<Value>,
    /// The input the task execution resumes from runs with, instead of its resolved one
    /// (Conductor's rerun `taskInput`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_input: Option<Value>,
    /// A restart's new definition, frozen by the sender (Conductor's restart
    /// `useLatestDefinitions`): the new run executes it instead of the old run's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub definition: Option<Box<WorkflowDef>>,
    /// On a retry passed down to a child (`resumeSubworkflowTasks`): the parent to retry
    /// instead when the child has nothing to retry, as Conductor's retry does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<RetryFallback>,
}

/// The parent a retry passed down came from (see [`Reset::fallback`]): retried in place,
/// without passing the retry down again, when its child cannot be retried.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RetryFallback {
    /// The parent workflow.
    pub workflow_id: String,
    /// The parent's run the retry was aimed at: a parent retried meanwhile by someone
    /// else refuses the fallback (409) instead of being retried twice.
    pub run_id: Uuid,
    /// The run id the parent's retry would have given its successor.
    pub new_run_id: Uuid,
}

/// The task a reset goes back to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum ResetTarget {
    /// The newest execution of this ref (or the one in loop iteration `iteration`).
    Ref {
        /// Reference name.
        task_ref: String,
        /// Loop iteration (from 1), for a task inside a DO_WHILE body.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        iteration: Option<i32>,
    },
    /// A task by id (Conductor's `reRunFromTaskId`).
    TaskId {
        /// The task.
        task_id: Uuid,
    },
    /// Every failed task of an ended run, in place (`retry`).
    LastFailed {
        /// Conductor's `resumeSubworkflowTasks`: when the run's first unsuccessful task
        /// is a SUB_WORKFLOW task, its child is retried instead (the deepest one, the
        /// retry passed down), and each parent's task waits for its child again.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        resume_subworkflow_tasks: bool,
    },
    /// A child of the run was retried in place: its SUB_WORKFLOW task waits for the
    /// child again, and the run goes on (Conductor's retry updating a child's parents).
    ResumeChild {
        /// The child workflow.
        child_workflow_id: String,
    },
    /// The first task (`restart`).
    First,
}

/// The rollback hooks of a reset are settled: each was sent (an awaited one delivered),
/// or an awaited one ran out of attempts (`ok` false, `reason` naming it). Also the
/// history event recording it in the run the reset created.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RollbackHooksDone {
    /// The run the reset created, which waits for its rollback hooks.
    pub run_id: Uuid,
    /// Whether the run may go on.
    pub ok: bool,
    /// Why not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// One rollback hook a reset fired, as its `WorkflowReset` marker lists them (most
/// recent task first).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RollbackHookRef {
    /// The delivery (`GET /api/workflow/{id}/hooks`).
    pub delivery_id: Uuid,
    /// The rolled-back task's reference name.
    pub task_ref: String,
    /// Its loop iteration (0 outside loops).
    #[serde(default)]
    pub iteration: i32,
    /// Awaited (`await: true`): the run goes on only once it succeeded.
    #[serde(default)]
    pub blocking: bool,
}

/// The heartbeat service's verdict on an attempt whose heartbeats stopped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ActivityTimedOut {
    /// The task.
    pub task_id: Uuid,
    /// The run.
    pub run_id: Uuid,
    /// The attempt that went silent.
    pub attempt: i32,
    /// Why, as shown to operators.
    pub reason: String,
}

/// Where a child run reports when it ends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ParentLink {
    /// The parent's workflow.
    pub workflow_id: String,
    /// The parent's run.
    pub run_id: Uuid,
    /// The parent's SUB_WORKFLOW task.
    pub task_id: Uuid,
}

/// Start a run of `definition` (already resolved and validated by the sender).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StartWorkflow {
    /// The definition the run executes, frozen for the run's lifetime.
    pub definition: WorkflowDef,
    /// The workflow input.
    #[serde(default)]
    pub input: Value,
    /// The caller's correlation id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correlation_id: Option<String>,
    /// The parent run's workflow id, for child runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_workflow_id: Option<String>,
    /// The parent's run and task, for child runs: told when this run ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<ParentLink>,
    /// W3C trace context of the start request, kept with the run so later decisions join its trace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// Conductor's priority (0–99, higher first) for the run's activity tasks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    /// Conductor's `taskToDomain`: task name (or `*`) → the domain its tasks go to, only
    /// workers polling that domain taking them (docs/domains.md).
    #[serde(default, skip_serializing_if = "TaskDomains::is_empty")]
    pub task_to_domain: TaskDomains,
}

/// Conductor's `taskToDomain` of a run: task name, or `*` for every task, → domain.
pub type TaskDomains = std::collections::BTreeMap<String, String>;

/// A signal sent to a run by an operator or another system.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Signal {
    /// The signal's name: the ref of the WAIT task it completes.
    pub name: String,
    /// Its payload: the WAIT task's output.
    #[serde(default)]
    pub payload: Value,
}

/// A task's result or a signal through the REST API, for the decider to judge: it applies
/// only to a task that still waits for it (or, for a signal, is kept for a WAIT, HUMAN or
/// EVENT task not reached yet), and the operator is told which (docs/task-updates.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UpdateTask {
    /// The request id the verdict is recorded under.
    #[serde(default)]
    pub op: Operation,
    /// The task's reference name (a signal's name).
    pub task_ref: String,
    /// The task, when the caller named it (by id, or the pending task a ref named when
    /// the gateway looked); otherwise the newest task of `task_ref` in the current run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<Uuid>,
    /// The run of `task_id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<Uuid>,
    /// What happened to the task.
    pub status: TaskUpdateStatus,
    /// The task's output (a signal's payload).
    #[serde(default)]
    pub output: Value,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The worker that reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_id: Option<String>,
    /// With [`TaskUpdateStatus::Postponed`]: seconds until the task is handed out again.
    #[serde(default, skip_serializing_if = "is_zero_i64")]
    pub callback_after_seconds: i64,
    /// A signal: when no task of `task_ref` waits now, it is kept (visibly) for the WAIT,
    /// HUMAN or asynchronous EVENT task of that name that the run reaches later.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hold: bool,
}

/// What a task update says happened to the task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TaskUpdateStatus {
    /// The task completed with the output.
    Completed,
    /// The attempt failed (retried per the task's policy).
    Failed,
    /// The task failed for good (no retry).
    FailedWithTerminalError,
    /// Conductor's IN_PROGRESS with `callbackAfterSeconds`: the worker gives the task
    /// back, handed out again after the delay ([`UpdateTask::callback_after_seconds`]).
    Postponed,
}

impl TaskUpdateStatus {
    /// Conductor's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Completed => "COMPLETED",
            Self::Failed => "FAILED",
            Self::FailedWithTerminalError => "FAILED_WITH_TERMINAL_ERROR",
            Self::Postponed => "IN_PROGRESS",
        }
    }
}

/// Attributes of [`Event::SignalsUnconsumed`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SignalsUnconsumed {
    /// The signals kept for a task the run never reached, oldest first.
    pub signals: Vec<Signal>,
}

/// A child run ended; sent to its parent's shard.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChildWorkflowEnded {
    /// The parent's run and task.
    pub parent: ParentLink,
    /// The child workflow.
    pub child_workflow_id: String,
    /// COMPLETED, FAILED, TERMINATED or TIMED_OUT.
    pub status: String,
    /// The child's output.
    #[serde(default)]
    pub output: Value,
    /// Why it did not complete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A timer came due.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TimerFired {
    /// The timer (from [`TimerStarted`]).
    pub timer_id: Uuid,
    /// The run that started it.
    pub run_id: Uuid,
}

/// A successful activity attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ActivityCompleted {
    /// The task the attempt belongs to.
    pub task_id: Uuid,
    /// The run that scheduled it.
    pub run_id: Uuid,
    /// The attempt number; a result for an attempt that is no longer current is ignored.
    pub attempt: i32,
    /// The activity's output.
    #[serde(default)]
    pub output: Value,
    /// Who ran it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_id: Option<String>,
    /// When the worker started it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<DateTime<Utc>>,
    /// The worker offers to run the run's next activity itself (eager dispatch,
    /// docs/eager-dispatch.md); none from workers that do not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eager: Option<EagerOffer>,
}

/// A worker took an activity attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ActivityStarted {
    /// The task the attempt belongs to.
    pub task_id: Uuid,
    /// The run that scheduled it.
    pub run_id: Uuid,
    /// The attempt number.
    pub attempt: i32,
    /// Who runs it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_id: Option<String>,
    /// When the worker took it.
    pub started_at: DateTime<Utc>,
}

/// A worker gave an activity attempt back: the task is SCHEDULED again, with the
/// output it reported, and handed out again after `callback_after_seconds`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ActivityPostponed {
    /// The task the attempt belongs to.
    pub task_id: Uuid,
    /// The run that scheduled it.
    pub run_id: Uuid,
    /// The attempt number.
    pub attempt: i32,
    /// What the worker reported so far (the task's output from now on).
    pub output: Value,
    /// Who gave it back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_id: Option<String>,
    /// How long the task stays out of its queue (0: handed out again at once).
    pub callback_after_seconds: i64,
}

/// A failed activity attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ActivityFailed {
    /// The task the attempt belongs to.
    pub task_id: Uuid,
    /// The run that scheduled it.
    pub run_id: Uuid,
    /// The attempt number.
    pub attempt: i32,
    /// Why it failed.
    pub reason: String,
    /// `FAILED_WITH_TERMINAL_ERROR`: no retry even if the policy allows one.
    #[serde(default)]
    pub terminal: bool,
    /// What kind of error it was, as the worker names it; a kind listed in the task
    /// definition's `nonRetryableErrors` is never retried.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_kind: Option<String>,
    /// Optional output the worker attached to the failure.
    #[serde(default)]
    pub output: Value,
    /// Who ran it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_id: Option<String>,
    /// When the worker started it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<DateTime<Utc>>,
    /// The worker offers to run the run's next activity itself (eager dispatch,
    /// docs/eager-dispatch.md); none from workers that do not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eager: Option<EagerOffer>,
}

/// A worker's offer, sent with a result, to run the run's next activity itself: the
/// decider may then schedule that activity already claimed for the worker, in the commit
/// that applies the result, and send it to the worker's own queue — no claim round trip
/// (docs/eager-dispatch.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EagerOffer {
    /// The worker process's eager queues' common prefix (`<ns>.eager.<instance>`); the
    /// queue of task `t` is `<prefix>.<t>`, bound to the eager exchange with its name.
    pub queue_prefix: String,
    /// The task names the worker runs (and has an eager queue for).
    pub task_names: Vec<String>,
    /// When the offer was made (the worker's clock): an old one (a result that waited in
    /// a backlog) is not taken, the worker may be gone.
    pub offered_at: DateTime<Utc>,
    /// The worker takes [`ActivityMessage::ActivityTasks`] on its eager queues: eager
    /// tasks for it that meet at the decider go as one message (docs/eager-dispatch.md,
    /// "Eager tasks sent together"). Absent: one message a task.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub batches: bool,
}

/// Messages on `weft.activity.<task>` queues, consumed by workers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "payload")]
pub enum ActivityMessage {
    /// Run one attempt of an activity.
    ActivityTask(ActivityTask),
    /// Run several attempts: eager tasks for one worker's queue sent as one message
    /// (only to a worker whose offer says `batches`; never on a shared queue).
    ActivityTasks(ActivityTaskBatch),
}

impl Typed for ActivityMessage {
    fn kind(&self) -> &'static str {
        match self {
            ActivityMessage::ActivityTask(_) => "ActivityTask",
            ActivityMessage::ActivityTasks(_) => "ActivityTasks",
        }
    }
}

pub use crate::activity_batch::{ActivityTaskBatch, BatchedMessage};
pub use crate::event_batch::LifecycleEventBatch;

/// One attempt of an activity, as a worker receives it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ActivityTask {
    /// Identifies the task (and, with `attempt`, the attempt).
    pub task_id: Uuid,
    /// The workflow.
    pub workflow_id: String,
    /// The run.
    pub run_id: Uuid,
    /// The task's reference name in the definition.
    pub task_ref: String,
    /// The task (definition) name; the queue it came from.
    pub task_name: String,
    /// The task type (`SIMPLE`, `HTTP`).
    pub task_type: String,
    /// 1 for the first attempt.
    pub attempt: i32,
    /// Resolved input.
    #[serde(default)]
    pub input: Value,
    /// Routing key on the commands exchange for the result (the run's shard), so
    /// workers need not know the shard count.
    pub reply_to: String,
    /// When the decider scheduled it.
    pub scheduled_at: DateTime<Utc>,
    /// Heartbeat timeout (`responseTimeoutSeconds`): an attempt silent for longer is
    /// timed out by the heartbeat service. 0: no heartbeat required.
    #[serde(default)]
    pub response_timeout_seconds: i64,
    /// Dispatched eagerly: the decider claimed the attempt for the worker whose queue it
    /// was sent to, which runs it without a claim. Found on a task's shared queue, it is
    /// one that waited too long in that worker's queue (docs/eager-dispatch.md): whoever
    /// takes it claims it with a takeover.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub eager: bool,
    /// The decider that sent it takes this task's result together with others for the
    /// same shard, in one `ActivityResults` message (docs/worker-sdk.md, "Results sent
    /// together"). Absent: the result goes alone, as `ActivityCompleted` or
    /// `ActivityFailed`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub results_together: bool,
}

/// A lifecycle change of a run or a task, published to the events exchange (topic) with
/// its `event` as routing key (`workflow.completed`, `task.failed`, ...); see
/// docs/events.md. Anyone can bind a queue to it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LifecycleEvent {
    /// `<entity>.<event>`: the routing key.
    pub event: String,
    /// The workflow.
    pub workflow_id: String,
    /// The run.
    pub run_id: Uuid,
    /// The run's correlation id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correlation_id: Option<String>,
    /// The workflow's (definition) name.
    pub workflow_type: String,
    /// The history event that caused it (its id in the run's history); 0 for a task
    /// canceled by its run's end.
    pub event_id: i64,
    /// The task, for task events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<Uuid>,
    /// Its reference name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_ref: Option<String>,
    /// Its type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_type: Option<String>,
    /// Its attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<i32>,
    /// Its loop iteration (0 outside loops).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iteration: Option<i32>,
    /// The status after the change (the run's for workflow events, the task's for task events).
    pub status: String,
    /// Why, for failures, timeouts, terminations, resets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// When it happened.
    pub time: DateTime<Utc>,
}

/// Messages on the events exchange.
// A single event is the common message: boxing it would cost every event an allocation
// to make the rarer batch variant's enum smaller.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "payload")]
pub enum EventMessage {
    /// A change of a run or a task.
    LifecycleEvent(LifecycleEvent),
    /// Several changes with the same routing key sent as one message
    /// (`WEFT_EVENTS_TOGETHER`; docs/events.md, "Events sent together").
    LifecycleEvents(LifecycleEventBatch),
}

impl Typed for EventMessage {
    fn kind(&self) -> &'static str {
        match self {
            EventMessage::LifecycleEvent(_) => "LifecycleEvent",
            EventMessage::LifecycleEvents(_) => crate::event_batch::EVENTS_KIND,
        }
    }
}

/// Messages on the `<ns>.heartbeat` queue, consumed by the heartbeat service.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "payload")]
pub enum HeartbeatMessage {
    /// A worker asks to run an attempt: a request (`Bus::call`), answered with
    /// [`HeartbeatAnswers`] — CONTINUE when the attempt is now this worker's, STOP (with
    /// the reason) when it was stopped or another worker holds it. The decider wrote the
    /// attempt's registry row when it scheduled it; the claim moves it to RUNNING.
    ClaimAttempt(ClaimAttempt),
    /// Several claims of one worker in one request (taken while its previous claim
    /// request waited for its answer); answered with one [`HeartbeatAnswers`] naming
    /// every claimed task. A claim the service could not write is left out of the
    /// answer: the worker hands that task back to its queue.
    ClaimAttempts(ClaimAttempts),
    /// A worker began an attempt: register it in `task_check`. Sent by SDKs before
    /// claims existed; still applied (as a claim that is not answered).
    AttemptStarted(AttemptStarted),
    /// A batch of heartbeats; answered on the AMQP `reply_to` with [`HeartbeatAnswers`].
    Heartbeats(Heartbeats),
    /// A worker published the attempt's result: the attempt is no longer watched.
    AttemptFinished(AttemptFinished),
    /// The decider stopped these attempts (terminate, reset, skip, fork cancel): their
    /// next heartbeat answers STOP with the reason.
    StopAttempts(StopAttempts),
    /// The timeout scanner's barrier: a request (`Bus::call`) answered with an empty
    /// [`HeartbeatAnswers`] once every heartbeat queued before it has been recorded, so
    /// the scanner never times out an attempt whose heartbeat waits in the queue.
    Barrier(Barrier),
}

impl Typed for HeartbeatMessage {
    fn kind(&self) -> &'static str {
        match self {
            HeartbeatMessage::ClaimAttempt(_) => "ClaimAttempt",
            HeartbeatMessage::ClaimAttempts(_) => "ClaimAttempts",
            HeartbeatMessage::AttemptStarted(_) => "AttemptStarted",
            HeartbeatMessage::Heartbeats(_) => "Heartbeats",
            HeartbeatMessage::AttemptFinished(_) => "AttemptFinished",
            HeartbeatMessage::StopAttempts(_) => "StopAttempts",
            HeartbeatMessage::Barrier(_) => "Barrier",
        }
    }
}

/// Identifies one attempt of a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AttemptRef {
    /// The task.
    pub task_id: Uuid,
    /// The attempt (from 1).
    pub attempt: i32,
}

/// A worker began an attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AttemptStarted {
    /// The attempt.
    #[serde(flatten)]
    pub attempt: AttemptRef,
    /// The workflow.
    pub workflow_id: String,
    /// The run.
    pub run_id: Uuid,
    /// The task's (definition) name.
    pub task_name: String,
    /// The task's reference name.
    pub task_ref: String,
    /// Who runs it.
    pub worker_id: String,
    /// Heartbeat timeout in seconds (0: not watched).
    pub response_timeout_seconds: i64,
    /// Size of the input, in bytes of JSON.
    #[serde(default)]
    pub input_bytes: i64,
    /// Routing key of the run's command shard (where `ActivityTimedOut` goes).
    pub reply_to: String,
    /// When the worker started it.
    pub started_at: DateTime<Utc>,
}

impl AttemptStarted {
    /// `worker_id` began `task` at `started_at` (the SDK on receipt, the gateway when a
    /// poll hands the task out).
    pub fn of(task: &ActivityTask, worker_id: &str, started_at: DateTime<Utc>) -> Self {
        Self {
            attempt: AttemptRef {
                task_id: task.task_id,
                attempt: task.attempt,
            },
            workflow_id: task.workflow_id.clone(),
            run_id: task.run_id,
            task_name: task.task_name.clone(),
            task_ref: task.task_ref.clone(),
            worker_id: worker_id.to_owned(),
            response_timeout_seconds: task.response_timeout_seconds,
            input_bytes: serde_json::to_vec(&task.input)
                .map_or(0, |v| i64::try_from(v.len()).unwrap_or(i64::MAX)),
            reply_to: task.reply_to.clone(),
            started_at,
        }
    }
}

/// A worker's claim of an attempt it took from its queue (see
/// [`HeartbeatMessage::ClaimAttempt`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimAttempt {
    /// The attempt and who starts it.
    #[serde(flatten)]
    pub started: AttemptStarted,
    /// The task message was delivered before (its earlier consumer died without
    /// acknowledging it): the claim may take the attempt over from that consumer.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub takeover: bool,
}

/// The timeout scanner's barrier (see [`HeartbeatMessage::Barrier`]); no fields.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Barrier {}

/// Claims sent together (see [`HeartbeatMessage::ClaimAttempts`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimAttempts {
    /// The claims, each as a [`HeartbeatMessage::ClaimAttempt`] would carry it.
    pub claims: Vec<ClaimAttempt>,
}

/// Heartbeats of a worker's running attempts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Heartbeats {
    /// Who sends them.
    pub worker_id: String,
    /// One per running attempt.
    pub beats: Vec<Beat>,
    /// A probe before attempts start (was any stopped while it waited in its queue?):
    /// answered at once, without waiting for registrations still being written.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub probe: bool,
}

/// One attempt's heartbeat.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Beat {
    /// The task.
    pub task_id: Uuid,
    /// Progress details the handler reported (kept on the task, visible to operators).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
}

/// The answer to a [`Heartbeats`] batch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HeartbeatAnswers {
    /// Per task id.
    pub results: std::collections::BTreeMap<Uuid, HeartbeatAnswer>,
}

/// What a heartbeat (or a claim) is answered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HeartbeatAnswer {
    /// What the worker should do.
    pub action: HeartbeatAction,
    /// Why (for STOP, and DEFER: the limit reached).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// For DEFER: how long to wait before the task may be claimed again, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
}

impl HeartbeatAnswer {
    /// An answer with `action` and `reason`, and no retry advice.
    pub fn new(action: HeartbeatAction, reason: Option<String>) -> Self {
        Self {
            action,
            reason,
            retry_after_ms: None,
        }
    }
}

/// A heartbeat's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum HeartbeatAction {
    /// Keep going.
    Continue,
    /// Stop the handler (terminated, reset, skipped, canceled, or timed out).
    Stop,
    /// The registry does not know this task: stop too.
    NotFound,
    /// The service is overloaded: retry this heartbeat soon, in the same cycle.
    Throttled,
    /// Answers a claim only: the task is over its task definition's limit
    /// (`concurrentExecLimit`, `rateLimitPerFrequency`) and stays SCHEDULED. Do not run
    /// it; give it back to its queue after `retryAfterMs` (docs/task-limits.md).
    Defer,
}

/// A worker published an attempt's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AttemptFinished {
    /// The attempt.
    #[serde(flatten)]
    pub attempt: AttemptRef,
    /// COMPLETED, FAILED or FAILED_WITH_TERMINAL_ERROR.
    pub status: String,
    /// Size of the output, in bytes of JSON.
    #[serde(default)]
    pub output_bytes: i64,
}

/// The decider stopped these attempts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StopAttempts {
    /// The attempts.
    pub attempts: Vec<AttemptRef>,
    /// Why, as the worker's next heartbeat is told.
    pub reason: String,
}

/// Events of a run's history (`history_events.type` / `.attributes`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
// A start carries its whole definition; messages are decoded one at a time and moved,
// never kept in bulk, so boxing it would only add noise to every constructor.
#[allow(clippy::large_enum_variant)]
#[serde(tag = "type", content = "attributes")]
pub enum Event {
    /// The run began.
    WorkflowStarted(WorkflowStarted),
    /// A task was scheduled (an activity published to its queue).
    TaskScheduled(TaskScheduled),
    /// A worker took the task (IN_PROGRESS).
    TaskStarted(TaskStarted),
    /// Its worker gave the task back: SCHEDULED again, handed out after its callback.
    TaskPostponed(TaskPostponed),
    /// An operator made the task's callback due at once.
    TaskCallbackReset(TaskCallbackReset),
    /// A task completed.
    TaskCompleted(TaskCompleted),
    /// A task attempt failed.
    TaskFailed(TaskFailed),
    /// The run completed.
    WorkflowCompleted(WorkflowCompleted),
    /// The run failed.
    WorkflowFailed(WorkflowFailed),
    /// Workflow variables changed (SET_VARIABLE).
    VariablesUpdated(VariablesUpdated),
    /// The run was terminated (TERMINATE task, or an operator).
    WorkflowTerminated(WorkflowTerminated),
    /// A signal arrived (kept until a WAIT task with its name consumes it).
    SignalReceived(Signal),
    /// The run ended with signals no task consumed (recorded just before its end).
    SignalsUnconsumed(SignalsUnconsumed),
    /// A durable timer was set (a WAIT's duration, a retry back-off, a timeout).
    TimerStarted(TimerStarted),
    /// A task ran out of time (`timeoutSeconds`).
    TaskTimedOut(TaskTimedOut),
    /// The run ran out of time (the definition's `timeoutSeconds`).
    WorkflowTimedOut(WorkflowTimedOut),
    /// That timer came due.
    TimerFired(TimerFired),
    /// A SUB_WORKFLOW task started its child run.
    ChildWorkflowStarted(ChildWorkflowStarted),
    /// An operator skipped a task that was scheduled or in progress.
    TaskSkipped(TaskSkipped),
    /// An operator asked to skip a task not reached yet; it is skipped when reached.
    SkipRequested(SkipRequested),
    /// A pending task was given up without a result (a reset copies a run's prefix and
    /// cancels what was still running at the cut, so that it runs again).
    TaskCanceled(TaskCanceled),
    /// An operator paused the run: no new task is scheduled.
    WorkflowPaused(WorkflowPaused),
    /// An operator resumed the run.
    WorkflowResumed(WorkflowResumed),
    /// This run continues an earlier run of the workflow from a reset point; the events
    /// before it are that run's prefix.
    WorkflowReset(WorkflowReset),
    /// The rollback hooks the reset fired are settled (the run waited for them).
    RollbackHooksDone(RollbackHooksDone),
}

impl Event {
    /// Whether this event ends its run (COMPLETED, FAILED, TERMINATED or TIMED_OUT).
    pub fn ends_run(&self) -> bool {
        matches!(
            self,
            Event::WorkflowCompleted(_)
                | Event::WorkflowFailed(_)
                | Event::WorkflowTerminated(_)
                | Event::WorkflowTimedOut(_)
        )
    }

    /// The `type` name stored in `history_events.type`.
    pub fn kind(&self) -> &'static str {
        match self {
            Event::WorkflowStarted(_) => "WorkflowStarted",
            Event::TaskScheduled(_) => "TaskScheduled",
            Event::TaskStarted(_) => "TaskStarted",
            Event::TaskPostponed(_) => "TaskPostponed",
            Event::TaskCallbackReset(_) => "TaskCallbackReset",
            Event::TaskCompleted(_) => "TaskCompleted",
            Event::TaskFailed(_) => "TaskFailed",
            Event::WorkflowCompleted(_) => "WorkflowCompleted",
            Event::WorkflowFailed(_) => "WorkflowFailed",
            Event::VariablesUpdated(_) => "VariablesUpdated",
            Event::WorkflowTerminated(_) => "WorkflowTerminated",
            Event::SignalReceived(_) => "SignalReceived",
            Event::SignalsUnconsumed(_) => "SignalsUnconsumed",
            Event::TimerStarted(_) => "TimerStarted",
            Event::TaskTimedOut(_) => "TaskTimedOut",
            Event::WorkflowTimedOut(_) => "WorkflowTimedOut",
            Event::TimerFired(_) => "TimerFired",
            Event::ChildWorkflowStarted(_) => "ChildWorkflowStarted",
            Event::TaskSkipped(_) => "TaskSkipped",
            Event::SkipRequested(_) => "SkipRequested",
            Event::TaskCanceled(_) => "TaskCanceled",
            Event::WorkflowPaused(_) => "WorkflowPaused",
            Event::WorkflowResumed(_) => "WorkflowResumed",
            Event::WorkflowReset(_) => "WorkflowReset",
            Event::RollbackHooksDone(_) => "RollbackHooksDone",
        }
    }

    /// The event's attributes as stored.
    pub fn attributes(&self) -> Value {
        serde_json::to_value(AttributesOf(self)).unwrap_or(Value::Null)
    }

    /// [`Self::attributes`] as JSON text, serialized straight from the event.
    pub fn attributes_text(&self) -> String {
        // Only string-keyed maps are serialized, which cannot fail; `null` is what
        // `attributes` gives in that case too.
        serde_json::to_string(&AttributesOf(self)).unwrap_or_else(|_| "null".to_owned())
    }

    /// Rebuilds an event from its stored `type` and `attributes`.
    pub fn from_parts(kind: &str, attributes: Value) -> crate::Result<Self> {
        Ok(serde_json::from_value(
            serde_json::json!({ "type": kind, "attributes": attributes }),
        )?)
    }
}

/// An event's attributes (its payload without the `type` tag) for serializing straight
/// from the event: what [`Event::attributes`] gives, without building a [`Value`] tree
/// first. The decider's commit writes every event this way.
pub struct AttributesOf<'a>(pub &'a Event);

impl Serialize for AttributesOf<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        macro_rules! each_variant {
            ($($variant:ident),* $(,)?) => {
                match self.0 {
                    $(Event::$variant(attributes) => attributes.serialize(serializer),)*
                }
            };
        }
        each_variant!(
            WorkflowStarted,
            TaskScheduled,
            TaskStarted,
            TaskPostponed,
            TaskCallbackReset,
            TaskCompleted,
            TaskFailed,
            WorkflowCompleted,
            WorkflowFailed,
            VariablesUpdated,
            WorkflowTerminated,
            SignalReceived,
            SignalsUnconsumed,
            TimerStarted,
            TaskTimedOut,
            WorkflowTimedOut,
            TimerFired,
            ChildWorkflowStarted,
            TaskSkipped,
            SkipRequested,
            TaskCanceled,
            WorkflowPaused,
            WorkflowResumed,
            WorkflowReset,
            RollbackHooksDone,
        )
    }
}

/// Attributes of [`Event::WorkflowStarted`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowStarted {
    /// The definition, frozen for the run.
    pub definition: WorkflowDef,
    /// The workflow input.
    pub input: Value,
    /// The caller's correlation id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correlation_id: Option<String>,
    /// The parent workflow, for child runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_workflow_id: Option<String>,
    /// The parent's run and task, for child runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<ParentLink>,
    /// The DO_WHILE iteration cap in force when the run started (absent: 1,000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_loop_iterations: Option<u32>,
    /// The FORK_JOIN_DYNAMIC branch cap in force when the run started (absent: 1,000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_fork_branches: Option<u32>,
    /// The size limit of the run's variables in force when it started, in kilobytes
    /// (absent: 256).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_variables_kb: Option<u32>,
    /// The start request's trace context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// Conductor's priority (0–99) the run's activity tasks are queued with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    /// The run's `taskToDomain` (docs/domains.md).
    #[serde(default, skip_serializing_if = "TaskDomains::is_empty")]
    pub task_to_domain: TaskDomains,
}

/// Attributes of [`Event::TaskScheduled`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskScheduled {
    /// The new task's id.
    pub task_id: Uuid,
    /// Its reference name.
    pub task_ref: String,
    /// Its type.
    pub task_type: String,
    /// Its (definition) name.
    pub task_name: String,
    /// Position in the run's schedule order (0-based).
    pub seq: i32,
    /// Attempt number, from 1.
    pub attempt: i32,
    /// Resolved input.
    pub input: Value,
    /// Loop iteration (from 1) of a task inside a DO_WHILE body; 0 elsewhere.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub iteration: i32,
    /// Output it shows while it runs (an EVENT task's message, as Conductor's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    /// Conductor's `callbackAfterSeconds` of a retry waiting out its back-off: the
    /// delay before its worker may take it, in whole seconds, without jitter.
    #[serde(default, skip_serializing_if = "is_zero_i64")]
    pub callback_after_seconds: i64,
    /// How long after its scheduling its message goes to its queue, in milliseconds
    /// (the back-off with its jitter); 0: at once.
    #[serde(default, skip_serializing_if = "is_zero_i64")]
    pub dispatch_delay_ms: i64,
    /// The domain of a worker's task (from the run's `taskToDomain`): it goes to that
    /// domain's queue, for workers polling that domain only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
}

fn is_zero(n: &i32) -> bool {
    *n == 0
}

fn is_zero_i64(n: &i64) -> bool {
    *n == 0
}

/// Attributes of [`Event::TaskPostponed`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskPostponed {
    /// The task.
    pub task_id: Uuid,
    /// Its reference name.
    pub task_ref: String,
    /// What its worker reported so far.
    pub output: Value,
    /// Who gave it back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_id: Option<String>,
    /// How long it stays out of its queue (0: handed out again at once).
    pub callback_after_seconds: i64,
}

/// Attributes of [`Event::TaskCallbackReset`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskCallbackReset {
    /// The task.
    pub task_id: Uuid,
    /// Its reference name.
    pub task_ref: String,
}

/// Attributes of [`Event::TaskCompleted`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskCompleted {
    /// The task.
    pub task_id: Uuid,
    /// Its reference name.
    pub task_ref: String,
    /// Its output.
    pub output: Value,
    /// Who ran it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_id: Option<String>,
    /// When the worker started it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<DateTime<Utc>>,
    /// Completed with errors (COMPLETED_WITH_ERRORS), and why: a JOIN whose optional
    /// tasks failed, as Conductor's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errors: Option<String>,
}

/// Attributes of [`Event::TaskFailed`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskFailed {
    /// The task.
    pub task_id: Uuid,
    /// Its reference name.
    pub task_ref: String,
    /// Why.
    pub reason: String,
    /// No retry allowed.
    #[serde(default)]
    pub terminal: bool,
    /// The worker's name for the kind of error (see `nonRetryableErrors`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_kind: Option<String>,
    /// Output attached to the failure.
    #[serde(default)]
    pub output: Value,
    /// Who ran it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_id: Option<String>,
    /// When the worker started it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<DateTime<Utc>>,
}

/// Attributes of [`Event::WorkflowCompleted`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowCompleted {
    /// The shaped workflow output.
    pub output: Value,
    /// Why, when a TERMINATE task completed the run (Conductor's `reasonForIncompletion`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Attributes of [`Event::WorkflowFailed`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowFailed {
    /// Why.
    pub reason: String,
    /// The tasks whose failure failed the run.
    pub failed_task_refs: Vec<String>,
    /// The output the run ends with (none in histories written before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
}

/// Attributes of [`Event::ChildWorkflowStarted`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChildWorkflowStarted {
    /// The SUB_WORKFLOW task.
    pub task_id: Uuid,
    /// The child's workflow id.
    pub child_workflow_id: String,
}

/// Attributes of [`Event::TaskStarted`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskStarted {
    /// The task.
    pub task_id: Uuid,
    /// Its reference name.
    pub task_ref: String,
    /// Who runs it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_id: Option<String>,
    /// When the worker took it (the worker's clock; timeouts count from here).
    pub started_at: DateTime<Utc>,
}

/// Attributes of [`Event::TaskSkipped`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskSkipped {
    /// The task.
    pub task_id: Uuid,
    /// Its reference name.
    pub task_ref: String,
    /// The output it ends with (the operator's `taskOutput`).
    #[serde(default)]
    pub output: Value,
}

/// Attributes of [`Event::SkipRequested`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SkipRequested {
    /// The task's reference name.
    pub task_ref: String,
    /// The input it is recorded with when reached (`taskInput`; null: its resolved input).
    #[serde(default)]
    pub input: Value,
    /// The output it ends with.
    #[serde(default)]
    pub output: Value,
}

/// Attributes of [`Event::TaskCanceled`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskCanceled {
    /// The task.
    pub task_id: Uuid,
    /// Its reference name.
    pub task_ref: String,
    /// Why.
    pub reason: String,
    /// Canceled for good: a SUB_WORKFLOW task whose child run was terminated, which the
    /// run does not run again (as Conductor's: the run is terminated unless the task is
    /// optional or permissive). Otherwise (a reset's cut) the task runs again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub for_good: bool,
}

/// Attributes of [`Event::WorkflowPaused`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowPaused {}

/// Attributes of [`Event::WorkflowResumed`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowResumed {}

/// Attributes of [`Event::WorkflowReset`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowReset {
    /// The run this one continues.
    pub previous_run_id: Uuid,
    /// The task execution resumes from.
    pub task_ref: String,
    /// Its loop iteration (0 outside loops).
    #[serde(default)]
    pub iteration: i32,
    /// Why, as the operator gave it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The rollback hooks the reset fired, most recent task first; while any is
    /// unsettled the run schedules nothing (docs/hooks.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rollback_hooks: Vec<RollbackHookRef>,
    /// The input the task execution resumes from runs with (Conductor's rerun
    /// `taskInput`); its resolved input when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_input: Option<Value>,
    /// A retry in place (Conductor's retry of an ended run): the run kept the old run's
    /// whole history but its end, failed attempts included, and each task listed gets
    /// one more attempt (a failed JOIN is waiting again). `None`: a reset cut before
    /// `task_ref`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retried: Option<Vec<TaskAt>>,
    /// With `retried`: a SUB_WORKFLOW task whose child was retried, waiting for it again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed: Option<TaskAt>,
}

/// A task of a run by reference name and loop iteration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskAt {
    /// Its reference name.
    pub task_ref: String,
    /// Its loop iteration (0 outside loops).
    #[serde(default)]
    pub iteration: i32,
}

/// Attributes of [`Event::TaskTimedOut`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskTimedOut {
    /// The task.
    pub task_id: Uuid,
    /// Its reference name.
    pub task_ref: String,
    /// Why, as shown to operators.
    pub reason: String,
}

/// Attributes of [`Event::WorkflowTimedOut`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowTimedOut {
    /// Why, as shown to operators.
    pub reason: String,
}

/// Attributes of [`Event::TimerStarted`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TimerStarted {
    /// The timer.
    pub timer_id: Uuid,
    /// The task waiting for it.
    pub task_id: Uuid,
    /// When it is due (absolute: compared with the clock, never counted down).
    pub fire_at: DateTime<Utc>,
}

/// Attributes of [`Event::VariablesUpdated`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VariablesUpdated {
    /// The variables set (merged over the existing ones).
    pub variables: serde_json::Map<String, Value>,
}

/// Attributes of [`Event::WorkflowTerminated`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowTerminated {
    /// Why.
    pub reason: String,
    /// The output the run ends with.
    #[serde(default)]
    pub output: Value,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Envelope;

    #[test]
    fn command_round_trips_through_envelope() {
        let cmd = Command::ActivityCompleted(ActivityCompleted {
            task_id: Uuid::nil(),
            run_id: Uuid::nil(),
            attempt: 1,
            output: serde_json::json!({"x": 1}),
            worker_id: Some("w".into()),
            started_at: None,
            eager: Some(EagerOffer {
                queue_prefix: "weft.eager.0123456789abcdef0123456789abcdef".into(),
                task_names: vec!["shout".into()],
                offered_at: Utc::now(),
                batches: true,
            }),
        });
        let env = Envelope::new("wf", None, &cmd).unwrap();
        assert_eq!(env.payload["eager"]["taskNames"][0], "shout");
        assert_eq!(env.payload["eager"]["batches"], true);
        assert_eq!(env.kind, "ActivityCompleted");
        assert_eq!(env.payload["output"]["x"], 1);
        let back = Envelope::from_bytes(&env.to_bytes().unwrap()).unwrap();
        assert_eq!(back.decode::<Command>().unwrap(), cmd);
    }

    #[test]
    fn unknown_type_is_a_decode_error() {
        let mut env = Envelope::new(
            "wf",
            None,
            &ActivityMessage::ActivityTask(ActivityTask {
                task_id: Uuid::nil(),
                workflow_id: "wf".into(),
                run_id: Uuid::nil(),
                task_ref: "r".into(),
                task_name: "t".into(),
                task_type: "SIMPLE".into(),
                attempt: 1,
                input: Value::Null,
                reply_to: "shard.0".into(),
                scheduled_at: Utc::now(),
                response_timeout_seconds: 0,
                eager: false,
                results_together: false,
            }),
        )
        .unwrap();
        env.kind = "Bogus".into();
        assert!(env.decode::<Command>().is_err());
    }

    #[test]
    fn event_parts_round_trip() {
        let ev = Event::WorkflowCompleted(WorkflowCompleted {
            output: serde_json::json!({"r": "x"}),
            reason: None,
        });
        let back = Event::from_parts(ev.kind(), ev.attributes()).unwrap();
        assert_eq!(back, ev);
    }

    #[test]
    fn attributes_are_the_payload_of_the_tagged_form() {
        let events = [
            Event::WorkflowCompleted(WorkflowCompleted {
                output: serde_json::json!({"r": "x", "n": [1, 2]}),
                reason: None,
            }),
            Event::TaskCompleted(TaskCompleted {
                task_id: Uuid::nil(),
                task_ref: "t1".into(),
                output: serde_json::json!({"ok": true}),
                worker_id: Some("w".into()),
                started_at: None,
                errors: None,
            }),
            Event::WorkflowPaused(WorkflowPaused {}),
        ];
        for ev in events {
            let tagged = serde_json::to_value(&ev).unwrap();
            assert_eq!(ev.attributes(), tagged["attributes"], "{}", ev.kind());
            let direct = serde_json::to_vec(&AttributesOf(&ev)).unwrap();
            assert_eq!(
                serde_json::from_slice::<Value>(&direct).unwrap(),
                tagged["attributes"],
                "{}",
                ev.kind()
            );
            assert_eq!(
                serde_json::from_str::<Value>(&ev.attributes_text()).unwrap(),
                tagged["attributes"],
                "{}",
                ev.kind()
            );
        }
    }
}
