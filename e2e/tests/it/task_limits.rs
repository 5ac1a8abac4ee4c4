//! Task limits (docs/task-limits.md) across real workers: a task definition's
//! `concurrentExecLimit` holds while many of its tasks wait (two example workers take
//! them), its rate limit spreads their starts over windows, and an HTTP poller over the
//! limit is answered "none for now". Assertions are on what the handlers recorded (their
//! own start and end times) and on counters, with timings only as generous bounds.

use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;
use weft_e2e::{Backend, Service, Suite};

crate::on_both_backends!(
    at_most_the_concurrency_limit_of_a_task_runs_at_once,
    a_rate_limited_task_starts_at_most_its_rate_per_window,
    an_http_poll_over_the_limit_gets_no_task_until_one_ends,
);

/// A second example worker beside the suite's, so that the limit is held across
/// workers: another process on the services, another worker on `weft dev`'s bus. The
/// token stops the in-process one.
async fn second_worker(suite: &mut Suite) -> CancellationToken {
    let stop = CancellationToken::new();
    match suite.dev_bus().cloned() {
        None => {
            suite.spawn(Service::Worker).await.unwrap();
        }
        Some(bus) => {
            let config = weft::Config {
                namespace: suite.env().namespace.clone(),
                shards: suite.env().options.shards,
                ..weft::Config::default()
            };
            let worker = weft_worker_example::register(weft::worker::Worker::builder(&config))
                .worker_id("second-worker")
                .build();
            tokio::spawn(worker.run_on(bus, stop.clone()));
        }
    }
    stop
}

/// A run of `branches` parallel `slow` tasks, each sleeping `ms`: every one of them is
/// scheduled in the same commit, so they all wait for a worker at once.
fn fanned_out(name: &str, branches: usize, ms: u64) -> Value {
    let forks: Vec<Value> = (0..branches)
        .map(|i| {
            json!([{"name": "slow", "taskReferenceName": format!("s{i}"), "type": "SIMPLE",
                    "inputParameters": {"ms": ms}}])
        })
        .collect();
    let refs: Vec<String> = (0..branches).map(|i| format!("s{i}")).collect();
    json!({"name": name, "version": 1, "tasks": [
        {"name": "fan", "taskReferenceName": "fan", "type": "FORK_JOIN", "forkTasks": forks},
        {"name": "join", "taskReferenceName": "join", "type": "JOIN", "joinOn": refs}]})
}

