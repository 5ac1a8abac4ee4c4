//! Workflow runs: start, read, status, history (Conductor's `WorkflowResource` plus
//! Weft's history pages).

use axum::body::Bytes;
use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Map, Value};
use uuid::Uuid;

use super::start::{self, StartRequest};
use crate::error::ApiError;
use crate::extract::{parse_json, JsonBody, Path, Query};
use crate::state::AppState;
use crate::views::{HistoryPage, Workflow, WorkflowStatus};

/// Events per history page when the caller does not say.
const DEFAULT_HISTORY_LIMIT: i64 = 100;
/// Largest history page served.
const MAX_HISTORY_LIMIT: i64 = 1000;

/// The workflow routes.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/workflow", post(start_with_request))
        .route(
            "/api/workflow/{id}",
            post(start_by_name)
                .get(get_workflow)
                .delete(super::operations::terminate),
        )
        .route("/api/workflow/{id}/status", get(get_status))
        .route("/api/workflow/{id}/history", get(get_history))
}

/// `POST /api/workflow`: a StartWorkflowRequest; answers the workflow id as text.
async fn start_with_request(
    State(state): State<AppState>,
    JsonBody(json): JsonBody<Value>,
) -> Result<String, ApiError> {
    let request = StartRequest::from_json(json)?;
    start::start(&state, request).await
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct StartByNameQuery {
    version: Option<i32>,
    correlation_id: Option<String>,
    priority: Option<i32>,
}

/// `POST /api/workflow/{name}?version=&correlationId=&priority=`: the body is the input
/// map (an empty body is an empty input); answers the workflow id as text.
async fn start_by_name(
    State(state): State<AppState>,
    Path(name): Path<String>,
    Query(q): Query<StartByNameQuery>,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<String, ApiError> {
    let body = body?;
    let input = if body.iter().all(u8::is_ascii_whitespace) {
        Map::new()
    } else {
        match parse_json::<Value>(&body)? {
            Value::Object(map) => map,
            Value::Null => Map::new(),
            _ => {
                return Err(ApiError::invalid(
                    "invalid_request",
                    "input",
                    "the body must be a JSON object: the workflow input",
                ))
            }
        }
    };
    let request = StartRequest {
        name: Some(name),
        version: q.version,
        input,
        correlation_id: q.correlation_id,
        workflow_def: None,
        idempotency_key: None,
        priority: q.priority,
        task_to_domain: Default::default(),
    };
    request.check_priority()?;
    start::start(&state, request).await
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WorkflowQuery {
    #[serde(default, deserialize_with = "crate::extract::lenient_opt_bool")]
    include_tasks: Option<bool>,
}

/// `GET /api/workflow/{id}?includeTasks=`: the current run, tasks included by default.
async fn get_workflow(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(q): Query<WorkflowQuery>,
) -> Result<Json<Workflow>, ApiError> {
    load(&state, &id, q.include_tasks.unwrap_or(true))
        .await
        .map(Json)
}

/// `GET /api/workflow/{id}/status`.
async fn get_status(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<WorkflowStatus>, ApiError> {
    load(&state, &id, false)
        .await
        .map(|w| Json(WorkflowStatus::from(w)))
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct HistoryQuery {
    run_id: Option<String>,
    after: Option<i64>,
    limit: Option<i64>,
}

/// `GET /api/workflow/{id}/history?runId=&after=&limit=`: one page of a run's events
/// (the current run unless `runId`), after event `after`; `next` is the `after` of the
/// following page, `null` on the last one.
async fn get_history(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(q): Query<HistoryQuery>,
) -> Result<Json<HistoryPage>, ApiError> {
    let limit = q.limit.unwrap_or(DEFAULT_HISTORY_LIMIT);
    if limit < 1 {
        return Err(ApiError::invalid(
            "invalid_query",
            "limit",
            "limit must be at least 1",
        ));
    }
    let limit = limit.min(MAX_HISTORY_LIMIT);
    let after = q.after.unwrap_or(0).max(0);
    let run = match q.run_id.as_deref() {
        Some(raw) => {
            let run_id = Uuid::parse_str(raw).map_err(|_| {
                ApiError::invalid("invalid_query", "runId", format!("{raw:?} is not a run id"))
            })?;
            match state.store.run_of_workflow(&id, run_id).await? {
                Some(run) => run,
                None => {
                    return Err(ApiError::NotFound(format!(
                        "run {run_id} of workflow {id} not found"
                    )))
                }
            }
        }
        None => match state.store.current_run(&id).await? {
            Some(run) => run,
            // Accepted but not applied yet: the run has no events so far.
            None if state.store.get_start(&id).await?.is_some() => {
                return Ok(Json(HistoryPage::from_rows(Vec::new(), 1)));
            }
            None => return Err(workflow_not_found(&id)),
        },
    };
    // One row more than asked tells whether another page follows.
    let rows = state
        .store
        .history_page(run.run_id, after, limit + 1)
        .await?;
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    Ok(Json(HistoryPage::from_rows(rows, limit)))
}

/// The workflow as Conductor shows it: the current run, or the accepted start while the
/// decider has not applied it yet (RUNNING / QUEUING).
pub(crate) async fn load(
    state: &AppState,
    id: &str,
    include_tasks: bool,
) -> Result<Workflow, ApiError> {
    if include_tasks {
        if let Some((run, tasks)) = state.store.current_run_with_tasks(id).await? {
            // The run's definition, as it started (its first event), for `workflowTask`.
            let start = state.store.history_page(run.run_id, 0, 1).await?;
            let definition = start
                .first()
                .map(|e| &e.attributes["definition"])
                .cloned()
                .unwrap_or_default();
            return Ok(Workflow::from_run(run, tasks).with_workflow_tasks(&definition));
        }
    } else if let Some(run) = state.store.current_run(id).await? {
        return Ok(Workflow::from_run(run, Vec::new()));
    }
    match state.store.get_start(id).await? {
        Some(start) => Ok(Workflow::from_start(start)),
        None => Err(workflow_not_found(id)),
    }
}

fn workflow_not_found(id: &str) -> ApiError {
    ApiError::NotFound(format!("workflow {id} not found"))
}
