//! Semantics of the in-process bus that the shared scenarios do not pin: topic routing,
//! single-active consumers, where a requeued message goes, names refused, and the SQLite
//! journal (a message not acknowledged survives the process; an acknowledged one does
//! not). Topic routing and single-active consumers also run against RabbitMQ, to show
//! the two agree.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use sqlx::SqlitePool;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;
use weft::bus::{Bus, ConsumeOptions, Delivery, Disposition};
use weft::store::sqlite::SqliteStore;
use weft::topology::Names;

use crate::bus::{bus, envelope, header, n_of, namespace, pair, ready_count, take_one, Kind};

/// Generous bound for anything a test waits on.
const WAIT: Duration = Duration::from_secs(20);

both_transports!(
    topic_routing_matches_star_and_hash,
    a_shard_queue_has_one_active_consumer_and_the_other_takes_over,
);

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

async fn topic_routing_matches_star_and_hash(kind: Kind) {
    let bus = bus(kind).await;
    let names = bus.names().clone();
    let events = names.events_exchange();
    let ns = names.namespace().to_owned();
    let (one_word, any_failed, everything_workflow) = (
        format!("{ns}.one-word"),
        format!("{ns}.any-failed"),
        format!("{ns}.all-workflow"),
    );
    bus.declare_queue(&one_word, &[(&events, "workflow.*")])
        .await
        .unwrap();
    bus.declare_queue(&any_failed, &[(&events, "#.failed")])
        .await
        .unwrap();
    // Two bindings that both match still deliver one copy.
    bus.declare_queue(
        &everything_workflow,
        &[(&events, "workflow.#"), (&events, "#")],
    )
    .await
    .unwrap();
    for key in ["workflow.completed", "workflow.task.failed", "other.failed"] {
        bus.publish(&events, key, &envelope(key, 1)).await.unwrap();
    }
    let taken = |queue: String| {
        let bus = bus.clone();
        async move {
            let mut keys = Vec::new();
            while let Some(t) = bus.get(&queue).await.unwrap() {
                keys.push(t.delivery.envelope.workflow_id.clone());
                t.ack().await.unwrap();
            }
            keys
        }
    };
    assert_eq!(ready_count(&bus, &one_word, 1).await, 1);
    assert_eq!(taken(one_word).await, ["workflow.completed"]);
    assert_eq!(ready_count(&bus, &any_failed, 2).await, 2);
    assert_eq!(
        taken(any_failed).await,
        ["workflow.task.failed", "other.failed"]
    );
    assert_eq!(ready_count(&bus, &everything_workflow, 3).await, 3);
    assert_eq!(
        taken(everything_workflow).await,
        ["workflow.completed", "workflow.task.failed", "other.failed"]
    );
    bus.teardown(&[]).await.unwrap();
}

/// A consumer of shard 0 that reports `(who, n)` for every delivery and acks it.
fn shard_consumer(
    bus: &Bus,
    who: u8,
    tx: mpsc::UnboundedSender<(u8, u64)>,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    let handler = move |d: Delivery| {
        let _ = tx.send((who, n_of(&d)));
        std::future::ready(Disposition::Ack)
    };
    let queue = bus.names().command_queue(0);
    bus.consume(&queue, opts(8, 1), handler, stop)
}

async fn a_shard_queue_has_one_active_consumer_and_the_other_takes_over(kind: Kind) {
    let (first, second) = pair(kind).await;
    let names = first.names().clone();
    let exchange = names.commands_exchange();
    let key = Names::shard_key(0);
    let (tx, mut rx) = mpsc::unbounded_channel();
    let stops = [CancellationToken::new(), CancellationToken::new()];
    let mut tasks = vec![
        shard_consumer(&first, 0, tx.clone(), stops[0].clone()),
        shard_consumer(&second, 1, tx.clone(), stops[1].clone()),
    ];
    // Whichever attached first is the active one; everything goes to it, in order.
    let mut active = None;
    for n in 0..20 {
        first
            .publish(&exchange, &key, &envelope("wf", n))
            .await
            .unwrap();
        let (who, got) = recv(&mut rx).await;
        assert_eq!(got, n);
        assert_eq!(*active.get_or_insert(who), who, "message {n}");
    }
    let active = usize::from(active.unwrap_or_default());
    // Once it stops, the other one receives.
    stops[active].cancel();
    tasks.remove(active).await.unwrap();
    first
        .publish(&exchange, &key, &envelope("wf", 20))
        .await
        .unwrap();
    let (who, got) = recv(&mut rx).await;
    assert_eq!((usize::from(who), got), (1 - active, 20));
    stops[1 - active].cancel();
    for task in tasks {
        task.await.unwrap();
    }
    first.teardown(&[]).await.unwrap();
    second.teardown(&[]).await.unwrap();
}