/// `(began, ended)` of each `slow` task of a completed run, as its handler recorded them.
fn handler_times(wf: &Value) -> Vec<(u64, u64)> {
    wf["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["taskDefName"] == "slow" || t["taskType"] == "slow")
        .map(|t| {
            let out = &t["outputData"];
            let time = |k: &str| out[k].as_u64().unwrap_or_else(|| panic!("no {k} in {t}"));
            (time("began"), time("ended"))
        })
        .collect()
}

/// The most intervals that overlap at one instant.
fn most_at_once(intervals: &[(u64, u64)]) -> usize {
    let mut edges: Vec<(u64, i32)> = intervals
        .iter()
        .flat_map(|&(began, ended)| [(began, 1), (ended, -1)])
        .collect();
    // An end before a start at the same instant: touching intervals do not overlap.
    edges.sort();
    let (mut now, mut most) = (0, 0);
    for (_, step) in edges {
        now += step;
        most = most.max(now);
    }
    most as usize
}

/// `weft_claims_deferred_total` for `task_name` and `limit`, summed over the heartbeat
/// services (bus workers' claims) and the gateway (HTTP polls) on the services, or read
/// off `weft dev`'s one metrics registry.
pub(crate) async fn deferred_claims(suite: &Suite, task_name: &str, limit: &str) -> u64 {
    let mut urls = vec![format!("{}/metrics", suite.gateway_url())];
    if suite.backend() == Backend::Services {
        urls.extend(
            suite
                .procs(Service::Heartbeat)
                .into_iter()
                .map(|id| format!("http://{}/metrics", suite.proc(id).addr)),
        );
    }
    let (name, kind) = (
        format!("task_name=\"{task_name}\""),
        format!("limit=\"{limit}\""),
    );
    let mut total = 0;
    for url in urls {
        let text = reqwest::get(&url)
            .await
            .and_then(|r| r.error_for_status())
            .unwrap_or_else(|e| panic!("{url}: {e}"))
            .text()
            .await
            .unwrap();
        total += text
            .lines()
            .filter(|l| l.starts_with("weft_claims_deferred_total{"))
            .filter(|l| l.contains(&name) && l.contains(&kind))
            .filter_map(|l| l.rsplit_once(' ')?.1.trim().parse::<u64>().ok())
            .sum::<u64>();
    }
    total
}

async fn at_most_the_concurrency_limit_of_a_task_runs_at_once(mut suite: Suite) {
    const LIMIT: usize = 2;
    const TASKS: usize = 8;
    let second = second_worker(&mut suite).await;
    let client = suite.client();
    client
        .register_taskdefs(&json!([{"name": "slow", "concurrentExecLimit": LIMIT,
            "retryCount": 0, "responseTimeoutSeconds": 60, "ownerEmail": "e2e@weft.dev"}]))
        .await
        .unwrap();
    client
        .register(&fanned_out("capped_fan", TASKS, 400))
        .await
        .unwrap();
    let id = client.start("capped_fan", json!({})).await.unwrap();
    let wf = crate::ended(&suite, &id, "COMPLETED").await;
    let times = handler_times(&wf);
    assert_eq!(times.len(), TASKS, "every task ran once: {times:?}");
    let most = most_at_once(&times);
    assert!(
        (1..=LIMIT).contains(&most),
        "{most} handlers ran at once, above concurrentExecLimit {LIMIT}: {times:?}"
    );
    // Eight waited for two places: the claims over the limit were deferred, not failed.
    assert!(deferred_claims(&suite, "slow", "concurrency").await > 0);
    assert!(
        wf["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["retryCount"] == 0),
        "no task was retried"
    );
    second.cancel();
}

async fn a_rate_limited_task_starts_at_most_its_rate_per_window(suite: Suite) {
    const PER_WINDOW: usize = 2;
    const WINDOW_MS: u64 = 2_000;
    const TASKS: usize = 6;
    let client = suite.client();
    client
        .register_taskdefs(
            &json!([{"name": "slow", "rateLimitPerFrequency": PER_WINDOW,
            "rateLimitFrequencyInSeconds": WINDOW_MS / 1_000, "retryCount": 0,
            "ownerEmail": "e2e@weft.dev"}]),
        )
        .await
        .unwrap();
    client
        .register(&fanned_out("paced_fan", TASKS, 0))
        .await
        .unwrap();
    let id = client.start("paced_fan", json!({})).await.unwrap();
    let wf = crate::ended(&suite, &id, "COMPLETED").await;
    let mut began: Vec<u64> = handler_times(&wf).into_iter().map(|(b, _)| b).collect();
    began.sort_unstable();
    assert_eq!(began.len(), TASKS);
    // Fixed windows admit at most two windows' worth (2 × 2) in any span shorter than a
    // window, so any five consecutive starts span at least a window. Half a window is
    // left for the time between a claim and its handler's start; unlimited, all six
    // start within a few milliseconds of each other.
    for (first, fifth) in began.iter().zip(&began[2 * PER_WINDOW..]) {
        assert!(
            fifth - first >= WINDOW_MS / 2,
            "{} starts within {} ms: {began:?}",
            2 * PER_WINDOW + 1,
            fifth - first
        );
    }
    assert!(deferred_claims(&suite, "slow", "rate").await > 0);
}

async fn an_http_poll_over_the_limit_gets_no_task_until_one_ends(mut suite: Suite) {
    const TASK: &str = "polled_capped";
    suite.delete_queue_on_cleanup(TASK);
    let client = suite.client();
    client
        .register_taskdefs(
            &json!([{"name": TASK, "concurrentExecLimit": 1, "retryCount": 0,
            "responseTimeoutSeconds": 60, "ownerEmail": "e2e@weft.dev"}]),
        )
        .await
        .unwrap();
    client
        .register(&json!({"name": "polled_pair", "version": 1, "tasks": [
            {"name": "fan", "taskReferenceName": "fan", "type": "FORK_JOIN", "forkTasks": [
                [{"name": TASK, "taskReferenceName": "a", "type": "SIMPLE"}],
                [{"name": TASK, "taskReferenceName": "b", "type": "SIMPLE"}]]},
            {"name": "join", "taskReferenceName": "join", "type": "JOIN", "joinOn": ["a", "b"]}]}))
        .await
        .unwrap();
    let id = client.start("polled_pair", json!({})).await.unwrap();
    let first = crate::http_tasks::poll_one(&suite, TASK, "w1").await;
    assert_eq!(first["workflowInstanceId"], json!(id));
    // The other is over the limit: every poll answers none while the first runs.
    for _ in 0..3 {
        let r = client
            .raw(
                reqwest::Method::GET,
                &format!("/api/tasks/poll/batch/{TASK}?workerid=w2&count=2&timeout=200"),
                None,
            )
            .await
            .unwrap();
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(r.json, Some(json!([])), "handed out over the limit");
    }
    let done = json!({"taskId": first["taskId"], "workflowInstanceId": id,
                      "status": "COMPLETED", "outputData": {"n": 1}});
    client.post_json("/api/tasks", &done).await.unwrap();
    // Once the first ended (the decider's commit), the second is handed out.
    let second = crate::http_tasks::poll_one(&suite, TASK, "w2").await;
    assert_ne!(second["taskId"], first["taskId"]);
    let done = json!({"taskId": second["taskId"], "workflowInstanceId": id,
                      "status": "COMPLETED", "outputData": {"n": 2}});
    client.post_json("/api/tasks", &done).await.unwrap();
    crate::ended(&suite, &id, "COMPLETED").await;
    assert!(deferred_claims(&suite, TASK, "concurrency").await >= 3);
}
