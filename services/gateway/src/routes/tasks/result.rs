//! Results of HTTP workers: Conductor's `POST /api/tasks` (a `TaskResult`) and
//! `POST /api/tasks/update-v2` (the same, answered with the next task of the type).
//!
//! COMPLETED and FAILED (FAILED_WITH_TERMINAL_ERROR: no retry) become the
//! `ActivityCompleted` / `ActivityFailed` command on the run's shard (a confirmed publish
//! before the answer); the decider ends the attempt in the registry. IN_PROGRESS is a
//! heartbeat (it extends the attempt's lease; `outputData` is kept as its progress) —
//! unless it names `callbackAfterSeconds` without `extendLease`: then, as Conductor's,
//! the worker gives the task back (`ActivityPostponed`): SCHEDULED again with that
//! output, handed out again once the delay is over (docs/callbacks.md).
//! `logs` go to the task log. A result for a task that is no longer awaited is refused
//! with 409, never applied twice.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::Value;
use uuid::Uuid;
use weft::messages::{ActivityCompleted, ActivityFailed, ActivityPostponed, Beat, Command};
use weft::Envelope;

use super::logs::{self, LogLine};
use super::poll;
use super::view::{self, TaskRow};
use crate::error::ApiError;
use crate::extract::JsonBody;
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
enum Outcome {
    /// A heartbeat: the worker keeps the task.
    InProgress,
    /// The worker gives the task back, to be handed out again after that many seconds.
    CallBackAfter(i64),
    Completed,
    Failed {
        terminal: bool,
    },
}

