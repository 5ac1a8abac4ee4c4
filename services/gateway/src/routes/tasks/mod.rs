//! The task API for workers that speak HTTP (API.md, "Tasks"), in Conductor's shapes so
//! Conductor's SDKs work unchanged:
//!
//! - `GET /api/tasks/poll/{taskType}` and the long-polling
//!   `GET /api/tasks/poll/batch/{taskType}` hand out activity tasks ([`poll`]);
//! - `POST /api/tasks` and `POST /api/tasks/update-v2` take results ([`result`]);
//! - `GET /api/tasks/queue/sizes`, `/queue/size`, `/queue/all`: waiting tasks per type
//!   ([`queues`]);
//! - `GET /api/tasks/{taskId}` reads a task; `POST`/`GET /api/tasks/{taskId}/log` append
//!   and read its log ([`logs`]).

pub mod logs;
pub mod poll;
pub mod queues;
pub mod result;
pub mod view;

use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};
use uuid::Uuid;

use crate::error::ApiError;
use crate::extract::Path;
use crate::state::AppState;

/// The task routes.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/tasks/poll/{task_type}", get(poll::one))
        .route("/api/tasks/poll/batch/{task_type}", get(poll::batch))
        .route("/api/tasks", post(result::update))
        .route("/api/tasks/update-v2", post(result::update_v2))
        .route("/api/tasks/queue/sizes", get(queues::sizes))
        .route("/api/tasks/queue/size", get(queues::one))
        .route("/api/tasks/queue/all", get(queues::all))
        .route("/api/tasks/queue/polldata", get(queues::poll_data))
        .route("/api/tasks/queue/polldata/all", get(queues::all_poll_data))
        .route("/api/tasks/{task_id}", get(task))
        .route("/api/tasks/{task_id}/log", post(logs::add).get(logs::list))
}

/// `GET /api/tasks/{taskId}`: the task as stored, with the heartbeat registry's view of
/// its attempt (last heartbeat, progress details); 404 for an unknown one.
async fn task(
    State(state): State<AppState>,
    Path(raw): Path<String>,
) -> Result<Json<view::Task>, ApiError> {
    let unknown = || ApiError::NotFound(format!("task {raw} not found"));
    let id = Uuid::parse_str(&raw).map_err(|_| unknown())?;
    let row = view::load(&state.store, id).await?.ok_or_else(unknown)?;
    let row = view::as_it_stands(&state.store, row).await?;
    let check = state.registry.get(id).await?;
    Ok(Json(view::Task::from_row(row).with_heartbeat(check)))
}
