//! The bus's semantics, each scenario against RabbitMQ and in process (`<scenario>::amqp`,
//! `<scenario>::in_process`); what is about the broker itself (connections, arguments,
//! broker-level rejects) against RabbitMQ only. Each test has its own namespace and tears
//! it down.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use lapin::options::{BasicConsumeOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::{Connection, ConnectionProperties};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;
use weft::bus::{Bus, ConsumeOptions, Delivery, Disposition, Message};
use weft::topology::Names;
use weft::{Envelope, Error};

const URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";
/// Generous bound for anything a test waits on.
const WAIT: Duration = Duration::from_secs(20);
const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// Which transport a scenario runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// RabbitMQ through lapin.
    Amqp,
    /// The in-process broker (no journal).
    InProcess,
}

/// A fresh namespace name.
pub(crate) fn namespace() -> String {
    format!("t{}", Uuid::new_v4().simple())
}

/// A bus of `kind` on a fresh namespace with two command shards.
pub(crate) async fn bus(kind: Kind) -> Bus {
    match kind {
        Kind::Amqp => bus_on(&namespace()).await,
        Kind::InProcess => Bus::in_process(Names::new(&namespace(), 2), None)
            .await
            .unwrap(),
    }
}

/// Two buses of `kind` on one namespace: two connections to RabbitMQ, or two handles on
/// one in-process broker (another `Bus::in_process` would be another broker).
pub(crate) async fn pair(kind: Kind) -> (Bus, Bus) {
    match kind {
        Kind::Amqp => {
            let ns = namespace();
            (bus_on(&ns).await, bus_on(&ns).await)
        }
        Kind::InProcess => {
            let bus = bus(kind).await;
            (bus.clone(), bus)
        }
    }
}

async fn bus_on(ns: &str) -> Bus {
    Bus::connect(URL, Names::new(ns, 2), CancellationToken::new())
        .await
        .unwrap()
}

pub(crate) fn envelope(workflow_id: &str, n: u64) -> Envelope {
    Envelope {
        id: Uuid::now_v7(),
        kind: "Test".into(),
        version: 1,
        workflow_id: workflow_id.into(),
        run_id: None,
        time: chrono::Utc::now(),
        priority: None,
        payload: serde_json::json!({ "n": n }),
    }
}

pub(crate) fn n_of(d: &Delivery) -> u64 {
    d.envelope.payload["n"].as_u64().unwrap()
}

/// A handler that forwards every delivery to the returned receiver and acks it.
fn forwarding() -> (
    impl Fn(Delivery) -> std::future::Ready<Disposition> + Send + Sync + 'static,
    mpsc::UnboundedReceiver<Delivery>,
) {
    let (tx, rx) = mpsc::unbounded_channel();
    let handler = move |d: Delivery| {
        let _ = tx.send(d);
        std::future::ready(Disposition::Ack)
    };
    (handler, rx)
}

async fn recv<T>(rx: &mut mpsc::UnboundedReceiver<T>) -> T {
    tokio::time::timeout(WAIT, rx.recv())
        .await
        .expect("timed out waiting for a message")
        .expect("channel closed")
}

fn opts(prefetch: u16, concurrency: usize) -> ConsumeOptions {
    ConsumeOptions {
        prefetch,
        concurrency,
    }
}

/// A plain lapin connection, to look at queues from outside the bus.
async fn raw() -> Connection {
    Connection::connect(URL, ConnectionProperties::default())
        .await
        .unwrap()
}

