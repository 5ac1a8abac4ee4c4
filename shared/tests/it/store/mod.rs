//! Backend-generic store scenarios: each runs on PostgreSQL (a database of its own,
//! dropped afterwards) and on SQLite (a file of its own under the temp dir, deleted
//! afterwards), through the same [`Store`] facade the services use.
//!
//! `store_test!(scenario)` makes module `scenario` with tests `postgres` and `sqlite`,
//! each calling `async fn scenario(store: &Store)` on a fresh store of that backend
//! (`store_test!(name, scenario)` names the module `name`). `bus_test!(name, scenario)`
//! does the same for `async fn scenario(env: &Env) -> Vec<String>`, whose store comes
//! with a RabbitMQ bus on a namespace of its own (the queues it returns are removed
//! afterwards). Run one backend with a filter, e.g.
//! `cargo test -p weft --test it store:: -- sqlite`.

use std::path::PathBuf;

use chrono::{DateTime, SubsecRound, Utc};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;
use weft::bus::Bus;
use weft::dsl::WorkflowDef;
use weft::messages::Event;
use weft::store::runs::{RunRecord, StoredEvent, TaskRecord};
use weft::store::sqlite::SqliteStore;
use weft::store::Store;
use weft::testing::{amqp_url, random_suffix, TestDb};
use weft::topology::Names;

/// Makes module `$name` running scenario `$name(&Store)` on each backend.
macro_rules! store_test {
    ($name:ident) => {
        store_test!($name, $name);
    };
    ($name:ident, $scenario:ident) => {
        mod $name {
            #[tokio::test]
            async fn postgres() {
                let fixture = $crate::store::Fixture::postgres().await;
                super::$scenario(&fixture.store).await;
            }

            #[tokio::test]
            async fn sqlite() {
                let fixture = $crate::store::Fixture::sqlite().await;
                super::$scenario(&fixture.store).await;
            }
        }
    };
}

/// Makes module `$name` running scenario `$scenario(&Env)` on each backend, with a bus.
macro_rules! bus_test {
    ($name:ident, $scenario:ident) => {
        mod $name {
            #[tokio::test]
            async fn postgres() {
                let env = $crate::store::Env::new($crate::store::Fixture::postgres().await).await;
                let queues = super::$scenario(&env).await;
                env.teardown(&queues).await;
            }

            #[tokio::test]
            async fn sqlite() {
                let env = $crate::store::Env::new($crate::store::Fixture::sqlite().await).await;
                let queues = super::$scenario(&env).await;
                env.teardown(&queues).await;
            }
        }
    };
}

mod auth;
mod delivery;
mod executions;
mod metadata;
mod reads;
mod registry;
mod runs;
mod search;
mod starts;

/// A fresh store of one backend, removed when dropped.
pub(crate) struct Fixture {
    /// The store under test.
    pub store: Store,
    /// Ends the PostgreSQL pool's background work.
    token: CancellationToken,
    /// The PostgreSQL database (dropped after the store).
    _db: Option<TestDb>,
    /// The SQLite file.
    file: Option<PathBuf>,
}

impl Fixture {
    /// A store on a new PostgreSQL database.
    pub async fn postgres() -> Self {
        let db = TestDb::create("store").await;
        let token = CancellationToken::new();
        let store = Store::connect(&db.url, 4, &token)
            .await
            .expect("connect and migrate");
        Self {
            store,
            token,
            _db: Some(db),
            file: None,
        }
    }

    /// A store on a new SQLite file.
    pub async fn sqlite() -> Self {
        let file = std::env::temp_dir().join(format!("weft-store-{}.db", Uuid::new_v4()));
        let store = Store::new(
            SqliteStore::open_file(&file)
                .await
                .expect("open and migrate"),
        );
        Self {
            store,
            token: CancellationToken::new(),
            _db: None,
            file: Some(file),
        }
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        self.token.cancel();
        if let Some(file) = &self.file {
            for suffix in ["", "-wal", "-shm"] {
                let _ = std::fs::remove_file(format!("{}{suffix}", file.display()));
            }
        }
    }
}

/// A fresh store of one backend with a bus on a namespace of its own, for the scenarios
/// that publish (outbox, timers, hooks, the registry's scan).
pub(crate) struct Env {
    /// The store under test.
    pub store: Store,
    /// A bus on the namespace.
    pub bus: Bus,
    /// The namespace's names.
    pub names: Names,
    /// The store's database or file, removed when dropped (after the bus).
    _fixture: Fixture,
}

