//! Conductor's bulk operations (`WorkflowBulkResource`): the same operation on up to
//! 1,000 workflows, each applied as its own request would be (in its run's order, with
//! the decider's verdict), answered as `BulkResponse` — the ids it applied to, and for
//! each other id why not. One failing id never stops the others.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, post, put};
use axum::{Json, Router};
use futures_util::stream::{self, StreamExt};
use serde::Deserialize;
use serde_json::Value;

use crate::error::ApiError;
use crate::extract::{JsonBody, Path, Query};
use crate::state::AppState;
use crate::views::BulkResponse;

/// Most ids one bulk request takes, as Conductor.
const MAX_IDS: usize = 1_000;
/// Operations of one bulk request in flight at once.
const CONCURRENCY: usize = 16;

/// The bulk routes.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/workflow/bulk/pause", put(pause))
        .route("/api/workflow/bulk/resume", put(resume))
        .route("/api/workflow/bulk/restart", post(restart))
        .route("/api/workflow/bulk/retry", post(retry))
        .route("/api/workflow/bulk/terminate", post(terminate))
        .route("/api/workflow/bulk/remove", delete(remove))
        .route(
            "/api/workflow/bulk/terminate-remove",
            delete(terminate_remove),
        )
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct BulkQuery {
    reason: Option<String>,
    #[serde(default)]
    use_latest_definitions: bool,
}

/// The ids of the body: a non-empty JSON array of at most 1,000 strings.
fn ids(body: Value) -> Result<Vec<String>, ApiError> {
    let invalid = |message: String| ApiError::invalid("invalid_field", "workflowIds", message);
    let Value::Array(items) = body else {
        return Err(invalid(
            "the body must be a JSON array of workflow ids".into(),
        ));
    };
    if items.is_empty() || items.len() > MAX_IDS {
        return Err(invalid(format!(
            "between 1 and {MAX_IDS} workflow ids, not {}",
            items.len()
        )));
    }
    items
        .into_iter()
        .map(|v| match v {
            Value::String(id) => Ok(id),
            other => Err(invalid(format!("{other} is not a workflow id"))),
        })
        .collect()
}

/// Applies `one` to every id (at most [`CONCURRENCY`] at once) and gathers the answer.
async fn each<F, Fut>(ids: Vec<String>, one: F) -> Json<BulkResponse>
where
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = Result<Response, ApiError>>,
{
    let outcomes: Vec<(String, Result<Response, ApiError>)> = stream::iter(ids)
        .map(|id| {
            let done = one(id.clone());
            async move { (id, done.await) }
        })
        .buffered(CONCURRENCY)
        .collect()
        .await;
    let mut answer = BulkResponse::default();
    for (id, outcome) in outcomes {
        match outcome {
            // 202: queued without a verdict yet is not "applied".
            Ok(r) if r.status() == StatusCode::ACCEPTED => {
                answer.bulk_error_results.insert(
                    id,
                    Value::String("queued for the run; no decider answered in time".into()),
                );
            }
            Ok(_) => answer.bulk_successful_results.push(id),
            Err(e) => {
                answer
                    .bulk_error_results
                    .insert(id, Value::String(e.summary()));
            }
        }
    }
    Json(answer)
}

/// `op` (an operator route taking the workflow id) on every id of the body.
async fn each_id<F, Fut>(
    state: AppState,
    body: Value,
    op: F,
) -> Result<Json<BulkResponse>, ApiError>
where
    F: Fn(State<AppState>, Path<String>) -> Fut,
    Fut: std::future::Future<Output = Result<Response, ApiError>>,
{
    let ids = ids(body)?;
    Ok(each(ids, |id| op(State(state.clone()), Path(id))).await)
}

/// `PUT /api/workflow/bulk/pause`.
async fn pause(
    State(state): State<AppState>,
    JsonBody(body): JsonBody<Value>,
) -> Result<Json<BulkResponse>, ApiError> {
    each_id(state, body, super::operations::pause).await
}

/// `PUT /api/workflow/bulk/resume`.
async fn resume(
    State(state): State<AppState>,
    JsonBody(body): JsonBody<Value>,
) -> Result<Json<BulkResponse>, ApiError> {
    each_id(state, body, super::operations::resume).await
}

/// `POST /api/workflow/bulk/restart?useLatestDefinitions=`.
async fn restart(
    State(state): State<AppState>,
    Query(q): Query<BulkQuery>,
    JsonBody(body): JsonBody<Value>,
) -> Result<Json<BulkResponse>, ApiError> {
    let ids = ids(body)?;
    let latest = q.use_latest_definitions;
    Ok(each(ids, |id| super::operations::restart_run(&state, id, latest)).await)
}

/// `POST /api/workflow/bulk/retry`.
async fn retry(
    State(state): State<AppState>,
    JsonBody(body): JsonBody<Value>,
) -> Result<Json<BulkResponse>, ApiError> {
    let ids = ids(body)?;
    Ok(each(ids, |id| super::operations::retry_run(&state, id, false)).await)
}

/// `POST /api/workflow/bulk/terminate?reason=`.
async fn terminate(
    State(state): State<AppState>,
    Query(q): Query<BulkQuery>,
    JsonBody(body): JsonBody<Value>,
) -> Result<Json<BulkResponse>, ApiError> {
    let ids = ids(body)?;
    let reason = q
        .reason
        .filter(|r| !r.trim().is_empty())
        .unwrap_or_else(|| "terminated by an operator (bulk)".to_owned());
    Ok(each(ids, |id| {
        let (state, reason) = (state.clone(), reason.clone());
        async move {
            let body = super::operations::terminate_run(&state, &id, reason).await?;
            Ok(match body.get("requestId") {
                Some(_) => StatusCode::ACCEPTED.into_response(),
                None => StatusCode::OK.into_response(),
            })
        }
    })
    .await)
}

/// `DELETE /api/workflow/bulk/remove`: removes the ended ones.
async fn remove(
    State(state): State<AppState>,
    JsonBody(body): JsonBody<Value>,
) -> Result<Json<BulkResponse>, ApiError> {
    let ids = ids(body)?;
    Ok(each(ids, |id| {
        let state = state.clone();
        async move {
            super::executions::remove_one(&state, &id).await?;
            Ok(StatusCode::OK.into_response())
        }
    })
    .await)
}

/// `DELETE /api/workflow/bulk/terminate-remove?reason=`.
async fn terminate_remove(
    State(state): State<AppState>,
    Query(q): Query<BulkQuery>,
    JsonBody(body): JsonBody<Value>,
) -> Result<Json<BulkResponse>, ApiError> {
    let ids = ids(body)?;
    Ok(each(ids, |id| {
        let (state, reason) = (state.clone(), q.reason.clone());
        async move {
            super::executions::terminate_and_remove(&state, &id, reason).await?;
            Ok(StatusCode::OK.into_response())
        }
    })
    .await)
}
