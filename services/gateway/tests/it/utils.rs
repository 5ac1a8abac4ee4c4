//! Test harness: a fresh PostgreSQL database and a random bus namespace per test, the
//! gateway's router in-process, and small HTTP helpers.
//!
//! The real PostgreSQL and RabbitMQ are used (`WEFT_TEST_PG_URL`, default
//! `postgres://postgres@127.0.0.1:5432`; `WEFT_TEST_AMQP_URL`, default the local broker).

use std::time::Duration;

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use axum::Router;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;
use weft::admin::Metrics;
use weft::bus::{Bus, ConsumeOptions, Delivery, Disposition};
use weft::store::Store;
use weft::topology::Names;
use weft_gateway::AppState;

/// Command shards in tests: few, so declaring them is quick.
pub const SHARDS: u16 = 4;

pub use weft::testing::{amqp_url, random_suffix, TestDb};

/// One test's world: database, bus namespace, router.
pub struct TestEnv {
    /// The gateway's routes.
    pub router: Router,
    /// The store the router uses (to insert and inspect rows).
    pub store: Store,
    /// The bus the router publishes on.
    pub bus: Bus,
    /// What the router runs on.
    pub state: AppState,
    shutdown: CancellationToken,
    consumers: CancellationToken,
    // Declared last so the database is dropped after everything else.
    _db: TestDb,
}

/// A response, read whole.
#[derive(Debug)]
pub struct Reply {
    /// Status code.
    pub status: StatusCode,
    /// `Content-Type`, if any.
    pub content_type: String,
    /// The raw body.
    pub body: Vec<u8>,
}

impl Reply {
    /// The body as JSON; panics with the body when it is not.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("{e}: body is not JSON: {}", self.text()))
    }

    /// The body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// Asserts a JSON error answer with `status` and returns its body.
    pub fn error(&self, status: StatusCode) -> Value {
        assert_eq!(self.status, status, "body: {}", self.text());
        assert!(
            self.content_type.starts_with("application/json"),
            "{self:?}"
        );
        let body = self.json();
        assert!(body["code"].is_string(), "{body}");
        assert!(body["message"].is_string(), "{body}");
        body
    }
}

impl TestEnv {
    /// A world with the default body limit.
    pub async fn new() -> Self {
        Self::with_max_body(weft::Config::default().max_body_bytes).await
    }

    /// A world whose gateway accepts bodies of at most `max_body_bytes`.
    pub async fn with_max_body(max_body_bytes: usize) -> Self {
        let db = TestDb::create("gw").await;
        let shutdown = CancellationToken::new();
        let store = Store::connect(&db.url, 5, &shutdown)
            .await
            .expect("connect and migrate");
        let names = Names::new(&format!("gwt-{}", random_suffix()), SHARDS);
        let bus = Bus::connect(&amqp_url(), names, shutdown.clone())
            .await
            .expect("connect to the broker");
        let state = AppState::new(store.clone(), bus.clone(), max_body_bytes, Metrics::new());
        Self {
            router: weft_gateway::router(state.clone()),
            store,
            bus,
            state,
            shutdown,
            consumers: CancellationToken::new(),
            _db: db,
        }
    }

    /// This world with auth on, `admin` being the configured admin token.
    pub fn with_admin_token(mut self, admin: &str) -> Self {
        let settings = weft::auth_settings::AuthSettings {
            mode: None,
            admin_token: Some(weft::auth_settings::Secret::new(admin)),
            metrics_need_token: true,
        };
        self.state = self.state.clone().with_auth(&settings);
        self.router = weft_gateway::router(self.state.clone());
        self
    }

    /// Sends one request; `body` is sent as is.
    pub async fn send(&self, method: Method, uri: &str, body: Option<Vec<u8>>) -> Reply {
        self.send_with(method, uri, body, &[]).await
    }

