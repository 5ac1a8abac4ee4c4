//! Test harness: a fresh database and a random bus namespace per test, a queue that
//! records what the timers publish, and helpers to make timers.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;
use weft::bus::{Bus, ConsumeOptions, Delivery, Disposition};
use weft::envelope::Typed;
use weft::store::timers::{self, TimerRecord};
use weft::store::Store;
use weft::topology::Names;
use weft::Envelope;

/// Command shards in tests: few, so declaring them is quick.
pub const SHARDS: u16 = 4;

/// Routing key (on the commands exchange) of the test queue.
pub const TEST_KEY: &str = "timer-test";

pub use weft::testing::{amqp_url, TestDb};

/// A message received by the test queue, with the local time it arrived.
#[derive(Debug)]
pub struct Received {
    /// What arrived.
    pub delivery: Delivery,
    /// `Utc::now()` in the handler (the database runs on the same clock).
    pub at: DateTime<Utc>,
}

/// The payload of test timers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "payload")]
pub enum Ping {
    /// A numbered ping.
    TimerPing {
        /// Which one.
        n: u32,
    },
}

impl Typed for Ping {
    fn kind(&self) -> &'static str {
        "TimerPing"
    }
}

/// One test's world: database, store, bus namespace.
pub struct TestEnv {
    /// The namespace's names.
    pub names: Names,
    /// The database URL.
    pub db_url: String,
    /// A store on the test database (migrated).
    pub store: Store,
    /// A bus on the test namespace.
    pub bus: Bus,
    /// Cancelled first by [`TestEnv::finish`]: stops consumers and firers.
    pub shutdown: CancellationToken,
    /// The store's and bus's connection token, cancelled after the teardown.
    connections: CancellationToken,
    // Last, so the database is dropped after everything else.
    _db: TestDb,
}

impl TestEnv {
    /// A fresh database and namespace.
    pub async fn new() -> Self {
        let weft::testing::Backing {
            names,
            store,
            bus,
            connections,
            db,
        } = weft::testing::Backing::create("hist", "histt", 5, SHARDS).await;
        Self {
            names,
            db_url: db.url.clone(),
            store,
            bus,
            shutdown: CancellationToken::new(),
            connections,
            _db: db,
        }
    }

    /// Another store on the same database (as a second history replica would have).
    pub async fn second_store(&self) -> Store {
        Store::connect(&self.db_url, 5, &self.connections)
            .await
            .expect("connect a second store")
    }

    /// Declares the test queue (bound to the commands exchange with [`TEST_KEY`]) and
    /// records what arrives there.
    pub async fn receive(&self) -> mpsc::UnboundedReceiver<Received> {
        let queue = format!("{}.timer-test", self.names.namespace());
        let exchange = self.names.commands_exchange();
        self.bus
            .declare_queue(&queue, &[(exchange.as_str(), TEST_KEY)])
            .await
            .expect("declare the test queue");
        self.consume(&queue)
    }

    /// Records what arrives on `queue` (already declared).
    pub fn consume(&self, queue: &str) -> mpsc::UnboundedReceiver<Received> {
        let (tx, rx) = mpsc::unbounded_channel();
        let opts = ConsumeOptions {
            prefetch: 64,
            concurrency: 1,
        };
        self.bus.consume(
            queue,
            opts,
            move |delivery| {
                let at = Utc::now();
                let _ = tx.send(Received { delivery, at });
                async { Disposition::Ack }
            },
            self.shutdown.clone(),
        );
        rx
    }

    /// A ping timer to the test queue, due at `fire_at`.
    pub fn timer(&self, n: u32, run_id: Option<Uuid>, fire_at: DateTime<Utc>) -> TimerRecord {
        let envelope =
            Envelope::new(&format!("wf-{n}"), run_id, &Ping::TimerPing { n }).expect("an envelope");
        TimerRecord::new(
            envelope.workflow_id.clone(),
            run_id,
            fire_at,
            self.names.commands_exchange(),
            TEST_KEY,
            &envelope,
            Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into()),
        )
        .expect("a timer")
    }

    /// Inserts `timers` in one transaction, as the decider does.
    pub async fn insert(&self, timers: &[TimerRecord]) {
        let mut tx = self.store.pg_pool().unwrap().begin().await.expect("begin");
        timers::insert(&mut tx, timers)
            .await
            .expect("insert timers");
        tx.commit().await.expect("commit");
    }

    /// The database's clock.
    pub async fn db_now(&self) -> DateTime<Utc> {
        sqlx::query_scalar("SELECT clock_timestamp()")
            .fetch_one(self.store.pg_pool().unwrap())
            .await
            .expect("read the clock")
    }

    /// Whether the timer row `id` is still there.
    pub async fn timer_exists(&self, id: Uuid) -> bool {
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM timers WHERE id = $1)")
            .bind(id)
            .fetch_one(self.store.pg_pool().unwrap())
            .await
            .expect("query timers")
    }

    /// Rows in `timers`.
    pub async fn timer_count(&self) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM timers")
            .fetch_one(self.store.pg_pool().unwrap())
            .await
            .expect("count timers")
    }

    /// Stops consumers and firers, removes the namespace; the database goes with `self`.
    pub async fn finish(self) {
        self.shutdown.cancel();
        if let Err(e) = self.bus.teardown(&[]).await {
            eprintln!("bus teardown: {e}");
        }
        self.connections.cancel();
    }
}

/// Waits at most `within` for the next message.
pub async fn next(
    rx: &mut mpsc::UnboundedReceiver<Received>,
    within: Duration,
) -> Option<Received> {
    tokio::time::timeout(within, rx.recv()).await.ok().flatten()
}

/// Polls `check` every 20 ms until it holds, for at most `within`.
pub async fn eventually<F, Fut>(within: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if check().await {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The number carried by a test ping.
pub fn ping_number(received: &Received) -> u32 {
    match received.delivery.envelope.decode::<Ping>().expect("a ping") {
        Ping::TimerPing { n } => n,
    }
}
