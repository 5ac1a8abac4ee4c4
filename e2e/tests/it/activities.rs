//! HTTP tasks, retries with back-off on durable timers, and timeouts, over the real
//! services (loopback test servers stand in for the outside world).

use serde_json::{json, Value};
use weft_e2e::Suite;

use crate::constructs::statuses;

crate::on_both_backends!(
    http_task_calls_a_service_and_feeds_the_next_task,
    retries_back_off_on_timers_and_timeouts_end_runs,
    a_registered_task_definition_governs_an_http_task_of_its_name,
);

/// A tiny HTTP service on loopback for the HTTP task to call: `POST /orders/{id}`
/// echoes the JSON body with the id; `GET /missing` answers 404.
async fn order_service() -> std::net::SocketAddr {
    use axum::extract::Path;
    use axum::routing::post;
    use axum::Json;
    let app = axum::Router::new().route(
        "/orders/{id}",
        post(
            |Path(id): Path<String>, Json(body): Json<Value>| async move {
                Json(json!({"id": id, "received": body}))
            },
        ),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

async fn http_task_calls_a_service_and_feeds_the_next_task(suite: Suite) {
    let addr = order_service().await;
    let client = suite.client();
    client
        .register(&json!({"name": "call_out", "version": 1, "tasks": [
            {"name": "place_order", "taskReferenceName": "order", "type": "HTTP",
             "inputParameters": {"http_request": {
                 "uri": format!("http://{addr}/orders/${{workflow.input.id}}"),
                 "method": "POST", "body": {"qty": "${workflow.input.qty}"}}}},
            {"name": "shout", "taskReferenceName": "s", "type": "SIMPLE",
             "inputParameters": {"text": "${order.output.response.body.id}"}},
            {"name": "missing", "taskReferenceName": "gone", "type": "HTTP", "optional": true,
             "inputParameters": {"http_request": {"uri": format!("http://{addr}/missing")}}}],
         "outputParameters": {"status": "${order.output.response.statusCode}",
                              "echo": "${order.output.response.body.received}",
                              "shouted": "${s.output.text}"}}))
        .await
        .unwrap();
    let id = client
        .start("call_out", json!({"id": "a-7", "qty": 3}))
        .await
        .unwrap();
    let wf = crate::ended(&suite, &id, "COMPLETED").await;
    assert_eq!(wf["output"]["status"], json!(200));
    assert_eq!(wf["output"]["echo"], json!({"qty": 3}));
    assert_eq!(wf["output"]["shouted"], json!("A-7"));
    let tasks = statuses(&wf);
    assert_eq!(
        tasks.last(),
        Some(&("gone".to_owned(), "COMPLETED_WITH_ERRORS".to_owned())),
        "a 404 fails the optional HTTP task, and the run goes on: {tasks:?}"
    );
}

/// A loopback service whose `/flaky` answers 500 twice, then 200 `{"calls": n}`.
async fn flaky_service() -> std::net::SocketAddr {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;
    let calls = Arc::new(AtomicU32::new(0));
    let app = axum::Router::new().route(
        "/flaky",
        axum::routing::get(move || {
            let calls = calls.clone();
            async move {
                let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
                if n <= 2 {
                    (
                        axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                        axum::Json(json!({"calls": n})),
                    )
                } else {
                    (axum::http::StatusCode::OK, axum::Json(json!({"calls": n})))
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

async fn retries_back_off_on_timers_and_timeouts_end_runs(suite: Suite) {
    let addr = flaky_service().await;
    let client = suite.client();
    client
        .register(&json!({"name": "persistent", "version": 1, "tasks": [
            {"name": "call", "taskReferenceName": "call", "type": "HTTP",
             "taskDefinition": {"retryCount": 2, "retryDelaySeconds": 1,
                                "retryLogic": "EXPONENTIAL_BACKOFF"},
             "inputParameters": {"http_request": {"uri": format!("http://{addr}/flaky")}}}],
         "outputParameters": {"calls": "${call.output.response.body.calls}"}}))
        .await
        .unwrap();
    client
        .register(
            &json!({"name": "impatient", "version": 1, "timeoutSeconds": 1, "tasks": [
            {"name": "approval", "taskReferenceName": "approval", "type": "WAIT"}]}),
        )
        .await
        .unwrap();

    let persistent = client.start("persistent", json!({})).await.unwrap();
    let impatient = client.start("impatient", json!({})).await.unwrap();

    let wf = crate::ended(&suite, &persistent, "COMPLETED").await;
    assert_eq!(wf["output"], json!({"calls": 3}));
    let attempts: Vec<(String, i64)> = wf["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["status"].as_str().unwrap_or_default().to_owned(),
                t["retryCount"].as_i64().unwrap_or(-1),
            )
        })
        .collect();
    assert_eq!(
        attempts,
        vec![
            ("FAILED".to_owned(), 0),
            ("FAILED".to_owned(), 1),
            ("COMPLETED".to_owned(), 2)
        ]
    );
    // Exponential back-off: 1 s after the first failure, 2 s after the second. Each retry
    // is scheduled at once with its delay as `callbackAfterSeconds` (Conductor's), and
    // its worker starts it only after the delay (a lower bound the dispatch timer
    // guarantees).
    let tasks = wf["tasks"].as_array().unwrap();
    for (pair, back_off) in tasks.windows(2).zip([1_000, 2_000]) {
        assert_eq!(
            pair[1]["callbackAfterSeconds"],
            back_off / 1_000,
            "{}",
            pair[1]
        );
        let gap = pair[1]["startTime"].as_i64().unwrap() - pair[0]["endTime"].as_i64().unwrap();
        assert!(
            gap >= back_off,
            "the retry started {gap} ms after the failure, before its {back_off} ms back-off"
        );
    }

    let wf = crate::ended(&suite, &impatient, "TIMED_OUT").await;
    assert_eq!(wf["subStatus"], json!("TIMED_OUT"));
    assert!(
        wf["reasonForIncompletion"]
            .as_str()
            .unwrap_or_default()
            .contains("timeoutSeconds"),
        "{wf}"
    );
}

/// Conductor applies a registered TaskDef to every task of its name, not only SIMPLE ones:
/// an HTTP task without an inline definition retries as its TaskDef says.
async fn a_registered_task_definition_governs_an_http_task_of_its_name(suite: Suite) {
    let addr = flaky_service().await;
    let client = suite.client();
    client
        .register_taskdefs(&json!([{"name": "call_flaky", "retryCount": 2,
                                    "retryDelaySeconds": 0, "responseTimeoutSeconds": 30}]))
        .await
        .unwrap();
    client
        .register(&json!({"name": "by_taskdef", "version": 1, "tasks": [
            {"name": "call_flaky", "taskReferenceName": "call", "type": "HTTP",
             "inputParameters": {"http_request": {"uri": format!("http://{addr}/flaky")}}}],
         "outputParameters": {"calls": "${call.output.response.body.calls}"}}))
        .await
        .unwrap();
    let id = client.start("by_taskdef", json!({})).await.unwrap();
    let wf = crate::ended(&suite, &id, "COMPLETED").await;
    assert_eq!(
        wf["output"],
        json!({"calls": 3}),
        "two retries, as the TaskDef says"
    );
    let statuses: Vec<&str> = wf["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["status"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(statuses, ["FAILED", "FAILED", "COMPLETED"]);
}