    /// Sends one request with extra headers.
    pub async fn send_with(
        &self,
        method: Method,
        uri: &str,
        body: Option<Vec<u8>>,
        headers: &[(&str, &str)],
    ) -> Reply {
        let mut req = Request::builder().method(method).uri(uri);
        if body.is_some() {
            req = req.header(header::CONTENT_TYPE, "application/json");
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let req = req
            .body(body.map_or_else(Body::empty, Body::from))
            .expect("a request");
        let res = self.router.clone().oneshot(req).await.expect("infallible");
        let status = res.status();
        let content_type = res
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let body = axum::body::to_bytes(res.into_body(), usize::MAX)
            .await
            .expect("read the body")
            .to_vec();
        Reply {
            status,
            content_type,
            body,
        }
    }

    /// `GET uri`.
    pub async fn get(&self, uri: &str) -> Reply {
        self.send(Method::GET, uri, None).await
    }

    /// `POST uri` with a JSON body.
    pub async fn post(&self, uri: &str, body: &Value) -> Reply {
        self.send(Method::POST, uri, Some(body.to_string().into_bytes()))
            .await
    }

    /// `PUT uri` with a JSON body.
    pub async fn put(&self, uri: &str, body: &Value) -> Reply {
        self.send(Method::PUT, uri, Some(body.to_string().into_bytes()))
            .await
    }

    /// Caches the starts' definitions as `weft-gateway` does: changes to them are heard
    /// from PostgreSQL until `finish`.
    pub fn watch_definitions(&self) {
        self.store.watch_definitions(self.shutdown.clone());
    }

    /// Registers `def`, asserting success.
    pub async fn register(&self, def: &Value) {
        let r = self.post("/api/metadata/workflow", def).await;
        assert_eq!(r.status, StatusCode::OK, "register: {}", r.text());
    }

    /// Starts a workflow with `request`, asserting success; returns the workflow id.
    pub async fn start(&self, request: &Value) -> String {
        let r = self.post("/api/workflow", request).await;
        assert_eq!(r.status, StatusCode::OK, "start: {}", r.text());
        assert!(r.content_type.starts_with("text/plain"), "{r:?}");
        r.text()
    }

    /// Runs `handler` on every delivery of every command shard of the namespace, one at
    /// a time per shard (in queue order), acknowledging each.
    fn consume_each_shard<F, Fut>(&self, handler: F)
    where
        F: Fn(Delivery) -> Fut + Clone + Send + Sync + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        for k in 0..SHARDS {
            let handler = handler.clone();
            let opts = ConsumeOptions {
                prefetch: 16,
                concurrency: 1,
            };
            self.bus.consume(
                &self.bus.names().command_queue(k),
                opts,
                move |d| {
                    let handled = handler(d);
                    async move {
                        handled.await;
                        Disposition::Ack
                    }
                },
                self.consumers.clone(),
            );
        }
    }

