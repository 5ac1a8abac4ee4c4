//! HTTP workers over the real services: a worker that polls a task over HTTP and then
//! goes silent is timed out by the heartbeat service, the decider retries the task, and
//! the retry, polled by another worker, completes the run; the silent worker's late
//! result is refused.

use std::time::Duration;

use serde_json::{json, Value};
use weft_e2e::{poll_until, EnvOptions, Service, Suite, TestEnv};

use crate::RUN_TIMEOUT;

const TASK: &str = "http_polled";

/// Long-polls `task` as `worker`, as an HTTP worker does, until one task comes (bounded
/// by [`RUN_TIMEOUT`]).
pub(crate) async fn poll_one(suite: &Suite, task: &str, worker: &str) -> Value {
    let path = format!("/api/tasks/poll/batch/{task}?workerid={worker}&count=1&timeout=2000");
    poll_until(
        RUN_TIMEOUT,
        Duration::from_millis(10),
        || format!("{worker} was never handed a task"),
        || async {
            let r = suite
                .client()
                .raw(reqwest::Method::GET, &path, None)
                .await?;
            anyhow::ensure!(r.status == 200, "poll answered {}: {}", r.status, r.text);
            Ok(r.json
                .and_then(|tasks| tasks.as_array().and_then(|a| a.first().cloned())))
        },
    )
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_polled_task_whose_http_worker_goes_silent_is_retried_for_another_worker() {
    let options = EnvOptions {
        extra_env: vec![(
            "WEFT_HEARTBEAT_SCAN_INTERVAL_MS".to_owned(),
            "250".to_owned(),
        )],
        ..EnvOptions::default()
    };
    let mut env = TestEnv::create(options).await.unwrap();
    let queue = env.names().activity_queue(TASK);
    env.activity_queues.push(queue);
    let suite = Suite::start_with(env, &Service::CORE).await.unwrap();
    let client = suite.client();
    let taskdef = json!([{
        "name": TASK, "retryCount": 1, "retryLogic": "FIXED", "retryDelaySeconds": 0,
        "responseTimeoutSeconds": 2, "timeoutSeconds": 0, "ownerEmail": "e2e@weft.dev"
    }]);
    client.register_taskdefs(&taskdef).await.unwrap();
    client
        .register(&json!({"name": "polled_wf", "version": 1, "tasks": [
            {"name": TASK, "taskReferenceName": "work", "type": "SIMPLE",
             "inputParameters": {"order": "${workflow.input.order}"}}],
            "outputParameters": {"done": "${work.output.done}"}}))
        .await
        .unwrap();
    let id = client
        .start("polled_wf", json!({"order": 42}))
        .await
        .unwrap();

    // The first worker takes the task and is never heard of again.
    let first = poll_one(&suite, TASK, "silent").await;
    assert_eq!(first["workflowInstanceId"], json!(id));
    assert_eq!(first["retryCount"], json!(0));
    assert_eq!(first["inputData"], json!({"order": 42}));

    // Its attempt times out; the retry goes to the next worker that polls.
    let second = poll_one(&suite, TASK, "second").await;
    assert_eq!(second["retryCount"], json!(1), "{second}");
    assert_ne!(second["taskId"], first["taskId"]);
    let late = json!({"taskId": first["taskId"], "status": "COMPLETED",
                      "outputData": {"done": "late"}});
    let r = client.post_json("/api/tasks", &late).await.unwrap();
    assert_eq!(
        r.status, 409,
        "a late result of the silent worker: {}",
        r.text
    );

    let result = json!({"workflowInstanceId": id, "taskId": second["taskId"],
                        "status": "COMPLETED", "outputData": {"done": "yes"},
                        "workerId": "second"});
    let r = client.post_json("/api/tasks", &result).await.unwrap();
    assert_eq!(r.status, 200, "{}", r.text);
    let wf = client
        .wait_for_status(&id, &["COMPLETED"], RUN_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", suite.describe()));
    assert_eq!(wf["output"], json!({"done": "yes"}), "{wf}");
    let statuses: Vec<(&str, &str)> = wf["tasks"]
        .as_array()
        .expect("tasks")
        .iter()
        .map(|t| {
            (
                t["status"].as_str().unwrap_or_default(),
                t["workerId"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        statuses,
        vec![("TIMED_OUT", "silent"), ("COMPLETED", "second")],
        "{wf}"
    );
}
