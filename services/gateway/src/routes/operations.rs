//! Operator operations (API.md, DESIGN.md §7): terminate, pause, resume, skip, reset,
//! rerun, retry, restart, and the run chain a reset builds.
//!
//! The gateway does not judge whether an operation applies: the decider, the single
//! writer, does, in per-run order, and records its verdict under the request's id in
//! the same transaction as the effect (`store::operations`). The gateway publishes the
//! command and answers with that verdict: 200 (or the endpoint's success shape), 400 for
//! an unknown task, 404 for an unknown workflow, 409 naming the state. Should no decider
//! answer in time (all down), the command stays queued and the answer is 202 with the
//! request id.

use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};
use uuid::Uuid;
use weft::messages::{
    Command, Operation, Reset, ResetTarget, SkipTask, Terminate, UpdateVariables, WatchReply,
    WatchVerdict,
};
use weft::Envelope;

use crate::error::ApiError;
use crate::extract::{parse_json, Path, Query};
use crate::state::AppState;

/// How long an operator request waits for the decider's verdict.
const VERDICT_TIMEOUT: Duration = Duration::from_secs(10);
/// When the store is first looked at for a verdict the decider did not push (a reply
/// lost, a decider that restarted between the command and its watch).
const VERDICT_PROBES_AFTER: Duration = Duration::from_millis(250);

/// The operation routes (terminate is `DELETE /api/workflow/{id}`, routed with the
/// workflow's other methods in `workflow.rs`).
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/workflow/{id}/pause", put(pause))
        .route("/api/workflow/{id}/resume", put(resume))
        .route("/api/workflow/{id}/resetcallbacks", post(reset_callbacks))
        .route("/api/workflow/{id}/skiptask/{task_ref}", put(skip))
        .route("/api/workflow/{id}/reset", post(reset))
        .route("/api/workflow/{id}/rerun", post(rerun))
        .route("/api/workflow/{id}/retry", post(retry))
        .route("/api/workflow/{id}/restart", post(restart))
        .route("/api/workflow/{id}/runs", get(runs))
        .route("/api/workflow/{id}/variables", post(update_variables))
        .route("/api/workflow/decide/{id}", put(decide))
}

/// `PUT /api/workflow/decide/{id}`: Conductor runs its decider for the workflow now.
/// Weft's decider decides in the commit of every command, so nothing is ever left to
/// decide: 200 for a known workflow, 404 otherwise.
async fn decide(State(state): State<AppState>, Path(id): Path<String>) -> Result<(), ApiError> {
    if state.store.current_run(&id).await?.is_some() || state.store.get_start(&id).await?.is_some()
    {
        return Ok(());
    }
    Err(ApiError::NotFound(format!("workflow {id} not found")))
}

/// What became of an operation.
pub(crate) enum Outcome {
    /// Applied; the decider's answer (`workflowId`, `runId`, `status`).
    Applied(Value),
    /// Queued, no verdict yet.
    Pending(Uuid),
}

#[derive(Debug, Deserialize)]
pub(crate) struct TerminateQuery {
    reason: Option<String>,
}

/// `DELETE /api/workflow/{id}?reason=`: the run ends TERMINATED at once, its running
/// activities are told to stop and its child runs are terminated.
pub(crate) async fn terminate(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(q): Query<TerminateQuery>,
) -> Result<Response, ApiError> {
    let reason = q
        .reason
        .filter(|r| !r.trim().is_empty())
        .unwrap_or_else(|| "terminated by an operator".to_owned());
    let outcome = operate(&state, &id, false, |op| {
        Command::Terminate(Terminate { op, reason })
    })
    .await?;
    Ok(answer(outcome, |_| StatusCode::OK.into_response()))
}

