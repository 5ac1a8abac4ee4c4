//! The web UI (issue 5): `GET /` and its assets under `/ui/`.
//!
//! The pages are built from `services/gateway/ui` (plain JavaScript bundled by esbuild;
//! Cytoscape.js with dagre for the flowchart, see that folder's README) and embedded
//! here at compile time, so the binary serves them with nothing on disk and a fresh
//! clone builds without npm. They talk to the REST API like any other client.

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;

use crate::state::AppState;

const INDEX_HTML: &str = include_str!("../../ui/index.html");
const APP_CSS: &str = include_str!("../../ui/app.css");
const APP_JS: &str = include_str!("../../ui/dist/app.js");

/// The UI routes; none is under `/api`, `/healthz`, `/readyz` or `/metrics`.
pub fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route(
            "/",
            get(|| async { asset("text/html; charset=utf-8", INDEX_HTML) }),
        )
        .route(
            "/ui/app.css",
            get(|| async { asset("text/css; charset=utf-8", APP_CSS) }),
        )
        .route(
            "/ui/app.js",
            get(|| async { asset("text/javascript; charset=utf-8", APP_JS) }),
        )
}

/// `GET /api/ui/config`: what the UI needs to know of this deployment, e.g.
/// `{"traceUrl": "http://localhost:16686/trace/{traceId}", "auth": true}` (`traceUrl`
/// `null`: no trace viewer; `auth`: the API needs a token, so the UI asks for one).
pub fn config_routes() -> Router<AppState> {
    Router::new().route(
        "/api/ui/config",
        get(|State(state): State<AppState>| async move {
            Json(json!({ "traceUrl": state.trace_url, "auth": state.auth.enabled() }))
        }),
    )
}

/// An embedded file; revalidated on each load so that a new gateway's UI is seen at once.
fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        body,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use tower::ServiceExt;

    async fn get(path: &str) -> (StatusCode, String, String) {
        let res = super::routes::<()>()
            .oneshot(Request::get(path).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = res.status();
        let ct = res.headers()[axum::http::header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .to_owned();
        let body = axum::body::to_bytes(res.into_body(), usize::MAX)
            .await
            .unwrap();
        (status, ct, String::from_utf8(body.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn root_serves_the_page_that_loads_the_bundle() {
        let (status, ct, body) = get("/").await;
        assert_eq!(status, StatusCode::OK);
        assert!(ct.starts_with("text/html"), "{ct}");
        assert!(body.contains(r#"src="/ui/app.js""#), "{body}");
        assert!(body.contains(r#"href="/ui/app.css""#), "{body}");
    }

    #[tokio::test]
    async fn assets_are_served_with_their_types() {
        let (status, ct, body) = get("/ui/app.js").await;
        assert_eq!(status, StatusCode::OK);
        assert!(ct.starts_with("text/javascript"), "{ct}");
        assert!(
            body.contains("cytoscape") || body.len() > 100_000,
            "not the bundle"
        );
        let (status, ct, _) = get("/ui/app.css").await;
        assert_eq!(status, StatusCode::OK);
        assert!(ct.starts_with("text/css"), "{ct}");
    }
}
