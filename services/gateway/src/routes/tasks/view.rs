//! Conductor's `Task` as the task API answers it (poll, task by id).

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;
use weft::registry::{AttemptStatus, TaskCheck};
use weft::store::Store;

use crate::views::{map_or_empty, ms};

/// Task statuses in which a result is still awaited.
pub const PENDING: [&str; 2] = ["SCHEDULED", "IN_PROGRESS"];

/// A task with its run (re-exported from the store).
pub use weft::store::task_api::TaskWithRun as TaskRow;

/// Whether a result is still awaited for `row`.
pub fn is_pending(row: &TaskRow) -> bool {
    PENDING.contains(&row.task.status.as_str())
}

/// Task `task_id` and its run's name; `None` for an unknown task.
pub async fn load(store: &Store, task_id: Uuid) -> weft::Result<Option<TaskRow>> {
    store.task_with_run(task_id).await
}

/// The task `row` as it stands now: a task of a run that a reset replaced, and that the
/// new run kept (a retry keeps every task), is read from the newest run that has it, as
/// Conductor's retry, which keeps its task ids, would show it.
pub async fn as_it_stands(store: &Store, mut row: TaskRow) -> weft::Result<TaskRow> {
    // Nearly always: the task's run is current, and nothing newer can hold it.
    if row.run_is_current {
        return Ok(row);
    }
    let chain = store.run_chain(&row.task.workflow_id).await?;
    if chain
        .iter()
        .any(|r| r.run_id == row.task.run_id && r.is_current)
    {
        return Ok(row);
    }
    loop {
        let run = row.task.run_id;
        let Some(next) = chain
            .iter()
            .find(|r| r.reset_from.as_ref().is_some_and(|(from, _)| *from == run))
        else {
            return Ok(row);
        };
        let kept = weft::ids::kept_task_id(next.run_id, row.task.task_id);
        match store.task_with_run(kept).await? {
            Some(newer) => row = newer,
            None => return Ok(row),
        }
    }
}

/// Conductor's `Task` (common/metadata/tasks/Task.java): times in epoch milliseconds
/// (0 for "not yet"), maps never `null`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Task {
    task_id: Uuid,
    /// For a SIMPLE task, its name, as Conductor does (the queue a worker polls).
    task_type: String,
    task_def_name: String,
    reference_task_name: String,
    status: String,
    input_data: Value,
    output_data: Value,
    workflow_instance_id: String,
    workflow_type: String,
    correlation_id: Option<String>,
    retry_count: i32,
    seq: i32,
    iteration: i32,
    poll_count: i32,
    callback_after_seconds: i64,
    /// Conductor's task domain (docs/domains.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    domain: Option<String>,
    response_timeout_seconds: i64,
    start_delay_in_seconds: i64,
    scheduled_time: i64,
    start_time: i64,
    end_time: i64,
    update_time: i64,
    worker_id: Option<String>,
    reason_for_incompletion: Option<String>,
    retried: bool,
    executed: bool,
    callback_from_worker: bool,
    workflow_priority: i32,
    /// The run (Weft's addition).
    run_id: Uuid,
    /// What the heartbeat registry knows of the newest attempt (Weft's addition;
    /// absent for tasks no worker took, and in poll answers).
    #[serde(skip_serializing_if = "Option::is_none")]
    heartbeat: Option<Heartbeat>,
}

/// The heartbeat registry's view of a task's newest attempt: the worker's last sign of
/// life, the progress details it reported (`ActivityContext::heartbeat`) and, once it
/// ended, how.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Heartbeat {
    attempt: i32,
    /// RUNNING, COMPLETED, FAILED, TIMED_OUT or STOPPED.
    status: AttemptStatus,
    /// Epoch milliseconds of the last heartbeat; `null` before the first one.
    last_heartbeat_time: Option<i64>,
    /// The last progress details a heartbeat carried.
    details: Option<Value>,
    /// The heartbeat timeout (`responseTimeoutSeconds`; 0: not watched).
    timeout_seconds: i64,
    /// Why the attempt was stopped or timed out.
    stop_reason: Option<String>,
}

impl From<TaskCheck> for Heartbeat {
    fn from(c: TaskCheck) -> Self {
        Self {
            attempt: c.attempt,
            status: c.status,
            last_heartbeat_time: c.last_heartbeat_at.map(|t| t.timestamp_millis()),
            details: c.details,
            timeout_seconds: c.timeout_seconds,
            stop_reason: c.stop_reason,
        }
    }
}

impl Task {
    /// The task as stored.
    pub fn from_row(row: TaskRow) -> Self {
        let TaskRow {
            task: t,
            workflow_name,
            correlation_id,
            ..
        } = row;
        let (task_type, task_def_name) = crate::views::conductor_type(t.task_type, t.task_name);
        let iteration =
            crate::views::conductor_iteration(&task_type, t.iteration, t.output.as_ref());
        let done = !PENDING.contains(&t.status.as_str());
        Self {
            task_id: t.task_id,
            task_type,
            task_def_name,
            reference_task_name: crate::views::conductor_ref(t.task_ref, t.iteration),
            status: t.status,
            input_data: map_or_empty(Some(t.input)),
            output_data: map_or_empty(t.output),
            workflow_instance_id: t.workflow_id,
            workflow_type: workflow_name,
            correlation_id,
            retry_count: (t.attempt - 1).max(0),
            // Conductor numbers a run's tasks from 1; the store from 0.
            seq: t.seq + 1,
            iteration,
            poll_count: i32::from(t.start_time.is_some()),
            callback_after_seconds: t.callback_after_seconds,
            domain: t.domain.clone(),
            response_timeout_seconds: 0,
            start_delay_in_seconds: 0,
            scheduled_time: ms(Some(t.scheduled_time)),
            start_time: ms(t.start_time),
            end_time: ms(t.end_time),
            update_time: ms(Some(t.update_time)),
            worker_id: t.worker_id,
            reason_for_incompletion: t.reason,
            retried: false,
            executed: done,
            callback_from_worker: true,
            workflow_priority: 0,
            run_id: t.run_id,
            heartbeat: None,
        }
    }

    /// The task with the registry's view of its newest attempt (when that is this
    /// task's attempt).
    pub fn with_heartbeat(mut self, check: Option<TaskCheck>) -> Self {
        self.heartbeat = check
            .filter(|c| c.attempt == self.retry_count + 1)
            .map(Heartbeat::from);
        self
    }

    /// The task as handed to `worker_id` by a poll at `started_at`: IN_PROGRESS.
    pub fn polled(
        row: TaskRow,
        worker_id: Option<String>,
        started_at: DateTime<Utc>,
        response_timeout_seconds: i64,
        redelivered: bool,
    ) -> Self {
        let mut task = Self::from_row(row);
        task.status = "IN_PROGRESS".to_owned();
        task.worker_id = worker_id;
        task.start_time = started_at.timestamp_millis();
        task.update_time = task.start_time;
        task.poll_count = 1 + i32::from(redelivered);
        task.response_timeout_seconds = response_timeout_seconds;
        task.executed = false;
        task
    }

    /// The task's type (the queue it is polled from, for a SIMPLE task).
    pub fn task_type(&self) -> &str {
        &self.task_type
    }
}
