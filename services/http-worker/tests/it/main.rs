//! The HTTP worker against a real local HTTP server (axum on 127.0.0.1:0) and the real
//! RabbitMQ (`WEFT_AMQP_URL`, default the local broker).
//!
//! Each test plays the decider in a random namespace: it publishes an `HTTP` activity
//! task to the activity exchange, runs [`weft_http_worker::run`] in-process and reads
//! the result from the command shard named by `reply_to`.
//!
//! The test server is on this machine, which the outbound guard refuses by default: the
//! worker runs with `WEFT_OUTBOUND_ALLOW` set to loopback, except in the tests of the
//! guard itself (`outbound.rs`).

mod outbound;

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::time::Duration;

use axum::extract::{Path, Query};
use axum::http::header::LOCATION;
use axum::http::{HeaderMap, Method, StatusCode};
use axum::routing::{any, get};
use axum::{Json, Router};
use chrono::Utc;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;
use weft::bus::{Bus, ConsumeOptions, Delivery, Disposition};
use weft::messages::{ActivityFailed, ActivityMessage, ActivityTask, Command};
use weft::outbound::AllowList;
use weft::topology::Names;
use weft::{Config, Envelope};
use weft_http_worker::TASK_NAME;

/// Upper bound on any wait for something that should happen.
const WAIT: Duration = Duration::from_secs(20);
/// The shard results are routed to (of two).
const REPLY_SHARD: u16 = 1;

/// The test server on 127.0.0.1: JSON, echo, any status, slow and big answers, redirects.
async fn serve() -> (SocketAddr, CancellationToken) {
    serve_on("127.0.0.1").await
}

/// The test server on `ip` (port chosen by the system).
async fn serve_on(ip: &str) -> (SocketAddr, CancellationToken) {
    let app = Router::new()
        .route(
            "/json",
            get(|| async {
                (
                    [("x-served-by", "it")],
                    Json(json!({"hello": "world", "n": 1})),
                )
            }),
        )
        .route("/text", get(|| async { "plain words" }))
        .route("/echo", any(echo))
        .route(
            "/status/{code}",
            get(|Path(code): Path<u16>| async move {
                let status = StatusCode::from_u16(code).unwrap_or(StatusCode::IM_A_TEAPOT);
                (status, format!("no luck: {code}"))
            }),
        )
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(3)).await;
                "late"
            }),
        )
        .route("/big", get(|| async { "x".repeat(3 * 1024 * 1024) }))
        // `/redirect?to=<url>`: 302 to `url`.
        .route(
            "/redirect",
            get(|Query(q): Query<HashMap<String, String>>| async move {
                let to = q.get("to").cloned().unwrap_or_default();
                (StatusCode::FOUND, [(LOCATION, to)])
            }),
        );
    let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = CancellationToken::new();
    let token = stop.clone();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(token.cancelled_owned())
            .await;
    });
    (addr, stop)
}

/// Answers with what arrived: method, headers (name → values) and the raw body.
async fn echo(method: Method, headers: HeaderMap, body: String) -> Json<Value> {
    let mut seen: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, value) in &headers {
        let value = value.to_str().unwrap_or("<binary>").to_owned();
        seen.entry(name.to_string()).or_default().push(value);
    }
    Json(json!({"method": method.as_str(), "headers": seen, "body": body}))
}

/// The test's side of the bus: schedules HTTP tasks and collects results.
struct Decider {
    bus: Bus,
    names: Names,
    results: mpsc::UnboundedReceiver<Delivery>,
    consumers: CancellationToken,
    worker_stop: CancellationToken,
    worker: JoinHandle<weft::Result<()>>,
    /// Every task published so far.
    published: Vec<Uuid>,
}

impl Decider {
    /// Connects in a fresh namespace, consumes the command shards and starts the worker,
    /// which may call this machine (the test server).
    async fn start() -> Self {
        Self::start_allowing(Some(AllowList::loopback())).await
    }

