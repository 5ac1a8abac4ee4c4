//! The official Conductor Python SDK (`conductor-python` from PyPI, unmodified) runs a
//! worker against the gateway's task API: it polls the SIMPLE tasks of a workflow,
//! reports their results, and the run completes with the outputs it produced; a worker
//! function raising the SDK's `NonRetryableException` fails its run at once, with the
//! reason and the traceback the SDK sends in the task log.
//!
//! The test installs the SDK itself into a virtualenv under the cargo target directory
//! (`target/py-venv`, reused once it holds the pinned version; the interpreter is
//! `WEFT_TEST_PYTHON`, else `python3.11`, else `python3`). Without Python or PyPI it fails
//! saying so; it never passes without running the SDK.

use std::path::Path;
use std::process::Stdio;

use anyhow::Context as _;
use serde_json::json;
use weft_e2e::{Service, Suite, TestEnv};

use crate::RUN_TIMEOUT;

/// The SDK version the test pins.
const SDK_VERSION: &str = "2.0.0";

/// The worker: two `@worker_task` functions, started by the SDK's `TaskHandler`, which
/// reads `CONDUCTOR_SERVER_URL`.
const WORKER: &str = r#"
import logging
import sys

from conductor.client.automator.task_handler import TaskHandler
from conductor.client.configuration.configuration import Configuration
from conductor.client.worker.exception import NonRetryableException
from conductor.client.worker.worker_task import worker_task


@worker_task(task_definition_name="py_greet")
def greet(name: str) -> dict:
    return {"greeting": "Hello, " + name}


@worker_task(task_definition_name="py_shout")
def shout(text: str) -> dict:
    return {"shouted": text.upper() + "!", "length": len(text)}


@worker_task(task_definition_name="py_charge")
def charge(amount: int) -> dict:
    if amount > 1000:
        raise NonRetryableException("card declined")
    if amount > 100:
        raise ValueError("over the limit")
    return {"charged": amount}


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    configuration = Configuration()
    handler = TaskHandler(configuration=configuration, scan_for_annotated_workers=True)
    handler.start_processes()
    print("worker started", flush=True)
    handler.join_processes()
"#;

/// The Python worker process group; SIGKILLed (with every process the SDK forked) when
/// dropped.
struct PyWorker {
    child: tokio::process::Child,
    pid: u32,
}

impl PyWorker {
    fn spawn(python: &Path, script: &Path, server_url: &str, log: &Path) -> anyhow::Result<Self> {
        let log =
            std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
        let child = tokio::process::Command::new(python)
            .arg(script)
            .env("CONDUCTOR_SERVER_URL", server_url)
            .env("PYTHONUNBUFFERED", "1")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            // Its own process group: the SDK forks one process per worker.
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .context("starting the Python worker")?;
        let pid = child.id().context("the Python worker has no pid")?;
        Ok(Self { child, pid })
    }

    /// Whether it is still running.
    fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for PyWorker {
    fn drop(&mut self) {
        // The group's id is the leader's pid; `kill` rather than libc (no unsafe code).
        let _ = std::process::Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.pid)])
            .status();
        let _ = self.child.start_kill();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conductor_python_sdk_worker_completes_a_workflow() {
    let python = weft_e2e::python::venv("py-venv", "conductor-python", SDK_VERSION)
        .expect("the Conductor Python SDK must be installable");
    let mut env = TestEnv::new().await.unwrap();
    for task in ["py_greet", "py_shout", "py_charge"] {
        let queue = env.names().activity_queue(task);
        env.activity_queues.push(queue);
    }
    let suite = Suite::start_with(env, &Service::CORE).await.unwrap();
    let client = suite.client();
    client
        .register(&json!({"name": "py_flow", "version": 1, "tasks": [
            {"name": "py_greet", "taskReferenceName": "greet", "type": "SIMPLE",
             "inputParameters": {"name": "${workflow.input.name}"}},
            {"name": "py_shout", "taskReferenceName": "shout", "type": "SIMPLE",
             "inputParameters": {"text": "${greet.output.greeting}"}}
        ], "outputParameters": {
            "greeting": "${greet.output.greeting}",
            "shouted": "${shout.output.shouted}",
            "length": "${shout.output.length}"
        }}))
        .await
        .unwrap();
    let script = suite.log_dir().join("worker.py");
    std::fs::write(&script, WORKER).unwrap();
    let mut worker = PyWorker::spawn(
        &python,
        &script,
        &format!("{}/api", suite.gateway_url()),
        &suite.log_dir().join("python-worker.log"),
    )
    .unwrap();

    let ids = futures_util::future::join_all(["Ada", "Grace"].map(|name| {
        let client = client.clone();
        async move {
            (
                name,
                client
                    .start("py_flow", json!({"name": name}))
                    .await
                    .unwrap(),
            )
        }
    }))
    .await;
    for (name, id) in ids {
        let wf = client
            .wait_for_status(&id, &["COMPLETED"], RUN_TIMEOUT)
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "{e:#}\npython worker log: {}",
                    suite.log_dir().join("python-worker.log").display()
                )
            });
        let greeting = format!("Hello, {name}");
        assert_eq!(
            wf["output"],
            json!({
                "greeting": greeting,
                "shouted": format!("{}!", greeting.to_uppercase()),
                "length": greeting.len(),
            }),
            "{wf}"
        );
        let tasks = wf["tasks"].as_array().expect("tasks");
        assert_eq!(tasks.len(), 2, "{wf}");
        for t in tasks {
            assert_eq!(t["status"], json!("COMPLETED"), "{t}");
            assert!(t["workerId"].as_str().is_some_and(|w| !w.is_empty()), "{t}");
        }
    }
    declined_charge_fails_its_run(&suite).await;
    assert!(worker.running(), "the Python worker exited early");
    drop(worker);
}

