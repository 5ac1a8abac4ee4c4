//! Results of HTTP workers: Conductor's `POST /api/tasks` (a `TaskResult`) and
//! `POST /api/tasks/update-v2` (the same, answered with the next task of the type).
//!
//! COMPLETED and FAILED (FAILED_WITH_TERMINAL_ERROR: no retry) become an `UpdateTask`
//! command on the run's shard, and the answer is the decider's verdict on it
//! (docs/task-updates.md): 200 once applied, 409 naming the state when the task no longer
//! waits for it (a timeout, a skip or a reset came first). IN_PROGRESS is a heartbeat (it
//! extends the attempt's lease; `outputData` is kept as its progress) — unless it names
//! `callbackAfterSeconds` without `extendLease`: then, as Conductor's, the worker gives
//! the task back: SCHEDULED again with that output, handed out again once the delay is
//! over (docs/callbacks.md). `logs` go to the task log. A result for a task that is no
//! longer awaited is refused with 409, never applied twice.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::json;
use serde_json::Value;
use uuid::Uuid;
use weft::messages::{Beat, Command, TaskUpdateStatus, UpdateTask};

use super::logs::{self, LogLine};
use super::poll;
use super::view::{self, TaskRow};
use crate::error::ApiError;
use crate::extract::JsonBody;
use crate::routes::operations::{self, Outcome};
use crate::state::AppState;

/// Conductor's `TaskResult` (common/metadata/tasks/TaskResult.java). Fields Weft does
/// not use (external payload paths, subWorkflowId) are accepted and ignored.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskResult {
    #[serde(default)]
    workflow_instance_id: Option<String>,
    #[serde(default)]
    task_id: Option<String>,
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    output_data: Option<Value>,
    #[serde(default)]
    reason_for_incompletion: Option<String>,
    #[serde(default)]
    worker_id: Option<String>,
    /// IN_PROGRESS with `extendLease`: a heartbeat, whatever else it says.
    #[serde(default)]
    extend_lease: Option<bool>,
    /// IN_PROGRESS with it (and without `extendLease`): the task goes back to its queue,
    /// handed out again after this many seconds (0: at once).
    #[serde(default)]
    callback_after_seconds: Option<i64>,
    #[serde(default)]
    logs: Option<Vec<LogLine>>,
}

/// What a result says happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    /// A heartbeat: the worker keeps the task.
    InProgress,
    /// The worker gives the task back, to be handed out again after that many seconds.
    CallBackAfter(i64),
    Completed,
    Failed {
        terminal: bool,
    },
}

impl Status {
    fn parse(status: Option<&str>) -> Result<Self, ApiError> {
        match status {
            Some("IN_PROGRESS") => Ok(Self::InProgress),
            Some("COMPLETED") => Ok(Self::Completed),
            Some("FAILED") => Ok(Self::Failed { terminal: false }),
            Some("FAILED_WITH_TERMINAL_ERROR") => Ok(Self::Failed { terminal: true }),
            Some(other) => Err(ApiError::invalid(
                "invalid_status",
                "status",
                format!("status {other:?}: expected IN_PROGRESS, COMPLETED, FAILED or FAILED_WITH_TERMINAL_ERROR"),
            )),
            None => Err(ApiError::invalid(
                "missing_field",
                "status",
                "status is required",
            )),
        }
    }

    /// The decider's status for it (IN_PROGRESS, given back or not, is `Postponed`:
    /// a heartbeat never reaches the decider).
    fn update_status(self) -> TaskUpdateStatus {
        match self {
            Self::Completed => TaskUpdateStatus::Completed,
            Self::Failed { terminal: false } => TaskUpdateStatus::Failed,
            Self::Failed { terminal: true } => TaskUpdateStatus::FailedWithTerminalError,
            Self::InProgress | Self::CallBackAfter(_) => TaskUpdateStatus::Postponed,
        }
    }

    /// The outcome of `result`: its status, where IN_PROGRESS with a callback (and no
    /// `extendLease`) gives the task back.
    fn of(result: &TaskResult) -> Result<Self, ApiError> {
        let outcome = Self::parse(result.status.as_deref())?;
        if outcome != Self::InProgress || result.extend_lease == Some(true) {
            return Ok(outcome);
        }
        match result.callback_after_seconds {
            None => Ok(Self::InProgress),
            Some(seconds) if seconds < 0 => Err(ApiError::invalid(
                "invalid_field",
                "callbackAfterSeconds",
                format!("callbackAfterSeconds {seconds}: must be 0 or more"),
            )),
            Some(seconds) => Ok(Self::CallBackAfter(seconds.min(MAX_CALLBACK_SECONDS))),
        }
    }
}

