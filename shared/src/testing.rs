//! Test support for every crate of the workspace (feature `testing`, for dev-dependencies
//! only): a PostgreSQL database of a test's own, dropped when the test ends, and the
//! local servers' URLs. Tests isolate themselves this way so they can run in parallel.

use sqlx::{Connection, PgConnection};

/// The server part of the PostgreSQL URL, no database (`WEFT_TEST_PG_URL`).
pub fn pg_server() -> String {
    std::env::var("WEFT_TEST_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".into())
}

/// The broker URL (`WEFT_TEST_AMQP_URL`).
pub fn amqp_url() -> String {
    std::env::var("WEFT_TEST_AMQP_URL")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into())
}

/// The Redis URL (`WEFT_TEST_REDIS_URL`).
pub fn redis_url() -> String {
    std::env::var("WEFT_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

/// Deletes every Redis key of `namespace` (`<namespace>:*`): a test's cleanup. Best
/// effort: an unreachable Redis is ignored (keys of the registry expire anyway).
pub async fn delete_redis_keys(namespace: &str) {
    let Ok(client) = redis::Client::open(redis_url()) else {
        return;
    };
    let Ok(mut conn) = client.get_multiplexed_async_connection().await else {
        return;
    };
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{namespace}:*"))
        .query_async(&mut conn)
        .await
        .unwrap_or_default();
    if !keys.is_empty() {
        let _: Result<(), _> = redis::cmd("DEL").arg(keys).query_async(&mut conn).await;
    }
}

/// 12 random hex characters, for database names and namespaces.
pub fn random_suffix() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..12].to_owned()
}

/// A database of its own; dropped (`WITH (FORCE)`) when the value is dropped.
#[derive(Debug)]
pub struct TestDb {
    /// Its name.
    pub name: String,
    /// Its URL.
    pub url: String,
}

impl TestDb {
    /// Creates `<prefix>_<random>`.
    ///
    /// # Panics
    /// When PostgreSQL cannot be reached: a test cannot run without it.
    pub async fn create(prefix: &str) -> Self {
        let name = format!("{prefix}_{}", random_suffix());
        let mut admin = PgConnection::connect(&format!("{}/postgres", pg_server()))
            .await
            .expect("connect to the postgres database");
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut admin)
            .await
            .expect("create the test database");
        let url = format!("{}/{name}", pg_server());
        Self { name, url }
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        // Drop runs outside async (and maybe during a panic): a runtime of its own on a
        // plain thread. FORCE ends the pools' connections still open.
        let name = self.name.clone();
        let done = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| sqlx::Error::Io(std::io::Error::other(e)))?;
            rt.block_on(async {
                let mut admin = PgConnection::connect(&format!("{}/postgres", pg_server())).await?;
                sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                    .execute(&mut admin)
                    .await
                    .map(|_| ())
            })
        })
        .join();
        if !matches!(done, Ok(Ok(()))) {
            eprintln!("could not drop test database {}", self.name);
        }
    }
}

/// What most integration tests stand on: a database of their own (migrated, through a
/// store), and a namespace of their own on the broker.
#[derive(Debug)]
pub struct Backing {
    /// The namespace's names.
    pub names: crate::topology::Names,
    /// A store on the test database.
    pub store: crate::store::Store,
    /// A bus on the test namespace.
    pub bus: crate::bus::Bus,
    /// The store's and bus's connection token: cancel it after the teardown.
    pub connections: tokio_util::sync::CancellationToken,
    /// The database, dropped last by whoever keeps it.
    pub db: TestDb,
}

impl Backing {
    /// Creates database `<db_prefix>_<random>` (a store of `pool` connections) and
    /// namespace `<ns_prefix>-<random>` with `shards` command shards.
    ///
    /// # Panics
    /// When PostgreSQL or RabbitMQ cannot be reached: a test cannot run without them.
    pub async fn create(db_prefix: &str, ns_prefix: &str, pool: u32, shards: u16) -> Self {
        let db = TestDb::create(db_prefix).await;
        let connections = tokio_util::sync::CancellationToken::new();
        let store = crate::store::Store::connect(&db.url, pool, &connections)
            .await
            .expect("connect and migrate");
        let names =
            crate::topology::Names::new(&format!("{ns_prefix}-{}", random_suffix()), shards);
        let bus = crate::bus::Bus::connect(&amqp_url(), names.clone(), connections.clone())
            .await
            .expect("connect to the broker");
        Self {
            names,
            store,
            bus,
            connections,
            db,
        }
    }
}

/// A stand-in for the heartbeat service's registry, for tests of workers without it:
/// consumes `bus`'s heartbeat queue until `shutdown` and grants every claim
/// (`ClaimAttempt`, `ClaimAttempts`: CONTINUE); other heartbeat messages are acknowledged
/// unanswered.
pub fn grant_claims(
    bus: &crate::bus::Bus,
    shutdown: tokio_util::sync::CancellationToken,
) -> tokio::task::JoinHandle<()> {
    use crate::bus::{ConsumeOptions, Delivery, Disposition};
    use crate::messages::{HeartbeatAction, HeartbeatAnswer, HeartbeatAnswers, HeartbeatMessage};
    let responder = bus.clone();
    let grant = move |d: Delivery| {
        let bus = responder.clone();
        async move {
            let claims = match d.envelope.decode() {
                Ok(HeartbeatMessage::ClaimAttempt(c)) => vec![c],
                Ok(HeartbeatMessage::ClaimAttempts(group)) => group.claims,
                _ => Vec::new(),
            };
            if !claims.is_empty() {
                let results = claims
                    .iter()
                    .map(|c| {
                        let grant = HeartbeatAnswer {
                            action: HeartbeatAction::Continue,
                            reason: None,
                            retry_after_ms: None,
                        };
                        (c.started.attempt.task_id, grant)
                    })
                    .collect();
                let answers = HeartbeatAnswers { results };
                let reply = serde_json::to_value(answers).map(|payload| crate::Envelope {
                    id: crate::ids::new_id(),
                    kind: "HeartbeatAnswers".into(),
                    payload,
                    ..d.envelope.clone()
                });
                if let Ok(reply) = reply {
                    let _ = bus.reply(&d, &reply).await;
                }
            }
            Disposition::Ack
        }
    };
    let opts = ConsumeOptions {
        prefetch: 64,
        concurrency: 16,
    };
    let queue = bus.names().heartbeat_queue();
    bus.consume(&queue, opts, grant, shutdown)
}