/// `py_charge` over 1000 raises `NonRetryableException`: FAILED_WITH_TERMINAL_ERROR, not
/// retried, the run FAILED. Over 100 it raises `ValueError`: FAILED, retried once (the
/// task definition's `retryCount`), then the run FAILED; the SDK's traceback is kept in
/// the task log.
async fn declined_charge_fails_its_run(suite: &Suite) {
    let client = suite.client();
    let taskdef = json!([{"name": "py_charge", "retryCount": 1, "retryLogic": "FIXED",
        "retryDelaySeconds": 0, "timeoutSeconds": 0, "ownerEmail": "e2e@weft.dev"}]);
    client.register_taskdefs(&taskdef).await.unwrap();
    client
        .register(&json!({"name": "py_pay", "version": 1, "tasks": [
            {"name": "py_charge", "taskReferenceName": "charge", "type": "SIMPLE",
             "inputParameters": {"amount": "${workflow.input.amount}"}}]}))
        .await
        .unwrap();
    let terminal = client
        .start("py_pay", json!({"amount": 5000}))
        .await
        .unwrap();
    let failing = client
        .start("py_pay", json!({"amount": 500}))
        .await
        .unwrap();
    let failed = |id: String| async move {
        client
            .wait_for_status(&id, &["FAILED"], RUN_TIMEOUT)
            .await
            .unwrap_or_else(|e| panic!("{e:#}\n{}", suite.describe()))
    };
    let wf = failed(terminal).await;
    let tasks = wf["tasks"].as_array().expect("tasks");
    assert_eq!(tasks.len(), 1, "a terminal error is not retried: {wf}");
    assert_eq!(
        tasks[0]["status"],
        json!("FAILED_WITH_TERMINAL_ERROR"),
        "{wf}"
    );
    assert_eq!(
        tasks[0]["reasonForIncompletion"],
        json!("card declined"),
        "{wf}"
    );

    let wf = failed(failing).await;
    let tasks = wf["tasks"].as_array().expect("tasks");
    assert_eq!(tasks.len(), 2, "retried once: {wf}");
    for t in tasks {
        assert_eq!(t["status"], json!("FAILED"), "{wf}");
        assert_eq!(t["reasonForIncompletion"], json!("over the limit"), "{wf}");
    }
    let task_id = tasks[0]["taskId"].as_str().expect("a task id");
    let logs = client
        .raw(
            reqwest::Method::GET,
            &format!("/api/tasks/{task_id}/log"),
            None,
        )
        .await
        .unwrap();
    assert_eq!(logs.status, 200, "{}", logs.text);
    let lines = logs.json.unwrap_or_default();
    let first = &lines[0];
    assert!(
        first["log"]
            .as_str()
            .is_some_and(|l| l.contains("over the limit")),
        "the SDK's traceback: {lines}"
    );
    // The SDK sends seconds where Conductor means milliseconds; either reads as now.
    let year_2020_ms = 1_577_836_800_000_i64;
    assert!(
        first["createdTime"].as_i64().unwrap_or(0) > year_2020_ms,
        "{lines}"
    );
}