/// The longest callback delay a result may ask for (a year); a longer one is this.
const MAX_CALLBACK_SECONDS: i64 = 365 * 86_400;

/// `POST /api/tasks`: 200 with the task id as text once the decider applied the result
/// (202 with the request id when no decider answered in time).
pub async fn update(
    State(state): State<AppState>,
    JsonBody(result): JsonBody<TaskResult>,
) -> Result<Response, ApiError> {
    let (row, _, outcome) = apply(&state, result).await?;
    Ok(answer_with_task_id(outcome, row.task.task_id))
}

/// `POST /api/tasks/update-v2`: applies the result as `POST /api/tasks`, then answers the
/// next task of the same type for the same worker (200), or 204 when none is waiting.
pub async fn update_v2(
    State(state): State<AppState>,
    JsonBody(result): JsonBody<TaskResult>,
) -> Result<Response, ApiError> {
    let (row, worker, outcome) = apply(&state, result).await?;
    if let Outcome::Pending(_) = outcome {
        return Ok(answer_with_task_id(outcome, row.task.task_id));
    }
    // The next task of the same domain, as Conductor's `updateTaskV2`.
    let domain = row.task.domain.as_deref();
    let queue = poll::queue_of(&state, &row.task.task_name, domain).await?;
    Ok(
        match poll::take(&state, &queue, worker.as_deref()).await?.task() {
            Some(task) => Json(task).into_response(),
            None => StatusCode::NO_CONTENT.into_response(),
        },
    )
}

/// 200 with the task id as text, or 202 with the request id while the update waits in
/// its run's queue.
fn answer_with_task_id(outcome: Outcome, task_id: Uuid) -> Response {
    operations::answer(outcome, |_| task_id.to_string().into_response())
}

/// Applies `status` (COMPLETED, FAILED, ...) with `output` to the task `task_id`, as a
/// worker's `POST /api/tasks` would (an event handler's `complete_task` by task id).
pub(crate) async fn apply_status(
    state: &AppState,
    task_id: &str,
    status: &str,
    output: Value,
    reason: Option<String>,
) -> Result<Uuid, ApiError> {
    let result = TaskResult {
        workflow_instance_id: None,
        task_id: Some(task_id.to_owned()),
        status: Some(status.to_owned()),
        output_data: Some(output),
        reason_for_incompletion: reason,
        worker_id: None,
        extend_lease: None,
        callback_after_seconds: None,
        logs: None,
    };
    let (row, _, _) = apply(state, result).await?;
    Ok(row.task.task_id)
}

/// A task's output: a JSON object, `{}` for null; `None` for anything else.
fn output_object(v: Value) -> Option<Value> {
    match v {
        Value::Null => Some(Value::Object(Default::default())),
        Value::Object(m) => Some(Value::Object(m)),
        _ => None,
    }
}

/// Validates and applies one result; returns the task, the worker id it named and the
/// decider's verdict (a heartbeat is applied by the registry: `Applied` at once).
async fn apply(
    state: &AppState,
    result: TaskResult,
) -> Result<(TaskRow, Option<String>, Outcome), ApiError> {
    let outcome = Status::of(&result)?;
    let raw_id = result
        .task_id
        .filter(|id| !id.is_empty())
        .ok_or_else(|| ApiError::invalid("missing_field", "taskId", "taskId is required"))?;
    let output = output_object(result.output_data.unwrap_or(Value::Null)).ok_or_else(|| {
        ApiError::invalid(
            "invalid_field",
            "outputData",
            "outputData must be a JSON object",
        )
    })?;
    let unknown = || ApiError::NotFound(format!("task {raw_id} not found"));
    let task_id = Uuid::parse_str(&raw_id).map_err(|_| unknown())?;
    let row = view::load(&state.store, task_id)
        .await?
        .ok_or_else(unknown)?;
    if let Some(wf) = result.workflow_instance_id.as_deref() {
        if !wf.is_empty() && wf != row.task.workflow_id {
            return Err(ApiError::invalid(
                "invalid_field",
                "workflowInstanceId",
                format!(
                    "task {task_id} belongs to workflow {}, not {wf}",
                    row.task.workflow_id
                ),
            ));
        }
    }
    // An ended task never waits again (a reset gives its run new tasks): refused here,
    // without a round trip to the decider.
    if !view::is_pending(&row) {
        return Err(ApiError::Conflict(format!(
            "task {task_id} is {}; it takes no more results",
            row.task.status
        )));
    }
    let worker = result.worker_id.filter(|w| !w.is_empty());
    let verdict = record(
        state,
        &row,
        outcome,
        output,
        result.reason_for_incompletion,
        &worker,
    )
    .await?;
    let lines = result.logs.unwrap_or_default();
    if !lines.is_empty() {
        logs::append(&state.store, task_id, &lines).await?;
    }
    Ok((row, worker, verdict))
}

