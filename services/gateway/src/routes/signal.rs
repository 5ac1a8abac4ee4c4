//! Signals: `POST /api/workflow/{id}/signal/{name}` (Weft) and Conductor's
//! `POST /api/tasks/{workflowId}/{taskRef}/{status}`, both completing the WAIT task whose
//! ref is the name. A signal that arrives before its WAIT is reached is kept by the run.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};
use weft::messages::{Command, Signal};
use weft::Envelope;

use crate::error::ApiError;
use crate::extract::{parse_json, Path, Query};
use crate::state::AppState;

/// The signal routes.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/workflow/{id}/signal/{name}", post(signal))
        .route(
            "/api/tasks/{workflow_id}/{task_ref}/{status}",
            post(complete_by_ref),
        )
        .route(
            "/api/tasks/{workflow_id}/{task_ref}/{status}/sync",
            post(complete_by_ref_sync),
        )
        // Conductor's `/{workflowId}/{status}/signal`: the second segment is the status.
        .route(
            "/api/tasks/{workflow_id}/{task_ref}/signal",
            post(signal_blocking),
        )
        .route(
            "/api/tasks/{workflow_id}/{task_ref}/signal/sync",
            post(signal_blocking_sync),
        )
}

/// How long the `/sync` forms wait for the decider when the caller does not say.
const SYNC_TIMEOUT_MS: u64 = 5_000;

/// `POST /api/tasks/{workflowId}/{taskRef}/{status}/sync`: as the form without `/sync`,
/// then answers the workflow (with its tasks) once the decider has applied the update
/// (or after 5 s, as it then stands).
async fn complete_by_ref_sync(
    State(state): State<AppState>,
    Path((id, task_ref, status)): Path<(String, String, String)>,
    Query(q): Query<ByRefQuery>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let payload = payload(&body?)?;
    complete_task_by_ref(&state, &id, &task_ref, &status, q.workerid, payload, None).await?;
    let timeout = std::time::Duration::from_millis(SYNC_TIMEOUT_MS);
    // The decider knows a loop task by its plain reference.
    let mut until = vec![task_ref.clone()];
    until.extend(crate::views::without_iteration(&task_ref).map(str::to_owned));
    super::execute::wait_for(&state, &id, until, timeout).await;
    let workflow = super::workflow::load(&state, &id, true).await?;
    Ok(Json(
        serde_json::to_value(workflow).map_err(weft::Error::from)?,
    ))
}

/// The most runs a signal looks through for its WAIT: the workflow's and its children's.
const MAX_RUNS_SEARCHED: usize = 100;

/// The pending WAIT task (without a timer) that Conductor's signal endpoints complete:
/// the first of the workflow's current run, else, as Conductor's `signalTask` descends
/// into running sub-workflows (depth first, in task order), the first of its child runs'.
/// Its workflow id and ref.
async fn blocking_wait(state: &AppState, id: &str) -> Result<(String, String), ApiError> {
    let mut pending = vec![id.to_owned()];
    let mut searched = 0;
    while let Some(workflow_id) = pending.pop() {
        searched += 1;
        if searched > MAX_RUNS_SEARCHED {
            break;
        }
        let Some((_, tasks)) = state.store.current_run_with_tasks(&workflow_id).await? else {
            if workflow_id == id {
                return Err(ApiError::NotFound(format!("workflow {id} not found")));
            }
            continue;
        };
        let is_pending = |t: &weft::store::reads::TaskView| {
            matches!(t.status.as_str(), "SCHEDULED" | "IN_PROGRESS")
        };
        let wait = tasks.iter().find(|t| {
            t.task_type == "WAIT"
                && is_pending(t)
                && t.input.get("duration").is_none()
                && t.input.get("until").is_none()
        });
        if let Some(t) = wait {
            return Ok((workflow_id, t.task_ref.clone()));
        }
        let children = tasks
            .iter()
            .filter(|t| t.task_type == "SUB_WORKFLOW" && is_pending(t))
            .filter_map(|t| t.output.as_ref()?.get("subWorkflowId")?.as_str())
            .map(str::to_owned)
            .collect::<Vec<_>>();
        pending.extend(children.into_iter().rev());
    }
    Err(ApiError::NotFound(format!(
        "workflow {id} has no pending WAIT task to signal, nor has any of its running child workflows"
    )))
}

/// Only COMPLETED completes a WAIT (a signal); the status names the field otherwise.
fn check_signal_status(status: &str) -> Result<(), ApiError> {
    match status {
        "COMPLETED" => Ok(()),
        other => Err(ApiError::invalid(
            "invalid_status",
            "status",
            format!("a WAIT task is completed by a signal with status COMPLETED, not {other:?}"),
        )),
    }
}

/// `POST /api/tasks/{workflowId}/{status}/signal`: completes the run's pending WAIT task
/// (or one of its running child runs', as Conductor looks for it) with the body as its
/// output; 200, or 404 when nothing waits.
async fn signal_blocking(
    State(state): State<AppState>,
    Path((id, status)): Path<(String, String)>,
    body: Result<Bytes, BytesRejection>,
) -> Result<(), ApiError> {
    check_signal_status(&status)?;
    let payload = payload(&body?)?;
    let (waiting, task_ref) = blocking_wait(&state, &id).await?;
    send(&state, &waiting, task_ref, payload).await
}

