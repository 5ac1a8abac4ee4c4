//! Signals: `POST /api/workflow/{id}/signal/{name}` (Weft) and Conductor's
//! `POST /api/tasks/{workflowId}/{taskRef}/{status}`, both completing the task whose ref
//! is the name, as the decider judges in the run's order (docs/task-updates.md). A signal
//! that arrives before its WAIT is reached is kept by the run, visibly; an update by ref
//! applies only to a task that waits for it.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::extract::{parse_json, Path, Query};
use crate::routes::operations::{self, Outcome};
use crate::routes::tasks::result::update_by_ref;
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
) -> Result<Response, ApiError> {
    let payload = payload(&body?)?;
    let outcome = update_by_ref(
        &state, &id, &task_ref, &status, q.workerid, payload, None, false,
    );
    let outcome = outcome.await?;
    if let Outcome::Pending(_) = outcome {
        return Ok(operations::answer(outcome, |_| {
            StatusCode::OK.into_response()
        }));
    }
    let timeout = std::time::Duration::from_millis(SYNC_TIMEOUT_MS);
    // The decider knows a loop task by its plain reference.
    let mut until = vec![task_ref.clone()];
    until.extend(crate::views::without_iteration(&task_ref).map(str::to_owned));
    super::execute::wait_for(&state, &id, until, timeout).await;
    let workflow = super::workflow::load(&state, &id, true).await?;
    Ok(Json(serde_json::to_value(workflow).map_err(weft::Error::from)?).into_response())
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

/// Completes the WAIT that Conductor's signal endpoints find for `id` ([`blocking_wait`])
/// with `payload`: the decider's verdict.
async fn signal_blocking_wait(
    state: &AppState,
    id: &str,
    payload: Value,
) -> Result<Outcome, ApiError> {
    let (waiting, task_ref) = blocking_wait(state, id).await?;
    update_by_ref(
        state,
        &waiting,
        &task_ref,
        "COMPLETED",
        None,
        payload,
        None,
        false,
    )
    .await
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
) -> Result<Response, ApiError> {
    check_signal_status(&status)?;
    let payload = payload(&body?)?;
    let outcome = signal_blocking_wait(&state, &id, payload).await?;
    Ok(operations::answer(outcome, |_| {
        StatusCode::OK.into_response()
    }))
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
) -> Result<Response, ApiError> {
    check_signal_status(&status)?;
    let strategy = super::execute::ReturnStrategy::parse(q.return_strategy.as_deref())?;
    let payload = payload(&body?)?;
    let outcome = signal_blocking_wait(&state, &id, payload).await?;
    if let Outcome::Pending(_) = outcome {
        return Ok(operations::answer(outcome, |_| {
            StatusCode::OK.into_response()
        }));
    }
    let timeout = std::time::Duration::from_millis(
        q.timeout_millis
            .unwrap_or(SYNC_TIMEOUT_MS)
            .min(super::execute::MAX_WAIT_SECONDS * 1000),
    );
    let waited = super::execute::wait_for(&state, &id, Vec::new(), timeout).await;
    let request_id = weft::ids::new_id().to_string();
    super::execute::respond(&state, &id, &waited, strategy, &request_id, 0)
        .await
        .map(|answer| Json(answer).into_response())
}

/// `POST /api/workflow/{id}/signal/{name}`: the decider's verdict (docs/task-updates.md):
/// 200 when the signal completed the task of that name (`taskId`), 202 with `held: true`
/// when it is kept for a WAIT, HUMAN or asynchronous EVENT task the run has not reached
/// yet (the run shows it under `pendingSignals`), 404 for a name the definition does not
/// have, 409 naming the state when nothing will consume it.
async fn signal(
    State(state): State<AppState>,
    Path((id, name)): Path<(String, String)>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let payload = payload(&body?)?;
    let outcome = update_by_ref(&state, &id, &name, "COMPLETED", None, payload, None, true);
    Ok(operations::answer(outcome.await?, |verdict| {
        if verdict["held"] == json!(true) {
            let message = format!("kept until the run reaches task {name}");
            let body =
                json!({ "workflowId": id, "signal": name, "held": true, "message": message });
            (StatusCode::ACCEPTED, Json(body)).into_response()
        } else {
            let body = json!({ "workflowId": id, "signal": name, "held": false, "taskId": verdict["taskId"] });
            (StatusCode::OK, Json(body)).into_response()
        }
    }))
}

/// Query of `POST /api/tasks/{workflowId}/{taskRef}/{status}`.
#[derive(Debug, serde::Deserialize)]
struct ByRefQuery {
    workerid: Option<String>,
}

/// `POST /api/tasks/{workflowId}/{taskRef}/{status}`: Conductor's way to complete (or
/// fail) a task by ref; the body is the task's output. The decider applies it to the
/// pending task of that ref — a worker's task, a WAIT (its timer, if any, no longer
/// matters), a HUMAN or an asynchronous EVENT task — and the answer is its task id; a
/// task not scheduled yet or already ended is refused with 409, an unknown ref with 404.
async fn complete_by_ref(
    State(state): State<AppState>,
    Path((id, task_ref, status)): Path<(String, String, String)>,
    Query(q): Query<ByRefQuery>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let payload = payload(&body?)?;
    let outcome = update_by_ref(
        &state, &id, &task_ref, &status, q.workerid, payload, None, false,
    );
    Ok(operations::answer(outcome.await?, |verdict| {
        task_id_of(&verdict, &id).into_response()
    }))
}

/// The task id a verdict names (the workflow id when it names none: an IN_PROGRESS
/// report, which the registry takes).
fn task_id_of(verdict: &Value, workflow_id: &str) -> String {
    verdict["taskId"]
        .as_str()
        .map_or_else(|| workflow_id.to_owned(), str::to_owned)
}

/// An event handler's `complete_task` (or `fail_task`) by ref: applies `status` with
/// `payload` (and `reason` for a failure) to the task `task_ref` of the workflow's current
/// run, as `POST /api/tasks/{workflowId}/{taskRef}/{status}` does — except that an event
/// completing a WAIT, HUMAN or asynchronous EVENT task the run has not reached yet is kept
/// for it, as a signal is (the event that completes a task may well come before the run
/// gets there). Its task id once applied (the workflow id when kept), or the request id
/// while it waits in its run's queue; the decider's refusal otherwise.
pub(crate) async fn complete_task_by_ref(
    state: &AppState,
    id: &str,
    task_ref: &str,
    status: &str,
    worker: Option<String>,
    payload: Value,
    reason: Option<String>,
) -> Result<String, ApiError> {
    let outcome = update_by_ref(state, id, task_ref, status, worker, payload, reason, true);
    Ok(match outcome.await? {
        Outcome::Applied(verdict) => task_id_of(&verdict, id),
        Outcome::Pending(request_id) => request_id.to_string(),
    })
}

/// The signal's payload: any JSON value; an empty body is `{}`.
fn payload(body: &Bytes) -> Result<Value, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        Ok(json!({}))
    } else {
        parse_json::<Value>(body)
    }
}