impl Env {
    /// `fixture`'s store with a bus on a new namespace.
    pub async fn new(fixture: Fixture) -> Self {
        let names = Names::new(&format!("sb{}", random_suffix()), 1);
        let bus = Bus::connect(&amqp_url(), names.clone(), fixture.token.clone())
            .await
            .expect("connect to the broker");
        Self {
            store: fixture.store.clone(),
            bus,
            names,
            _fixture: fixture,
        }
    }

    /// A queue bound to the commands exchange for `key`.
    pub async fn listen(&self, key: &str) -> String {
        let queue = format!("{}.listen.{key}", self.names.namespace());
        self.bus
            .declare_queue(&queue, &[(&self.names.commands_exchange(), key)])
            .await
            .expect("declare the queue");
        queue
    }

    /// Takes every message waiting on `queue` (waiting up to two seconds for `expected`).
    pub async fn take(&self, queue: &str, expected: usize) -> Vec<weft::Envelope> {
        let mut out = Vec::new();
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(2);
        loop {
            match self.bus.get(queue).await.expect("get") {
                Some(t) => {
                    out.push(t.delivery.envelope.clone());
                    t.ack().await.expect("ack");
                }
                None if out.len() >= expected || tokio::time::Instant::now() > deadline => {
                    return out
                }
                None => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
            }
        }
    }

    /// Removes `queues` and the namespace's exchanges; the fixture then drops the store.
    pub async fn teardown(self, queues: &[String]) {
        let _ = self.bus.teardown(queues).await;
    }
}

/// A trace context, as a start request's.
pub(crate) const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// Now, at millisecond precision (both backends store it exactly).
pub(crate) fn now() -> DateTime<Utc> {
    Utc::now().trunc_subsecs(3)
}

/// A definition of two SIMPLE tasks, `a` then `b`.
pub(crate) fn definition(name: &str, version: i32) -> WorkflowDef {
    serde_json::from_value(json!({
        "name": name,
        "version": version,
        "tasks": [
            {"name": "task_a", "taskReferenceName": "a", "type": "SIMPLE"},
            {"name": "task_b", "taskReferenceName": "b", "type": "SIMPLE"}
        ],
        "ownerEmail": "ops@example.com"
    }))
    .expect("definition")
}

/// A new RUNNING run of `workflow_id` at `version`.
pub(crate) fn run(workflow_id: &str, run_id: Uuid, version: i64) -> RunRecord {
    let t = now();
    RunRecord {
        run_id,
        workflow_id: workflow_id.into(),
        workflow_name: "wf".into(),
        workflow_version: 1,
        status: "RUNNING".into(),
        sub_status: "RUNNING".into(),
        input: json!({"x": 1, "s": "é"}),
        output: None,
        variables: json!({}),
        correlation_id: Some("corr-1".into()),
        parent_workflow_id: None,
        reason: None,
        failed_task_refs: Vec::new(),
        start_time: t,
        end_time: None,
        update_time: t,
        version,
        is_current: true,
        reset_from: None,
        pending_signals: None,
    }
}

/// Event 1 of a run: its start, with the definition frozen in.
pub(crate) fn started(run_id: Uuid) -> StoredEvent {
    event(
        run_id,
        1,
        "WorkflowStarted",
        json!({"definition": definition("wf", 1), "input": {"x": 1}, "traceparent": TRACEPARENT}),
    )
}

/// Event `event_id` of a run: a variables update.
pub(crate) fn variables(run_id: Uuid, event_id: i64) -> StoredEvent {
    event(
        run_id,
        event_id,
        "VariablesUpdated",
        json!({"variables": {"n": event_id}}),
    )
}

fn event(run_id: Uuid, event_id: i64, kind: &str, attributes: serde_json::Value) -> StoredEvent {
    StoredEvent {
        run_id,
        event_id,
        time: now(),
        event: Event::from_parts(kind, attributes).expect("event"),
    }
}

/// A SCHEDULED task row of a run.
pub(crate) fn task(run: &RunRecord, task_ref: &str, seq: i32) -> TaskRecord {
    TaskRecord {
        task_id: Uuid::new_v4(),
        run_id: run.run_id,
        workflow_id: run.workflow_id.clone(),
        task_ref: task_ref.into(),
        task_type: "SIMPLE".into(),
        task_name: format!("task_{task_ref}"),
        seq,
        iteration: 0,
        attempt: 1,
        status: "SCHEDULED".into(),
        input: json!({"in": task_ref}),
        output: None,
        reason: None,
        worker_id: None,
        scheduled_time: now(),
        start_time: None,
        end_time: None,
        update_time: now(),
        callback_after_seconds: 0,
        domain: None,
    }
}