#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct SignalSyncQuery {
    return_strategy: Option<String>,
    timeout_millis: Option<u64>,
}

/// `POST /api/tasks/{workflowId}/{status}/signal/sync?returnStrategy=&timeoutMillis=`:
/// as the form without `/sync`, then waits as synchronous execution does (the run ends
/// or blocks again) and answers the same `SignalResponse`.
async fn signal_blocking_sync(
    State(state): State<AppState>,
    Path((id, status)): Path<(String, String)>,
    Query(q): Query<SignalSyncQuery>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    check_signal_status(&status)?;
    let strategy = super::execute::ReturnStrategy::parse(q.return_strategy.as_deref())?;
    let payload = payload(&body?)?;
    let (waiting, task_ref) = blocking_wait(&state, &id).await?;
    send(&state, &waiting, task_ref, payload).await?;
    let timeout = std::time::Duration::from_millis(
        q.timeout_millis
            .unwrap_or(SYNC_TIMEOUT_MS)
            .min(super::execute::MAX_WAIT_SECONDS * 1000),
    );
    let waited = super::execute::wait_for(&state, &id, Vec::new(), timeout).await;
    let request_id = weft::ids::new_id().to_string();
    super::execute::respond(&state, &id, &waited, strategy, &request_id, 0)
        .await
        .map(Json)
}

/// `POST /api/workflow/{id}/signal/{name}`: 202 once the signal is durably queued for
/// the run (a confirmed publish to its command shard).
async fn signal(
    State(state): State<AppState>,
    Path((id, name)): Path<(String, String)>,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let payload = payload(&body?)?;
    send(&state, &id, name.clone(), payload).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({ "workflowId": id, "signal": name })),
    ))
}

/// Query of `POST /api/tasks/{workflowId}/{taskRef}/{status}`.
#[derive(Debug, serde::Deserialize)]
struct ByRefQuery {
    workerid: Option<String>,
}

/// `POST /api/tasks/{workflowId}/{taskRef}/{status}`: Conductor's way to complete a task
/// by ref; the body is the task's output. A pending SIMPLE or HTTP task takes `status`
/// (COMPLETED, FAILED, FAILED_WITH_TERMINAL_ERROR, IN_PROGRESS) as a worker's result and
/// the answer is its task id; otherwise the ref names a WAIT (or HUMAN) task, completed
/// (COMPLETED only) by a signal, and the answer is the workflow id.
async fn complete_by_ref(
    State(state): State<AppState>,
    Path((id, task_ref, status)): Path<(String, String, String)>,
    Query(q): Query<ByRefQuery>,
    body: Result<Bytes, BytesRejection>,
) -> Result<String, ApiError> {
    let payload = payload(&body?)?;
    complete_task_by_ref(&state, &id, &task_ref, &status, q.workerid, payload, None).await
}

/// Applies `status` with `payload` (and `reason` for a failure) to the task `task_ref` of
/// the workflow's current run, as `POST /api/tasks/{workflowId}/{taskRef}/{status}` does: a pending SIMPLE or HTTP
/// task takes it as a worker's result (the answer is its task id); otherwise the ref names
/// a WAIT (or HUMAN) task, completed (COMPLETED only) by a signal (the answer is the
/// workflow id).
pub(crate) async fn complete_task_by_ref(
    state: &AppState,
    id: &str,
    task_ref: &str,
    status: &str,
    worker: Option<String>,
    payload: Value,
    reason: Option<String>,
) -> Result<String, ApiError> {
    let activity = crate::routes::tasks::result::complete_by_ref(
        state,
        id,
        task_ref,
        status,
        worker,
        payload.clone(),
        reason,
    );
    if let Some(task_id) = activity.await? {
        return Ok(task_id.to_string());
    }
    if status != "COMPLETED" {
        return Err(ApiError::invalid(
            "invalid_status",
            "status",
            format!("completing a task by ref with status {status:?} is not supported yet; use COMPLETED"),
        ));
    }
    send(state, id, task_ref.to_owned(), payload).await?;
    Ok(id.to_owned())
}

/// The signal's payload: any JSON value; an empty body is `{}`.
fn payload(body: &Bytes) -> Result<Value, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        Ok(json!({}))
    } else {
        parse_json::<Value>(body)
    }
}

/// Publishes the signal after checking that the workflow exists and is not finished.
pub(crate) async fn send(
    state: &AppState,
    id: &str,
    name: String,
    payload: Value,
) -> Result<(), ApiError> {
    match state.store.current_run(id).await? {
        Some(run) if run.status != "RUNNING" && run.status != "PAUSED" => {
            return Err(ApiError::Conflict(format!(
                "workflow {id} is {}; it takes no more signals",
                run.status
            )))
        }
        Some(_) => {}
        None if state.store.get_start(id).await?.is_some() => {}
        None => return Err(ApiError::NotFound(format!("workflow {id} not found"))),
    }
    let envelope = Envelope::new(id, None, &Command::Signal(Signal { name, payload }))?;
    state.bus.publish_command(&envelope).await?;
    Ok(())
}
