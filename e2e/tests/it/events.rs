//! Lifecycle events on the events exchange (issue 6): a listener bound with `#` sees each
//! change of a run and its tasks once, with the routing key `<entity>.<event>` and the
//! history's `eventId` to order a run's events by.

use std::time::Duration;

use serde_json::json;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;
use weft::bus::{Bus, ConsumeOptions, Disposition};
use weft::messages::LifecycleEvent;
use weft_e2e::{EnvOptions, Suite, TestEnv};

use crate::RUN_TIMEOUT;

/// An event as a listener received it: the type and id of the message it came in (one
/// event a message, or several sent together), and the event.
pub(crate) type Received = (String, Uuid, LifecycleEvent);

/// Binds a queue of the test's own to the events exchange with `keys` and forwards each
/// event that arrives.
pub(crate) async fn listen(
    suite: &Suite,
    stop: &CancellationToken,
    keys: &[&str],
) -> (Bus, String, mpsc::UnboundedReceiver<Received>) {
    let env = suite.env();
    let bus = Bus::connect(&env.amqp_url, env.names(), stop.clone())
        .await
        .unwrap();
    let queue = format!("{}.test-listener", env.namespace);
    let exchange = env.names().events_exchange();
    let bindings: Vec<(&str, &str)> = keys.iter().map(|k| (exchange.as_str(), *k)).collect();
    bus.declare_queue(&queue, &bindings).await.unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    bus.consume(
        &queue,
        ConsumeOptions {
            prefetch: 64,
            concurrency: 1,
        },
        move |delivery| {
            let tx = tx.clone();
            async move {
                // Each event with the message it came in (a test that wants one message an
                // event checks it).
                let message = (delivery.envelope.kind.clone(), delivery.envelope.id);
                let events = weft::event_batch::events_of(&delivery.envelope)
                    .and_then(|events| events.into_iter().collect::<weft::Result<Vec<_>>>());
                match events {
                    Ok(events) => {
                        for (_, event) in events {
                            let _ = tx.send((message.0.clone(), message.1, event));
                        }
                        Disposition::Ack
                    }
                    Err(e) => Disposition::DeadLetter(e.to_string()),
                }
            }
        },
        stop.clone(),
    );
    (bus, queue, rx)
}

/// The events of workflow `id` received until each of `wanted` (as [`names`] shows
/// them) has arrived, in whatever order the broker delivers them.
async fn until(
    rx: &mut mpsc::UnboundedReceiver<Received>,
    id: &str,
    wanted: &[&str],
) -> Vec<LifecycleEvent> {
    let mut seen = Vec::new();
    while !wanted.iter().all(|w| names(&seen).iter().any(|n| n == w)) {
        let (kind, _, event) = tokio::time::timeout(RUN_TIMEOUT, rx.recv())
            .await
            .unwrap_or_else(|_| panic!("not all of {wanted:?} for {id}; saw {:?}", names(&seen)))
            .expect("listener alive");
        assert_eq!(kind, "LifecycleEvent");
        if event.workflow_id == id {
            seen.push(event);
        }
    }
    seen
}

fn names(events: &[LifecycleEvent]) -> Vec<String> {
    events
        .iter()
        .map(|e| match &e.task_ref {
            Some(r) => format!("{} {r}", e.event),
            None => e.event.clone(),
        })
        .collect()
}

