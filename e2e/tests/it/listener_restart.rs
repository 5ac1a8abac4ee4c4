//! An event listener (`weft::listener::run`) outlives broker restarts: its durable queue
//! and binding survive the crash, and its consumer comes back on the restarted broker and
//! receives what is published there. A private RabbitMQ node (not the machine's broker),
//! killed as a crash and started again, several times.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use weft::bus::Bus;
use weft::listener::{EventListener, ListenerError};
use weft::messages::{EventMessage, LifecycleEvent};
use weft::topology::Names;
use weft::Envelope;
use weft_e2e::infra::RabbitNode;

/// How many crashes the listener lives through.
const RESTARTS: usize = 4;
/// How long an event may take to arrive after a restart (the listener's reconnect
/// backs off; the broker recovers its queues first).
const ARRIVAL: Duration = Duration::from_secs(60);

/// The workflow ids of the events received.
#[derive(Clone, Default)]
struct Received(Arc<Mutex<HashSet<String>>>);

impl EventListener for Received {
    async fn on_event(&self, event: LifecycleEvent) -> Result<(), ListenerError> {
        self.0.lock().unwrap().insert(event.workflow_id);
        Ok(())
    }
}

/// A `workflow.completed` event of `workflow_id`.
fn event(workflow_id: &str) -> Envelope {
    let event = LifecycleEvent {
        event: "workflow.completed".into(),
        workflow_id: workflow_id.into(),
        run_id: weft::ids::new_id(),
        correlation_id: None,
        workflow_type: "restarts".into(),
        event_id: 1,
        task_id: None,
        task_ref: None,
        task_type: None,
        attempt: None,
        iteration: None,
        status: "COMPLETED".into(),
        reason: None,
        time: chrono::Utc::now(),
    };
    Envelope::new(workflow_id, None, &EventMessage::LifecycleEvent(event)).unwrap()
}

/// Publishes an event of `workflow_id` until it is accepted (the publisher's bus may
/// still be reconnecting), then waits until the listener has it.
async fn publish_and_receive(bus: &Bus, names: &Names, received: &Received, workflow_id: &str) {
    let deadline = tokio::time::Instant::now() + ARRIVAL;
    let message = event(workflow_id);
    while let Err(e) = bus
        .publish(&names.events_exchange(), "workflow.completed", &message)
        .await
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "event {workflow_id} not published: {e}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    while !received.0.lock().unwrap().contains(workflow_id) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the listener never received event {workflow_id}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_listener_receives_events_after_each_broker_restart() {
    let root =
        std::env::temp_dir().join(format!("weft-restarts-{}", uuid::Uuid::new_v4().simple()));
    let suffix = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
    let mut node = RabbitNode::start(&root, &format!("weft-r-{suffix}"))
        .await
        .expect("a private RabbitMQ node");
    let namespace = format!("restarts_{suffix}");
    let names = Names::new(&namespace, 2);
    let shutdown = CancellationToken::new();
    // The services' side: declares the topology (the events exchange) and publishes.
    let bus = Bus::connect(&node.url(), names.clone(), shutdown.clone())
        .await
        .expect("the services' bus");
    let config = weft::Config {
        amqp_url: node.url(),
        namespace,
        shards: 2,
        ..weft::Config::default()
    };
    let received = Received::default();
    let listening = {
        let (received, shutdown) = (received.clone(), shutdown.clone());
        tokio::spawn(
            async move { weft::listener::run(&config, "restarts", received, shutdown).await },
        )
    };

    // Published once the listener's queue is there (an event nobody's queue binds is
    // dropped by the broker, as it should be).
    let queue = weft::listener::queue_name(&names, "restarts");
    weft_e2e::poll_until(
        ARRIVAL,
        Duration::from_millis(50),
        || "the listener never declared its queue".into(),
        || async { Ok(bus.message_count(&queue).await.ok()) },
    )
    .await
    .unwrap();
    publish_and_receive(&bus, &names, &received, "before").await;
    for restart in 1..=RESTARTS {
        // The broker dies while events stream in: some on their way, some delivered and
        // not yet acknowledged.
        let streaming = {
            let (bus, names) = (bus.clone(), names.clone());
            tokio::spawn(async move {
                for i in 0.. {
                    let message = event(&format!("stream-{restart}-{i}"));
                    let exchange = names.events_exchange();
                    if bus
                        .publish(&exchange, "workflow.completed", &message)
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
            })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        node.kill().await.unwrap();
        streaming.abort();
        node.up().await.unwrap();
        publish_and_receive(&bus, &names, &received, &format!("after-{restart}")).await;
    }

    shutdown.cancel();
    listening
        .await
        .unwrap()
        .expect("the listener stops cleanly");
    drop(node);
    let _ = std::fs::remove_dir_all(&root);
}
