//! Tasks that wait before a worker may take them (docs/callbacks.md), on both shapes: a
//! worker gives its task back with `callbackAfterSeconds`, a failed attempt's retry waits
//! out its back-off, and `resetcallbacks` makes a waiting task due at once. A waiting task
//! is listed SCHEDULED with its delay, counted in its queue's size, and handed to no
//! worker before its time.

use serde_json::{json, Value};
use weft_e2e::{poll_until, Backend, Suite};

use crate::RUN_TIMEOUT;

const TASK: &str = "callback_task";
const WORKER: &str = "cb-worker";

/// The run's only task row that `pred` picks, once it exists (bounded by [`RUN_TIMEOUT`]).
async fn task_where(suite: &Suite, id: &str, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    poll_until(
        RUN_TIMEOUT,
        std::time::Duration::from_millis(20),
        || format!("no task {what} in {id}"),
        || async {
            let wf = suite.client().get(id).await?;
            let tasks = wf["tasks"].as_array().cloned().unwrap_or_default();
            Ok(tasks.into_iter().rev().find(|t| pred(t)))
        },
    )
    .await
    .unwrap()
}

/// One poll that waits for nothing: the answer's status and task, if any.
async fn poll_now(suite: &Suite) -> Option<Value> {
    let path = format!("/api/tasks/poll/{TASK}?workerid={WORKER}");
    let r = suite
        .client()
        .raw(reqwest::Method::GET, &path, None)
        .await
        .unwrap();
    match r.status {
        200 => r.json,
        204 => None,
        other => panic!("poll answered {other}: {}", r.text),
    }
}

/// Polls until the task comes.
async fn poll_until_given(suite: &Suite) -> Value {
    poll_until(
        RUN_TIMEOUT,
        std::time::Duration::from_millis(50),
        || format!("no {TASK} handed out"),
        || async { Ok(poll_now(suite).await) },
    )
    .await
    .unwrap()
}

/// `GET /api/tasks/queue/size?taskType=` once it reads `size`.
async fn queue_size_is(suite: &Suite, size: u64) {
    let path = format!("/api/tasks/queue/size?taskType={TASK}");
    poll_until(
        RUN_TIMEOUT,
        std::time::Duration::from_millis(20),
        || format!("the queue of {TASK} never held {size}"),
        || async {
            let r = suite
                .client()
                .raw(reqwest::Method::GET, &path, None)
                .await?;
            Ok((r.json == Some(json!(size))).then_some(()))
        },
    )
    .await
    .unwrap();
}

/// The run's one task waits out `what`: counted in its queue's size, handed to nobody.
async fn held_back(suite: &Suite, what: &str) {
    queue_size_is(suite, 1).await;
    assert_eq!(
        poll_now(suite).await,
        None,
        "handed out before {what} was over"
    );
}

/// `POST /api/workflow/{id}/resetcallbacks`, answered `status`.
async fn reset_callbacks(suite: &Suite, id: &str, status: u16) {
    let path = format!("/api/workflow/{id}/resetcallbacks");
    let r = suite
        .client()
        .raw(reqwest::Method::POST, &path, None)
        .await
        .unwrap();
    assert_eq!(r.status, status, "resetcallbacks answered: {}", r.text);
}

async fn result(suite: &Suite, task: &Value, status: &str, extra: Value) {
    let mut body = json!({"workflowInstanceId": task["workflowInstanceId"],
                          "taskId": task["taskId"], "workerId": WORKER, "status": status});
    for (k, v) in extra.as_object().into_iter().flatten() {
        body[k] = v.clone();
    }
    let r = suite.client().post_json("/api/tasks", &body).await.unwrap();
    assert_eq!(r.status, 200, "{status} answered {}: {}", r.status, r.text);
}

