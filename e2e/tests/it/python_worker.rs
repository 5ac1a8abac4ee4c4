//! The wire protocol spoken from another language: `examples/python-worker/worker.py`, a
//! few dozen lines over `pika` that know nothing of Weft but docs/protocol.md, runs every
//! activity of `greet` against the real services (claims through the heartbeat queue's
//! direct reply-to, results to the run's shard by the task's `replyTo`; claims of its
//! rate-limited `shout` deferred and given back), and checks each message it receives and
//! sends against the JSON Schemas in docs/protocol.

use std::process::Stdio;

use tokio::io::AsyncReadExt as _;
use weft_e2e::{greet, Service, Suite, TestEnv};

use crate::start_events::{protocol_dir, PYTHON_PACKAGES};
use crate::{assert_all_completed, start_greets};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_worker_speaking_the_wire_protocol_runs_greet() {
    let python = weft_e2e::python::venv_with("py-venv-amqp", PYTHON_PACKAGES)
        .expect("pika and jsonschema must be installable from PyPI");
    let mut env = TestEnv::new().await.unwrap();
    for task in greet::TASKS {
        let queue = env.names().activity_queue(task);
        env.activity_queues.push(queue);
    }
    // The services without the Rust example worker: the Python one serves greet.
    let suite = Suite::start_with(env, &Service::CORE).await.unwrap();
    // `shout` under a rate limit (docs/task-limits.md): its claims past five per 2 s are
    // answered DEFER, which the worker must give back later rather than drop.
    suite
        .client()
        .register_taskdefs(&serde_json::json!([{"name": "shout", "retryCount": 0,
            "rateLimitPerFrequency": 5, "rateLimitFrequencyInSeconds": 2,
            "ownerEmail": "e2e@weft.dev"}]))
        .await
        .unwrap();
    suite.client().register(&greet::definition()).await.unwrap();
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("examples")
        .join("python-worker")
        .join("worker.py");
    let log = std::fs::File::create(suite.log_dir().join("python-worker.log")).unwrap();
    let mut worker = tokio::process::Command::new(&python)
        .arg(&script)
        .env("WEFT_AMQP_URL", &suite.env().amqp_url)
        .env("WEFT_NAMESPACE", &suite.env().namespace)
        .env("WEFT_PROTOCOL_SCHEMAS", protocol_dir())
        .env("PYTHONUNBUFFERED", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .expect("start the Python worker");

    let runs = start_greets(&suite, "Py", 20).await;
    assert_all_completed(&suite, &runs).await;
    assert!(
        crate::task_limits::deferred_claims(&suite, "shout", "rate").await > 0,
        "twenty shouts at five per 2 s: some were deferred"
    );

    // A graceful stop prints how many messages of each type it checked.
    let pid = worker.id().expect("the worker runs").to_string();
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status();
    let status = tokio::time::timeout(crate::RUN_TIMEOUT, worker.wait())
        .await
        .expect("the worker stops on SIGTERM")
        .unwrap();
    let mut out = String::new();
    worker
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .await
        .unwrap();
    assert!(status.success(), "worker exited {status}: {out}");
    let checked = out
        .lines()
        .find_map(|l| l.strip_prefix("checked "))
        .unwrap_or_else(|| panic!("no summary in {out:?}"));
    let checked: serde_json::Value = serde_json::from_str(checked).unwrap();
    for kind in [
        "ActivityTask",
        "ClaimAttempt",
        "HeartbeatAnswers",
        "ActivityCompleted",
    ] {
        assert!(
            checked[kind].as_u64().unwrap_or(0) >= 60,
            "{kind}: {checked}"
        );
    }
}