    /// Consumes every command shard of the namespace; deliveries arrive on the channel
    /// (and are acknowledged). The gateway's `WatchVerdict` calls are not passed on (no
    /// verdict comes: the gateway then reads the store, as without a decider).
    pub fn consume_commands(&self) -> mpsc::UnboundedReceiver<Delivery> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.consume_each_shard(move |d| {
            let tx = tx.clone();
            async move {
                if d.envelope.kind != "WatchVerdict" {
                    let _ = tx.send(d);
                }
            }
        });
        rx
    }

    /// As [`Self::consume_commands`], standing in for a decider that pushes the verdict
    /// `status` with `message` to every `WatchVerdict` and records none in the store.
    pub fn consume_commands_pushing(
        &self,
        status: i16,
        message: &'static str,
    ) -> mpsc::UnboundedReceiver<Delivery> {
        let (tx, rx) = mpsc::unbounded_channel();
        let bus = self.bus.clone();
        self.consume_each_shard(move |d| {
            let (tx, bus) = (tx.clone(), bus.clone());
            async move {
                match d.envelope.decode::<weft::messages::Command>() {
                    Ok(weft::messages::Command::WatchVerdict(w)) => {
                        let body = serde_json::json!({ "message": message });
                        reply(&bus, &d, w.request_id, status, body).await;
                    }
                    _ => {
                        let _ = tx.send(d);
                    }
                }
            }
        });
        rx
    }

    /// As [`Self::consume_commands`], standing in for the decider's verdicts too: each
    /// task update (`UpdateTask`) is answered as applied (200, naming its task), recorded
    /// in the store and pushed to the `WatchVerdict` behind it, so that the request
    /// waiting for it returns.
    pub fn consume_commands_applying_updates(&self) -> mpsc::UnboundedReceiver<Delivery> {
        let (tx, rx) = mpsc::unbounded_channel();
        let (store, bus) = (self.store.clone(), self.bus.clone());
        self.consume_each_shard(move |d| {
            let (tx, store, bus) = (tx.clone(), store.clone(), bus.clone());
            async move {
                match d.envelope.decode::<weft::messages::Command>() {
                    // As the decider: the verdict recorded before, pushed.
                    Ok(weft::messages::Command::WatchVerdict(w)) => {
                        if let Ok(Some(o)) = store.operation_outcome(w.request_id).await {
                            reply(&bus, &d, w.request_id, o.status, o.body).await;
                        }
                    }
                    Ok(weft::messages::Command::UpdateTask(u)) => {
                        let outcome = weft::store::operations::OperationOutcome {
                            request_id: u.op.request_id.expect("a request id"),
                            workflow_id: d.envelope.workflow_id.clone(),
                            status: 200,
                            body: serde_json::json!({
                                "workflowId": d.envelope.workflow_id,
                                "taskId": u.task_id,
                                "held": false,
                            }),
                        };
                        let batch = weft::store::runs::CommitBatch {
                            outcomes: vec![outcome],
                            ..Default::default()
                        };
                        store.commit(&batch).await.expect("verdict written");
                        let _ = tx.send(d);
                    }
                    _ => {
                        let _ = tx.send(d);
                    }
                }
            }
        });
        rx
    }

    /// Starts the gateway's start-event consumer (as `weft-gateway` does), until `finish`.
    pub fn consume_start_events(&self) {
        weft_gateway::start_events::spawn(&self.state, 4, self.consumers.clone());
    }

    /// Removes the namespace's queues and exchanges; the database goes with `self`.
    pub async fn finish(self) {
        self.consumers.cancel();
        if let Err(e) = self.bus.teardown(&[]).await {
            eprintln!("bus teardown: {e}");
        }
        self.shutdown.cancel();
    }
}

/// Replies to the `WatchVerdict` delivery `d` with the verdict `status`, `body`.
async fn reply(bus: &Bus, d: &Delivery, request_id: uuid::Uuid, status: i16, body: Value) {
    let verdict = weft::messages::Verdict {
        request_id,
        status,
        body,
    };
    let reply = weft::messages::WatchReply::Verdict(verdict);
    let envelope = weft::Envelope::new(&d.envelope.workflow_id, None, &reply).expect("a reply");
    bus.reply(d, &envelope).await.expect("reply sent");
}

/// Waits at most `secs` for the next delivery.
pub async fn next_delivery(
    rx: &mut mpsc::UnboundedReceiver<Delivery>,
    secs: u64,
) -> Option<Delivery> {
    tokio::time::timeout(Duration::from_secs(secs), rx.recv())
        .await
        .ok()
        .flatten()
}

/// A minimal valid definition with one SIMPLE task.
pub fn simple_def(name: &str, version: i32) -> Value {
    serde_json::json!({
        "name": name,
        "version": version,
        "schemaVersion": 2,
        "tasks": [{
            "name": "greet",
            "taskReferenceName": "greet_ref",
            "type": "SIMPLE",
            "inputParameters": {"who": "${workflow.input.who}"}
        }]
    })
}