/// Applies a result to the pending task `row`: a heartbeat for an activity's
/// IN_PROGRESS (nothing for another task's: it is not handed out), the decider's
/// verdict on the update otherwise.
async fn record(
    state: &AppState,
    row: &TaskRow,
    status: Status,
    output: Value,
    reason: Option<String>,
    worker: &Option<String>,
) -> Result<Outcome, ApiError> {
    let t = &row.task;
    let update_status = match status {
        Status::InProgress => {
            let details = output
                .as_object()
                .is_some_and(|m| !m.is_empty())
                .then_some(output);
            if ACTIVITY_TYPES.contains(&t.task_type.as_str()) {
                let beat = Beat {
                    task_id: t.task_id,
                    details,
                };
                state.registry.heartbeat(&[beat]).await?;
            }
            return Ok(Outcome::Applied(Value::Null));
        }
        other => other.update_status(),
    };
    let update = UpdateTask {
        op: Default::default(),
        task_ref: t.task_ref.clone(),
        task_id: Some(t.task_id),
        run_id: Some(t.run_id),
        status: update_status,
        output,
        reason,
        worker_id: worker.clone().or_else(|| t.worker_id.clone()),
        callback_after_seconds: match status {
            Status::CallBackAfter(seconds) => seconds,
            _ => 0,
        },
        hold: false,
    };
    send_update(state, &t.workflow_id, update).await
}

/// Sends `update` to the run of `workflow_id` and waits for the decider's verdict.
pub(crate) async fn send_update(
    state: &AppState,
    workflow_id: &str,
    update: UpdateTask,
) -> Result<Outcome, ApiError> {
    operations::decide_command(state, workflow_id, |request_id| {
        let mut update = update;
        update.op.request_id = Some(request_id);
        Command::UpdateTask(update)
    })
    .await
}

/// Task types whose results come from workers (the others are the decider's own).
const ACTIVITY_TYPES: [&str; 2] = ["SIMPLE", "HTTP"];

/// Conductor's `POST /api/tasks/{workflowId}/{taskRef}/{status}`: applies `status` with
/// `output` (and `reason` for a failure, by default "<status> by reference") to the task
/// `task_ref` of the workflow's current run — the pending one of that ref, else whatever
/// the decider finds (it refuses a task not scheduled yet, ended, or unknown) — and
/// returns the verdict. With `hold` (a signal), a WAIT, HUMAN or asynchronous EVENT task
/// not reached yet gets it when reached. 404 for an unknown workflow.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn update_by_ref(
    state: &AppState,
    workflow_id: &str,
    task_ref: &str,
    status: &str,
    worker: Option<String>,
    output: Value,
    reason: Option<String>,
    hold: bool,
) -> Result<Outcome, ApiError> {
    let status = Status::parse(Some(status))?;
    let output = output_object(output.clone()).unwrap_or_else(|| json!({ "payload": output }));
    let tasks = match state.store.current_run_with_tasks(workflow_id).await? {
        Some((_, tasks)) => tasks,
        None if state.store.get_start(workflow_id).await?.is_some() => Vec::new(),
        None => {
            return Err(ApiError::NotFound(format!(
                "workflow {workflow_id} not found"
            )))
        }
    };
    let pending = tasks.into_iter().rev().find(|t| {
        crate::views::names_task(task_ref, &t.task_ref, t.iteration)
            && view::PENDING.contains(&t.status.as_str())
    });
    if let Some(task) = &pending {
        if status == Status::InProgress || matches!(status, Status::CallBackAfter(_)) {
            let row = view::load(&state.store, task.task_id)
                .await?
                .ok_or_else(|| ApiError::NotFound(format!("task {task_ref} not found")))?;
            return record(state, &row, status, output, reason, &worker).await;
        }
    } else if status == Status::InProgress {
        return Err(ApiError::Conflict(format!(
            "workflow {workflow_id} has no pending task {task_ref} to report IN_PROGRESS for"
        )));
    }
    let update_status = status.update_status();
    let reason = reason.or_else(|| Some(format!("{} by reference", update_status.as_str())));
    let update = UpdateTask {
        op: Default::default(),
        task_ref: pending
            .as_ref()
            .map_or_else(|| task_ref.to_owned(), |t| t.task_ref.clone()),
        task_id: pending.as_ref().map(|t| t.task_id),
        run_id: pending.as_ref().map(|t| t.run_id),
        status: update_status,
        output,
        reason: reason.filter(|_| update_status != TaskUpdateStatus::Completed),
        worker_id: worker,
        callback_after_seconds: 0,
        hold,
    };
    send_update(state, workflow_id, update).await
}
