//! Per-request tracing and metrics, and the JSON answers for unknown routes.

use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tracing::Instrument;

use crate::error::ApiError;
use crate::state::AppState;

/// Opens one span per request, a child of the caller's W3C `traceparent` when it sends
/// one, and records the request's count and latency under its route template.
pub async fn observe(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
    let method = req.method().clone();
    let parent = req
        .headers()
        .get(weft::telemetry::TRACEPARENT)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let span = tracing::info_span!(
        "http request",
        otel.name = %format!("{method} {route}"),
        otel.kind = "server",
        http.request.method = %method,
        http.route = %route,
        http.response.status_code = tracing::field::Empty,
    );
    weft::telemetry::set_parent(&span, parent.as_deref());

    let started = Instant::now();
    let response = next.run(req).instrument(span.clone()).await;
    let status = response.status().as_u16();
    span.record("http.response.status_code", status);
    state
        .http
        .observe(method.as_str(), &route, status, started.elapsed());
    response
}

/// 404 for a path no route matches, in the error shape.
pub async fn no_route(req: Request) -> Response {
    ApiError::NotFound(format!(
        "no route for {} {}",
        req.method(),
        req.uri().path()
    ))
    .into_response()
}

/// 405 for a known path with the wrong method, in the error shape.
pub async fn wrong_method(req: Request) -> Response {
    ApiError::MethodNotAllowed(format!(
        "{} is not allowed on {}",
        req.method(),
        req.uri().path()
    ))
    .into_response()
}
