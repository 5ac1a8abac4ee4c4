//! Event handlers over the real services and on `weft dev`: handlers registered while
//! everything runs listen to an exchange, and the events published there complete a WAIT
//! task, fail a SIMPLE task, terminate a run and start one, each as the handler's
//! condition selects.

use std::time::Duration;

use serde_json::{json, Value};
use weft::bus::ExchangeKind;
use weft_e2e::Suite;

use crate::RUN_TIMEOUT;

crate::on_both_backends!(
    handlers_on_an_exchange_complete_terminate_and_start_runs,
    a_completion_by_event_for_a_wait_not_reached_yet_is_kept_until_it_is,
);

/// A bus to publish on: `weft dev`'s own, or a connection to the suite's broker.
async fn register(suite: &Suite, handler: Value) {
    let r = suite
        .client()
        .post_json("/api/event", &handler)
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.text);
}

async fn handlers_on_an_exchange_complete_terminate_and_start_runs(suite: Suite) {
    let client = suite.client();
    client
        .register(&json!({"name": "checkout", "version": 1, "tasks": [
            {"name": "payment", "taskReferenceName": "payment", "type": "WAIT"}],
         "outputParameters": {"paid": "${payment.output.amount}",
                              "by": "${payment.output.conductor.event.name}"}}))
        .await
        .unwrap();
    let (bus, stop) = suite.client_bus().await.unwrap();
    let ns = bus.names().namespace().to_owned();
    let exchange = format!("{ns}-shop");
    let event = format!("amqp_exchange:{exchange}:payment.*");
    register(
        &suite,
        json!({
            "name": "paid", "event": event, "active": true,
            "condition": "$.status == 'paid'",
            "actions": [{"action": "complete_task", "complete_task": {
                "workflowId": "${workflowId}", "taskRefName": "payment",
                "output": {"amount": "${amount}"}}}]
        }),
    )
    .await;
    register(
        &suite,
        json!({
            "name": "cancelled", "event": event, "active": true,
            "condition": "$.status == 'cancelled'",
            "actions": [{"action": "terminate_workflow", "terminate_workflow": {
                "workflowId": "${workflowId}", "terminationReason": "cancelled by ${by}"}}]
        }),
    )
    .await;
    register(
        &suite,
        json!({
            "name": "rejected", "event": event, "active": true,
            "condition": "$.status == 'rejected'",
            "actions": [{"action": "fail_task", "fail_task": {
                "workflowId": "${workflowId}", "taskRefName": "review",
                "reasonForIncompletion": "rejected: ${why}"}}]
        }),
    )
    .await;
    register(
        &suite,
        json!({
            "name": "reorder", "event": event, "active": true,
            "condition": "$.status == 'cancelled' && $.reorder",
            "actions": [{"action": "start_workflow", "start_workflow": {
                "name": "checkout", "correlationId": "${workflowId}"}}]
        }),
    )
    .await;
    // The exchange and the queue as the gateway declares them, so that nothing published
    // before its listener is up is lost.
    bus.declare_exchange(&exchange, ExchangeKind::Topic)
        .await
        .unwrap();
    let queue = format!("{ns}.event.{exchange}.payment.*");
    bus.declare_queue(&queue, &[(&exchange, "payment.*")])
        .await
        .unwrap();

    // A SIMPLE task no worker serves, failed by an event.
    client
        .register(&json!({"name": "manual", "version": 1, "tasks": [
            {"name": "manual_review", "taskReferenceName": "review", "type": "SIMPLE"}]}))
        .await
        .unwrap();
    let rejected = client.start("manual", json!({})).await.unwrap();
    let deadline = tokio::time::Instant::now() + RUN_TIMEOUT;
    loop {
        let run = client.get(&rejected).await.unwrap();
        if run["tasks"].as_array().is_some_and(|t| !t.is_empty()) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "review never scheduled: {run}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let paid = client.start("checkout", json!({})).await.unwrap();
    let cancelled = client.start("checkout", json!({})).await.unwrap();
    let publish = |key: &'static str, body: Value, id: &'static str| {
        let (bus, exchange) = (bus.clone(), exchange.clone());
        async move {
            bus.publish_raw(&exchange, key, body.to_string().as_bytes(), Some(id))
                .await
                .unwrap();
        }
    };
    publish(
        "payment.received",
        json!({"workflowId": paid, "status": "paid", "amount": 42}),
        "e-1",
    )
    .await;
    publish(
        "payment.cancelled",
        json!({"workflowId": cancelled, "status": "cancelled", "by": "Ada", "reorder": true}),
        "e-2",
    )
    .await;

    publish(
        "payment.rejected",
        json!({"workflowId": rejected, "status": "rejected", "why": "no stock"}),
        "e-3",
    )
    .await;
    let run = client
        .wait_for_status(&rejected, &["FAILED"], RUN_TIMEOUT)
        .await
        .unwrap();
    let review = &run["tasks"][0];
    assert_eq!(review["status"], json!("FAILED"), "{run}");
    assert_eq!(
        review["reasonForIncompletion"],
        json!("rejected: no stock"),
        "{run}"
    );
    let run = client
        .wait_for_status(&paid, &["COMPLETED"], RUN_TIMEOUT)
        .await
        .unwrap();
    assert_eq!(run["output"]["paid"], json!(42), "{run}");
    let run = client
        .wait_for_status(&cancelled, &["TERMINATED"], RUN_TIMEOUT)
        .await
        .unwrap();
    assert_eq!(
        run["reasonForIncompletion"],
        json!("cancelled by Ada"),
        "{run}"
    );

    // The third handler started a new checkout for the cancelled one.
    let deadline = tokio::time::Instant::now() + RUN_TIMEOUT;
    let reordered = loop {
        let r = client
            .raw(reqwest::Method::GET, "/api/event/reorder/executions", None)
            .await
            .unwrap();
        let found: Value = serde_json::from_str(&r.text).unwrap();
        let started = found
            .as_array()
            .and_then(|all| all.iter().find_map(|e| e["output"]["workflowId"].as_str()));
        if let Some(id) = started {
            break id.to_owned();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no execution of reorder: {found}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let run = client.get(&reordered).await.unwrap();
    assert_eq!(run["correlationId"], json!(cancelled), "{run}");
    // Each handler saw every event: one acted, the others skipped.
    // A handler records its execution once its action is answered, which may be after
    // the run it completed is seen ended: wait for the three rows.
    for name in ["paid", "cancelled", "rejected"] {
        let deadline = tokio::time::Instant::now() + RUN_TIMEOUT;
        let found = loop {
            let r = client
                .raw(
                    reqwest::Method::GET,
                    &format!("/api/event/{name}/executions"),
                    None,
                )
                .await
                .unwrap();
            let found: Value = serde_json::from_str(&r.text).unwrap();
            if found.as_array().is_some_and(|all| all.len() >= 3)
                || tokio::time::Instant::now() >= deadline
            {
                break found;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let mut statuses: Vec<&str> = found
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["status"].as_str().unwrap())
            .collect();
        statuses.sort_unstable();
        assert_eq!(
            statuses,
            ["COMPLETED", "SKIPPED", "SKIPPED"],
            "{name}: {found}"
        );
    }
    // The same resource through the command line.
    let weft = crate::cli::Weft::new(&suite.gateway_url());
    let file = suite.log_dir().join("handler.json");
    let extra = json!({"name": "audit", "event": "amqp:audit", "active": false,
        "actions": [{"action": "start_workflow", "start_workflow": {"name": "checkout"}}]});
    std::fs::write(&file, extra.to_string()).unwrap();
    let file = file.display().to_string();
    weft.run(&["event", "add", &file])
        .await
        .expect(0, "event add");
    let again = weft
        .run(&["event", "add", &file])
        .await
        .expect(3, "event add again");
    assert!(again.stderr.contains("already exists"), "{}", again.stderr);
    let list = weft.run(&["event", "list"]).await.expect(0, "event list");
    for name in ["audit", "cancelled", "paid", "reorder"] {
        assert!(list.stdout.contains(name), "{}", list.stdout);
    }
    let done = weft
        .run(&["event", "executions", "paid"])
        .await
        .expect(0, "event executions");
    assert!(
        done.stdout.contains("complete_task") && done.stdout.contains("SKIPPED"),
        "{}",
        done.stdout
    );
    weft.run(&["event", "delete", "audit"])
        .await
        .expect(0, "event delete");
    weft.run(&["event", "delete", "audit"])
        .await
        .expect(3, "event delete again");

    // The exchange and queue the suite does not know of go with this bus's teardown.
    let on_dev = suite.dev_bus().is_some();
    drop(suite);
    if !on_dev {
        let review_queue = bus.names().activity_queue("manual_review");
        bus.teardown(&[review_queue]).await.unwrap();
    }
    stop.cancel();
}

/// An event that completes a WAIT the run has not reached yet (by ref) is kept, visibly,
/// and consumed when the run gets there (docs/event-handlers.md).
async fn a_completion_by_event_for_a_wait_not_reached_yet_is_kept_until_it_is(suite: Suite) {
    let client = suite.client();
    client
        .register(&json!({"name": "prepaid", "version": 1, "tasks": [
            {"name": "weft_unserved", "taskReferenceName": "pack", "type": "SIMPLE"},
            {"name": "payment", "taskReferenceName": "payment", "type": "WAIT"}],
         "outputParameters": {"paid": "${payment.output.amount}"}}))
        .await
        .unwrap();
    let (bus, stop) = suite.client_bus().await.unwrap();
    let ns = bus.names().namespace().to_owned();
    let exchange = format!("{ns}-prepay");
    register(
        &suite,
        json!({
            "name": "prepay", "event": format!("amqp_exchange:{exchange}:paid"), "active": true,
            "actions": [{"action": "complete_task", "complete_task": {
                "workflowId": "${workflowId}", "taskRefName": "payment",
                "output": {"amount": "${amount}"}}}]
        }),
    )
    .await;
    bus.declare_exchange(&exchange, ExchangeKind::Topic)
        .await
        .unwrap();
    let queue = format!("{ns}.event.{exchange}.paid");
    bus.declare_queue(&queue, &[(&exchange, "paid")])
        .await
        .unwrap();

    // The run waits on `pack` (no worker serves it): `payment` is not reached.
    let id = client.start("prepaid", json!({})).await.unwrap();
    let body = json!({"workflowId": id, "amount": 7});
    bus.publish_raw(&exchange, "paid", body.to_string().as_bytes(), Some("p-1"))
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + RUN_TIMEOUT;
    loop {
        let run = client.get(&id).await.unwrap();
        if run["pendingSignals"][0]["name"] == json!("payment") {
            assert_eq!(
                run["pendingSignals"][0]["payload"]["amount"],
                json!(7),
                "{run}"
            );
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the completion was not kept: {run}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let r = client
        .post_json(&format!("/api/tasks/{id}/pack/COMPLETED"), &json!({}))
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.text);
    let run = client
        .wait_for_status(&id, &["COMPLETED"], RUN_TIMEOUT)
        .await
        .unwrap();
    assert_eq!(run["output"]["paid"], json!(7), "{run}");
    assert!(run.get("pendingSignals").is_none(), "consumed: {run}");
    stop.cancel();
}
