//! The decider's persistence: load a run's history, and commit a batch of state
//! changes (events, run rows, task rows, outbox) in one transaction with an
//! optimistic version check per run.

use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use super::operations::OperationOutcome;
use super::outbox::OutboxMessage;
use super::timers::TimerRecord;
use crate::messages::Event;
use crate::Result;

/// The materialised row of a run (`runs`).
#[derive(Debug, Clone, PartialEq)]
pub struct RunRecord {
    /// The run.
    pub run_id: Uuid,
    /// Its workflow.
    pub workflow_id: String,
    /// Definition name.
    pub workflow_name: String,
    /// Definition version.
    pub workflow_version: i32,
    /// RUNNING, COMPLETED, FAILED, …
    pub status: String,
    /// The business sub-status (QUEUING, RUNNING, COMPLETED, …).
    pub sub_status: String,
    /// Workflow input.
    pub input: Value,
    /// Workflow output, once shaped.
    pub output: Option<Value>,
    /// Workflow variables.
    pub variables: Value,
    /// Caller's correlation id.
    pub correlation_id: Option<String>,
    /// Parent workflow of a child run.
    pub parent_workflow_id: Option<String>,
    /// Why the run failed or ended.
    pub reason: Option<String>,
    /// Refs whose failure failed the run.
    pub failed_task_refs: Vec<String>,
    /// When the run started.
    pub start_time: DateTime<Utc>,
    /// When it ended.
    pub end_time: Option<DateTime<Utc>>,
    /// Last change.
    pub update_time: DateTime<Utc>,
    /// Number of history events (the concurrency token).
    pub version: i64,
    /// Whether this is its workflow's current run (false once a reset replaced it).
    pub is_current: bool,
    /// The run a reset continued from, and the task it was reset to.
    pub reset_from: Option<(Uuid, String)>,
    /// Signals kept for a task the run has not reached (`[{name, payload}]`); `None`
    /// when there are none.
    pub pending_signals: Option<Value>,
}

/// A task row (`tasks`).
#[derive(Debug, Clone, PartialEq)]
pub struct TaskRecord {
    /// The task.
    pub task_id: Uuid,
    /// Its run.
    pub run_id: Uuid,
    /// Its workflow.
    pub workflow_id: String,
    /// Reference name.
    pub task_ref: String,
    /// Type.
    pub task_type: String,
    /// Definition name.
    pub task_name: String,
    /// Schedule order.
    pub seq: i32,
    /// Loop iteration (0 outside loops).
    pub iteration: i32,
    /// Attempt, from 1.
    pub attempt: i32,
    /// SCHEDULED, IN_PROGRESS, COMPLETED, …
    pub status: String,
    /// Resolved input.
    pub input: Value,
    /// Output.
    pub output: Option<Value>,
    /// Failure reason.
    pub reason: Option<String>,
    /// Who ran it.
    pub worker_id: Option<String>,
    /// When scheduled.
    pub scheduled_time: DateTime<Utc>,
    /// When a worker started it.
    pub start_time: Option<DateTime<Utc>>,
    /// When it ended.
    pub end_time: Option<DateTime<Utc>>,
    /// Last change.
    pub update_time: DateTime<Utc>,
    /// Conductor's `callbackAfterSeconds`: how long a SCHEDULED task stays out of its
    /// queue (a retry's back-off, a worker's postponement).
    pub callback_after_seconds: i64,
    /// The domain of a worker's task (docs/domains.md); written when it is scheduled.
    pub domain: Option<String>,
}

/// One stored history event.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredEvent {
    /// The run.
    pub run_id: Uuid,
    /// 1-based position in the run's history.
    pub event_id: i64,
    /// When it happened.
    pub time: DateTime<Utc>,
    /// The event.
    pub event: Event,
}

