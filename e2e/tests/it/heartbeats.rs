//! Heartbeats over real processes: a worker SIGKILLed in the middle of an activity goes
//! silent, the heartbeat service times the attempt out (its heartbeat timeout from a
//! registered task definition), the decider retries it, and another worker completes it.

use std::time::Duration;

use serde_json::{json, Value};
use weft_e2e::process::{bin_dir, Proc};
use weft_e2e::suite::free_port;
use weft_e2e::{poll_until, EnvOptions, Service, Suite, TestEnv};

use crate::RUN_TIMEOUT;

/// The slow worker's task (`weft-e2e-slow-worker`).
pub(crate) const TASK: &str = "slow_task";
/// Its heartbeat timeout (`responseTimeoutSeconds` of the registered task definition).
const HEARTBEAT_TIMEOUT_S: i64 = 3;
/// The heartbeat service's scan interval in this test.
const SCAN_MS: i64 = 250;

/// Starts `weft-e2e-slow-worker` as `worker_id` in the suite's environment.
pub(crate) fn slow_worker(suite: &Suite, worker_id: &str) -> Proc {
    let env = suite.env();
    let vars: Vec<(String, String)> = [
        ("WEFT_AMQP_URL", env.amqp_url.clone()),
        ("WEFT_DATABASE_URL", env.database_url.clone()),
        ("WEFT_NAMESPACE", env.namespace.clone()),
        ("WEFT_SHARDS", env.options.shards.to_string()),
        ("WEFT_WORKER_ID", worker_id.to_owned()),
        ("WEFT_E2E_TASK", TASK.to_owned()),
        ("RUST_LOG", "info".to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let binary = bin_dir().unwrap().join("weft-e2e-slow-worker");
    let log = suite.log_dir().join(format!("{worker_id}.log"));
    Proc::spawn(Service::Worker, &binary, &vars, free_port().unwrap(), log)
        .expect("spawn weft-e2e-slow-worker (cargo build --workspace --bins)")
}

/// The status of attempt `attempt` of the workflow's task in the registry.
async fn attempt_status(suite: &Suite, workflow_id: &str, attempt: i32) -> Option<String> {
    sqlx::query_scalar("SELECT status FROM task_check WHERE workflow_id = $1 AND attempt = $2")
        .bind(workflow_id)
        .bind(attempt)
        .fetch_optional(suite.env().pool())
        .await
        .expect("read task_check")
}

/// An RFC 3339 or epoch-millisecond time as epoch milliseconds.
fn millis(v: &Value) -> i64 {
    v.as_i64().unwrap_or_else(|| {
        let s = v.as_str().expect("a time");
        chrono::DateTime::parse_from_rfc3339(s)
            .expect("an RFC 3339 time")
            .timestamp_millis()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_workers_activity_times_out_and_another_worker_completes_it() {
    let options = EnvOptions {
        extra_env: vec![(
            "WEFT_HEARTBEAT_SCAN_INTERVAL_MS".to_owned(),
            SCAN_MS.to_string(),
        )],
        ..EnvOptions::default()
    };
    let mut env = TestEnv::create(options).await.unwrap();
    let queue = env.names().activity_queue(TASK);
    env.activity_queues.push(queue);
    let mut suite = Suite::start_with(env, &Service::CORE).await.unwrap();
    assert_eq!(
        suite.procs(Service::Heartbeat).len(),
        1,
        "the suite runs weft-heartbeat"
    );
    let client = suite.client();
    let taskdef = json!([{
        "name": TASK, "retryCount": 1, "retryLogic": "FIXED", "retryDelaySeconds": 0,
        "responseTimeoutSeconds": HEARTBEAT_TIMEOUT_S, "timeoutSeconds": 0,
        "ownerEmail": "e2e@weft.dev"
    }]);
    client.register_taskdefs(&taskdef).await.unwrap();
    client
        .register(&json!({"name": "slow_wf", "version": 1, "tasks": [
            {"name": TASK, "taskReferenceName": "slow", "type": "SIMPLE",
             "inputParameters": {"ms": 6000}}]}))
        .await
        .unwrap();

    let mut first = slow_worker(&suite, "worker-a");
    let id = client.start("slow_wf", json!({})).await.unwrap();
    poll_until(
        RUN_TIMEOUT,
        Duration::from_millis(20),
        || "attempt 1 never registered RUNNING".into(),
        || async {
            Ok((attempt_status(&suite, &id, 1).await.as_deref() == Some("RUNNING")).then_some(()))
        },
    )
    .await
    .unwrap();
    first.kill().await.unwrap();
    let killed_at = chrono::Utc::now().timestamp_millis();

    // The decider records TaskTimedOut once the heartbeat service says so.
    let timed_out = poll_until(
        RUN_TIMEOUT,
        Duration::from_millis(50),
        || "the silent attempt was never timed out".into(),
        || async {
            let history = client.history(&id).await?;
            Ok(history.into_iter().find(|e| e.kind == "TaskTimedOut"))
        },
    )
    .await
    .unwrap();
    let after_kill = millis(&timed_out.time) - killed_at;
    eprintln!("TaskTimedOut {after_kill} ms after the SIGKILL (timeout {HEARTBEAT_TIMEOUT_S} s, scan every {SCAN_MS} ms)");
    // A bound, not a measurement: the last heartbeat came at most one heartbeat interval
    // (1 s) before the kill, so the deadline is at most the timeout after the kill; one
    // scan interval later it is found. The slack covers the decider's commit on a busy box.
    let bound = HEARTBEAT_TIMEOUT_S * 1000 + SCAN_MS + 5_000;
    assert!(
        after_kill <= bound,
        "timed out {after_kill} ms after the kill (bound {bound} ms)"
    );
    assert!(
        timed_out.attributes["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("heartbeat"),
        "{:?}",
        timed_out.attributes
    );
    assert_eq!(
        attempt_status(&suite, &id, 1).await.as_deref(),
        Some("TIMED_OUT")
    );

    // The retry runs on another worker (which also gets the dead worker's stale attempt
    // back from the broker: its first heartbeat answers STOP and it is dropped).
    let mut second = slow_worker(&suite, "worker-b");
    let wf = client
        .wait_for_status(&id, &["COMPLETED"], RUN_TIMEOUT)
        .await
        .unwrap();
    assert_eq!(wf["output"]["worker"], json!("worker-b"), "{wf}");
    let statuses: Vec<&str> = wf["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["status"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(statuses, vec!["TIMED_OUT", "COMPLETED"], "{wf}");
    assert_eq!(
        attempt_status(&suite, &id, 2).await.as_deref(),
        Some("COMPLETED")
    );

    second.terminate(Duration::from_secs(20)).await.unwrap();
    suite.stop_all().await.unwrap();
}
