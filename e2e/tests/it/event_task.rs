//! The EVENT task over the real services and on `weft dev`: a run publishes its message
//! to an exchange (read back with its fields and the task id as message id), starts
//! another run through the start-event queue, and, with `asyncComplete`, waits until the
//! task is completed by reference.

use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::mpsc;
use weft::bus::{ConsumeOptions, Disposition, ExchangeKind, RawDelivery};
use weft_e2e::{greet, Suite};

use crate::RUN_TIMEOUT;

crate::on_both_backends!(event_tasks_publish_start_runs_and_complete_asynchronously);

async fn event_tasks_publish_start_runs_and_complete_asynchronously(suite: Suite) {
    let client = suite.client();
    client.register(&greet::definition()).await.unwrap();
    let (bus, stop) = suite.client_bus().await.unwrap();
    let ns = bus.names().namespace().to_owned();
    let exchange = format!("{ns}-orders");
    // A listener on the exchange the run publishes to.
    bus.declare_exchange(&exchange, ExchangeKind::Topic)
        .await
        .unwrap();
    let queue = format!("{ns}-order-log");
    bus.declare_queue(&queue, &[(&exchange, "order.#")])
        .await
        .unwrap();
    let (tx, mut received) = mpsc::unbounded_channel::<RawDelivery>();
    let opts = ConsumeOptions {
        prefetch: 8,
        concurrency: 1,
    };
    bus.consume_raw(
        &queue,
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

    client
        .register(&json!({"name": "notify", "version": 2, "tasks": [
            {"name": "announce", "taskReferenceName": "announce", "type": "EVENT",
             "sink": "amqp_exchange:${workflow.input.exchange}:order.created",
             "inputParameters": {"orderId": "${workflow.input.orderId}"}},
            {"name": "follow_up", "taskReferenceName": "follow_up", "type": "EVENT",
             "sink": format!("amqp:{}", bus.names().starts_queue()),
             "inputParameters": {"name": "greet", "input": {"first": "Ev", "n": 2}}},
            {"name": "confirm", "taskReferenceName": "confirm", "type": "EVENT",
             "sink": "amqp_exchange:${workflow.input.exchange}:order.confirmed",
             "asyncComplete": true, "inputParameters": {}},
            {"name": "internal", "taskReferenceName": "internal", "type": "EVENT",
             "sink": "conductor", "inputParameters": {"step": "settle"}},
            {"name": "settle", "taskReferenceName": "settle", "type": "WAIT"}
         ], "outputParameters": {"produced": "${announce.output.event_produced}",
                                 "confirmed": "${confirm.output.by}",
                                 "internal": "${internal.output.event_produced}",
                                 "settled": "${settle.output.by}"}}))
        .await
        .unwrap();
    // The message carries the run's correlation id (as in Conductor), which the started
    // run takes.
    // Conductor's own queue: the `conductor` sink of `internal` is
    // `conductor:notify:internal`, where this handler completes the WAIT after it.
    let r = client
        .post_json(
            "/api/event",
            &json!({"name": "settler", "event": "conductor:notify:internal", "active": true,
                "actions": [{"action": "complete_task", "complete_task": {
                    "workflowId": "${workflowInstanceId}", "taskRefName": "${step}",
                    "output": {"by": "handler"}}}]}),
        )
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.text);
    let id = client
        .start_request(&json!({"name": "notify", "correlationId": "o-9",
            "input": {"exchange": exchange, "orderId": "o-9"}}))
        .await
        .unwrap();

    // Both messages arrive (in either order: EVENT tasks decided in one commit are
    // published together): the task's input with the run's identity, the task id as id.
    let mut messages = Vec::new();
    for _ in 0..2 {
        let d = tokio::time::timeout(RUN_TIMEOUT, received.recv())
            .await
            .expect("the EVENT tasks' messages")
            .unwrap();
        messages.push(d);
    }
    let sink = format!("amqp_exchange:{exchange}:order.created");
    let sent_to = |d: &RawDelivery| -> Value { serde_json::from_slice::<Value>(&d.body).unwrap() };
    let (first, confirm) = match sent_to(&messages[0])["sink"] == json!(sink) {
        true => (&messages[0], &messages[1]),
        false => (&messages[1], &messages[0]),
    };
    assert_eq!(
        sent_to(first),
        json!({"orderId": "o-9", "workflowInstanceId": id, "workflowType": "notify",
               "workflowVersion": 2, "correlationId": "o-9", "sink": sink,
               "event_produced": sink})
    );
    // The synchronous one completes once the broker confirmed its message, the
    // asynchronous one waits for a completion.
    let deadline = tokio::time::Instant::now() + RUN_TIMEOUT;
    let run = loop {
        let run = client.get(&id).await.unwrap();
        let completed = run["tasks"].as_array().is_some_and(|tasks| {
            tasks.iter().any(|t| {
                t["referenceTaskName"] == json!("announce") && t["status"] == json!("COMPLETED")
            })
        });
        if completed {
            break run;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "announce never completed: {run}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let tasks = run["tasks"].as_array().unwrap();
    let task_of = |r: &str| {
        tasks
            .iter()
            .find(|t| t["referenceTaskName"] == json!(r))
            .cloned()
            .unwrap_or_else(|| panic!("no task {r}: {run}"))
    };
    assert_eq!(
        first.message_id.as_deref(),
        task_of("announce")["taskId"].as_str()
    );
    assert_eq!(
        confirm.message_id.as_deref(),
        task_of("confirm")["taskId"].as_str()
    );
    assert_eq!(
        task_of("announce")["outputData"]["event_produced"],
        json!(sink)
    );
    assert_eq!(task_of("confirm")["status"], json!("IN_PROGRESS"), "{run}");
    assert_eq!(run["status"], json!("RUNNING"));

    let r = client
        .post_json(
            &format!("/api/tasks/{id}/confirm/COMPLETED"),
            &json!({"by": "warehouse"}),
        )
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.text);
    let run = client
        .wait_for_status(&id, &["COMPLETED"], RUN_TIMEOUT)
        .await
        .unwrap();
    assert_eq!(
        run["output"],
        json!({"produced": sink, "confirmed": "warehouse",
               "internal": "conductor:notify:internal", "settled": "handler"}),
        "{run}"
    );

    // The second EVENT task started a greet run through the start-event queue.
    let deadline = tokio::time::Instant::now() + RUN_TIMEOUT;
    let started = loop {
        let found = client
            .raw(
                reqwest::Method::GET,
                "/api/workflow/search?query=workflowType%20IN%20(greet)",
                None,
            )
            .await
            .unwrap();
        let hits: Value = serde_json::from_str(&found.text).unwrap();
        if let Some(hit) = hits["results"].as_array().and_then(|r| r.first()) {
            break hit["workflowId"].as_str().unwrap().to_owned();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no greet run: {hits}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let greet_run = client
        .wait_for_status(&started, &["COMPLETED"], RUN_TIMEOUT)
        .await
        .unwrap();
    assert_eq!(greet_run["correlationId"], json!("o-9"));
    assert_eq!(greet_run["output"], greet::expected_output("Ev", 2));

    let on_dev = suite.dev_bus().is_some();
    drop(suite);
    stop.cancel();
    if !on_dev {
        bus.teardown(&[]).await.unwrap();
    }
}
