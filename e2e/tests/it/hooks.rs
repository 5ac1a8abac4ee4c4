//! Hooks over the real services (issue 6, docs/hooks.md): a reset fires the rollback
//! hooks of the tasks it undoes, newest first, signed, before the reset task runs
//! again; a failing receiver is retried (three attempts, visible in GET /hooks); an
//! activity that times out fires `onTimeout` (and an `EventListener` sees the event);
//! an awaited rollback hook that never succeeds makes the reset fail visibly.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use reqwest::Method;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;
use weft_e2e::{Client, EnvOptions, Service, Suite, TestEnv};

use crate::operations::{Steps, STEP};
use crate::RUN_TIMEOUT;

/// The secret every definition here signs its hooks with.
const SECRET: &str = "e2e-hook-secret";

/// One call the receiver got.
#[derive(Debug, Clone)]
struct Call {
    /// The path's last segment: which hook it was.
    name: String,
    headers: HeaderMap,
    body: Bytes,
    /// How many times the worker had started the hook's task when the call came.
    executions: u32,
}

impl Call {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }

    fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    }
}

/// A local HTTP receiver: records every call, in arrival order, and answers 500 to the
/// first `failures[name]` calls of a name (`u32::MAX`: always), 200 after.
#[derive(Clone)]
struct Receiver {
    calls: Arc<Mutex<Vec<Call>>>,
    failures: Arc<Mutex<HashMap<String, u32>>>,
    steps: Steps,
    base: String,
}

impl Receiver {
    async fn start(steps: &Steps) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let receiver = Self {
            calls: Arc::default(),
            failures: Arc::default(),
            steps: steps.clone(),
            base: format!("http://{}", listener.local_addr().unwrap()),
        };
        let app = axum::Router::new()
            .route("/hook/{name}", axum::routing::post(receive))
            .with_state(receiver.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        receiver
    }

    fn url(&self, name: &str) -> String {
        format!("{}/hook/{name}", self.base)
    }

    fn fail(&self, name: &str, times: u32) {
        self.failures.lock().unwrap().insert(name.to_owned(), times);
    }

    fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }

    fn calls_of(&self, name: &str) -> Vec<Call> {
        self.calls()
            .into_iter()
            .filter(|c| c.name == name)
            .collect()
    }

    /// Waits until `name` was called `n` times.
    async fn called(&self, name: &str, n: usize) -> Vec<Call> {
        let deadline = tokio::time::Instant::now() + RUN_TIMEOUT;
        loop {
            let calls = self.calls_of(name);
            if calls.len() >= n {
                return calls;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "hook {name} called {} times, not {n}; calls: {:?}",
                calls.len(),
                self.calls().iter().map(|c| &c.name).collect::<Vec<_>>()
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
}

async fn receive(
    State(r): State<Receiver>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let task_ref = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|b| b["task"]["taskRef"].as_str().map(str::to_owned))
        .unwrap_or_default();
    let executions = r.steps.count(&task_ref);
    r.calls.lock().unwrap().push(Call {
        name: name.clone(),
        headers,
        body,
        executions,
    });
    let mut failures = r.failures.lock().unwrap();
    match failures.get_mut(&name) {
        Some(n) if *n > 0 => {
            if *n != u32::MAX {
                *n -= 1;
            }
            StatusCode::INTERNAL_SERVER_ERROR
        }
        _ => StatusCode::OK,
    }
}

/// A suite of the four services whose dispatcher retries quickly, three attempts; the
/// queues of the event listeners named `listeners` are removed with the environment.
async fn suite(listeners: &[&str]) -> Suite {
    let mut env = TestEnv::create(EnvOptions {
        extra_env: vec![
            ("WEFT_HOOK_MAX_ATTEMPTS".into(), "3".into()),
            ("WEFT_HOOK_RETRY_DELAY_MS".into(), "200".into()),
            ("WEFT_HOOK_TIMEOUT_MS".into(), "5000".into()),
            // Listeners of these tests see every event.
            ("WEFT_EVENTS".into(), "#".into()),
        ],
        ..EnvOptions::default()
    })
    .await
    .unwrap();
    for name in listeners {
        let queue = weft::listener::queue_name(&env.names(), name);
        env.activity_queues.push(queue);
    }
    Suite::start_with(env, &Service::CORE).await.unwrap()
}

/// A step task, with `hooks` when given.
fn step(task_ref: &str, hooks: Option<Value>) -> Value {
    let mut t = json!({"name": STEP, "taskReferenceName": task_ref, "type": "SIMPLE",
                       "inputParameters": {"n": "${workflow.input.n}"}});
    if let Some(h) = hooks {
        t["hooks"] = h;
    }
    t
}

fn definition(name: &str, tasks: Vec<Value>) -> Value {
    json!({"name": name, "version": 1, "hooks": {"secret": SECRET}, "tasks": tasks})
}

async fn reset(client: &Client, id: &str, task_ref: &str) -> String {
    let resp = client
        .raw(
            Method::POST,
            &format!("/api/workflow/{id}/reset"),
            Some((
                "application/json",
                json!({"taskRef": task_ref, "reason": "undo it"})
                    .to_string()
                    .into_bytes(),
            )),
        )
        .await
        .unwrap();
    assert_eq!(resp.status, 200, "{}", resp.text);
    resp.text
}

/// The hook deliveries of `id` once each has settled (DELIVERED, DEAD or SKIPPED): a
/// receiver sees a call before the dispatcher records its outcome.
async fn hooks_of(client: &Client, id: &str) -> Vec<Value> {
    let deadline = tokio::time::Instant::now() + RUN_TIMEOUT;
    loop {
        let resp = client
            .raw(Method::GET, &format!("/api/workflow/{id}/hooks"), None)
            .await
            .unwrap();
        assert_eq!(resp.status, 200, "{}", resp.text);
        let deliveries = resp.json.unwrap().as_array().unwrap().clone();
        let settled = deliveries.iter().all(|d| {
            ["DELIVERED", "DEAD", "SKIPPED"].contains(&d["status"].as_str().unwrap_or(""))
        });
        if settled {
            return deliveries;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the hooks of {id} never settled: {deliveries:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

fn status_codes(delivery: &Value) -> Vec<Value> {
    delivery["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["statusCode"].clone())
        .collect()
}

fn verify(call: &Call) {
    let signature = call.header("x-weft-signature");
    assert!(
        weft::hooks::sign::verify(SECRET, &call.body, signature),
        "bad signature {signature:?} on {}",
        String::from_utf8_lossy(&call.body)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_fires_rollback_hooks_newest_first_signed_and_retried_before_the_task_runs_again() {
    let suite = suite(&[]).await;
    let client = suite.client();
    let shutdown = CancellationToken::new();
    let steps = Steps::default();
    steps.start(&suite, &shutdown);
    let receiver = Receiver::start(&steps).await;
    let rollback = |name: &str, awaited: bool| {
        Some(json!({"onRollback": {"url": receiver.url(name), "await": awaited}}))
    };
    client
        .register(&definition(
            "undoable",
            vec![
                step("a", None),
                step("b", rollback("b", false)),
                step("c", None),
                step("d", rollback("d", false)),
                step("e", None),
            ],
        ))
        .await
        .unwrap();

    // Five tasks done; a reset to b undoes e, d, c and b: d's hook, then b's, each
    // signed, both before b runs again.
    let id = client.start("undoable", json!({"n": 1})).await.unwrap();
    crate::ended(&suite, &id, "COMPLETED").await;
    let new_run = reset(client, &id, "b").await;
    crate::ended(&suite, &id, "COMPLETED").await;
    let calls = receiver.calls();
    let names: Vec<&str> = calls.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, vec!["d", "b"]);
    for call in &calls {
        verify(call);
        assert_eq!(call.header("x-weft-hook"), "onRollback");
        assert_eq!(call.header("x-weft-event"), "workflow.reset");
        let body = call.json();
        assert_eq!(body["runId"], new_run.as_str());
        assert_eq!(body["reason"], "undo it");
        assert_eq!(body["task"]["status"], "COMPLETED");
        assert_eq!(
            body["task"]["output"]["ref"],
            call.name.as_str(),
            "the hook carries the rolled-back task's output"
        );
    }
    assert_eq!(
        calls[1].executions, 1,
        "b's rollback hook came after b ran again"
    );
    assert_eq!(
        ["a", "b", "c", "d", "e"].map(|r| steps.count(r)),
        [1, 2, 2, 2, 2]
    );
    let deliveries = hooks_of(client, &id).await;
    let seen: Vec<(&str, &str, i64)> = deliveries
        .iter()
        .map(|d| {
            (
                d["taskRef"].as_str().unwrap(),
                d["status"].as_str().unwrap(),
                d["sequence"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(seen, vec![("d", "DELIVERED", 0), ("b", "DELIVERED", 1)]);
    assert_eq!(
        deliveries[0]["deliveryId"],
        calls[0].header("x-weft-delivery")
    );
    assert_eq!(status_codes(&deliveries[0]), vec![json!(200)]);

    // An awaited hook whose receiver fails twice: three attempts, the same delivery id,
    // and the task runs again only after the third succeeded.
    client
        .register(&definition(
            "flaky_receiver",
            vec![step("x", rollback("x", true)), step("y", None)],
        ))
        .await
        .unwrap();
    receiver.fail("x", 2);
    let id = client
        .start("flaky_receiver", json!({"n": 2}))
        .await
        .unwrap();
    crate::ended(&suite, &id, "COMPLETED").await;
    reset(client, &id, "x").await;
    crate::ended(&suite, &id, "COMPLETED").await;
    let calls = receiver.calls_of("x");
    let attempts: Vec<&str> = calls.iter().map(|c| c.header("x-weft-attempt")).collect();
    assert_eq!(attempts, vec!["1", "2", "3"]);
    assert!(calls
        .iter()
        .all(|c| c.header("x-weft-delivery") == calls[0].header("x-weft-delivery")));
    assert_eq!(
        calls[2].executions, 1,
        "x ran again before its awaited hook succeeded"
    );
    assert_eq!(steps.count("x"), 2);
    let deliveries = hooks_of(client, &id).await;
    assert_eq!(deliveries.len(), 1, "{deliveries:?}");
    assert_eq!(deliveries[0]["status"], "DELIVERED");
    assert_eq!(deliveries[0]["attemptCount"], 3);
    assert_eq!(
        status_codes(&deliveries[0]),
        vec![json!(500), json!(500), json!(200)]
    );

    // GET /hooks of an unknown workflow: 404.
    let resp = client
        .raw(Method::GET, "/api/workflow/no-such-workflow/hooks", None)
        .await
        .unwrap();
    assert_eq!(resp.status, 404, "{}", resp.text);
    shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_awaited_rollback_hook_that_never_succeeds_fails_the_reset() {
    let suite = suite(&[]).await;
    let client = suite.client();
    let shutdown = CancellationToken::new();
    let steps = Steps::default();
    steps.start(&suite, &shutdown);
    let receiver = Receiver::start(&steps).await;
    receiver.fail("q", u32::MAX);
    client
        .register(&definition(
            "stuck",
            vec![
                step("p", Some(json!({"onRollback": {"url": receiver.url("p")}}))),
                step(
                    "q",
                    Some(json!({"onRollback": {"url": receiver.url("q"), "await": true}})),
                ),
                step("r", None),
            ],
        ))
        .await
        .unwrap();
    let id = client.start("stuck", json!({"n": 3})).await.unwrap();
    crate::ended(&suite, &id, "COMPLETED").await;
    let new_run = reset(client, &id, "p").await;
    let wf = crate::ended(&suite, &id, "FAILED").await;
    assert_eq!(wf["workflowId"], id.as_str());
    let reason = wf["reasonForIncompletion"].as_str().unwrap_or_default();
    assert!(
        reason.starts_with("reset failed: rollback hook onRollback of task \"q\"")
            && reason.contains("after 3 attempts")
            && reason.contains("HTTP 500"),
        "{reason}"
    );
    assert_eq!(receiver.calls_of("q").len(), 3);
    assert!(
        receiver.calls_of("p").is_empty(),
        "hooks after a failed awaited one are not sent"
    );
    assert_eq!(steps.count("p"), 1, "the failed reset ran nothing again");
    let deliveries = hooks_of(client, &id).await;
    let seen: Vec<(&str, &str)> = deliveries
        .iter()
        .map(|d| {
            (
                d["taskRef"].as_str().unwrap(),
                d["status"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(seen, vec![("q", "DEAD"), ("p", "SKIPPED")]);
    assert_eq!(deliveries[0]["runId"], new_run.as_str());
    assert_eq!(
        status_codes(&deliveries[0]),
        vec![json!(500), json!(500), json!(500)]
    );
    shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_activity_fires_on_timeout_and_listeners_see_it() {
    let suite = suite(&["e2e-log"]).await;
    let client = suite.client();
    let shutdown = CancellationToken::new();
    let steps = Steps::default();
    steps.start(&suite, &shutdown);
    let receiver = Receiver::start(&steps).await;
    // The example listener, run with the SDK in this process, logs every task event.
    let log_path = suite.log_dir().join("event-log-listener.jsonl");
    let log = weft_event_log_listener::EventLog::open(&log_path, vec!["task.*".into()]).unwrap();
    let env = suite.env();
    let config = weft::Config {
        amqp_url: env.amqp_url.clone(),
        namespace: env.namespace.clone(),
        shards: env.options.shards,
        ..weft::Config::default()
    };
    let listener_stop = shutdown.clone();
    tokio::spawn(async move { weft::listener::run(&config, "e2e-log", log, listener_stop).await });

    let mut slow = step(
        "slow",
        Some(json!({"onTimeout": {"url": receiver.url("timeout"),
                     "headers": {"x-team": "ops"},
                     "body": {"task": "${task.taskRef}", "n": "${task.input.n}",
                              "why": "${reason}", "workflow": "${workflowId}"}}})),
    );
    slow["taskDefinition"] = json!({"timeoutSeconds": 1, "retryCount": 0});
    client
        .register(&definition("slow", vec![slow]))
        .await
        .unwrap();
    steps.hold("slow");
    let id = client.start("slow", json!({"n": 4})).await.unwrap();
    let call = receiver.called("timeout", 1).await.remove(0);
    verify(&call);
    assert_eq!(call.header("x-weft-hook"), "onTimeout");
    assert_eq!(call.header("x-weft-event"), "task.timed_out");
    assert_eq!(call.header("x-team"), "ops");
    let body = call.json();
    assert_eq!(
        (&body["task"], &body["n"], &body["workflow"]),
        (&json!("slow"), &json!(4), &json!(id))
    );
    assert!(
        body["why"].as_str().is_some_and(|w| !w.is_empty()),
        "{body}"
    );
    steps.release("slow");

    // The listener wrote the same change to its log.
    let deadline = tokio::time::Instant::now() + RUN_TIMEOUT;
    loop {
        let text = std::fs::read_to_string(&log_path).unwrap_or_default();
        let timed_out = text.lines().any(|l| {
            let e: Value = serde_json::from_str(l).unwrap();
            e["event"] == "task.timed_out" && e["workflowId"] == id.as_str()
        });
        if timed_out {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the event log has no task.timed_out of {id}: {text}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let deliveries = hooks_of(client, &id).await;
    assert_eq!(deliveries.len(), 1, "{deliveries:?}");
    assert_eq!(
        (&deliveries[0]["hook"], &deliveries[0]["status"]),
        (&json!("onTimeout"), &json!("DELIVERED"))
    );
    shutdown.cancel();
}
