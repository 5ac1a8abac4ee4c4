//! Start events: plain JSON start requests published to `<ns>.starts` by any AMQP client
//! start runs exactly once per idempotency key (the body's `idempotencyKey`, else the
//! message id); bad ones are dead-lettered with the reason; a reply goes where asked.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use weft::bus::{ConsumeOptions, Disposition, HeaderValue, RawDelivery, DEAD_REASON_HEADER};
use weft::topology::Names;

use crate::utils::{simple_def, TestEnv};

/// Runs started so far: (workflow name, correlation id, idempotency key).
async fn starts(env: &TestEnv) -> Vec<(String, Option<String>, Option<String>)> {
    sqlx::query_as(
        "SELECT workflow_name, correlation_id, idempotency_key FROM workflow_starts \
         ORDER BY idempotency_key",
    )
    .fetch_all(env.store.pg_pool().unwrap())
    .await
    .expect("read starts")
}

/// Publishes `body` to the start-event queue as an outside client would.
async fn publish(env: &TestEnv, body: &[u8], message_id: Option<&str>) {
    let queue = env.bus.names().starts_queue();
    env.bus
        .publish_raw("", &queue, body, message_id)
        .await
        .expect("publish a start event");
}

/// Collects what lands in the start-event queue's DLQ (acknowledging it).
fn dead_letters(env: &TestEnv, stop: &CancellationToken) -> mpsc::UnboundedReceiver<RawDelivery> {
    let (tx, rx) = mpsc::unbounded_channel();
    let dlq = Names::dlq(&env.bus.names().starts_queue());
    let opts = ConsumeOptions {
        prefetch: 16,
        concurrency: 1,
    };
    env.bus.consume_raw(
        &dlq,
        opts,
        move |d| {
            let tx = tx.clone();
            async move {
                let _ = tx.send(d);
                Disposition::Ack
            }
        },
        stop.clone(),
    );
    rx
}

fn reason(headers: &BTreeMap<String, HeaderValue>) -> String {
    match headers.get(DEAD_REASON_HEADER) {
        Some(HeaderValue::Text(reason)) => reason.clone(),
        other => panic!("no dead-letter reason: {other:?}"),
    }
}

#[tokio::test]
async fn start_events_start_one_run_per_key_and_dead_letter_bad_ones_with_the_reason() {
    let env = TestEnv::new().await;
    env.register(&simple_def("greeting", 1)).await;
    let stop = CancellationToken::new();
    let mut dead = dead_letters(&env, &stop);
    env.consume_start_events();

    let greeting = |correlation: &str| {
        json!({"name": "greeting", "input": {"who": "Ada"}, "correlationId": correlation})
            .to_string()
            .into_bytes()
    };
    // The same message id twice (a publisher's retry): one run.
    publish(&env, &greeting("by-message-id"), Some("evt-1")).await;
    publish(&env, &greeting("by-message-id"), Some("evt-1")).await;
    // The body's idempotency key wins over differing message ids: one run.
    let keyed = json!({"name": "greeting", "idempotencyKey": "key-2", "correlationId": "by-key"});
    publish(&env, keyed.to_string().as_bytes(), Some("m-a")).await;
    publish(&env, keyed.to_string().as_bytes(), Some("m-b")).await;
    // Through the starts exchange, any routing key.
    let exchange = env.bus.names().starts_exchange();
    env.bus
        .publish_raw(
            &exchange,
            "orders.created",
            &greeting("by-exchange"),
            Some("evt-3"),
        )
        .await
        .expect("publish through the exchange");
    // Poison: not JSON, an unknown definition, an input that is not an object.
    publish(&env, b"{oops", Some("bad-1")).await;
    publish(&env, br#"{"name": "ghost"}"#, Some("bad-2")).await;
    publish(
        &env,
        br#"{"name": "greeting", "input": [1]}"#,
        Some("bad-3"),
    )
    .await;

    let mut reasons = BTreeMap::new();
    while reasons.len() < 3 {
        let d = tokio::time::timeout(Duration::from_secs(20), dead.recv())
            .await
            .expect("three dead letters within 20 s")
            .expect("the DLQ consumer runs");
        reasons.insert(d.message_id.clone().unwrap_or_default(), reason(&d.headers));
    }
    assert!(reasons["bad-1"].starts_with("invalid_json"), "{reasons:?}");
    assert!(reasons["bad-2"].starts_with("not_found"), "{reasons:?}");
    assert!(reasons["bad-2"].contains("ghost"), "{reasons:?}");
    assert_eq!(
        reasons["bad-3"], "invalid_request: input: must be a JSON object",
        "{reasons:?}"
    );

    // Wait until every good event is through too.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let rendered = loop {
        let text = env.state.metrics.render();
        let settled = ["started", "repeated"]
            .iter()
            .map(|o| counter(&text, o))
            .sum::<u64>();
        if settled == 5 || tokio::time::Instant::now() > deadline {
            break text;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(counter(&rendered, "started"), 3, "{rendered}");
    assert_eq!(counter(&rendered, "repeated"), 2, "{rendered}");
    assert_eq!(counter(&rendered, "dead_lettered"), 3, "{rendered}");
    let runs = starts(&env).await;
    let expected = vec![
        (
            "greeting".to_owned(),
            Some("by-message-id".to_owned()),
            Some("evt-1".to_owned()),
        ),
        (
            "greeting".to_owned(),
            Some("by-exchange".to_owned()),
            Some("evt-3".to_owned()),
        ),
        (
            "greeting".to_owned(),
            Some("by-key".to_owned()),
            Some("key-2".to_owned()),
        ),
    ];
    assert_eq!(runs, expected);
    stop.cancel();
    env.finish().await;
}

/// `weft_start_events_total{outcome="…"}` in a metrics rendering (0 when absent).
fn counter(rendered: &str, outcome: &str) -> u64 {
    let prefix = format!("weft_start_events_total{{outcome=\"{outcome}\"}} ");
    rendered
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn a_start_event_with_reply_to_is_answered_with_the_run_or_the_error() {
    let env = TestEnv::new().await;
    env.register(&simple_def("greeting", 1)).await;
    env.consume_start_events();
    let queue = env.bus.names().starts_queue();
    let ask = |body: Value, id: &'static str| {
        let (bus, queue) = (env.bus.clone(), queue.clone());
        async move {
            let reply = bus
                .call_raw(
                    "",
                    &queue,
                    body.to_string().into_bytes(),
                    Some(id),
                    Duration::from_secs(20),
                )
                .await
                .expect("a reply");
            serde_json::from_slice::<Value>(&reply).expect("a JSON reply")
        }
    };
    let first = ask(json!({"name": "greeting", "input": {"who": "Ada"}}), "r-1").await;
    let id = first["workflowId"]
        .as_str()
        .expect("a workflow id")
        .to_owned();
    assert_eq!(first["repeated"], json!(false), "{first}");
    let again = ask(json!({"name": "greeting", "input": {"who": "Ada"}}), "r-1").await;
    assert_eq!(again, json!({"workflowId": id, "repeated": true}));

    let refused = ask(json!({"name": "greeting", "priority": 120}), "r-2").await;
    assert_eq!(
        refused,
        json!({"error": {
            "code": "invalid_request",
            "message": "must be between 0 and 99",
            "path": "priority"
        }})
    );
    // The answered run is the one the REST API reads.
    let read = env.get(&format!("/api/workflow/{id}")).await;
    assert_eq!(
        read.json()["workflowName"],
        json!("greeting"),
        "{}",
        read.text()
    );
    env.finish().await;
}