/// Terminates `id` with `reason`, as `DELETE /api/workflow/{id}` does: the decider's
/// answer, or `{"requestId"}` while the command still waits in its queue.
pub(crate) async fn terminate_run(
    state: &AppState,
    id: &str,
    reason: String,
) -> Result<Value, ApiError> {
    let outcome = operate(state, id, false, |op| {
        Command::Terminate(Terminate { op, reason })
    })
    .await?;
    Ok(match outcome {
        Outcome::Applied(body) => body,
        Outcome::Pending(request_id) => json!({ "requestId": request_id }),
    })
}

/// `PUT /api/workflow/{id}/pause`.
pub(crate) async fn pause(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let outcome = operate(&state, &id, false, Command::Pause).await?;
    Ok(answer(outcome, |_| StatusCode::OK.into_response()))
}

/// `PUT /api/workflow/{id}/resume`.
pub(crate) async fn resume(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let outcome = operate(&state, &id, false, Command::Resume).await?;
    Ok(answer(outcome, |_| StatusCode::OK.into_response()))
}

/// `POST /api/workflow/{id}/resetcallbacks`: every worker's task of the run that waits
/// out a callback (a retry's back-off, a postponement) is handed out at once; 204, or
/// 409 for a run that has ended (Conductor's).
async fn reset_callbacks(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let outcome = operate(&state, &id, false, Command::ResetCallbacks).await?;
    Ok(answer(outcome, |_| StatusCode::NO_CONTENT.into_response()))
}