    /// [`Decider::start`] with `allow` as the worker's `WEFT_OUTBOUND_ALLOW` (`None`:
    /// unset, the guard's default rules alone).
    async fn start_allowing(allow: Option<AllowList>) -> Self {
        let config = Config {
            namespace: format!("t{}", Uuid::new_v4().simple()),
            amqp_url: std::env::var("WEFT_AMQP_URL").unwrap_or_else(|_| Config::default().amqp_url),
            shards: 2,
            shutdown_grace: Duration::from_secs(5),
            outbound_allow: allow,
            ..Config::default()
        };
        let names = Names::new(&config.namespace, config.shards);
        let connect = Bus::connect(&config.amqp_url, names.clone(), CancellationToken::new());
        let bus = tokio::time::timeout(WAIT, connect)
            .await
            .expect("broker reachable")
            .expect("connect");
        let (sender, results) = mpsc::unbounded_channel();
        let consumers = CancellationToken::new();
        for k in 0..config.shards {
            let sender = sender.clone();
            let opts = ConsumeOptions {
                prefetch: 32,
                concurrency: 1,
            };
            let on_result = move |d: Delivery| {
                let _ = sender.send(d);
                async { Disposition::Ack }
            };
            bus.consume(&names.command_queue(k), opts, on_result, consumers.clone());
        }
        // The heartbeat service's part: every claim is granted.
        weft::testing::grant_claims(&bus, consumers.clone());
        let worker_stop = CancellationToken::new();
        let worker = tokio::spawn(weft_http_worker::run(config, worker_stop.clone()));
        Self {
            bus,
            names,
            results,
            consumers,
            worker_stop,
            worker,
            published: Vec::new(),
        }
    }

    /// Publishes an HTTP task with `input`, as the decider does, and returns its result.
    async fn run_task(&mut self, input: Value) -> Command {
        let task = ActivityTask {
            task_id: Uuid::new_v4(),
            workflow_id: format!("wf-{}", Uuid::new_v4().simple()),
            run_id: Uuid::new_v4(),
            task_ref: "call".into(),
            task_name: TASK_NAME.into(),
            task_type: "HTTP".into(),
            attempt: 1,
            input,
            reply_to: Names::shard_key(REPLY_SHARD),
            scheduled_at: Utc::now(),
            response_timeout_seconds: 0,
            eager: false,
            results_together: false,
        };
        let message = ActivityMessage::ActivityTask(task.clone());
        let envelope = Envelope::new(&task.workflow_id, Some(task.run_id), &message).unwrap();
        self.bus.declare_activity_queue(TASK_NAME).await.unwrap();
        let exchange = self.names.activity_exchange();
        let body = envelope.to_bytes().unwrap();
        self.bus
            .publish_bytes(&exchange, TASK_NAME, &body, None)
            .await
            .unwrap();

        // The worker reports each start in the background, so a start report may
        // arrive after its result, even after the next task was published.
        self.published.push(task.task_id);
        let command = loop {
            let delivery = tokio::time::timeout(WAIT, self.results.recv())
                .await
                .expect("a result in time")
                .expect("result consumers alive");
            assert_eq!(delivery.queue, self.names.command_queue(REPLY_SHARD));
            match delivery.envelope.decode::<Command>().unwrap() {
                Command::ActivityStarted(started) => {
                    assert!(self.published.contains(&started.task_id), "{started:?}")
                }
                other => break other,
            }
        };
        let id = match &command {
            Command::ActivityCompleted(c) => c.task_id,
            Command::ActivityFailed(f) => f.task_id,
            other => panic!("not an activity result: {other:?}"),
        };
        assert_eq!(id, task.task_id);
        command
    }

    /// The output of a completed task.
    async fn completed(&mut self, input: Value) -> Value {
        match self.run_task(input).await {
            Command::ActivityCompleted(done) => done.output,
            other => panic!("expected ActivityCompleted, got {other:?}"),
        }
    }

    /// The failure of a failed task.
    async fn failed(&mut self, input: Value) -> ActivityFailed {
        match self.run_task(input).await {
            Command::ActivityFailed(failed) => failed,
            other => panic!("expected ActivityFailed, got {other:?}"),
        }
    }

