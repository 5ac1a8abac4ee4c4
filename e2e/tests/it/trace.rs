//! One trace per workflow (issue 6): every service exports its spans over OTLP (HTTP/JSON
//! here, to a receiver in the test) and the W3C trace context travels in AMQP headers and
//! the stored timers, so a run's start, decisions, timer and activities are one trace.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::routing::post;
use axum::Json;
use serde_json::{json, Value};
use weft_e2e::{EnvOptions, Suite, TestEnv};

/// One exported span.
#[derive(Debug, Clone)]
struct Span {
    service: String,
    name: String,
    trace_id: String,
    span_id: String,
    parent_id: String,
    attributes: HashMap<String, String>,
}

/// An OTLP/HTTP JSON receiver on loopback; returns its base URL and what it received.
async fn receiver() -> (String, Arc<Mutex<Vec<Span>>>) {
    let spans: Arc<Mutex<Vec<Span>>> = Arc::default();
    let store = spans.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        post(move |Json(body): Json<Value>| {
            let store = store.clone();
            async move {
                store.lock().unwrap().extend(parse(&body));
                Json(json!({}))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}"), spans)
}

/// The spans of an `ExportTraceServiceRequest` in OTLP's JSON encoding.
fn parse(body: &Value) -> Vec<Span> {
    let text = |v: &Value| match v {
        Value::Object(m) => m
            .values()
            .next()
            .map(|x| x.as_str().map_or_else(|| x.to_string(), str::to_owned))
            .unwrap_or_default(),
        _ => String::new(),
    };
    let attributes = |list: &Value| -> HashMap<String, String> {
        list.as_array()
            .into_iter()
            .flatten()
            .map(|a| {
                (
                    a["key"].as_str().unwrap_or_default().to_owned(),
                    text(&a["value"]),
                )
            })
            .collect()
    };
    let mut out = Vec::new();
    for rs in body["resourceSpans"].as_array().into_iter().flatten() {
        let service = attributes(&rs["resource"]["attributes"])
            .remove("service.name")
            .unwrap_or_default();
        for ss in rs["scopeSpans"].as_array().into_iter().flatten() {
            for s in ss["spans"].as_array().into_iter().flatten() {
                out.push(Span {
                    service: service.clone(),
                    name: s["name"].as_str().unwrap_or_default().to_owned(),
                    trace_id: s["traceId"].as_str().unwrap_or_default().to_lowercase(),
                    span_id: s["spanId"].as_str().unwrap_or_default().to_lowercase(),
                    parent_id: s["parentSpanId"]
                        .as_str()
                        .unwrap_or_default()
                        .to_lowercase(),
                    attributes: attributes(&s["attributes"]),
                });
            }
        }
    }
    out
}

/// The chain of span names from `span` up to the first `decider.command` (excluded),
/// e.g. `["activity", "queue.wait", "bus.publish"]`; panics when a parent is missing.
fn chain_to_decision<'a>(span: &'a Span, ids: &HashMap<&str, &'a Span>) -> Vec<&'a Span> {
    let mut chain = vec![span];
    let mut at = span;
    while at.name != "decider.command" {
        at = ids
            .get(at.parent_id.as_str())
            .unwrap_or_else(|| panic!("{at:?} has no parent in the trace (chain {chain:?})"));
        chain.push(at);
    }
    chain.pop();
    chain
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_is_one_trace_across_every_service_and_the_worker() {
    let (base, spans) = receiver().await;
    let options = EnvOptions {
        extra_env: vec![
            ("OTEL_EXPORTER_OTLP_ENDPOINT".into(), base),
            ("OTEL_EXPORTER_OTLP_PROTOCOL".into(), "http/json".into()),
            ("OTEL_BSP_SCHEDULE_DELAY".into(), "200".into()),
        ],
        ..EnvOptions::default()
    };
    let suite = Suite::start(TestEnv::create(options).await.unwrap())
        .await
        .unwrap();
    let client = suite.client();
    client
        .register(&json!({"name": "traced", "version": 1, "tasks": [
            {"name": "make_name", "taskReferenceName": "m", "type": "SIMPLE",
             "inputParameters": {"first": "${workflow.input.first}"}},
            {"name": "pause", "taskReferenceName": "p", "type": "WAIT",
             "inputParameters": {"duration": "1 seconds"}},
            {"name": "approve", "taskReferenceName": "approve", "type": "WAIT"},
            {"name": "shout", "taskReferenceName": "s", "type": "SIMPLE",
             "inputParameters": {"text": "${m.output.name}"}}]}))
        .await
        .unwrap();
    let id = client
        .start("traced", json!({"first": "Ada"}))
        .await
        .unwrap();
    // A signal sent by an operator's request (its own trace) joins the run's trace.
    let signal = client
        .post_json(
            &format!("/api/workflow/{id}/signal/approve"),
            &json!({"ok": true}),
        )
        .await
        .unwrap();
    assert!(signal.status < 300, "{}", signal.text);
    crate::ended(&suite, &id, "COMPLETED").await;

    let wanted: HashSet<&str> = [
        "weft-gateway",
        "weft-decider",
        "weft-history",
        "weft-heartbeat",
        "weft-worker-example",
    ]
    .into_iter()
    .collect();
    let deadline = tokio::time::Instant::now() + crate::RUN_TIMEOUT;
    loop {
        let seen = spans.lock().unwrap().clone();
        let commands: Vec<&Span> = seen
            .iter()
            .filter(|s| s.name == "decider.command" && s.attributes.get("workflow_id") == Some(&id))
            .collect();
        let traces: HashSet<&str> = commands.iter().map(|s| s.trace_id.as_str()).collect();
        if let (Some(trace), 1) = (traces.iter().next(), traces.len()) {
            let in_trace: Vec<&Span> = seen.iter().filter(|s| s.trace_id == *trace).collect();
            let services: HashSet<&str> = in_trace.iter().map(|s| s.service.as_str()).collect();
            let activities: Vec<&Span> = in_trace
                .iter()
                .copied()
                .filter(|s| s.name == "activity")
                .collect();
            let signalled = commands
                .iter()
                .any(|s| s.attributes.get("command").map(String::as_str) == Some("UpdateTask"));
            let committed = in_trace.iter().any(|s| s.name == "decider.commit");
            let registered = in_trace
                .iter()
                .any(|s| s.name == "heartbeat.apply" && s.service == "weft-heartbeat");
            // Start, two results, the timer, the signal (short activities send no
            // separate start report).
            if wanted.is_subset(&services)
                && activities.len() >= 2
                && commands.len() >= 5
                && signalled
                && committed
                && registered
            {
                // Parent links cross the bus: each activity is a child of the time its
                // task waited in its queue, which follows the decider's publish of it,
                // which follows the decision that scheduled it.
                let ids: HashMap<&str, &Span> =
                    in_trace.iter().map(|s| (s.span_id.as_str(), *s)).collect();
                for a in &activities {
                    let chain: Vec<(&str, &str)> = chain_to_decision(a, &ids)
                        .iter()
                        .map(|s| (s.name.as_str(), s.service.as_str()))
                        .collect();
                    assert_eq!(
                        chain,
                        vec![
                            ("activity", "weft-worker-example"),
                            ("queue.wait", "weft-worker-example"),
                            ("bus.publish", "weft-decider"),
                        ],
                        "{a:?}"
                    );
                }
                // The timer's firing is a child of the decision that set it, and the
                // decision it wakes follows its publish and queue wait.
                let fired = in_trace
                    .iter()
                    .find(|s| s.name == "history.timer_fired")
                    .expect("the timer's firing is in the trace");
                assert_eq!(ids[fired.parent_id.as_str()].name, "decider.command");
                let woken = commands
                    .iter()
                    .find(|s| s.attributes.get("command").map(String::as_str) == Some("TimerFired"))
                    .expect("the decision the timer woke");
                let chain: Vec<&str> = chain_to_decision(ids[woken.parent_id.as_str()], &ids)
                    .iter()
                    .map(|s| s.name.as_str())
                    .collect();
                assert_eq!(
                    chain,
                    vec!["queue.wait", "bus.publish", "history.timer_fired"]
                );
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "trace {trace} has services {services:?}, {} activity spans, {} decisions \
                 (signal: {signalled}, commit: {committed}, attempt registered: {registered})",
                activities.len(),
                commands.len()
            );
        } else {
            assert!(
                traces.len() <= 1,
                "the run's decisions are spread over several traces: {traces:?}"
            );
            assert!(
                tokio::time::Instant::now() < deadline,
                "no decision spans for {id}"
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
