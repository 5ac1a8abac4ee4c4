//! Backend-generic scenarios of the outbox, timers, hooks, registry, search and stats,
//! each run on PostgreSQL and on SQLite (a local harness until the shared one lands).

use sqlx::{Connection, PgConnection};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;
use weft::bus::Bus;
use weft::store::sqlite::SqliteStore;
use weft::store::Store;
use weft::topology::Names;

mod delivery;
mod registry;
mod search;

const PG: &str = "postgres://postgres@127.0.0.1:5432";
const AMQP: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

/// A store of either backend, a bus on a namespace of its own, and their cleanup.
pub(crate) struct Env {
    pub store: Store,
    pub bus: Bus,
    pub names: Names,
    pg_db: Option<String>,
    sqlite_file: Option<std::path::PathBuf>,
    token: CancellationToken,
}

fn suffix() -> String {
    Uuid::new_v4().simple().to_string()[..12].to_owned()
}

async fn bus(token: &CancellationToken) -> (Bus, Names) {
    let names = Names::new(&format!("sb{}", suffix()), 1);
    let bus = Bus::connect(AMQP, names.clone(), token.clone())
        .await
        .unwrap();
    (bus, names)
}

impl Env {
    pub async fn postgres() -> Self {
        let name = format!("store_b_{}", suffix());
        let mut admin = PgConnection::connect(&format!("{PG}/postgres"))
            .await
            .unwrap();
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut admin)
            .await
            .unwrap();
        let token = CancellationToken::new();
        let store = Store::connect(&format!("{PG}/{name}"), 4, &token)
            .await
            .unwrap();
        let (bus, names) = bus(&token).await;
        Self {
            store,
            bus,
            names,
            pg_db: Some(name),
            sqlite_file: None,
            token,
        }
    }

    pub async fn sqlite() -> Self {
        let path = std::env::temp_dir().join(format!("weft-store-b-{}.db", suffix()));
        let store = Store::new(SqliteStore::open_file(&path).await.unwrap());
        let token = CancellationToken::new();
        let (bus, names) = bus(&token).await;
        Self {
            store,
            bus,
            names,
            pg_db: None,
            sqlite_file: Some(path),
            token,
        }
    }

    /// A queue bound to the commands exchange for `key`.
    pub async fn listen(&self, key: &str) -> String {
        let queue = format!("{}.listen.{key}", self.names.namespace());
        self.bus
            .declare_queue(&queue, &[(&self.names.commands_exchange(), key)])
            .await
            .unwrap();
        queue
    }

    /// Takes every message waiting on `queue` (waiting up to a second for `expected`).
    pub async fn take(&self, queue: &str, expected: usize) -> Vec<weft::Envelope> {
        let mut out = Vec::new();
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(2);
        loop {
            match self.bus.get(queue).await.unwrap() {
                Some(t) => {
                    out.push(t.delivery.envelope.clone());
                    t.ack().await.unwrap();
                }
                None if out.len() >= expected || tokio::time::Instant::now() > deadline => {
                    return out
                }
                None => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
            }
        }
    }

    pub async fn teardown(self, queues: &[String]) {
        let _ = self.bus.teardown(queues).await;
        self.token.cancel();
        drop(self.store);
        if let Some(name) = self.pg_db {
            if let Ok(mut admin) = PgConnection::connect(&format!("{PG}/postgres")).await {
                let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                    .execute(&mut admin)
                    .await;
            }
        }
        if let Some(path) = self.sqlite_file {
            for ext in ["", "-wal", "-shm"] {
                let _ = std::fs::remove_file(format!("{}{ext}", path.display()));
            }
        }
    }
}

/// `both!(name, scenario)`: module `name` with `postgres` and `sqlite` tests running
/// `scenario(&Env) -> Vec<String>` (queues to remove).
macro_rules! both {
    ($name:ident, $scenario:ident) => {
        mod $name {
            #[tokio::test]
            async fn postgres() {
                let env = $crate::store_b::Env::postgres().await;
                let queues = super::$scenario(&env).await;
                env.teardown(&queues).await;
            }

            #[tokio::test]
            async fn sqlite() {
                let env = $crate::store_b::Env::sqlite().await;
                let queues = super::$scenario(&env).await;
                env.teardown(&queues).await;
            }
        }
    };
}
pub(crate) use both;