    /// Stops the worker (cleanly), the consumers, and deletes the namespace.
    async fn teardown(self) {
        self.worker_stop.cancel();
        tokio::time::timeout(WAIT, self.worker)
            .await
            .expect("the worker stops in time")
            .expect("no panic")
            .expect("a clean stop");
        self.consumers.cancel();
        let http_queue = self.names.activity_queue(TASK_NAME);
        self.bus.teardown(&[http_queue]).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_json_completes_with_status_headers_and_parsed_body() {
    let (addr, server) = serve().await;
    let mut decider = Decider::start().await;

    let out = decider
        .completed(json!({"http_request": {"uri": format!("http://{addr}/json")}}))
        .await;
    let response = &out["response"];
    assert_eq!(response["statusCode"], 200, "{out}");
    assert_eq!(response["reasonPhrase"], "OK");
    assert_eq!(response["body"], json!({"hello": "world", "n": 1}));
    assert_eq!(response["headers"]["x-served-by"], json!(["it"]));
    assert_eq!(
        response["headers"]["content-type"],
        json!(["application/json"])
    );

    // The flat (newer Conductor) form, and a text answer.
    let out = decider
        .completed(json!({"uri": format!("http://{addr}/text"), "method": "GET"}))
        .await;
    assert_eq!(out["response"]["body"], "plain words", "{out}");

    // A body above the cap is truncated with a marker.
    let out = decider
        .completed(json!({"http_request": {"uri": format!("http://{addr}/big")}}))
        .await;
    let body = out["response"]["body"].as_str().expect("text");
    assert!(body.len() < 1024 * 1024 + 200, "{}", body.len());
    assert!(
        body.ends_with("bytes]") && body.contains("[truncated"),
        "{}",
        &body[body.len() - 80..]
    );

    decider.teardown().await;
    server.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_sends_the_json_body_and_custom_headers_as_given() {
    let (addr, server) = serve().await;
    let mut decider = Decider::start().await;

    let sent = json!({"order": 7, "items": ["a", "b"], "note": null});
    let out = decider
        .completed(json!({"http_request": {
            "uri": format!("http://{addr}/echo?q=1"),
            "method": "POST",
            "headers": {"X-Tenant": "acme", "X-Retry": 2},
            "body": sent,
        }}))
        .await;
    let seen = &out["response"]["body"];
    assert_eq!(seen["method"], "POST", "{out}");
    assert_eq!(seen["headers"]["x-tenant"], json!(["acme"]));
    assert_eq!(seen["headers"]["x-retry"], json!(["2"]));
    assert_eq!(seen["headers"]["content-type"], json!(["application/json"]));
    assert_eq!(seen["headers"]["accept"], json!(["application/json"]));
    let arrived: Value = serde_json::from_str(seen["body"].as_str().unwrap()).unwrap();
    assert_eq!(arrived, sent);

    // A string body with another content type is sent verbatim.
    let out = decider
        .completed(json!({"http_request": {
            "uri": format!("http://{addr}/echo"),
            "method": "put",
            "contentType": "text/csv",
            "accept": "text/plain",
            "body": "a,b\n1,2",
        }}))
        .await;
    let seen = &out["response"]["body"];
    assert_eq!(seen["method"], "PUT", "{out}");
    assert_eq!(seen["body"], "a,b\n1,2");
    assert_eq!(seen["headers"]["content-type"], json!(["text/csv"]));
    assert_eq!(seen["headers"]["accept"], json!(["text/plain"]));

    decider.teardown().await;
    server.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_statuses_are_retryable_failures_naming_the_status() {
    let (addr, server) = serve().await;
    let mut decider = Decider::start().await;

    for (code, phrase) in [(404, "Not Found"), (500, "Internal Server Error")] {
        let uri = format!("http://{addr}/status/{code}?token=secret");
        let failed = decider.failed(json!({"http_request": {"uri": uri}})).await;
        assert!(!failed.terminal, "{failed:?}");
        let expected =
            format!("HTTP {code} {phrase} from GET http://{addr}/status/{code}: no luck: {code}");
        assert_eq!(failed.reason, expected);
        assert!(!failed.reason.contains("secret"), "the query is not quoted");
    }

    decider.teardown().await;
    server.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeouts_and_refused_connections_are_retryable_failures_with_the_reason() {
    let (addr, server) = serve().await;
    let mut decider = Decider::start().await;

    let started = std::time::Instant::now();
    let failed = decider
        .failed(json!({"http_request": {"uri": format!("http://{addr}/slow"), "readTimeOut": 300}}))
        .await;
    assert!(!failed.terminal, "{failed:?}");
    assert!(failed.reason.contains("timed out"), "{}", failed.reason);
    assert!(
        failed.reason.contains("read timeout 300 ms"),
        "{}",
        failed.reason
    );
    assert!(
        started.elapsed() < Duration::from_millis(2500),
        "{:?}",
        started.elapsed()
    );

    // Nothing listens on a port that was just free.
    let free = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let failed = decider
        .failed(
            json!({"http_request": {"uri": format!("http://{free}/x"), "connectionTimeOut": 500}}),
        )
        .await;
    assert!(!failed.terminal, "{failed:?}");
    assert!(
        failed.reason.contains("could not connect"),
        "{}",
        failed.reason
    );

    decider.teardown().await;
    server.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_a_terminal_failure_naming_the_field() {
    let mut decider = Decider::start().await;

    let failed = decider
        .failed(json!({"http_request": {"method": "GET"}}))
        .await;
    assert!(failed.terminal, "{failed:?}");
    assert!(
        failed.reason.contains("`http_request.uri` is missing"),
        "{}",
        failed.reason
    );

    let failed = decider
        .failed(json!({"http_request": {"uri": "http://127.0.0.1:1/", "method": "YELL"}}))
        .await;
    assert!(failed.terminal, "{failed:?}");
    assert!(
        failed.reason.contains("`http_request.method`"),
        "{}",
        failed.reason
    );

    decider.teardown().await;
}
