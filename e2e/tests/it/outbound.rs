//! The outbound guard over the real services (docs/outbound.md): with
//! `WEFT_OUTBOUND_ALLOW` empty, an HTTP task calling this machine fails at once with
//! FAILED_WITH_TERMINAL_ERROR and the reason, despite retries left, and the workflow's
//! `onFailure` hook to this machine is dead-lettered on its first attempt with the
//! reason; the receiver never hears from either. (The suite's other tests call
//! loopback servers with this machine allowed; `weft dev` allows it by default.)

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};
use weft_e2e::{EnvOptions, Service, Suite, TestEnv};

use crate::RUN_TIMEOUT;

/// A server on 127.0.0.1 answering 200 to anything, counting the calls.
async fn counting_server() -> (std::net::SocketAddr, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let app = axum::Router::new().fallback(move || {
        let counted = counted.clone();
        async move {
            counted.fetch_add(1, Ordering::SeqCst);
            "ok"
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, calls)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_to_this_machine_are_refused_without_the_allow_list() {
    let env = TestEnv::create(EnvOptions {
        // Empty: nothing beyond public addresses (overrides the suite's loopback).
        extra_env: vec![("WEFT_OUTBOUND_ALLOW".into(), String::new())],
        ..EnvOptions::default()
    })
    .await
    .unwrap();
    let suite = Suite::start_with(env, &Service::ALL).await.unwrap();
    let client = suite.client();
    let (addr, calls) = counting_server().await;
    client
        .register(&json!({"name": "calls_home", "version": 1,
            "hooks": {"onFailure": {"url": format!("http://{addr}/failed")}},
            "tasks": [{"name": "call", "taskReferenceName": "call", "type": "HTTP",
                "taskDefinition": {"retryCount": 3, "retryDelaySeconds": 1},
                "inputParameters": {"http_request": {"uri": format!("http://{addr}/x")}}}]}))
        .await
        .unwrap();
    let id = client.start("calls_home", json!({})).await.unwrap();

    let wf = crate::ended(&suite, &id, "FAILED").await;
    let tasks = wf["tasks"].as_array().expect("tasks");
    assert_eq!(tasks.len(), 1, "a refused call is not retried: {wf}");
    assert_eq!(tasks[0]["status"], "FAILED_WITH_TERMINAL_ERROR", "{wf}");
    let expected = format!(
        "HTTP GET http://{addr}/x: outbound call refused: 127.0.0.1 is in the loopback \
         range (127.0.0.0/8); allow it with WEFT_OUTBOUND_ALLOW"
    );
    assert_eq!(tasks[0]["reasonForIncompletion"], json!(expected), "{wf}");

    let hook = settled_hook(&suite, &id).await;
    assert_eq!(hook["hook"], "onFailure", "{hook}");
    assert_eq!(hook["status"], "DEAD", "{hook}");
    assert_eq!(hook["attemptCount"], 1, "dead on its first attempt: {hook}");
    assert_eq!(
        hook["lastError"],
        json!(
            "outbound call refused: 127.0.0.1 is in the loopback range (127.0.0.0/8); \
             allow it with WEFT_OUTBOUND_ALLOW"
        ),
        "{hook}"
    );
    assert_eq!(
        calls.load(Ordering::SeqCst),
        0,
        "nothing reached the server"
    );
}

/// The only hook delivery of run `id`, once it has settled.
async fn settled_hook(suite: &Suite, id: &str) -> Value {
    let deadline = tokio::time::Instant::now() + RUN_TIMEOUT;
    loop {
        let resp = suite
            .client()
            .raw(Method::GET, &format!("/api/workflow/{id}/hooks"), None)
            .await
            .unwrap();
        assert_eq!(resp.status, 200, "{}", resp.text);
        let deliveries = resp.json.unwrap().as_array().unwrap().clone();
        if let [only] = deliveries.as_slice() {
            if only["status"] != "PENDING" {
                return only.clone();
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the hook of {id} never settled: {deliveries:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
