//! `/api/event`: Conductor's event handler resource, and each handler's recent executions.
//!
//! | method and path | answer |
//! |---|---|
//! | `POST /api/event` | 200, empty; 409 when the name exists |
//! | `PUT /api/event` | 200, empty; 404 when the name does not exist |
//! | `GET /api/event` | every handler |
//! | `GET /api/event/{event}?activeOnly=true` | the handlers of one event location |
//! | `DELETE /api/event/{name}` | 200, empty; 404 when the name does not exist |
//! | `GET /api/event/{name}/executions?limit=100` | the handler's executions, newest first (Weft) |

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};
use weft::store::event_handlers::StoredEventHandler;

use super::model::EventHandler;
use crate::error::ApiError;
use crate::extract::{JsonBody, Path, Query};
use crate::state::AppState;

/// Executions answered at most.
const MAX_EXECUTIONS: i64 = 1_000;

/// The event handler routes.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/event", get(list).post(add).put(update))
        .route("/api/event/{event}", get(for_event).delete(remove))
        .route("/api/event/{name}/executions", get(executions))
}

/// The stored JSON with `active` as Weft reads it (Conductor's default `false` shown).
fn view(stored: StoredEventHandler) -> Value {
    let mut json = stored.definition;
    if let Some(map) = json.as_object_mut() {
        map.insert("active".to_owned(), json!(stored.active));
    }
    json
}

/// `POST /api/event`: registers a new handler.
async fn add(
    State(state): State<AppState>,
    JsonBody(json): JsonBody<Value>,
) -> Result<(), ApiError> {
    let handler = EventHandler::from_json(&json)?;
    let added = state
        .store
        .add_event_handler(&handler.name, &handler.event, handler.active, &json)
        .await?;
    if !added {
        return Err(ApiError::Conflict(format!(
            "EventHandler with name {} already exists!",
            handler.name
        )));
    }
    tracing::info!(name = %handler.name, event = %handler.event, active = handler.active, "event handler registered");
    state.event_handlers_changed.notify_one();
    Ok(())
}

/// `PUT /api/event`: replaces a handler.
async fn update(
    State(state): State<AppState>,
    JsonBody(json): JsonBody<Value>,
) -> Result<(), ApiError> {
    let handler = EventHandler::from_json(&json)?;
    let updated = state
        .store
        .update_event_handler(&handler.name, &handler.event, handler.active, &json)
        .await?;
    if !updated {
        return Err(ApiError::NotFound(format!(
            "EventHandler with name {} not found!",
            handler.name
        )));
    }
    tracing::info!(name = %handler.name, event = %handler.event, active = handler.active, "event handler updated");
    state.event_handlers_changed.notify_one();
    Ok(())
}

/// `GET /api/event`.
async fn list(State(state): State<AppState>) -> Result<Json<Vec<Value>>, ApiError> {
    let all = state.store.list_event_handlers().await?;
    Ok(Json(all.into_iter().map(view).collect()))
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ForEvent {
    #[serde(default, deserialize_with = "crate::extract::lenient_opt_bool")]
    active_only: Option<bool>,
}

/// `GET /api/event/{event}?activeOnly=true`.
async fn for_event(
    State(state): State<AppState>,
    Path(event): Path<String>,
    Query(q): Query<ForEvent>,
) -> Result<Json<Vec<Value>>, ApiError> {
    let active_only = q.active_only.unwrap_or(true);
    let all = state.store.list_event_handlers().await?;
    Ok(Json(
        all.into_iter()
            .filter(|h| h.event == event && (h.active || !active_only))
            .map(view)
            .collect(),
    ))
}

/// `DELETE /api/event/{name}`.
async fn remove(State(state): State<AppState>, Path(name): Path<String>) -> Result<(), ApiError> {
    if !state.store.delete_event_handler(&name).await? {
        return Err(ApiError::NotFound(format!(
            "EventHandler with name {name} not found!"
        )));
    }
    tracing::info!(%name, "event handler removed");
    state.event_handlers_changed.notify_one();
    Ok(())
}

#[derive(Debug, Deserialize)]
struct Limit {
    limit: Option<i64>,
}

/// `GET /api/event/{name}/executions?limit=100`: what the handler did with recent
/// events, newest first.
async fn executions(
    State(state): State<AppState>,
    Path(name): Path<String>,
    Query(q): Query<Limit>,
) -> Result<Json<Vec<Value>>, ApiError> {
    let limit = q.limit.unwrap_or(100);
    if !(1..=MAX_EXECUTIONS).contains(&limit) {
        return Err(ApiError::invalid(
            "invalid_query",
            "limit",
            format!("must be between 1 and {MAX_EXECUTIONS}"),
        ));
    }
    let found = state.store.list_event_executions(&name, limit).await?;
    Ok(Json(
        found
            .into_iter()
            .map(|e| {
                json!({
                    "id": e.id,
                    "name": e.handler,
                    "event": e.event,
                    "messageId": e.message_id,
                    "action": e.action,
                    "status": e.status,
                    "output": e.output,
                    "created": e.created_at.timestamp_millis(),
                })
            })
            .collect(),
    ))
}