async fn waiting_tasks_are_held_back_until_due(backend: Backend) {
    let suite = Suite::start_on(backend).await.unwrap();
    let client = suite.client();
    let taskdef = json!([{"name": TASK, "retryCount": 1, "retryLogic": "FIXED",
        "retryDelaySeconds": 3600, "responseTimeoutSeconds": 600, "timeoutSeconds": 0,
        "ownerEmail": "e2e@weft.dev"}]);
    client.register_taskdefs(&taskdef).await.unwrap();
    client
        .register(&json!({"name": "callbacks_wf", "version": 1, "tasks": [
            {"name": TASK, "taskReferenceName": "work", "type": "SIMPLE"}],
            "outputParameters": {"done": "${work.output.done}"}}))
        .await
        .unwrap();
    let id = client.start("callbacks_wf", json!({})).await.unwrap();

    // Given back for an hour: SCHEDULED with its progress, counted, handed to nobody.
    let first = poll_until_given(&suite).await;
    result(
        &suite,
        &first,
        "IN_PROGRESS",
        json!({"callbackAfterSeconds": 3600, "outputData": {"step": 1}}),
    )
    .await;
    let waiting = task_where(&suite, &id, "given back", |t| {
        t["status"] == "SCHEDULED" && t["outputData"]["step"] == 1
    })
    .await;
    assert_eq!(
        waiting["taskId"], first["taskId"],
        "the same task: {waiting}"
    );
    assert_eq!(waiting["callbackAfterSeconds"], 3600, "{waiting}");
    assert_eq!(waiting["outputData"], json!({"step": 1}), "{waiting}");
    held_back(&suite, "its callback").await;

    // Made due by an operator: handed out again, the same attempt.
    reset_callbacks(&suite, &id, 204).await;
    let again = poll_until_given(&suite).await;
    assert_eq!(
        (&again["taskId"], &again["retryCount"]),
        (&first["taskId"], &json!(0))
    );

    // Failed: the retry is SCHEDULED at once, waiting out its hour, held back.
    result(
        &suite,
        &again,
        "FAILED",
        json!({"reasonForIncompletion": "flaky"}),
    )
    .await;
    let retry = task_where(&suite, &id, "retried", |t| t["retryCount"] == 1).await;
    assert_eq!(retry["status"], "SCHEDULED", "{retry}");
    assert_eq!(retry["callbackAfterSeconds"], 3600, "{retry}");
    held_back(&suite, "its back-off").await;

    // Made due at once; then given back without delay: straight back to its queue.
    reset_callbacks(&suite, &id, 204).await;
    let retried = poll_until_given(&suite).await;
    assert_eq!(retried["taskId"], retry["taskId"]);
    result(
        &suite,
        &retried,
        "IN_PROGRESS",
        json!({"callbackAfterSeconds": 0}),
    )
    .await;
    let taken = poll_until_given(&suite).await;
    assert_eq!(taken["taskId"], retry["taskId"]);
    result(
        &suite,
        &taken,
        "COMPLETED",
        json!({"outputData": {"done": true}}),
    )
    .await;
    let wf = client
        .wait_for_status(&id, &["COMPLETED"], RUN_TIMEOUT)
        .await
        .unwrap();
    assert_eq!(wf["output"], json!({"done": true}), "{wf}");

    // An ended run has no callbacks to reset.
    reset_callbacks(&suite, &id, 409).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_tasks_are_held_back_until_due_on_the_services() {
    waiting_tasks_are_held_back_until_due(Backend::Services).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_tasks_are_held_back_until_due_on_weft_dev() {
    waiting_tasks_are_held_back_until_due(Backend::Dev).await;
}

/// A task given back twice waits out the second callback alone: the first one's timer
/// goes with the second giving back (it used to fire too, handing the task out early).
async fn a_task_given_back_twice_waits_out_its_last_callback(backend: Backend) {
    let suite = Suite::start_on(backend).await.unwrap();
    let client = suite.client();
    client
        .register(&json!({"name": "callbacks_twice", "version": 1, "tasks": [
            {"name": TASK, "taskReferenceName": "work", "type": "SIMPLE"}]}))
        .await
        .unwrap();
    let id = client.start("callbacks_twice", json!({})).await.unwrap();
    let task = poll_until_given(&suite).await;
    result(
        &suite,
        &task,
        "IN_PROGRESS",
        json!({"callbackAfterSeconds": 1, "outputData": {"step": 1}}),
    )
    .await;
    task_where(&suite, &id, "given back", |t| t["outputData"]["step"] == 1).await;
    result(
        &suite,
        &task,
        "IN_PROGRESS",
        json!({"callbackAfterSeconds": 3600, "outputData": {"step": 2}}),
    )
    .await;
    let waiting = task_where(&suite, &id, "given back again", |t| {
        t["outputData"]["step"] == 2
    })
    .await;
    assert_eq!(waiting["callbackAfterSeconds"], 3600, "{waiting}");
    // Well past the first callback's second.
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    held_back(&suite, "its last callback").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_given_back_twice_waits_out_its_last_callback_on_the_services() {
    a_task_given_back_twice_waits_out_its_last_callback(Backend::Services).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_given_back_twice_waits_out_its_last_callback_on_weft_dev() {
    a_task_given_back_twice_waits_out_its_last_callback(Backend::Dev).await;
}
