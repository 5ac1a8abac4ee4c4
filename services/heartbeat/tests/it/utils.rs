//! Test harness: a fresh database, a random namespace (queues and Redis keys), a registry
//! over both, a queue that records what the scanner sends, and teardown of it all.

use std::time::Duration;

use chrono::Utc;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;
use weft::bus::{Bus, ConsumeOptions, Delivery, Disposition};
use weft::messages::{AttemptRef, AttemptStarted, Beat, HeartbeatAction, HeartbeatAnswer};
use weft::registry::{Cache, Registry};
use weft::store::Store;
use weft::topology::Names;

pub use weft::testing::{amqp_url, random_suffix, redis_url, TestDb};

/// Command shards in tests.
pub const SHARDS: u16 = 2;
/// Routing key (on the commands exchange) of the queue recording `ActivityTimedOut`.
pub const TEST_KEY: &str = "hb-test";
/// Generous bound for something that should happen soon.
pub const SOON: Duration = Duration::from_secs(30);

/// One test's world.
pub struct TestEnv {
    /// The namespace's names.
    pub names: Names,
    /// The database URL.
    pub db_url: String,
    /// A store on the test database (migrated).
    pub store: Store,
    /// A bus on the test namespace.
    pub bus: Bus,
    /// Cancelled by [`TestEnv::finish`]: stops consumers.
    pub shutdown: CancellationToken,
    connections: CancellationToken,
    extra_queues: Vec<String>,
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
        } = weft::testing::Backing::create("hb", "hbt", 6, SHARDS).await;
        Self {
            names,
            db_url: db.url.clone(),
            store,
            bus,
            shutdown: CancellationToken::new(),
            connections,
            extra_queues: Vec::new(),
            _db: db,
        }
    }

    /// The Redis cache of this namespace.
    pub fn cache(&self) -> Cache {
        Cache::new(&redis_url(), self.names.namespace()).expect("a Redis URL")
    }

    /// A registry with Redis and a 60 s write interval.
    pub fn registry(&self) -> Registry {
        Registry::new(
            self.store.clone(),
            Some(self.cache()),
            Duration::from_secs(60),
        )
    }

    /// A plain Redis connection, to look at or tamper with the cache.
    pub async fn redis(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(redis_url())
            .expect("a Redis URL")
            .get_multiplexed_async_connection()
            .await
            .expect("Redis reachable")
    }

    /// The cache key of a task.
    pub fn key(&self, task_id: Uuid) -> String {
        format!("{}:hb:{task_id}", self.names.namespace())
    }

    /// Declares a queue bound to the commands exchange with [`TEST_KEY`] and records
    /// what arrives there.
    pub async fn receive_commands(&mut self) -> mpsc::UnboundedReceiver<Delivery> {
        let queue = format!("{}.hb-test", self.names.namespace());
        let exchange = self.names.commands_exchange();
        self.bus
            .declare_queue(&queue, &[(exchange.as_str(), TEST_KEY)])
            .await
            .expect("declare the test queue");
        self.extra_queues.push(queue.clone());
        self.record(&queue)
    }

    /// Records what arrives on `queue` (already declared).
    pub fn record(&self, queue: &str) -> mpsc::UnboundedReceiver<Delivery> {
        let (tx, rx) = mpsc::unbounded_channel();
        let opts = ConsumeOptions {
            prefetch: 64,
            concurrency: 1,
        };
        self.bus.consume(
            queue,
            opts,
            move |delivery| {
                let _ = tx.send(delivery);
                async { Disposition::Ack }
            },
            self.shutdown.clone(),
        );
        rx
    }

    /// Stops consumers, deletes the namespace's queues and Redis keys.
    pub async fn finish(self) {
        self.shutdown.cancel();
        let _ = self.bus.teardown(&self.extra_queues).await;
        weft::testing::delete_redis_keys(self.names.namespace()).await;
        self.connections.cancel();
    }
}

/// A started attempt of a fresh task, with heartbeat timeout `timeout_s`.
pub fn started(timeout_s: i64) -> AttemptStarted {
    AttemptStarted {
        attempt: AttemptRef {
            task_id: Uuid::new_v4(),
            attempt: 1,
        },
        workflow_id: format!("wf-{}", random_suffix()),
        run_id: Uuid::new_v4(),
        task_name: "work".into(),
        task_ref: "work_ref".into(),
        worker_id: "worker-1".into(),
        response_timeout_seconds: timeout_s,
        input_bytes: 12,
        reply_to: TEST_KEY.into(),
        started_at: Utc::now(),
    }
}

/// A heartbeat without details.
pub fn beat(task_id: Uuid) -> Beat {
    Beat {
        task_id,
        details: None,
    }
}

/// The action of the only answer.
pub fn only(answers: Vec<(Uuid, HeartbeatAnswer)>) -> HeartbeatAnswer {
    assert_eq!(answers.len(), 1, "{answers:?}");
    answers
        .into_iter()
        .next()
        .map(|(_, a)| a)
        .expect("one answer")
}

/// Whether `answer` says stop, with `reason` inside its reason.
pub fn is_stop(answer: &HeartbeatAnswer, reason: &str) -> bool {
    answer.action == HeartbeatAction::Stop
        && answer
            .reason
            .as_deref()
            .unwrap_or_default()
            .contains(reason)
}

/// `task_check`'s status of an attempt, straight from PostgreSQL.
pub async fn stored_status(store: &Store, task_id: Uuid) -> Option<String> {
    sqlx::query_scalar("SELECT status FROM task_check WHERE task_id = $1")
        .bind(task_id)
        .fetch_optional(store.pg_pool().unwrap())
        .await
        .expect("read task_check")
}