/// `POST /api/workflow/{id}/variables` with a JSON object: merges it into the run's
/// variables in the run's order, as any command, and answers the workflow as it stands
/// after (Conductor's `update_variables`, which answers the `Workflow`). 409 for a run
/// that has ended.
async fn update_variables(
    State(state): State<AppState>,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let Value::Object(variables) = parse_json(&body?)? else {
        return Err(ApiError::invalid(
            "invalid_field",
            "variables",
            "the body must be a JSON object of variables",
        ));
    };
    let outcome = operate(&state, &id, false, |op| {
        Command::UpdateVariables(UpdateVariables { op, variables })
    })
    .await?;
    if let Outcome::Pending(_) = outcome {
        return Ok(answer(outcome, |_| StatusCode::OK.into_response()));
    }
    let workflow = super::workflow::load(&state, &id, true).await?;
    Ok(Json(workflow).into_response())
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SkipRequest {
    #[serde(default)]
    task_input: Option<Value>,
    #[serde(default)]
    task_output: Option<Value>,
}

/// `PUT /api/workflow/{id}/skiptask/{taskRef}` with optional `{taskInput, taskOutput}`.
async fn skip(
    State(state): State<AppState>,
    Path((id, task_ref)): Path<(String, String)>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let request: SkipRequest = optional_body(&body?)?;
    for (field, value) in [
        ("taskInput", &request.task_input),
        ("taskOutput", &request.task_output),
    ] {
        if value
            .as_ref()
            .is_some_and(|v| !v.is_object() && !v.is_null())
        {
            return Err(ApiError::invalid(
                "invalid_field",
                field,
                format!("{field} must be a JSON object"),
            ));
        }
    }
    let outcome = operate(&state, &id, false, |op| {
        Command::SkipTask(SkipTask {
            op,
            task_ref,
            output: request.task_output.unwrap_or(Value::Null),
            input: request.task_input.unwrap_or(Value::Null),
        })
    })
    .await?;
    Ok(answer(outcome, |_| StatusCode::OK.into_response()))
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ResetRequest {
    task_ref: String,
    #[serde(default)]
    iteration: Option<i32>,
    #[serde(default)]
    reason: Option<String>,
}

/// `POST /api/workflow/{id}/reset {taskRef, iteration?, reason?}`: a new run continues
/// from the task; answers the new run id as text.
async fn reset(
    State(state): State<AppState>,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let request: ResetRequest = parse_json(&body?)?;
    if request.task_ref.trim().is_empty() {
        return Err(ApiError::invalid(
            "invalid_field",
            "taskRef",
            "taskRef must name a task",
        ));
    }
    let target = ResetTarget::Ref {
        task_ref: request.task_ref,
        iteration: request.iteration,
    };
    let mut reset = reset_of(target);
    reset.reason = request.reason;
    reset_to(&state, &id, reset, |run_id| {
        run_id.to_string().into_response()
    })
    .await
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RerunRequest {
    #[serde(default)]
    re_run_from_workflow_id: Option<String>,
    #[serde(default)]
    re_run_from_task_id: Option<String>,
    /// Weft: the task by reference name.
    #[serde(default)]
    re_run_from_task_ref: Option<String>,
    #[serde(default)]
    workflow_input: Option<Value>,
    /// Conductor's override of the input of the task the rerun starts from.
    #[serde(default)]
    task_input: Option<Value>,
}

/// Conductor's `POST /api/workflow/{id}/rerun`: reset to `reRunFromTaskId` (or
/// `reRunFromTaskRef`), or to the first task; answers the workflow id as text.
async fn rerun(
    State(state): State<AppState>,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let request: RerunRequest = optional_body(&body?)?;
    if let Some(other) = request.re_run_from_workflow_id.as_deref() {
        if other != id {
            return Err(ApiError::invalid(
                "invalid_field",
                "reRunFromWorkflowId",
                format!("reRunFromWorkflowId {other:?} differs from the workflow in the path"),
            ));
        }
    }
    if request
        .workflow_input
        .as_ref()
        .is_some_and(|v| !v.is_object() && !v.is_null())
    {
        return Err(ApiError::invalid(
            "invalid_field",
            "workflowInput",
            "workflowInput must be a JSON object",
        ));
    }
    let task_input = match request.task_input {
        None | Some(Value::Null) => None,
        Some(Value::Object(m)) if m.is_empty() => None,
        Some(input @ Value::Object(_)) => Some(input),
        Some(_) => {
            return Err(ApiError::invalid(
                "invalid_field",
                "taskInput",
                "taskInput must be a JSON object",
            ))
        }
    };
    if task_input.is_some()
        && request.re_run_from_task_id.is_none()
        && request.re_run_from_task_ref.is_none()
    {
        return Err(ApiError::invalid(
            "invalid_field",
            "taskInput",
            "taskInput needs reRunFromTaskId (or reRunFromTaskRef): the task it replaces the \
             input of",
        ));
    }
    let target = match (request.re_run_from_task_id, request.re_run_from_task_ref) {
        (Some(task_id), _) => ResetTarget::TaskId {
            task_id: Uuid::parse_str(&task_id).map_err(|_| {
                ApiError::invalid(
                    "invalid_field",
                    "reRunFromTaskId",
                    format!("reRunFromTaskId {task_id:?} is not a task id"),
                )
            })?,
        },
        (None, Some(task_ref)) => ResetTarget::Ref {
            task_ref,
            iteration: None,
        },
        (None, None) => ResetTarget::First,
    };
    let workflow_input = request.workflow_input.filter(|v| !v.is_null());
    let answer_id = id.clone();
    let mut reset = reset_of(target);
    reset.workflow_input = workflow_input;
    reset.task_input = task_input;
    reset_to(&state, &id, reset, move |_| answer_id.into_response()).await
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RetryQuery {
    #[serde(default)]
    resume_subworkflow_tasks: bool,
}

/// `POST /api/workflow/{id}/retry?resumeSubworkflowTasks=`: Conductor's retry, in place
/// (each failed task gets one more attempt); with `resumeSubworkflowTasks`, a run that
/// failed with a child has the child retried instead, and waits for it again; 204.
pub(crate) async fn retry(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(q): Query<RetryQuery>,
) -> Result<Response, ApiError> {
    retry_run(&state, id, q.resume_subworkflow_tasks).await
}

/// Retries `id` (see [`retry`]).
pub(crate) async fn retry_run(
    state: &AppState,
    id: String,
    resume_subworkflow_tasks: bool,
) -> Result<Response, ApiError> {
    let reset = reset_of(ResetTarget::LastFailed {
        resume_subworkflow_tasks,
    });
    reset_to(state, &id, reset, |_| {
        StatusCode::NO_CONTENT.into_response()
    })
    .await
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RestartQuery {
    #[serde(default)]
    use_latest_definitions: bool,
}

/// `POST /api/workflow/{id}/restart?useLatestDefinitions=`: reset to the first task of
/// an ended run, on the run's own definition or (`useLatestDefinitions`) on the latest
/// registered version of it with the task definitions registered now; 204.
pub(crate) async fn restart(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(q): Query<RestartQuery>,
) -> Result<Response, ApiError> {
    restart_run(&state, id, q.use_latest_definitions).await
}

/// Restarts `id` (see [`restart`]).
pub(crate) async fn restart_run(
    state: &AppState,
    id: String,
    use_latest_definitions: bool,
) -> Result<Response, ApiError> {
    let mut reset = reset_of(ResetTarget::First);
    if use_latest_definitions {
        let run = state
            .store
            .current_run(&id)
            .await?
            .ok_or_else(|| ApiError::NotFound(format!("workflow {id} not found")))?;
        let input = run.input.as_object().cloned().unwrap_or_default();
        let latest = super::start::latest_frozen(state, &run.workflow_name, &input).await?;
        reset.definition = Some(Box::new(latest));
    }
    reset_to(state, &id, reset, |_| {
        StatusCode::NO_CONTENT.into_response()
    })
    .await
}

/// A reset to `target`, nothing else asked (the request's bookkeeping and the new run's
/// id are filled in by [`reset_to`]).
fn reset_of(target: ResetTarget) -> Reset {
    Reset {
        op: Operation::default(),
        target,
        new_run_id: Uuid::nil(),
        reason: None,
        workflow_input: None,
        task_input: None,
        definition: None,
        fallback: None,
    }
}

/// `GET /api/workflow/{id}/runs`: every run of the workflow, oldest first.
async fn runs(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let chain = state.store.run_chain(&id).await?;
    if chain.is_empty() {
        return Err(ApiError::NotFound(format!("workflow {id} not found")));
    }
    let runs: Vec<Value> = chain
        .into_iter()
        .map(|run| {
            let mut view = json!({
                "runId": run.run_id,
                "status": run.status,
                "current": run.is_current,
                "startTime": run.start_time.timestamp_millis(),
                "endTime": run.end_time.map(|t| t.timestamp_millis()),
            });
            if let Some((from, task_ref)) = run.reset_from {
                view["resetFrom"] = json!({ "runId": from, "taskRef": task_ref });
            }
            view
        })
        .collect();
    Ok(Json(Value::Array(runs)))
}

/// Sends a reset aimed at the run the operator sees now (so that of two operators
/// resetting at once, one wins and the other gets 409).
async fn reset_to(
    state: &AppState,
    id: &str,
    mut reset: Reset,
    success: impl FnOnce(Uuid) -> Response,
) -> Result<Response, ApiError> {
    let new_run_id = weft::ids::new_id();
    reset.new_run_id = new_run_id;
    let outcome = operate(state, id, true, |op| {
        reset.op = op;
        Command::Reset(reset)
    })
    .await?;
    Ok(answer(outcome, |_| success(new_run_id)))
}

/// Publishes the operation to the run's shard and waits for the decider's verdict.
async fn operate(
    state: &AppState,
    id: &str,
    aim_at_current: bool,
    command: impl FnOnce(Operation) -> Command,
) -> Result<Outcome, ApiError> {
    let current = state.store.current_run(id).await?;
    if current.is_none() && state.store.get_start(id).await?.is_none() {
        return Err(ApiError::NotFound(format!("workflow {id} not found")));
    }
    let expected_run_id = current.filter(|_| aim_at_current).map(|run| run.run_id);
    decide_command(state, id, |request_id| {
        command(Operation {
            request_id: Some(request_id),
            expected_run_id,
        })
    })
    .await
}

/// Publishes the command `command` builds around a new request id to the shard of `id`
/// and waits for the decider's verdict on it: applied (its answer), refused (the 4xx it
/// names), or still queued when no decider answered in time.
pub(crate) async fn decide_command(
    state: &AppState,
    id: &str,
    command: impl FnOnce(Uuid) -> Command,
) -> Result<Outcome, ApiError> {
    let request_id = weft::ids::new_id();
    let envelope = Envelope::new(id, None, &command(request_id))?;
    state.bus.publish_command(&envelope).await?;
    let Some((status, body)) = wait_verdict(state, id, request_id).await? else {
        return Ok(Outcome::Pending(request_id));
    };
    let verdict = weft::store::operations::OperationOutcome {
        request_id,
        workflow_id: id.to_owned(),
        status,
        body,
    };
    let message = verdict.body["message"]
        .as_str()
        .unwrap_or("refused")
        .to_owned();
    match verdict.status {
        200 => Ok(Outcome::Applied(verdict.body)),
        400 => Err(match field_of(&message) {
            Some(field) => ApiError::invalid("invalid_field", field, message.clone()),
            None => ApiError::bad_request("bad_request", message),
        }),
        404 => Err(ApiError::NotFound(message)),
        _ => Err(ApiError::Conflict(message)),
    }
}

/// The verdict on the command `request_id` sent to the shard of `id` just before: pushed
/// by the decider (a transient `WatchVerdict` call behind the command, answered after the
/// commit that recorded the verdict: docs/task-updates.md), or, should no reply come,
/// read from the store by probes that start after [`VERDICT_PROBES_AFTER`]; `None` when
/// neither has it within [`VERDICT_TIMEOUT`].
async fn wait_verdict(
    state: &AppState,
    id: &str,
    request_id: Uuid,
) -> Result<Option<(i16, Value)>, ApiError> {
    let names = state.bus.names();
    let watch = Envelope::new(
        id,
        None,
        &Command::WatchVerdict(WatchVerdict { request_id }),
    )?;
    let pushed = async {
        let reply = state
            .bus
            .call(
                &names.commands_exchange(),
                &names.command_key_for(id),
                &watch,
                VERDICT_TIMEOUT,
            )
            .await
            .ok()?;
        match reply.decode::<WatchReply>() {
            Ok(WatchReply::Verdict(v)) if v.request_id == request_id => Some((v.status, v.body)),
            _ => None,
        }
    };
    let probed = async {
        tokio::time::sleep(VERDICT_PROBES_AFTER).await;
        let rest = VERDICT_TIMEOUT.saturating_sub(VERDICT_PROBES_AFTER);
        state
            .store
            .wait_operation_outcome_from(request_id, rest, VERDICT_PROBES_AFTER)
            .await
    };
    tokio::pin!(pushed, probed);
    let (source, verdict) = tokio::select! {
        Some(verdict) = &mut pushed => ("pushed", Some(verdict)),
        outcome = &mut probed => match outcome? {
            Some(o) => ("read", Some((o.status, o.body))),
            None => ("none", None),
        },
    };
    state.http.verdict(source);
    Ok(verdict)
}

/// The success answer, or 202 with the request id while the command waits in its queue.
pub(crate) fn answer(outcome: Outcome, success: impl FnOnce(Value) -> Response) -> Response {
    match outcome {
        Outcome::Applied(body) => success(body),
        Outcome::Pending(request_id) => (
            StatusCode::ACCEPTED,
            Json(json!({
                "requestId": request_id,
                "message": "accepted: queued for the run, not applied yet (no decider answered in time)",
            })),
        )
            .into_response(),
    }
}

/// The field a decider refusal names (`"taskRef: ..."`).
fn field_of(message: &str) -> Option<String> {
    let (field, _) = message.split_once(": ")?;
    (!field.is_empty() && field.chars().all(|c| c.is_ascii_alphanumeric()))
        .then(|| field.to_owned())
}

/// A JSON body that may be absent (empty means all defaults).
fn optional_body<T: serde::de::DeserializeOwned + Default>(body: &Bytes) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        Ok(T::default())
    } else {
        parse_json(body)
    }
}
