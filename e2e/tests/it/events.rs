//! Lifecycle events on the events exchange (issue 6): a listener bound with `#` sees each
//! change of a run and its tasks once, with the routing key `<entity>.<event>` and the
//! history's `eventId` to order a run's events by.

use std::time::Duration;

use serde_json::json;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use weft::bus::{Bus, ConsumeOptions, Disposition};
use weft::messages::{EventMessage, LifecycleEvent};
use weft_e2e::{Suite, TestEnv};

use crate::RUN_TIMEOUT;

/// Binds a queue of the test's own to the events exchange and forwards what arrives.
async fn listen(
    suite: &Suite,
    stop: &CancellationToken,
) -> (
    Bus,
    String,
    mpsc::UnboundedReceiver<(String, LifecycleEvent)>,
) {
    let env = suite.env();
    let bus = Bus::connect(&env.amqp_url, env.names(), stop.clone())
        .await
        .unwrap();
    let queue = format!("{}.test-listener", env.namespace);
    let exchange = env.names().events_exchange();
    bus.declare_queue(&queue, &[(exchange.as_str(), "#")])
        .await
        .unwrap();
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
                match delivery.envelope.decode::<EventMessage>() {
                    Ok(EventMessage::LifecycleEvent(event)) => {
                        let _ = tx.send((delivery.envelope.kind.clone(), event));
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
    rx: &mut mpsc::UnboundedReceiver<(String, LifecycleEvent)>,
    id: &str,
    wanted: &[&str],
) -> Vec<LifecycleEvent> {
    let mut seen = Vec::new();
    while !wanted.iter().all(|w| names(&seen).iter().any(|n| n == w)) {
        let (kind, event) = tokio::time::timeout(RUN_TIMEOUT, rx.recv())
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_lifecycle_change_is_published_once_in_order() {
    let suite = Suite::start(TestEnv::new().await.unwrap()).await.unwrap();
    let client = suite.client();
    let stop = CancellationToken::new();
    let (bus, queue, mut rx) = listen(&suite, &stop).await;
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
    if let Ok(Some((_, extra))) = tokio::time::timeout(Duration::from_millis(500), rx.recv()).await
    {
        assert_ne!(extra.workflow_id, id, "unexpected {extra:?}");
    }
    stop.cancel();
    bus.teardown(&[queue]).await.unwrap();
}