/// An environment whose decider publishes every lifecycle event (`WEFT_EVENTS=#`).
async fn every_event() -> TestEnv {
    TestEnv::create(EnvOptions {
        extra_env: vec![("WEFT_EVENTS".into(), "#".into())],
        ..EnvOptions::default()
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_lifecycle_change_is_published_once_in_order() {
    let suite = Suite::start(every_event().await).await.unwrap();
    let client = suite.client();
    let stop = CancellationToken::new();
    let (bus, queue, mut rx) = listen(&suite, &stop, &["#"]).await;
    client
        .register(&json!({"name": "told", "version": 1, "tasks": [
            {"name": "make_name", "taskReferenceName": "m", "type": "SIMPLE",
             "inputParameters": {"first": "${workflow.input.first}"}},
            {"name": "nobody", "taskReferenceName": "stuck", "type": "SIMPLE"}]}))
        .await
        .unwrap();
    let id = client
        .start_request(&json!({"name": "told", "input": {"first": "Ada"}, "correlationId": "c-1"}))
        .await
        .unwrap();
    let seen = until(
        &mut rx,
        &id,
        &[
            "workflow.started",
            "task.scheduled m",
            "task.completed m",
            "task.scheduled stuck",
        ],
    )
    .await;
    // `task.started` is there unless the worker's result overtook its start report (the
    // decider then ignores the late start).
    // Publishes run concurrently, so arrival order may differ; `eventId` orders a run's.
    let mut seen: Vec<LifecycleEvent> = seen
        .into_iter()
        .filter(|e| e.event != "task.started")
        .collect();
    seen.sort_by_key(|e| e.event_id);
    assert_eq!(
        names(&seen),
        vec![
            "workflow.started",
            "task.scheduled m",
            "task.completed m",
            "task.scheduled stuck"
        ]
    );
    assert!(seen
        .iter()
        .all(|e| e.correlation_id.as_deref() == Some("c-1")));
    assert_eq!(seen[2].status, "COMPLETED");
    assert_eq!(seen[2].task_type.as_deref(), Some("SIMPLE"));
    assert_eq!(seen[0].workflow_type, "told");
    let (status, _, _) = (
        client
            .raw(
                reqwest::Method::DELETE,
                &format!("/api/workflow/{id}?reason=bye"),
                None,
            )
            .await
            .unwrap()
            .status,
        (),
        (),
    );
    assert_eq!(status, 200);
    let mut end = until(
        &mut rx,
        &id,
        &["task.canceled stuck", "workflow.terminated"],
    )
    .await;
    end.retain(|e| e.event != "task.started");
    end.sort_by_key(|e| (e.event_id, e.task_id.is_none()));
    assert_eq!(
        names(&end),
        vec!["task.canceled stuck", "workflow.terminated"]
    );
    assert_eq!(end[1].reason.as_deref(), Some("bye"));
    assert_eq!(end[0].status, "CANCELED");
    // Nothing more for this run.
    if let Ok(Some((_, _, extra))) =
        tokio::time::timeout(Duration::from_millis(500), rx.recv()).await
    {
        assert_ne!(extra.workflow_id, id, "unexpected {extra:?}");
    }
    stop.cancel();
    bus.teardown(&[queue]).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_bound_to_some_keys_gets_those_events_only() {
    use reqwest::Method;
    let suite = Suite::start(every_event().await).await.unwrap();
    let client = suite.client();
    let stop = CancellationToken::new();
    let keys = [
        "workflow.*",
        "task.skipped",
        "task.failed",
        "task.timed_out",
    ];
    let (bus, queue, mut rx) = listen(&suite, &stop, &keys).await;
    let send = |method: Method, path: String| {
        let client = client.clone();
        async move {
            let r = client.raw(method, &path, None).await.unwrap();
            assert!(r.status < 300, "{path}: {} {}", r.status, r.text);
        }
    };
    client
        .register(&json!({"name": "ops_events", "version": 1, "tasks": [
            {"name": "nobody", "taskReferenceName": "w1", "type": "SIMPLE"},
            {"name": "make_name", "taskReferenceName": "m", "type": "SIMPLE",
             "inputParameters": {"first": "Ada"}}]}))
        .await
        .unwrap();
    // The example worker fails `count` without `n` terminally.
    client
        .register(&json!({"name": "fail_events", "version": 1, "tasks": [
            {"name": "count", "taskReferenceName": "c", "type": "SIMPLE",
             "inputParameters": {"text": "x"}}]}))
        .await
        .unwrap();
    client
        .register(&json!({"name": "late_events", "version": 1, "tasks": [
            {"name": "nobody", "taskReferenceName": "p", "type": "SIMPLE",
             "taskDefinition": {"pollTimeoutSeconds": 1}}]}))
        .await
        .unwrap();

    // Pause, resume, skip: the run completes.
    let a = client.start("ops_events", json!({})).await.unwrap();
    until(&mut rx, &a, &["workflow.started"]).await;
    send(Method::PUT, format!("/api/workflow/{a}/pause")).await;
    send(Method::PUT, format!("/api/workflow/{a}/resume")).await;
    send(Method::PUT, format!("/api/workflow/{a}/skiptask/w1")).await;
    let seen_a = until(
        &mut rx,
        &a,
        &[
            "workflow.paused",
            "workflow.resumed",
            "task.skipped w1",
            "workflow.completed",
        ],
    )
    .await;

    // A failure, a retry (a reset), the same failure again.
    let b = client.start("fail_events", json!({})).await.unwrap();
    let mut seen_b = until(&mut rx, &b, &["task.failed c", "workflow.failed"]).await;
    send(Method::POST, format!("/api/workflow/{b}/retry")).await;
    seen_b.extend(
        until(
            &mut rx,
            &b,
            &["workflow.reset", "task.failed c", "workflow.failed"],
        )
        .await,
    );
    let failed = seen_b.iter().find(|e| e.event == "task.failed").unwrap();
    assert_eq!(failed.status, "FAILED_WITH_TERMINAL_ERROR");
    assert!(failed.reason.is_some(), "{failed:?}");
    let reset = seen_b.iter().find(|e| e.event == "workflow.reset").unwrap();
    assert_ne!(reset.run_id, failed.run_id, "the reset is the new run's");

    // No worker takes it in time.
    let c = client.start("late_events", json!({})).await.unwrap();
    let seen_c = until(&mut rx, &c, &["task.timed_out p", "workflow.timed_out"]).await;

    // Only the bound keys arrived: no task.scheduled, task.started or task.completed.
    for e in seen_a.iter().chain(&seen_b).chain(&seen_c) {
        let bound = e.event.starts_with("workflow.")
            || ["task.skipped", "task.failed", "task.timed_out"].contains(&e.event.as_str());
        assert!(bound, "{} arrived on a queue not bound to it", e.event);
    }
    stop.cancel();
    bus.teardown(&[queue]).await.unwrap();
}