/// Everything one decider transaction writes.
#[derive(Debug, Default)]
pub struct CommitBatch {
    /// Runs created by this batch.
    pub new_runs: Vec<RunRecord>,
    /// Runs changed by this batch, each with the version it was loaded at.
    pub updated_runs: Vec<(RunRecord, i64)>,
    /// New history events.
    pub events: Vec<StoredEvent>,
    /// Task rows to insert or update.
    pub tasks: Vec<TaskRecord>,
    /// Messages to publish after the commit.
    pub outbox: Vec<OutboxMessage>,
    /// Durable timers to fire later (by the history service).
    pub timers: Vec<TimerRecord>,
    /// Verdicts on operator commands.
    pub outcomes: Vec<OperationOutcome>,
    /// Hook deliveries the batch's changes fire (docs/hooks.md).
    pub hook_deliveries: Vec<crate::hooks::NewDelivery>,
    /// Registry rows of the activity attempts this batch scheduled or ended
    /// (docs/heartbeats.md), one per attempt: its state at the end of the batch.
    pub checks: Vec<AttemptCheck>,
    /// Runs this batch ended: their pending timers are deleted with the commit.
    pub ended_runs: Vec<Uuid>,
    /// Timers this batch made moot (a WAIT completed before its timer): deleted with the
    /// commit.
    pub cancelled_timers: Vec<Uuid>,
    /// Runs this batch starts through the outbox (children, START_WORKFLOW, failure
    /// workflows), recorded as accepted starts with the commit: their ids are known
    /// (in a task's output) before their `StartWorkflow` is applied, and reads must find
    /// them (RUNNING, QUEUING) meanwhile, as they find a start the gateway accepted.
    pub starts: Vec<super::starts::NewStart>,
}

/// An activity attempt's registry row (`task_check`) as the decider writes it: created
/// SCHEDULED when the attempt is scheduled; ended (COMPLETED, FAILED, TIMED_OUT, STOPPED)
/// when its result, timeout or stop is applied — unless it ended already (a scanner's
/// timeout wins over a later stop).
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptCheck {
    /// The task (one id per attempt).
    pub task_id: Uuid,
    /// The attempt (from 1).
    pub attempt: i32,
    /// The workflow.
    pub workflow_id: String,
    /// The run.
    pub run_id: Uuid,
    /// The task's (definition) name.
    pub task_name: String,
    /// The task's reference name.
    pub task_ref: String,
    /// Routing key of the run's command shard (where `ActivityTimedOut` goes).
    pub reply_to: String,
    /// The attempt's status after this batch.
    pub status: crate::registry::AttemptStatus,
    /// Why it was stopped or failed.
    pub reason: Option<String>,
    /// Heartbeat timeout (`responseTimeoutSeconds`, 0: not watched).
    pub timeout_seconds: i64,
    /// The limits of the attempt's task definition (`concurrentExecLimit`, rate limit),
    /// written with a scheduled row and enforced by its claim (docs/task-limits.md);
    /// none for almost every task.
    pub limits: crate::registry::AttemptLimits,
    /// The worker the attempt is claimed for at its scheduling (eager dispatch,
    /// docs/eager-dispatch.md): the row is created RUNNING for it. None: created
    /// SCHEDULED, claimed by whoever takes the task.
    pub worker_id: Option<String>,
}

impl CommitBatch {
    /// Whether there is nothing to write.
    pub fn is_empty(&self) -> bool {
        self.new_runs.is_empty()
            && self.updated_runs.is_empty()
            && self.events.is_empty()
            && self.outcomes.is_empty()
            // A command passed on to another run (a retry passed down to a child).
            && self.outbox.is_empty()
            // Parked commands: timers without a run change (docs/decider.md).
            && self.timers.is_empty()
    }
}

/// A `history_events` row as both backends read it, before its event is decoded.
#[derive(sqlx::FromRow)]
pub(super) struct EventRow {
    event_id: i64,
    time: DateTime<Utc>,
    #[sqlx(rename = "type")]
    kind: String,
    attributes: Value,
}

impl EventRow {
    /// The event of run `run_id` this row stores.
    pub(super) fn into_event(self, run_id: Uuid) -> Result<StoredEvent> {
        Ok(StoredEvent {
            run_id,
            event_id: self.event_id,
            time: self.time,
            event: Event::from_parts(&self.kind, self.attributes)?,
        })
    }
}