#[tokio::test]
async fn a_consumer_that_stops_gives_its_unsettled_deliveries_to_the_next_active_one() {
    let bus = bus(Kind::InProcess).await;
    let names = bus.names().clone();
    let (exchange, key) = (names.commands_exchange(), Names::shard_key(0));
    for n in 0..3 {
        bus.publish(&exchange, &key, &envelope("wf", n))
            .await
            .unwrap();
    }
    // The first consumer takes message 0 and never finishes it; its task is aborted.
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let stuck = move |d: Delivery| {
        let _ = started_tx.send(n_of(&d));
        std::future::pending::<Disposition>()
    };
    let queue = names.command_queue(0);
    let stop_stuck = CancellationToken::new();
    let stuck_task = bus.consume(&queue, opts(8, 1), stuck, stop_stuck.clone());
    assert_eq!(recv(&mut started).await, 0);
    let (tx, mut rx) = mpsc::unbounded_channel();
    let stop = CancellationToken::new();
    let task = shard_consumer(&bus, 1, tx, stop.clone());
    stuck_task.abort();
    assert!(stuck_task.await.unwrap_err().is_cancelled());
    // The next one gets everything, in order, the abandoned message first.
    let mut got = Vec::new();
    for _ in 0..3 {
        got.push(recv(&mut rx).await);
    }
    assert_eq!(got, [(1, 0), (1, 1), (1, 2)]);
    stop.cancel();
    task.await.unwrap();
    bus.teardown(&[]).await.unwrap();
}

#[tokio::test]
async fn a_requeued_message_goes_back_to_the_front_of_its_queue_marked_redelivered() {
    let bus = bus(Kind::InProcess).await;
    let names = bus.names().clone();
    bus.declare_activity_queue("front").await.unwrap();
    for n in 0..3 {
        bus.publish(&names.activity_exchange(), "front", &envelope("wf", n))
            .await
            .unwrap();
    }
    let (tx, mut rx) = mpsc::unbounded_channel();
    let requeued = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let handler = move |d: Delivery| {
        let first_time = n_of(&d) == 0 && !requeued.swap(true, std::sync::atomic::Ordering::SeqCst);
        let _ = tx.send((n_of(&d), d.redelivered));
        std::future::ready(if first_time {
            Disposition::Requeue
        } else {
            Disposition::Ack
        })
    };
    let stop = CancellationToken::new();
    let queue = names.activity_queue("front");
    let task = bus.consume(&queue, opts(8, 1), handler, stop.clone());
    let mut got = Vec::new();
    for _ in 0..4 {
        got.push(recv(&mut rx).await);
    }
    assert_eq!(got, [(0, false), (0, true), (1, false), (2, false)]);
    stop.cancel();
    task.await.unwrap();
    bus.teardown(&[]).await.unwrap();
}

#[tokio::test]
async fn names_longer_than_255_bytes_are_refused() {
    let bus = bus(Kind::InProcess).await;
    let long = "x".repeat(256);
    assert!(bus.declare_activity_queue(&long).await.is_err());
    assert!(bus.declare_queue(&long, &[]).await.is_err());
    let exchange = bus.names().activity_exchange();
    assert!(bus
        .publish(&exchange, &long, &envelope("wf", 1))
        .await
        .is_err());
    assert!(bus.get(&long).await.is_err());
    assert!(Bus::in_process(Names::new(&long, 1), None).await.is_err());
    // Publishing to an exchange that does not exist fails; to a key nobody is bound
    // for, it is dropped.
    assert!(bus
        .publish("no-such-exchange", "k", &envelope("wf", 1))
        .await
        .is_err());
    bus.publish(&exchange, "nobody", &envelope("wf", 1))
        .await
        .unwrap();
    bus.teardown(&[]).await.unwrap();
}

