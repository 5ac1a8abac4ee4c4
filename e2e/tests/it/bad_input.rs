//! Invariant 7 over the real gateway: bad input gets a clear JSON 4xx.

use reqwest::Method;
use serde_json::{json, Value};
use weft_e2e::{greet, RawResponse, Service, Suite, TestEnv};

async fn gateway_only() -> Suite {
    Suite::start_with(TestEnv::new().await.unwrap(), &[Service::Gateway])
        .await
        .unwrap()
}

/// The answer has `status` and the error body `{code, message, ...}`; returns the body.
fn assert_error(resp: &RawResponse, status: u16, what: &str) -> Value {
    assert_eq!(
        resp.status, status,
        "{what}: answered {}: {}",
        resp.status, resp.text
    );
    let body = resp
        .json
        .clone()
        .unwrap_or_else(|| panic!("{what}: body is not JSON: {:?}", resp.text));
    for field in ["code", "message"] {
        assert!(
            body[field].as_str().is_some_and(|s| !s.is_empty()),
            "{what}: no `{field}` in {body}"
        );
    }
    body
}

async fn post(suite: &Suite, path: &str, body: &[u8]) -> RawResponse {
    suite
        .client()
        .raw(
            Method::POST,
            path,
            Some(("application/json", body.to_vec())),
        )
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_or_unknown_input_gets_a_json_4xx() {
    let suite = gateway_only().await;
    suite.client().register(&greet::definition()).await.unwrap();

    let resp = post(&suite, "/api/workflow", br#"{"name": "greet", "input": "#).await;
    assert_error(&resp, 400, "start with malformed JSON");
    let resp = post(&suite, "/api/metadata/workflow", b"{not json").await;
    assert_error(&resp, 400, "register with malformed JSON");

    let start = json!({"name": "no_such_workflow", "input": {}});
    let resp = post(&suite, "/api/workflow", start.to_string().as_bytes()).await;
    assert_error(&resp, 404, "start of an unknown definition");

    let unknown = uuid::Uuid::new_v4();
    let resp = suite
        .client()
        .raw(
            Method::GET,
            &format!("/api/workflow/{unknown}?includeTasks=true"),
            None,
        )
        .await
        .unwrap();
    assert_error(&resp, 404, "GET of an unknown workflow id");

    let ready = suite
        .client()
        .raw(Method::GET, "/readyz", None)
        .await
        .unwrap();
    assert_eq!(
        ready.status, 200,
        "the gateway keeps serving: {}",
        ready.text
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_definition_is_refused_naming_the_field() {
    let suite = gateway_only().await;
    let mut def = greet::definition();
    def["name"] = json!("dup_refs");
    def["tasks"][1]["taskReferenceName"] = json!("n");

    let resp = post(&suite, "/api/metadata/workflow", def.to_string().as_bytes()).await;
    let body = assert_error(&resp, 400, "definition with a duplicate taskReferenceName");
    let path = body["path"].as_str().unwrap_or_default();
    assert!(
        path.starts_with("tasks"),
        "`path` should name the task field: {body}"
    );

    let resp = suite
        .client()
        .raw(Method::GET, "/api/metadata/workflow/dup_refs", None)
        .await
        .unwrap();
    assert_eq!(resp.status, 404, "nothing was stored: {}", resp.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_idempotency_key_starts_once() {
    let suite = gateway_only().await;
    suite.client().register(&greet::definition()).await.unwrap();
    let request = |key: &str| json!({"name": "greet", "input": greet::input("Ada", 1), "idempotencyKey": key});

    let first = suite.client().start_request(&request("k-1")).await.unwrap();
    let again = suite.client().start_request(&request("k-1")).await.unwrap();
    let other = suite.client().start_request(&request("k-2")).await.unwrap();

    assert_eq!(first, again, "the same key answers the first workflow id");
    assert_ne!(first, other, "another key starts another workflow");
}
