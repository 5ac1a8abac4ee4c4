//! `weft dev` as a user runs it: the real `weft` binary, one process, nothing else
//! (SQLite in a file, the in-process bus journaled in it, in-memory caches). The DSL and
//! operations scenarios run on it too, through `on_both_backends!`; this file covers
//! what only the binary shows: a crash and a restart mid-run, and the first command of
//! the README followed by the CLI.

use std::time::Duration;

use serde_json::{json, Value};
use weft_e2e::{greet, poll_until, Service, Suite, TestEnv};

use crate::cli::Weft;
use crate::constructs::statuses;
use crate::RUN_TIMEOUT;

/// An activity nobody serves in the process: it waits in its queue until the test takes
/// it over HTTP (Conductor's task API), as an external worker would.
const MANUAL: &str = "manual_review";

fn restartable() -> Value {
    json!({"name": "restartable", "version": 1, "tasks": [
        {"name": "make_name", "taskReferenceName": "n", "type": "SIMPLE",
         "inputParameters": {"first": "${workflow.input.first}"}},
        {"name": MANUAL, "taskReferenceName": "review", "type": "SIMPLE",
         "inputParameters": {"name": "${n.output.name}"}},
        {"name": "go", "taskReferenceName": "go", "type": "WAIT"},
        {"name": "nap", "taskReferenceName": "nap", "type": "WAIT",
         "inputParameters": {"duration": "2s"}},
        {"name": "shout", "taskReferenceName": "s", "type": "SIMPLE",
         "inputParameters": {"text": "${review.output.verdict}"}}],
     "outputParameters": {"name": "${n.output.name}", "shout": "${s.output.text}"}})
}

/// Waits until the run's task `task_ref` has `status`.
async fn task_reaches(suite: &Suite, id: &str, task_ref: &str, status: &str) {
    let client = suite.client();
    poll_until(
        RUN_TIMEOUT,
        Duration::from_millis(50),
        || {
            format!(
                "{task_ref} of {id} never became {status}\n{}",
                suite.describe()
            )
        },
        || async {
            let wf = client.get(id).await?;
            Ok(statuses(&wf)
                .iter()
                .any(|(r, s)| r == task_ref && s == status)
                .then_some(()))
        },
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_survives_weft_dev_being_killed_twice_on_a_file_database() {
    let mut suite = Suite::new(TestEnv::new().await.unwrap()).unwrap();
    let dev = suite.spawn(Service::Dev).await.unwrap();
    let client = suite.client().clone();
    client.register(&restartable()).await.unwrap();
    let id = client
        .start("restartable", json!({"first": "Ada"}))
        .await
        .unwrap();

    // Killed while the review task waits in its (journaled) activity queue.
    task_reaches(&suite, &id, "review", "SCHEDULED").await;
    suite.kill(dev).await.unwrap();
    suite.restart(dev).await.unwrap();
    let task = crate::http_tasks::poll_one(&suite, MANUAL, "outside").await;
    assert_eq!(task["workflowInstanceId"], json!(id), "{task}");
    assert_eq!(task["inputData"], json!({"name": "Ada Weft"}), "{task}");
    let result = json!({"workflowInstanceId": id, "taskId": task["taskId"],
                        "status": "COMPLETED", "outputData": {"verdict": "fine"},
                        "workerId": "outside"});
    let r = client.post_json("/api/tasks", &result).await.unwrap();
    assert_eq!(r.status, 200, "{}", r.text);

    // Killed again while the 2 s timer of `nap` is pending.
    task_reaches(&suite, &id, "go", "IN_PROGRESS").await;
    let r = client
        .post_json(&format!("/api/workflow/{id}/signal/go"), &json!({}))
        .await
        .unwrap();
    assert!(r.status < 300, "signal: {} {}", r.status, r.text);
    task_reaches(&suite, &id, "nap", "IN_PROGRESS").await;
    suite.kill(dev).await.unwrap();
    suite.restart(dev).await.unwrap();

    let wf = crate::ended(&suite, &id, "COMPLETED").await;
    assert_eq!(
        wf["output"],
        json!({"name": "Ada Weft", "shout": "FINE"}),
        "{wf}"
    );
    let done: Vec<(String, String)> = statuses(&wf);
    assert!(
        done.iter().all(|(_, s)| s == "COMPLETED"),
        "every task completed once: {done:?}"
    );
    assert_eq!(done.len(), 5, "no task ran twice: {done:?}");
    let stopped = suite.stop_all().await.unwrap();
    assert_eq!(stopped.len(), 1, "{stopped:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weft_dev_example_runs_greet_for_the_cli_and_stops_cleanly() {
    let mut suite = Suite::new(TestEnv::new().await.unwrap()).unwrap();
    suite.spawn(Service::Dev).await.unwrap();
    let weft = Weft::new(&suite.gateway_url());
    let out = weft
        .run(&[
            "run",
            "greet",
            "--input",
            &greet::input("Ada", 3).to_string(),
            "--wait",
        ])
        .await
        .expect(0, "weft run greet --wait on weft dev");
    let id = out
        .stdout
        .lines()
        .next()
        .unwrap_or_default()
        .trim()
        .to_owned();
    crate::assert_greet_completed(suite.client(), &id, "Ada", 3).await;
    // SIGTERM: every service finishes and the process exits 0.
    let report = suite.stop_all().await.unwrap();
    assert!(report[0].contains("exit status: 0"), "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weft_dev_on_a_busy_address_says_so_and_exits_4() {
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = busy.local_addr().unwrap().to_string();
    let weft = Weft::new("http://127.0.0.1:9");
    let out = weft
        .run(&["dev", "--db", ":memory:", "--addr", &addr])
        .await
        .expect(4, "weft dev on a busy address");
    assert!(
        out.stderr.contains(&addr) && out.stderr.contains("weft: "),
        "the error names the address: {}",
        out.stderr
    );
    drop(busy);
}