/// Takes one message off `queue` as it is (waiting for it) and acknowledges it.
pub(crate) async fn take_one(bus: &Bus, queue: &str) -> Message {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(message) = bus.take_raw(queue).await.unwrap() {
            return message;
        }
        assert!(Instant::now() < deadline, "timed out waiting on {queue}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Ready messages in `queue`, waiting until it equals `want` (or the bound passes).
pub(crate) async fn ready_count(bus: &Bus, queue: &str, want: u32) -> u32 {
    let deadline = Instant::now() + WAIT;
    loop {
        let count = bus.message_count(queue).await.unwrap();
        if count == want || Instant::now() > deadline {
            return count;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub(crate) fn header(m: &Message, name: &str) -> Option<String> {
    m.header_text(name).map(str::to_owned)
}

both_transports!(
    published_envelope_round_trips_with_its_traceparent,
    commands_are_routed_to_their_workflow_shard,
    undecodable_body_is_dead_lettered_with_its_reason_and_the_consumer_goes_on,
    dead_letter_disposition_moves_the_message_to_the_dlq_with_the_reason,
    requeued_message_comes_back_marked_redelivered,
    concurrency_one_handles_messages_one_at_a_time_in_queue_order,
    higher_concurrency_runs_handlers_side_by_side,
    consume_batches_hands_over_what_is_buffered_in_order,
    declaring_the_topology_twice_works,
    shutdown_finishes_the_running_handler_and_leaves_the_rest_queued,
    a_delivery_still_handled_is_not_acknowledged_with_those_after_it,
    many_concurrent_publishes_are_all_confirmed,
    teardown_removes_the_namespace,
    a_panicking_handler_dead_letters_its_message_and_the_consumer_goes_on,
    activity_queues_hand_out_higher_priorities_first,
);

/// Takes (and acknowledges) `count` messages from `queue` one by one; their `n`s in order.
async fn take_all(bus: &Bus, queue: &str, count: usize) -> Vec<u64> {
    let mut order = Vec::new();
    let deadline = Instant::now() + WAIT;
    while order.len() < count {
        assert!(Instant::now() < deadline, "only {order:?} arrived");
        match bus.get(queue).await.unwrap() {
            Some(taken) => {
                order.push(n_of(&taken.delivery));
                taken.ack().await.unwrap();
            }
            None => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    order
}

/// An activity queue is a priority queue: of the tasks waiting, a run's with a higher
/// priority go first, in publish order within a priority level; a message re-published
/// from its stored bytes (the outbox sweeper) keeps its priority.
async fn activity_queues_hand_out_higher_priorities_first(kind: Kind) {
    let bus = bus(kind).await;
    let names = bus.names().clone();
    bus.declare_activity_queue("ranked").await.unwrap();
    // (n, Conductor priority): levels 0, 0, 5, 9, 5, 2.
    let sent = [(1, 0), (2, 9), (3, 50), (4, 99), (5, 55), (6, 20)];
    for (n, priority) in sent {
        let envelope = envelope("wf-p", n).with_priority(priority);
        if n % 2 == 0 {
            bus.publish(&names.activity_exchange(), "ranked", &envelope)
                .await
                .unwrap();
        } else {
            bus.publish_bytes(
                &names.activity_exchange(),
                "ranked",
                &envelope.to_bytes().unwrap(),
                None,
            )
            .await
            .unwrap();
        }
    }
    let order = take_all(&bus, &names.activity_queue("ranked"), sent.len()).await;
    assert_eq!(order, [4, 3, 5, 6, 1, 2]);
    bus.teardown(&[]).await.unwrap();
}

async fn published_envelope_round_trips_with_its_traceparent(kind: Kind) {
    let bus = bus(kind).await;
    let names = bus.names().clone();
    bus.declare_activity_queue("greet").await.unwrap();
    let sent = envelope("wf-1", 7);
    bus.publish_bytes(
        &names.activity_exchange(),
        "greet",
        &sent.to_bytes().unwrap(),
        Some(TRACEPARENT),
    )
    .await
    .unwrap();

    let stop = CancellationToken::new();
    let (handler, mut rx) = forwarding();
    let queue = names.activity_queue("greet");
    let task = bus.consume(&queue, opts(8, 1), handler, stop.clone());
    let got = recv(&mut rx).await;
    assert_eq!(got.envelope, sent);
    assert_eq!(got.traceparent.as_deref(), Some(TRACEPARENT));
    assert!(!got.redelivered);
    assert_eq!(got.queue, queue);

    // publish() without a current span carries no traceparent but the same envelope.
    let second = envelope("wf-1", 8);
    bus.publish(&names.activity_exchange(), "greet", &second)
        .await
        .unwrap();
    assert_eq!(recv(&mut rx).await.envelope, second);

    stop.cancel();
    task.await.unwrap();
    bus.teardown(&[]).await.unwrap();
}

async fn commands_are_routed_to_their_workflow_shard(kind: Kind) {
    let bus = bus(kind).await;
    let names = bus.names().clone();
    let stop = CancellationToken::new();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut tasks = Vec::new();
    for k in 0..names.shards() {
        let tx = tx.clone();
        let handler = move |d: Delivery| {
            let _ = tx.send((k, d));
            std::future::ready(Disposition::Ack)
        };
        tasks.push(bus.consume(&names.command_queue(k), opts(8, 1), handler, stop.clone()));
    }
    for wf in ["alpha", "beta", "gamma", "delta"] {
        let sent = envelope(wf, 1);
        bus.publish_command(&sent).await.unwrap();
        let (shard, got) = recv(&mut rx).await;
        assert_eq!(got.envelope, sent);
        assert_eq!(Names::shard_key(shard), names.command_key_for(wf));
    }
    stop.cancel();
    for t in tasks {
        t.await.unwrap();
    }
    bus.teardown(&[]).await.unwrap();
}

async fn undecodable_body_is_dead_lettered_with_its_reason_and_the_consumer_goes_on(kind: Kind) {
    let bus = bus(kind).await;
    let names = bus.names().clone();
    bus.declare_activity_queue("poison").await.unwrap();
    let queue = names.activity_queue("poison");
    let exchange = names.activity_exchange();
    bus.publish_bytes(&exchange, "poison", b"{not an envelope", None)
        .await
        .unwrap();
    let good = envelope("wf-2", 1);
    bus.publish(&exchange, "poison", &good).await.unwrap();

    let stop = CancellationToken::new();
    let (handler, mut rx) = forwarding();
    let task = bus.consume(&queue, opts(8, 1), handler, stop.clone());
    assert_eq!(recv(&mut rx).await.envelope, good);

    let dead = take_one(&bus, &Names::dlq(&queue)).await;
    assert_eq!(dead.body, b"{not an envelope");
    let reason = header(&dead, "x-weft-dead-reason").unwrap();
    assert!(reason.contains("envelope"), "{reason}");
    assert_eq!(header(&dead, "x-weft-original-queue"), Some(queue.clone()));
    assert_eq!(ready_count(&bus, &queue, 0).await, 0);

    stop.cancel();
    task.await.unwrap();
    bus.teardown(&[]).await.unwrap();
}

async fn dead_letter_disposition_moves_the_message_to_the_dlq_with_the_reason(kind: Kind) {
    let bus = bus(kind).await;
    let names = bus.names().clone();
    bus.declare_activity_queue("refuse").await.unwrap();
    let queue = names.activity_queue("refuse");
    let sent = envelope("wf-3", 1);
    bus.publish_bytes(
        &names.activity_exchange(),
        "refuse",
        &sent.to_bytes().unwrap(),
        Some(TRACEPARENT),
    )
    .await
    .unwrap();

    let stop = CancellationToken::new();
    let handler = |_d: Delivery| async { Disposition::DeadLetter("unknown task type".into()) };
    let task = bus.consume(&queue, opts(8, 1), handler, stop.clone());
    let dead = take_one(&bus, &Names::dlq(&queue)).await;
    assert_eq!(Envelope::from_bytes(&dead.body).unwrap(), sent);
    assert_eq!(
        header(&dead, "x-weft-dead-reason").as_deref(),
        Some("unknown task type")
    );
    assert_eq!(header(&dead, "traceparent").as_deref(), Some(TRACEPARENT));
    assert_eq!(ready_count(&bus, &queue, 0).await, 0);

    stop.cancel();
    task.await.unwrap();
    bus.teardown(&[]).await.unwrap();
}

async fn requeued_message_comes_back_marked_redelivered(kind: Kind) {
    let bus = bus(kind).await;
    let names = bus.names().clone();
    bus.declare_activity_queue("again").await.unwrap();
    let sent = envelope("wf-4", 1);
    bus.publish(&names.activity_exchange(), "again", &sent)
        .await
        .unwrap();

    let stop = CancellationToken::new();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let seen = Arc::new(AtomicUsize::new(0));
    let handler = move |d: Delivery| {
        let first = seen.fetch_add(1, Ordering::SeqCst) == 0;
        let _ = tx.send(d);
        async move {
            if first {
                Disposition::Requeue
            } else {
                Disposition::Ack
            }
        }
    };
    let queue = names.activity_queue("again");
    let task = bus.consume(&queue, opts(8, 1), handler, stop.clone());
    let first = recv(&mut rx).await;
    let second = recv(&mut rx).await;
    assert_eq!(first.envelope, sent);
    assert!(!first.redelivered);
    assert_eq!(second.envelope, sent);
    assert!(second.redelivered);

    stop.cancel();
    task.await.unwrap();
    assert_eq!(ready_count(&bus, &queue, 0).await, 0);
    bus.teardown(&[]).await.unwrap();
}

async fn concurrency_one_handles_messages_one_at_a_time_in_queue_order(kind: Kind) {
    let bus = bus(kind).await;
    let names = bus.names().clone();
    bus.declare_activity_queue("ordered").await.unwrap();
    const N: u64 = 200;
    for n in 0..N {
        bus.publish(&names.activity_exchange(), "ordered", &envelope("wf-5", n))
            .await
            .unwrap();
    }

    let stop = CancellationToken::new();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let running = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let handler = {
        let (running, most) = (running.clone(), most.clone());
        move |d: Delivery| {
            let (running, most, tx) = (running.clone(), most.clone(), tx.clone());
            async move {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                // Later messages finish faster: any overlap would reorder them.
                tokio::time::sleep(Duration::from_micros(200 * (N - n_of(&d)))).await;
                let _ = tx.send(n_of(&d));
                running.fetch_sub(1, Ordering::SeqCst);
                Disposition::Ack
            }
        }
    };
    let queue = names.activity_queue("ordered");
    let task = bus.consume(&queue, opts(50, 1), handler, stop.clone());
    let mut got = Vec::new();
    for _ in 0..N {
        got.push(recv(&mut rx).await);
    }
    assert_eq!(got, (0..N).collect::<Vec<_>>());
    assert_eq!(most.load(Ordering::SeqCst), 1);

    stop.cancel();
    task.await.unwrap();
    bus.teardown(&[]).await.unwrap();
}

async fn higher_concurrency_runs_handlers_side_by_side(kind: Kind) {
    let bus = bus(kind).await;
    let names = bus.names().clone();
    bus.declare_activity_queue("parallel").await.unwrap();
    for n in 0..20 {
        bus.publish(&names.activity_exchange(), "parallel", &envelope("wf-6", n))
            .await
            .unwrap();
    }
    let stop = CancellationToken::new();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let running = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let handler = {
        let (running, most) = (running.clone(), most.clone());
        move |d: Delivery| {
            let (running, most, tx) = (running.clone(), most.clone(), tx.clone());
            async move {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(50)).await;
                running.fetch_sub(1, Ordering::SeqCst);
                let _ = tx.send(n_of(&d));
                Disposition::Ack
            }
        }
    };
    let task = bus.consume(
        &names.activity_queue("parallel"),
        opts(20, 4),
        handler,
        stop.clone(),
    );
    for _ in 0..20 {
        recv(&mut rx).await;
    }
    assert_eq!(most.load(Ordering::SeqCst), 4);
    stop.cancel();
    task.await.unwrap();
    bus.teardown(&[]).await.unwrap();
}

async fn consume_batches_hands_over_what_is_buffered_in_order(kind: Kind) {
    let bus = bus(kind).await;
    let names = bus.names().clone();
    bus.declare_activity_queue("batched").await.unwrap();
    let exchange = names.activity_exchange();
    const N: u64 = 60;
    for n in 0..N {
        bus.publish(&exchange, "batched", &envelope("wf-7", n))
            .await
            .unwrap();
    }
    // A poison message in the middle is dead-lettered, never handed to the handler.
    bus.publish_bytes(&exchange, "batched", b"garbage", None)
        .await
        .unwrap();

    let stop = CancellationToken::new();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let handler = move |batch: Vec<Delivery>| {
        let ns: Vec<u64> = batch.iter().map(n_of).collect();
        let _ = tx.send(ns);
        let acks = vec![Disposition::Ack; batch.len()];
        async move {
            // Give the broker time to buffer the next batch.
            tokio::time::sleep(Duration::from_millis(20)).await;
            acks
        }
    };
    let queue = names.activity_queue("batched");
    let task = bus.consume_batches(&queue, 100, 25, handler, stop.clone());
    let mut got = Vec::new();
    let mut sizes = Vec::new();
    while got.len() < N as usize {
        let batch = recv(&mut rx).await;
        sizes.push(batch.len());
        got.extend(batch);
    }
    assert_eq!(got, (0..N).collect::<Vec<_>>());
    assert!(sizes.iter().all(|&s| (1..=25).contains(&s)), "{sizes:?}");
    assert!(sizes.iter().any(|&s| s > 1), "{sizes:?}");
    let dead = take_one(&bus, &Names::dlq(&queue)).await;
    assert_eq!(dead.body, b"garbage");
    assert_eq!(ready_count(&bus, &queue, 0).await, 0);

    stop.cancel();
    task.await.unwrap();
    bus.teardown(&[]).await.unwrap();
}

async fn declaring_the_topology_twice_works(kind: Kind) {
    let (first, second) = pair(kind).await;
    first.declare_activity_queue("shared").await.unwrap();
    second.declare_activity_queue("shared").await.unwrap();
    second.declare_activity_queue("shared").await.unwrap(); // cached

    let names = first.names().clone();
    let stop = CancellationToken::new();
    let (handler, mut rx) = forwarding();
    let task = second.consume(
        &names.activity_queue("shared"),
        opts(8, 1),
        handler,
        stop.clone(),
    );
    let sent = envelope("wf-8", 1);
    first
        .publish(&names.activity_exchange(), "shared", &sent)
        .await
        .unwrap();
    assert_eq!(recv(&mut rx).await.envelope, sent);

    stop.cancel();
    task.await.unwrap();
    first.teardown(&[]).await.unwrap();
    second.teardown(&[]).await.unwrap();
}

/// Publishes `n` and waits until the consumer behind `rx` has it.
async fn publish_and_see(bus: &Bus, n: u64, rx: &mut mpsc::UnboundedReceiver<Delivery>) {
    let names = bus.names();
    bus.publish(
        &names.activity_exchange(),
        "resilient",
        &envelope("wf-9", n),
    )
    .await
    .unwrap();
    loop {
        // A message may come twice around a reconnect (redelivery); skip older ones.
        if n_of(&recv(rx).await) == n {
            return;
        }
    }
}

#[tokio::test]
async fn publishing_and_consuming_resume_after_a_client_side_disconnect() {
    let bus = bus(Kind::Amqp).await;
    bus.declare_activity_queue("resilient").await.unwrap();
    let stop = CancellationToken::new();
    let (handler, mut rx) = forwarding();
    let queue = bus.names().activity_queue("resilient");
    let task = bus.consume(&queue, opts(8, 1), handler, stop.clone());
    publish_and_see(&bus, 1, &mut rx).await;

    bus.force_disconnect().await;
    assert!(!bus.is_connected());
    publish_and_see(&bus, 2, &mut rx).await;
    assert!(bus.is_connected());

    stop.cancel();
    task.await.unwrap();
    bus.teardown(&[]).await.unwrap();
}

/// Asks the broker to close the connection named `name` (as an operator would).
async fn close_from_broker(name: &str) {
    let out = tokio::process::Command::new("rabbitmqctl")
        .args([
            "list_connections",
            "-q",
            "--no-table-headers",
            "pid",
            "client_properties",
        ])
        .output()
        .await
        .unwrap();
    let listing = String::from_utf8_lossy(&out.stdout);
    let line = listing
        .lines()
        .find(|l| l.contains(name))
        .unwrap_or_else(|| panic!("connection {name} not listed:\n{listing}"));
    let pid = line.split_whitespace().next().unwrap();
    let status = tokio::process::Command::new("rabbitmqctl")
        .args(["close_connection", pid, "test"])
        .status()
        .await
        .unwrap();
    assert!(status.success());
}

#[tokio::test]
async fn publishing_and_consuming_resume_after_the_broker_closes_the_connection() {
    let bus = bus(Kind::Amqp).await;
    bus.declare_activity_queue("resilient").await.unwrap();
    let stop = CancellationToken::new();
    let (handler, mut rx) = forwarding();
    let queue = bus.names().activity_queue("resilient");
    let task = bus.consume(&queue, opts(8, 1), handler, stop.clone());
    publish_and_see(&bus, 1, &mut rx).await;

    close_from_broker(bus.connection_name()).await;
    let deadline = Instant::now() + WAIT;
    while bus.is_connected() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!bus.is_connected(), "the close never reached the client");
    publish_and_see(&bus, 2, &mut rx).await;
    publish_and_see(&bus, 3, &mut rx).await;

    stop.cancel();
    task.await.unwrap();
    bus.teardown(&[]).await.unwrap();
}

/// An outside publisher may put bytes that are not UTF-8 in a header of a start event
/// (AMQP long strings are bytes); the event must still be delivered (the header as lossy
/// text), and its consumer's connection must survive it: a client that cannot decode the
/// frame drops the connection, and the broker redelivers the message to the next
/// consumer, for ever (`bus::amqp::outside`).
#[tokio::test]
async fn a_start_event_header_that_is_not_utf8_neither_blocks_the_queue_nor_drops_the_connection() {
    let bus = bus(Kind::Amqp).await;
    let names = bus.names().clone();
    let queue = names.starts_queue();
    let stop = CancellationToken::new();
    let (handler, mut rx) = forwarding();
    let task = bus.consume(&queue, opts(8, 1), handler, stop.clone());

    let outside = raw().await;
    let channel = outside.create_channel().await.unwrap();
    channel
        .confirm_select(lapin::options::ConfirmSelectOptions::default())
        .await
        .unwrap();
    let sent = [envelope("wf-bytes", 1), envelope("wf-bytes", 2)];
    let publish = |sent: &Envelope, note: Vec<u8>| {
        let channel = channel.clone();
        let exchange = names.starts_exchange();
        let body = sent.to_bytes().unwrap();
        async move {
            let mut headers = FieldTable::default();
            headers.insert(
                "x-note".into(),
                lapin::types::AMQPValue::LongString(lapin::types::LongString::from(note)),
            );
            channel
                .basic_publish(
                    exchange.as_str().into(),
                    "greet".into(),
                    lapin::options::BasicPublishOptions::default(),
                    &body,
                    lapin::BasicProperties::default().with_headers(headers),
                )
                .await
                .unwrap()
                .await
                .unwrap();
        }
    };
    publish(&sent[0], vec![b'a', 0xff, 0xfe]).await;
    publish(&sent[1], b"plain".to_vec()).await;
    let first = recv(&mut rx).await;
    assert_eq!(first.envelope, sent[0]);
    let second = recv(&mut rx).await;
    assert_eq!(second.envelope, sent[1]);
    assert!(
        !first.redelivered && !second.redelivered,
        "a connection was dropped on the way"
    );

    stop.cancel();
    task.await.unwrap();
    let _ = outside.close(200, "OK".into()).await;
    bus.teardown(&[]).await.unwrap();
}

async fn shutdown_finishes_the_running_handler_and_leaves_the_rest_queued(kind: Kind) {
    let bus = bus(kind).await;
    let names = bus.names().clone();
    bus.declare_activity_queue("drain").await.unwrap();
    for n in 0..3 {
        bus.publish(&names.activity_exchange(), "drain", &envelope("wf-10", n))
            .await
            .unwrap();
    }
    let stop = CancellationToken::new();
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let release = Arc::new(tokio::sync::Notify::new());
    let handler = {
        let release = release.clone();
        move |d: Delivery| {
            let _ = started_tx.send(n_of(&d));
            let release = release.clone();
            async move {
                release.notified().await;
                Disposition::Ack
            }
        }
    };
    let queue = names.activity_queue("drain");
    let task = bus.consume(&queue, opts(10, 1), handler, stop.clone());
    assert_eq!(recv(&mut started).await, 0);
    stop.cancel();
    tokio::task::yield_now().await;
    release.notify_one();
    tokio::time::timeout(WAIT, task).await.unwrap().unwrap();
    // The first was finished and acked; the two buffered ones went back to the queue.
    assert_eq!(ready_count(&bus, &queue, 2).await, 2);
    assert!(started.try_recv().is_err());
    bus.teardown(&[]).await.unwrap();
}

/// Acknowledgements that meet go as one `multiple` acknowledgement over AMQP
/// (`bus::amqp::ack_batch`): never one that would settle a delivery whose handler still
/// runs. Here the first delivery's handler waits for all the others to be acknowledged,
/// then requeues it: it must come back (settled by a multiple acknowledgement, it would
/// be gone, and its requeue an unknown delivery tag to the broker).
async fn a_delivery_still_handled_is_not_acknowledged_with_those_after_it(kind: Kind) {
    const COUNT: u64 = 30;
    let bus = bus(kind).await;
    let names = bus.names().clone();
    bus.declare_activity_queue("held").await.unwrap();
    for n in 0..COUNT {
        bus.publish(&names.activity_exchange(), "held", &envelope("wf-held", n))
            .await
            .unwrap();
    }
    let (seen_tx, mut seen) = mpsc::unbounded_channel();
    let others = Arc::new(AtomicUsize::new(0));
    let all_others = Arc::new(tokio::sync::Notify::new());
    let handler = {
        let (others, all_others) = (others.clone(), all_others.clone());
        move |d: Delivery| {
            let (n, redelivered) = (n_of(&d), d.redelivered);
            let _ = seen_tx.send((n, redelivered));
            let (others, all_others) = (others.clone(), all_others.clone());
            async move {
                if n != 0 {
                    if others.fetch_add(1, Ordering::SeqCst) + 1 == COUNT as usize - 1 {
                        all_others.notify_one();
                    }
                    return Disposition::Ack;
                }
                if redelivered {
                    return Disposition::Ack;
                }
                all_others.notified().await;
                // The others' acknowledgements are sent once their handlers returned.
                tokio::time::sleep(Duration::from_millis(300)).await;
                Disposition::Requeue
            }
        }
    };
    let stop = CancellationToken::new();
    let queue = names.activity_queue("held");
    let task = bus.consume(&queue, opts(64, 16), handler, stop.clone());
    let mut deliveries = Vec::new();
    while deliveries.len() < COUNT as usize + 1 {
        deliveries.push(recv(&mut seen).await);
    }
    assert!(deliveries.contains(&(0, true)), "{deliveries:?}");
    assert_eq!(deliveries.iter().filter(|(n, _)| *n == 0).count(), 2);
    stop.cancel();
    tokio::time::timeout(WAIT, task).await.unwrap().unwrap();
    // Everything was acknowledged in the end: nothing goes back to the queue.
    assert_eq!(ready_count(&bus, &queue, 0).await, 0);
    bus.teardown(&[]).await.unwrap();
}

#[tokio::test]
async fn connect_gives_up_when_shutdown_fires() {
    let stop = CancellationToken::new();
    let names = Names::new("unreachable", 1);
    let connecting = Bus::connect("amqp://guest:guest@127.0.0.1:1/%2f", names, stop.clone());
    let canceller = async {
        tokio::time::sleep(Duration::from_millis(400)).await;
        stop.cancel();
    };
    let (res, ()) = tokio::join!(connecting, canceller);
    assert!(matches!(res, Err(Error::ShuttingDown)), "{res:?}");
}

async fn many_concurrent_publishes_are_all_confirmed(kind: Kind) {
    let bus = bus(kind).await;
    let names = bus.names().clone();
    bus.declare_activity_queue("load").await.unwrap();
    const TASKS: u64 = 50;
    const EACH: u64 = 60;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let (bus, exchange) = (bus.clone(), names.activity_exchange());
        tasks.push(tokio::spawn(async move {
            for i in 0..EACH {
                bus.publish(&exchange, "load", &envelope("wf-11", t * EACH + i))
                    .await
                    .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let total = TASKS * EACH;
    let rate = total as f64 / started.elapsed().as_secs_f64();
    eprintln!("{total} confirmed publishes at {rate:.0}/s");
    let queue = names.activity_queue("load");
    assert_eq!(ready_count(&bus, &queue, total as u32).await, total as u32);
    bus.teardown(&[]).await.unwrap();
}

async fn teardown_removes_the_namespace(kind: Kind) {
    let bus = bus(kind).await;
    let names = bus.names().clone();
    bus.declare_activity_queue("gone").await.unwrap();
    let extra = format!("{}.listener", names.namespace());
    bus.declare_queue(&extra, &[(&names.events_exchange(), "workflow.*")])
        .await
        .unwrap();
    bus.teardown(&[]).await.unwrap();
    // Missing queues are fine on a second teardown.
    bus.teardown(&[format!("{}.never", names.namespace())])
        .await
        .unwrap();

    for queue in [
        names.command_queue(0),
        Names::dlq(&names.command_queue(1)),
        names.heartbeat_queue(),
        names.activity_queue("gone"),
        extra,
    ] {
        let res = bus.message_count(&queue).await;
        assert!(res.is_err(), "{queue} still exists");
    }
}

/// Shared with handlers that collect what they saw.
type Seen = Arc<Mutex<Vec<u64>>>;

async fn a_panicking_handler_dead_letters_its_message_and_the_consumer_goes_on(kind: Kind) {
    let bus = bus(kind).await;
    let names = bus.names().clone();
    bus.declare_activity_queue("panics").await.unwrap();
    for n in 0..2 {
        bus.publish(&names.activity_exchange(), "panics", &envelope("wf-12", n))
            .await
            .unwrap();
    }
    let stop = CancellationToken::new();
    let seen: Seen = Arc::default();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let handler = {
        let seen = seen.clone();
        move |d: Delivery| {
            let n = n_of(&d);
            seen.lock().unwrap().push(n);
            let tx = tx.clone();
            async move {
                if n == 0 {
                    panic!("boom");
                }
                let _ = tx.send(n);
                Disposition::Ack
            }
        }
    };
    let queue = names.activity_queue("panics");
    let task = bus.consume(&queue, opts(8, 1), handler, stop.clone());
    assert_eq!(recv(&mut rx).await, 1);
    let dead = take_one(&bus, &Names::dlq(&queue)).await;
    let reason = header(&dead, "x-weft-dead-reason").unwrap();
    assert!(reason.contains("boom"), "{reason}");
    assert_eq!(*seen.lock().unwrap(), vec![0, 1]);

    stop.cancel();
    task.await.unwrap();
    bus.teardown(&[]).await.unwrap();
}

#[tokio::test]
async fn a_broker_level_reject_lands_in_the_dlq() {
    let bus = bus(Kind::Amqp).await;
    let names = bus.names().clone();
    bus.declare_activity_queue("rejected").await.unwrap();
    let sent = envelope("wf-13", 1);
    bus.publish(&names.activity_exchange(), "rejected", &sent)
        .await
        .unwrap();

    let queue = names.activity_queue("rejected");
    let conn = raw().await;
    let ch = conn.create_channel().await.unwrap();
    let mut consumer = ch
        .basic_consume(
            queue.as_str().into(),
            "".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    let d = tokio::time::timeout(WAIT, consumer.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    d.acker
        .nack(lapin::options::BasicNackOptions::default())
        .await
        .unwrap();
    let dead = take_one(&bus, &Names::dlq(&queue)).await;
    assert_eq!(Envelope::from_bytes(&dead.body).unwrap(), sent);
    bus.teardown(&[]).await.unwrap();
}

#[tokio::test]
async fn connect_refuses_a_queue_declared_with_other_arguments() {
    let ns = format!("t{}", Uuid::new_v4().simple());
    let names = Names::new(&ns, 1);
    let conn = raw().await;
    let ch = conn.create_channel().await.unwrap();
    let durable = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };
    ch.queue_declare(
        names.heartbeat_queue().as_str().into(),
        durable,
        FieldTable::default(),
    )
    .await
    .unwrap();

    let res = tokio::time::timeout(
        WAIT,
        Bus::connect(URL, names.clone(), CancellationToken::new()),
    )
    .await
    .expect("connect kept retrying a refused topology");
    let err = res.unwrap_err().to_string();
    assert!(err.contains("PRECONDITION_FAILED"), "{err}");

    // Clean up with a bus on a compatible namespace view: drop the odd queue first.
    ch.queue_delete(
        names.heartbeat_queue().as_str().into(),
        lapin::options::QueueDeleteOptions::default(),
    )
    .await
    .unwrap();
    bus_on(&ns).await.teardown(&[]).await.unwrap();
}

/// An activity queue declared before priorities existed (no `x-max-priority`) is kept as
/// it is: declaring it again works, and its tasks flow (in publish order).
#[tokio::test]
async fn an_activity_queue_declared_without_priorities_keeps_working() {
    let bus = bus(Kind::Amqp).await;
    let names = bus.names().clone();
    let queue = names.activity_queue("legacy");
    let conn = raw().await;
    let ch = conn.create_channel().await.unwrap();
    let durable = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };
    let mut args = FieldTable::default();
    args.insert(
        "x-dead-letter-exchange".into(),
        lapin::types::AMQPValue::LongString("".into()),
    );
    args.insert(
        "x-dead-letter-routing-key".into(),
        lapin::types::AMQPValue::LongString(format!("{queue}.dlq").into()),
    );
    ch.queue_declare(queue.as_str().into(), durable, args)
        .await
        .unwrap();

    bus.declare_activity_queue("legacy").await.unwrap();
    for n in [1, 2] {
        let urgent = envelope("wf-legacy", n).with_priority(if n == 2 { 90 } else { 0 });
        bus.publish(&names.activity_exchange(), "legacy", &urgent)
            .await
            .unwrap();
    }
    let order = take_all(&bus, &queue, 2).await;
    assert_eq!(
        order,
        [1, 2],
        "no priorities on a queue declared without them"
    );
    bus.teardown(&[]).await.unwrap();
}

/// A client (a worker, a listener) declares none of the core topology: it waits until a
/// service of its namespace has declared the exchanges, declares only its own queues,
/// and leaves a core queue deleted behind its back alone when it reconnects (a service
/// would declare it again).
#[tokio::test]
async fn a_client_waits_for_the_services_and_declares_only_its_own_queues() {
    let ns = namespace();
    let names = Names::new(&ns, 2);
    let connecting = Bus::connect_client(URL, names.clone(), CancellationToken::new());
    let mut connecting = Box::pin(connecting);
    let early = tokio::time::timeout(Duration::from_millis(500), &mut connecting).await;
    assert!(
        early.is_err(),
        "connected before any service declared the topology"
    );

    let service = bus_on(&ns).await;
    let client = tokio::time::timeout(WAIT, connecting)
        .await
        .expect("the client connects once the exchanges exist")
        .unwrap();
    client.declare_activity_queue("mine").await.unwrap();
    let mine = names.activity_queue("mine");
    assert_eq!(service.message_count(&mine).await.unwrap(), 0);

    // The heartbeat queue goes away; the client reconnects, and publishes through it.
    let conn = raw().await;
    let ch = conn.create_channel().await.unwrap();
    let heartbeat = names.heartbeat_queue();
    ch.queue_delete(
        heartbeat.as_str().into(),
        lapin::options::QueueDeleteOptions::default(),
    )
    .await
    .unwrap();
    client.force_disconnect().await;
    let exchange = names.activity_exchange();
    client
        .publish(&exchange, "mine", &envelope("wf-client", 1))
        .await
        .unwrap();
    assert_eq!(ready_count(&service, &mine, 1).await, 1);
    assert!(
        service.message_count(&heartbeat).await.is_err(),
        "the client declared a core queue"
    );
    service.teardown(&[mine]).await.unwrap();
}

/// A worker configured with another `WEFT_QUEUE_TYPE` than the services declared its
/// activity queue first (classic, with priorities) where the services run on quorum
/// queues: the decider's declaration is refused twice (priorities, then the queue
/// type). It must publish to the queue as it is — failing instead failed every command
/// that schedules the task, again and again (the cluster soak's finding).
#[tokio::test]
async fn an_activity_queue_of_another_queue_type_is_used_as_it_is() {
    use weft::topology::QueueType;
    let ns = namespace();
    let quorum = Names::new(&ns, 2).with_queue_type(QueueType::Quorum);
    let services = Bus::connect(URL, quorum, CancellationToken::new())
        .await
        .unwrap();
    let worker = Bus::connect_client(URL, Names::new(&ns, 2), CancellationToken::new())
        .await
        .unwrap();
    worker.declare_activity_queue("mixed").await.unwrap();

    services.declare_activity_queue("mixed").await.unwrap();
    let names = services.names().clone();
    services
        .publish(
            &names.activity_exchange(),
            "mixed",
            &envelope("wf-mixed", 1),
        )
        .await
        .unwrap();
    let stop = CancellationToken::new();
    let (handler, mut rx) = forwarding();
    let task = worker.consume(
        &names.activity_queue("mixed"),
        opts(8, 1),
        handler,
        stop.clone(),
    );
    assert_eq!(n_of(&recv(&mut rx).await), 1);
    stop.cancel();
    task.await.unwrap();
    services.teardown(&[]).await.unwrap();
}
