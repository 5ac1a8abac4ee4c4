//! `GET /api/workflow/{id}/hooks` (docs/hooks.md): the hook deliveries of every run of a
//! workflow, oldest first, each with its status and every attempt's status code.

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use weft::store::hooks::DeliveryView;

use crate::error::ApiError;
use crate::extract::Path;
use crate::state::AppState;

/// The hook routes.
pub fn routes() -> Router<AppState> {
    Router::new().route("/api/workflow/{id}/hooks", get(list))
}

/// The deliveries of workflow `id`; 404 for a workflow that does not exist.
async fn list(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Vec<DeliveryView>>, ApiError> {
    let deliveries = state.store.hook_deliveries(&id).await?;
    if deliveries.is_empty()
        && state.store.current_run(&id).await?.is_none()
        && state.store.get_start(&id).await?.is_none()
    {
        return Err(ApiError::NotFound(format!("workflow {id} not found")));
    }
    Ok(Json(deliveries))
}
