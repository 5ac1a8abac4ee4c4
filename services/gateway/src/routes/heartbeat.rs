//! Heartbeats of HTTP workers (API.md, Weft extensions), answered by the shared
//! [`weft::registry`] like the bus heartbeats of the SDK:
//!
//! - `POST /api/tasks/{taskId}/heartbeat` `{details?}` → `{"action": "CONTINUE" | "STOP",
//!   "reason"?}`; 404 for a task the registry does not know; 503 when overloaded.
//! - `POST /api/tasks/heartbeat` `{taskIds: [...]}` → `{results: {taskId: {action,
//!   reason?}}}`, one request for many running tasks; an unknown id answers `NOT_FOUND`
//!   and an overloaded registry `THROTTLED` (retry soon) in its entry.

use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;
use weft::messages::{Beat, HeartbeatAction, HeartbeatAnswer};

use crate::error::ApiError;
use crate::extract::{parse_json, JsonBody, Path};
use crate::state::AppState;

/// Most task ids one batched heartbeat may carry.
pub const MAX_BATCH: usize = 10_000;

/// The heartbeat routes.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/tasks/heartbeat", post(batch))
        .route("/api/tasks/{task_id}/heartbeat", post(one))
}

/// The body of a single heartbeat.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct OneBody {
    /// Progress details, kept on the task.
    #[serde(default)]
    details: Option<Value>,
}

/// `POST /api/tasks/{taskId}/heartbeat`.
async fn one(
    State(state): State<AppState>,
    Path(task_id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<HeartbeatAnswer>, ApiError> {
    let body = body?;
    let OneBody { details } = if body.iter().all(u8::is_ascii_whitespace) {
        OneBody::default()
    } else {
        parse_json(&body)?
    };
    let unknown = || ApiError::NotFound(format!("task {task_id} not found"));
    let id = Uuid::parse_str(&task_id).map_err(|_| unknown())?;
    let answers = state
        .registry
        .heartbeat(&[Beat {
            task_id: id,
            details,
        }])
        .await?;
    let answer = answers
        .into_iter()
        .next()
        .map(|(_, a)| a)
        .ok_or_else(unknown)?;
    match answer.action {
        HeartbeatAction::NotFound => Err(unknown()),
        HeartbeatAction::Throttled => Err(ApiError::Unavailable(
            "too many heartbeats in flight; retry shortly".into(),
        )),
        // DEFER answers claims only; a heartbeat never gets it.
        HeartbeatAction::Continue | HeartbeatAction::Stop | HeartbeatAction::Defer => {
            Ok(Json(answer))
        }
    }
}

/// The body of a batched heartbeat.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct BatchBody {
    task_ids: Vec<String>,
}

/// The answer to a batched heartbeat.
#[derive(Debug, Serialize)]
struct BatchAnswer {
    results: BTreeMap<String, HeartbeatAnswer>,
}

/// `POST /api/tasks/heartbeat`.
async fn batch(
    State(state): State<AppState>,
    JsonBody(body): JsonBody<BatchBody>,
) -> Result<Json<BatchAnswer>, ApiError> {
    if body.task_ids.len() > MAX_BATCH {
        return Err(ApiError::invalid(
            "too_many_tasks",
            "taskIds",
            format!(
                "{} task ids; at most {MAX_BATCH} per request",
                body.task_ids.len()
            ),
        ));
    }
    let mut results = BTreeMap::new();
    let mut asked = Vec::with_capacity(body.task_ids.len());
    let mut beats = Vec::with_capacity(body.task_ids.len());
    for raw in body.task_ids {
        match Uuid::parse_str(&raw) {
            Ok(task_id) => {
                beats.push(Beat {
                    task_id,
                    details: None,
                });
                asked.push(raw);
            }
            // No task has such an id.
            Err(_) => {
                results.insert(raw, weft::registry::not_found());
            }
        }
    }
    // One answer per beat, in order: keyed by the id as the caller wrote it.
    let answers = state.registry.heartbeat(&beats).await?;
    for (raw, (_, answer)) in asked.into_iter().zip(answers) {
        results.insert(raw, answer);
    }
    Ok(Json(BatchAnswer { results }))
}