impl Outcome {
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

/// `POST /api/tasks`: 200 with the task id as text.
pub async fn update(
    State(state): State<AppState>,
    JsonBody(result): JsonBody<TaskResult>,
) -> Result<String, ApiError> {
    let (row, _) = apply(&state, result).await?;
    Ok(row.task.task_id.to_string())
}

/// `POST /api/tasks/update-v2`: applies the result as `POST /api/tasks`, then answers the
/// next task of the same type for the same worker (200), or 204 when none is waiting.
pub async fn update_v2(
    State(state): State<AppState>,
    JsonBody(result): JsonBody<TaskResult>,
) -> Result<Response, ApiError> {
    let (row, worker) = apply(&state, result).await?;
    let queue = poll::queue_of(&state, &row.task.task_name).await?;
    Ok(
        match poll::take(&state, &queue, worker.as_deref()).await?.task() {
            Some(task) => Json(task).into_response(),
            None => StatusCode::NO_CONTENT.into_response(),
        },
    )
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
    let (row, _) = apply(state, result).await?;
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

/// Validates and applies one result; returns the task and the worker id it named.
async fn apply(
    state: &AppState,
    result: TaskResult,
) -> Result<(TaskRow, Option<String>), ApiError> {
    let outcome = Outcome::of(&result)?;
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
    if !view::is_pending(&row) {
        return Err(ApiError::Conflict(format!(
            "task {task_id} is {}; it takes no more results",
            row.task.status
        )));
    }
    let lines = result.logs.unwrap_or_default();
    if !lines.is_empty() {
        logs::append(&state.store, task_id, &lines).await?;
    }
    let worker = result.worker_id.filter(|w| !w.is_empty());
    if !ACTIVITY_TYPES.contains(&row.task.task_type.as_str()) {
        // A HUMAN, WAIT or asynchronous EVENT task: the decider completes it with the
        // signal named after its ref (the run keeps it in order with its other commands).
        match outcome {
            Outcome::Completed => {
                let (id, task_ref) = (row.task.workflow_id.clone(), row.task.task_ref.clone());
                crate::routes::signal::send(state, &id, task_ref, output).await?;
            }
            // A system task is not handed out: nothing goes back to a queue.
            Outcome::InProgress | Outcome::CallBackAfter(_) => {}
            Outcome::Failed { .. } => {
                return Err(ApiError::invalid(
                    "invalid_status",
                    "status",
                    format!(
                        "a {} task is completed, not failed, through the task API",
                        row.task.task_type
                    ),
                ))
            }
        }
        return Ok((row, worker));
    }
    record(
        state,
        &row,
        outcome,
        output,
        result.reason_for_incompletion,
        &worker,
    )
    .await?;
    Ok((row, worker))
}

/// Applies a result to the pending task `row`: a heartbeat for IN_PROGRESS, the result
/// to the run otherwise.
async fn record(
    state: &AppState,
    row: &TaskRow,
    outcome: Outcome,
    output: Value,
    reason: Option<String>,
    worker: &Option<String>,
) -> Result<(), ApiError> {
    match outcome {
        Outcome::InProgress => {
            let details = output
                .as_object()
                .is_some_and(|m| !m.is_empty())
                .then_some(output);
            let beat = Beat {
                task_id: row.task.task_id,
                details,
            };
            state.registry.heartbeat(&[beat]).await?;
            Ok(())
        }
        Outcome::CallBackAfter(_) | Outcome::Completed | Outcome::Failed { .. } => {
            publish(state, row, outcome, output, reason, worker).await
        }
    }
}

/// Task types whose results come from workers (the others are the decider's own).
const ACTIVITY_TYPES: [&str; 2] = ["SIMPLE", "HTTP"];

/// Conductor's `POST /api/tasks/{workflowId}/{taskRef}/{status}` for an activity: applies
/// `status` with `output` (and `reason` for a failure, by default "<status> by
/// reference") to the pending SIMPLE or HTTP task `task_ref` of the workflow's
/// current run and returns its id; `None` when the run has no such pending activity (the
/// ref may name a WAIT task, completed by a signal instead).
pub async fn complete_by_ref(
    state: &AppState,
    workflow_id: &str,
    task_ref: &str,
    status: &str,
    worker: Option<String>,
    output: Value,
    reason: Option<String>,
) -> Result<Option<Uuid>, ApiError> {
    let Some((_, tasks)) = state.store.current_run_with_tasks(workflow_id).await? else {
        return Ok(None);
    };
    let pending = tasks.into_iter().rev().find(|t| {
        crate::views::names_task(task_ref, &t.task_ref, t.iteration)
            && view::PENDING.contains(&t.status.as_str())
            && ACTIVITY_TYPES.contains(&t.task_type.as_str())
    });
    let Some(task) = pending else {
        return Ok(None);
    };
    let outcome = Outcome::parse(Some(status))?;
    let output = output_object(output).ok_or_else(|| {
        ApiError::bad_request("invalid_body", "the task's output must be a JSON object")
    })?;
    let row = view::load(&state.store, task.task_id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("task {task_ref} not found")))?;
    let reason = reason.or_else(|| Some(format!("{status} by reference")));
    record(state, &row, outcome, output, reason, &worker).await?;
    Ok(Some(row.task.task_id))
}

/// Publishes the result to the run's shard (confirmed).
async fn publish(
    state: &AppState,
    row: &TaskRow,
    outcome: Outcome,
    output: Value,
    reason: Option<String>,
    worker: &Option<String>,
) -> Result<(), ApiError> {
    let t = &row.task;
    let worker_id = worker.clone().or_else(|| t.worker_id.clone());
    let command = match outcome {
        Outcome::CallBackAfter(seconds) => Command::ActivityPostponed(ActivityPostponed {
            task_id: t.task_id,
            run_id: t.run_id,
            attempt: t.attempt,
            output,
            worker_id,
            callback_after_seconds: seconds,
        }),
        Outcome::Failed { terminal } => Command::ActivityFailed(ActivityFailed {
            task_id: t.task_id,
            run_id: t.run_id,
            attempt: t.attempt,
            reason: reason
                .filter(|r| !r.is_empty())
                .unwrap_or_else(|| "the worker reported a failure".to_owned()),
            terminal,
            error_kind: None,
            output,
            worker_id,
            started_at: t.start_time,
            // HTTP pollers take tasks from the shared queues (Conductor's poll).
            eager: None,
        }),
        _ => Command::ActivityCompleted(ActivityCompleted {
            task_id: t.task_id,
            run_id: t.run_id,
            attempt: t.attempt,
            output,
            worker_id,
            started_at: t.start_time,
            // HTTP pollers take tasks from the shared queues (Conductor's poll).
            eager: None,
        }),
    };
    let envelope = Envelope::new(&t.workflow_id, Some(t.run_id), &command)?;
    // The decider ends the attempt's registry row in the commit that applies the result.
    state
        .bus
        .publish_command(&envelope)
        .await
        .map_err(Into::into)
}