/// A SQLite database in a temporary file, removed (with its WAL files) when dropped.
struct TempDb {
    path: PathBuf,
}

impl TempDb {
    fn new() -> Self {
        let path = std::env::temp_dir().join(format!("weft-bus-{}.db", Uuid::new_v4().simple()));
        Self { path }
    }

    /// The store on the file, as a new process would open it.
    async fn store(&self) -> SqliteStore {
        SqliteStore::open_file(&self.path).await.unwrap()
    }

    /// The store and an in-process bus journaled in it, as a new process opens them.
    async fn open_bus(&self, names: &Names) -> (SqliteStore, Bus) {
        let store = self.store().await;
        let bus = Bus::in_process(names.clone(), Some(store.writer().clone()))
            .await
            .unwrap();
        (store, bus)
    }
}

impl Drop for TempDb {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm"] {
            let mut path = self.path.clone().into_os_string();
            path.push(suffix);
            let _ = std::fs::remove_file(path);
        }
    }
}

async fn journal_rows(pool: &SqlitePool) -> i64 {
    sqlx::query_scalar("SELECT COUNT(*) FROM bus_journal")
        .fetch_one(pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn unacknowledged_messages_survive_the_process_and_acknowledged_ones_do_not() {
    let db = TempDb::new();
    let names = Names::new(&namespace(), 2);
    let exchange = names.activity_exchange();
    let queue = names.activity_queue("durable");

    // First process: four messages published; 0 acknowledged, 1 dead-lettered, 2 taken
    // and left unsettled, 3 held by a consumer that is aborted mid-handler.
    {
        let store = db.store().await;
        let bus = Bus::in_process(names.clone(), Some(store.writer().clone()))
            .await
            .unwrap();
        bus.declare_activity_queue("durable").await.unwrap();
        for n in 0..4 {
            bus.publish(&exchange, "durable", &envelope("wf", n))
                .await
                .unwrap();
        }
        // Written before `publish` returned.
        assert_eq!(journal_rows(store.pool()).await, 4);

        let zero = bus.get(&queue).await.unwrap().expect("message 0");
        assert_eq!(n_of(&zero.delivery), 0);
        zero.ack().await.unwrap();
        let one = bus.get(&queue).await.unwrap().expect("message 1");
        one.settle(Disposition::DeadLetter("poison".into())).await;
        let two = bus.get(&queue).await.unwrap().expect("message 2");
        assert_eq!(n_of(&two.delivery), 2);

        let (started_tx, mut started) = mpsc::unbounded_channel();
        let stuck = move |d: Delivery| {
            let _ = started_tx.send(n_of(&d));
            std::future::pending::<Disposition>()
        };
        let consumer = bus.consume(&queue, opts(8, 1), stuck, CancellationToken::new());
        assert_eq!(recv(&mut started).await, 3);
        bus.flush().await.unwrap();
        assert_eq!(journal_rows(store.pool()).await, 3);

        // The process dies: nothing settled any more.
        consumer.abort();
        let _ = consumer.await;
        std::mem::forget(two);
        drop(bus);
        store.close().await;
    }

    // Next process, on a new pool over the same file.
    let (store, bus) = db.open_bus(&names).await;
    bus.declare_activity_queue("durable").await.unwrap();
    let mut again = Vec::new();
    while let Some(taken) = bus.get(&queue).await.unwrap() {
        assert!(taken.delivery.redelivered);
        again.push(n_of(&taken.delivery));
        taken.ack().await.unwrap();
    }
    assert_eq!(again, [2, 3]);
    let dead = take_one(&bus, &Names::dlq(&queue)).await;
    assert_eq!(
        header(&dead, "x-weft-dead-reason").as_deref(),
        Some("poison")
    );
    assert_eq!(header(&dead, "x-weft-original-queue"), Some(queue.clone()));
    bus.flush().await.unwrap();
    assert_eq!(journal_rows(store.pool()).await, 0);

    // Journaled messages keep flowing to consumers of the new process.
    bus.publish(&exchange, "durable", &envelope("wf", 4))
        .await
        .unwrap();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let stop = CancellationToken::new();
    let handler = move |d: Delivery| {
        let _ = tx.send(n_of(&d));
        std::future::ready(Disposition::Ack)
    };
    let task = bus.consume(&queue, opts(8, 1), handler, stop.clone());
    assert_eq!(recv(&mut rx).await, 4);
    stop.cancel();
    task.await.unwrap();
    bus.teardown(&[]).await.unwrap();
    assert_eq!(journal_rows(store.pool()).await, 0);
    store.close().await;
}

#[tokio::test]
async fn requests_and_replies_are_not_journaled_and_namespaces_do_not_mix() {
    let db = TempDb::new();
    let store = db.store().await;
    let names = Names::new(&namespace(), 1);
    let bus = Bus::in_process(names.clone(), Some(store.writer().clone()))
        .await
        .unwrap();
    // A request nobody answers stays queued, in memory only.
    let heartbeat = names.heartbeat_queue();
    let res = bus
        .call(
            "",
            &heartbeat,
            &envelope("wf", 1),
            Duration::from_millis(50),
        )
        .await;
    assert!(res.is_err());
    assert_eq!(ready_count(&bus, &heartbeat, 1).await, 1);
    bus.publish("", &heartbeat, &envelope("wf", 2))
        .await
        .unwrap();
    assert_eq!(journal_rows(store.pool()).await, 1);

    // Another namespace on the same file does not see this one's messages.
    let other = Bus::in_process(Names::new(&namespace(), 1), Some(store.writer().clone()))
        .await
        .unwrap();
    let other_heartbeat = other.names().heartbeat_queue();
    assert_eq!(other.message_count(&other_heartbeat).await.unwrap(), 0);
    bus.teardown(&[]).await.unwrap();
    other.teardown(&[]).await.unwrap();
    assert_eq!(journal_rows(store.pool()).await, 0);
    store.close().await;
}

/// Publishes that wait together are journaled together (one multi-row statement), each
/// message once per queue it reaches: acknowledging every copy in one queue forgets
/// exactly those rows, and the other queue's copies, in order, are what a new process
/// finds.
#[tokio::test]
async fn publishes_journaled_together_keep_one_row_per_queue_and_copy() {
    let db = TempDb::new();
    let names = Names::new(&namespace(), 1);
    let events = names.events_exchange();
    let ns = names.namespace().to_owned();
    let (first, second) = (format!("{ns}.first"), format!("{ns}.second"));
    const MESSAGES: u64 = 40;
    {
        let (store, bus) = db.open_bus(&names).await;
        bus.declare_queue(&first, &[(&events, "run.#")])
            .await
            .unwrap();
        bus.declare_queue(&second, &[(&events, "run.#")])
            .await
            .unwrap();
        let publishes = (0..MESSAGES).map(|n| {
            let (bus, events) = (bus.clone(), events.clone());
            async move {
                bus.publish(&events, "run.step", &envelope("wf", n))
                    .await
                    .unwrap()
            }
        });
        futures_util::future::join_all(publishes).await;
        assert_eq!(journal_rows(store.pool()).await, 2 * MESSAGES as i64);
        let mut seen = Vec::new();
        while let Some(taken) = bus.get(&first).await.unwrap() {
            seen.push(n_of(&taken.delivery));
            taken.ack().await.unwrap();
        }
        seen.sort_unstable();
        assert_eq!(seen, (0..MESSAGES).collect::<Vec<_>>());
        bus.flush().await.unwrap();
        assert_eq!(journal_rows(store.pool()).await, MESSAGES as i64);
        drop(bus);
        store.close().await;
    }

    let (store, bus) = db.open_bus(&names).await;
    for queue in [&first, &second] {
        bus.declare_queue(queue, &[(&events, "run.#")])
            .await
            .unwrap();
    }
    assert_eq!(bus.message_count(&first).await.unwrap(), 0);
    let mut again = Vec::new();
    while let Some(taken) = bus.get(&second).await.unwrap() {
        again.push(n_of(&taken.delivery));
        taken.ack().await.unwrap();
    }
    let mut expected = again.clone();
    expected.sort_unstable();
    assert_eq!(expected, (0..MESSAGES).collect::<Vec<_>>());
    bus.flush().await.unwrap();
    assert_eq!(journal_rows(store.pool()).await, 0);
    bus.teardown(&[]).await.unwrap();
    store.close().await;
}

/// An eager queue (docs/eager-dispatch.md) holds a task at most five seconds, as
/// RabbitMQ's message TTL does there: what no worker took by then goes on to the task's
/// shared queue through the activity exchange, its journal row with it; what a worker
/// took stays with it.
#[tokio::test]
async fn an_eager_task_nobody_takes_moves_on_to_its_shared_queue_with_its_journal_row() {
    let db = TempDb::new();
    let names = Names::new(&namespace(), 1);
    let shared = names.activity_queue("shout");
    {
        let (store, bus) = db.open_bus(&names).await;
        bus.declare_activity_queue("shout").await.unwrap();
        let prefix = names.eager_prefix(&"ab".repeat(16));
        let eager = bus.declare_eager_queue(&prefix, "shout").await.unwrap();
        for n in 0..2 {
            bus.publish(&names.eager_exchange(), &eager, &envelope("wf", n))
                .await
                .unwrap();
        }
        let taken = bus.get(&eager).await.unwrap().expect("task 0");
        assert_eq!(n_of(&taken.delivery), 0);
        assert_eq!(bus.message_count(&shared).await.unwrap(), 0);

        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        while bus.message_count(&shared).await.unwrap() == 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "task 1 never moved on"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(bus.message_count(&eager).await.unwrap(), 0);
        // The taken one stayed with its taker, unsettled, and settles there.
        taken.ack().await.unwrap();
        bus.flush().await.unwrap();
        assert_eq!(journal_rows(store.pool()).await, 1);
        drop(bus);
        store.close().await;
    }
    // The next process finds the moved task in the shared queue, not in the dead
    // process's eager queue.
    let (store, bus) = db.open_bus(&names).await;
    bus.declare_activity_queue("shout").await.unwrap();
    let again = bus.get(&shared).await.unwrap().expect("the moved task");
    assert_eq!(n_of(&again.delivery), 1);
    assert!(again.delivery.redelivered);
    again.ack().await.unwrap();
    bus.flush().await.unwrap();
    assert_eq!(journal_rows(store.pool()).await, 0);
    store.close().await;
}

/// A task left in the eager queue of a process that died moves on once it expires in
/// the next process, where no worker declares that queue again.
#[tokio::test]
async fn an_eager_task_of_a_dead_process_moves_on_in_the_next_one() {
    let db = TempDb::new();
    let names = Names::new(&namespace(), 1);
    {
        let (store, bus) = db.open_bus(&names).await;
        let prefix = names.eager_prefix(&"cd".repeat(16));
        let eager = bus.declare_eager_queue(&prefix, "shout").await.unwrap();
        bus.publish(&names.eager_exchange(), &eager, &envelope("wf", 7))
            .await
            .unwrap();
        drop(bus);
        store.close().await;
    }
    let (store, bus) = db.open_bus(&names).await;
    bus.declare_activity_queue("shout").await.unwrap();
    let shared = names.activity_queue("shout");
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    let moved = loop {
        if let Some(taken) = bus.get(&shared).await.unwrap() {
            break taken;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the task never moved on"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(n_of(&moved.delivery), 7);
    moved.ack().await.unwrap();
    bus.flush().await.unwrap();
    assert_eq!(journal_rows(store.pool()).await, 0);
    store.close().await;
}
