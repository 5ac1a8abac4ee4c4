//! Requests the gateway must refuse cleanly, and its operational endpoints.

use axum::http::{Method, StatusCode};
use serde_json::json;

use crate::utils::{simple_def, TestEnv};

#[tokio::test]
async fn malformed_json_is_400_json_never_500() {
    let env = TestEnv::new().await;
    for uri in [
        "/api/metadata/workflow",
        "/api/metadata/workflow/validate",
        "/api/workflow",
        "/api/workflow/anything",
    ] {
        for raw in [&b"{\"name\": "[..], b"not json", b"{\"a\":1} trailing"] {
            let body = env
                .send(Method::POST, uri, Some(raw.to_vec()))
                .await
                .error(StatusCode::BAD_REQUEST);
            assert_eq!(body["code"], "invalid_json", "{uri}: {body}");
        }
    }
    let empty = env
        .send(Method::POST, "/api/metadata/workflow", Some(Vec::new()))
        .await
        .error(StatusCode::BAD_REQUEST);
    assert_eq!(empty["code"], "invalid_json");
    env.finish().await;
}

#[tokio::test]
async fn wrong_shapes_are_400_naming_the_field() {
    let env = TestEnv::new().await;
    env.register(&simple_def("shape", 1)).await;
    for (request, path) in [
        (json!({"name": "shape", "input": [1, 2]}), "input"),
        (json!({"name": "shape", "version": "one"}), "version"),
        (json!({"name": 7}), "name"),
        (json!({"name": "shape", "priority": 100}), "priority"),
        (
            json!({"name": "shape", "correlationId": {}}),
            "correlationId",
        ),
        (json!({"input": {}}), "name"),
        (
            json!({"name": "shape", "externalInputPayloadStoragePath": "in.json"}),
            "externalInputPayloadStoragePath",
        ),
    ] {
        let body = env
            .post("/api/workflow", &request)
            .await
            .error(StatusCode::BAD_REQUEST);
        assert_eq!(body["path"], path, "{request}: {body}");
    }
    let body = env
        .post("/api/workflow/shape", &json!([1]))
        .await
        .error(StatusCode::BAD_REQUEST);
    assert_eq!(body["path"], "input");
    env.post("/api/workflow", &json!("just a string"))
        .await
        .error(StatusCode::BAD_REQUEST);
    env.finish().await;
}

#[tokio::test]
async fn malformed_operation_flags_are_400_naming_the_parameter() {
    let env = TestEnv::new().await;
    for (uri, parameter) in [
        (
            "/api/workflow/some-run/retry?resumeSubworkflowTasks=maybe",
            "resumeSubworkflowTasks",
        ),
        (
            "/api/workflow/some-run/restart?useLatestDefinitions=2",
            "useLatestDefinitions",
        ),
        (
            "/api/workflow/bulk/restart?useLatestDefinitions=yes",
            "useLatestDefinitions",
        ),
    ] {
        let r = env.post(uri, &json!(["some-run"])).await;
        let body = r.error(StatusCode::BAD_REQUEST);
        let said = format!("{} {}", body["path"], body["message"]);
        assert!(said.contains(parameter), "{uri}: {body}");
    }
    env.finish().await;
}

#[tokio::test]
async fn oversize_body_is_413_json() {
    let env = TestEnv::with_max_body(1024).await;
    let mut def = simple_def("big", 1);
    def["description"] = json!("x".repeat(4096));
    for uri in [
        "/api/metadata/workflow",
        "/api/workflow",
        "/api/workflow/big",
    ] {
        let body = env
            .post(uri, &def)
            .await
            .error(StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(body["code"], "payload_too_large", "{uri}: {body}");
    }
    // Just under the limit is fine.
    env.register(&simple_def("small", 1)).await;
    env.finish().await;
}

#[tokio::test]
async fn unknown_routes_and_methods_answer_json() {
    let env = TestEnv::new().await;
    let body = env
        .get("/api/nothing/here")
        .await
        .error(StatusCode::NOT_FOUND);
    assert!(body["message"]
        .as_str()
        .unwrap_or_default()
        .contains("/api/nothing/here"));
    env.send(Method::PATCH, "/api/metadata/workflow", None)
        .await
        .error(StatusCode::METHOD_NOT_ALLOWED);
    env.finish().await;
}

#[tokio::test]
async fn health_readiness_and_metrics_are_served() {
    let env = TestEnv::new().await;
    let health = env.get("/healthz").await;
    assert_eq!(health.status, StatusCode::OK);
    let ready = env.get("/readyz").await;
    assert_eq!(ready.status, StatusCode::OK, "{}", ready.text());

    env.get("/api/workflow/some-id").await;
    let metrics = env.get("/metrics").await;
    assert_eq!(metrics.status, StatusCode::OK);
    let text = metrics.text();
    assert!(
        text.contains("route=\"/api/workflow/{id}\"") && text.contains("status=\"404\""),
        "{text}"
    );
    assert!(
        text.contains("weft_gateway_http_request_duration_seconds"),
        "{text}"
    );
    env.finish().await;
}
