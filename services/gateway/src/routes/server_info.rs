//! Conductor's health and version endpoints (`HealthCheckResource`, `VersionResource`),
//! for clients and load balancers that probe them instead of `/healthz` and `/readyz`.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};

use crate::state::AppState;

/// The health and version routes.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/health", get(health))
        .route("/api/health", get(health))
        .route("/api/version", get(version))
}

/// `GET /health`, `GET /api/health`: Conductor's `HealthCheckStatus`; healthy when the
/// database answers and the broker is connected (as `/readyz`), 503 otherwise.
async fn health(State(state): State<AppState>) -> (StatusCode, Json<Value>) {
    let check = state
        .store
        .ping()
        .await
        .map_err(|e| e.to_string())
        .and_then(|()| match state.bus.is_connected() {
            true => Ok(()),
            false => Err("not connected to the broker".to_owned()),
        });
    let (status, healthy, results) = match check {
        Ok(()) => (StatusCode::OK, true, json!([])),
        Err(why) => (
            StatusCode::SERVICE_UNAVAILABLE,
            false,
            json!([{"healthy": false, "details": {"error": why}}]),
        ),
    };
    (
        status,
        Json(json!({"healthResults": results, "suppressedHealthResults": [], "healthy": healthy})),
    )
}

/// `GET /api/version`: the gateway's version, as text.
async fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}
