//! Task definitions: `/api/metadata/taskdefs` (Conductor's `MetadataResource`).
//!
//! Both `POST` (a list) and `PUT` (one) create or replace. A registered TaskDef is copied
//! into each run started afterwards (see `weft::dsl::taskdef`), so changing or deleting
//! one never affects runs already started.

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::Value;
use weft::dsl::taskdef::{validate_task_def, validate_task_defs};
use weft::dsl::DslError;

use crate::error::ApiError;
use crate::extract::{JsonBody, Path};
use crate::state::AppState;

/// The task definition routes.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route(
            "/api/metadata/taskdefs",
            get(list).post(register_many).put(upsert_one),
        )
        .route("/api/metadata/taskdefs/{name}", get(get_one).delete(remove))
}

/// A 400 naming the offending field.
fn invalid(err: DslError) -> ApiError {
    ApiError::BadRequest {
        code: "invalid_task_definition",
        path: (!err.path.is_empty()).then_some(err.path),
        message: err.message,
    }
}

/// `POST /api/metadata/taskdefs`: creates or replaces every TaskDef of the list, or none
/// when one is invalid (400 naming it, e.g. `[1].retryCount`).
async fn register_many(
    State(state): State<AppState>,
    JsonBody(json): JsonBody<Value>,
) -> Result<(), ApiError> {
    let defs = validate_task_defs(&json).map_err(invalid)?;
    state.store.put_task_defs(&defs).await?;
    tracing::info!(count = defs.len(), "task definitions registered");
    Ok(())
}

/// `PUT /api/metadata/taskdefs`: creates or replaces one TaskDef.
async fn upsert_one(
    State(state): State<AppState>,
    JsonBody(json): JsonBody<Value>,
) -> Result<(), ApiError> {
    let def = validate_task_def(&json).map_err(invalid)?;
    state
        .store
        .put_task_defs(std::slice::from_ref(&def))
        .await?;
    tracing::info!(name = %def.name, "task definition updated");
    Ok(())
}

/// `GET /api/metadata/taskdefs`: every TaskDef, by name.
async fn list(State(state): State<AppState>) -> Result<Json<Vec<Value>>, ApiError> {
    let all = state.store.list_task_defs().await?;
    Ok(Json(all.into_iter().map(|d| d.definition).collect()))
}

/// `GET /api/metadata/taskdefs/{name}`; 404 when unknown.
async fn get_one(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    match state.store.get_task_def(&name).await? {
        Some(found) => Ok(Json(found.definition)),
        None => Err(not_found(&name)),
    }
}

/// `DELETE /api/metadata/taskdefs/{name}`; 404 when unknown.
async fn remove(State(state): State<AppState>, Path(name): Path<String>) -> Result<(), ApiError> {
    if state.store.delete_task_def(&name).await? {
        tracing::info!(%name, "task definition removed");
        Ok(())
    } else {
        Err(not_found(&name))
    }
}

fn not_found(name: &str) -> ApiError {
    ApiError::NotFound(format!("task definition {name} not found"))
}
