//! `GET /api/workflow/{id}/graph?runId=`: a run's flowchart (docs/graph.md).
//!
//! The run's version is read first (one indexed row); the graph of `(run, version)` is
//! served from Redis when cached, else computed from one PostgreSQL snapshot and cached.
//! A newer event makes a newer version, so a cached graph is never stale.

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde::Deserialize;
use uuid::Uuid;

use crate::error::ApiError;
use crate::extract::{Path, Query};
use crate::state::AppState;

/// The graph route.
pub fn routes() -> Router<AppState> {
    Router::new().route("/api/workflow/{id}/graph", get(get_graph))
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct GraphQuery {
    run_id: Option<String>,
}

/// Parses an optional `runId` query parameter (400 naming it when malformed).
pub(crate) fn parse_run_id(raw: Option<&str>) -> Result<Option<Uuid>, ApiError> {
    raw.map(|raw| {
        Uuid::parse_str(raw).map_err(|_| {
            ApiError::invalid("invalid_query", "runId", format!("{raw:?} is not a run id"))
        })
    })
    .transpose()
}

async fn get_graph(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(q): Query<GraphQuery>,
) -> Result<Response, ApiError> {
    let run_id = parse_run_id(q.run_id.as_deref())?;
    let not_found = || match run_id {
        Some(run) => ApiError::NotFound(format!("run {run} of workflow {id} not found")),
        None => ApiError::NotFound(format!("workflow {id} has no run yet")),
    };
    let Some(at) = state.store.run_version(&id, run_id).await? else {
        return Err(not_found());
    };
    if let Some(cache) = &state.graph_cache {
        if let Some(json) = cache.get(at.run_id, at.version).await {
            return Ok(json_response(json));
        }
    }
    let Some(graph) = state
        .store
        .run_graph_at_least(&id, at.run_id, at.version)
        .await?
    else {
        return Err(not_found());
    };
    let json = serde_json::to_vec(&graph).map_err(|e| ApiError::Internal(e.into()))?;
    if let Some(cache) = &state.graph_cache {
        // Keyed by the version the snapshot saw, which may be newer than `at`'s.
        cache.put(graph.run_id, graph.version, &json).await;
    }
    Ok(json_response(json))
}

fn json_response(json: Vec<u8>) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], json).into_response()
}
