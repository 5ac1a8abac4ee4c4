//! Accepted means applied (docs/task-updates.md): task results by ref and by id, and
//! signals, answered with the decider's verdict. A table of requests, each against a run
//! in a known state: every row asserts its answer and, read back from the run, that the
//! change happened (2xx) or that nothing changed (4xx).

use std::time::Duration;

use serde_json::{json, Value};
use weft_e2e::Suite;

use crate::constructs::{latest_status, statuses};

crate::on_both_backends!(
    task_updates_by_ref_by_id_and_signals_take_effect_or_are_refused,
    a_wait_failed_through_the_task_api_fails_its_run,
    a_wait_whose_task_definition_retries_it_waits_again_when_failed,
    a_worker_only_policy_on_a_wait_is_refused_at_registration_and_at_start,
);

/// Every task type a result or a signal can name, pending at once (a fork), then a task
/// not reached until they end, and a WAIT in a branch the run never takes.
fn definition() -> Value {
    json!({"name": "updates", "version": 1, "tasks": [
        {"name": "fork", "taskReferenceName": "fork", "type": "FORK_JOIN", "forkTasks": [
            [{"name": "weft_unserved", "taskReferenceName": "simple", "type": "SIMPLE"}],
            [{"name": "wait", "taskReferenceName": "wait", "type": "WAIT"}],
            [{"name": "timed", "taskReferenceName": "timed", "type": "WAIT",
              "inputParameters": {"duration": "1 hour"}}],
            [{"name": "human", "taskReferenceName": "human", "type": "HUMAN"}]]},
        {"name": "join", "taskReferenceName": "join", "type": "JOIN",
         "joinOn": ["simple", "wait", "timed", "human"]},
        {"name": "weft_unserved", "taskReferenceName": "later", "type": "SIMPLE"},
        {"name": "switch", "taskReferenceName": "switch", "type": "SWITCH",
         "evaluatorType": "value-param", "expression": "x", "inputParameters": {"x": "no"},
         "decisionCases": {"yes": [
            {"name": "never", "taskReferenceName": "never", "type": "WAIT"}]}}]})
}

/// What a row expects back.
struct Row {
    method: reqwest::Method,
    path: String,
    body: Value,
    status: u16,
    /// A phrase the answer must contain.
    says: &'static str,
}

fn post(path: String, body: Value, status: u16, says: &'static str) -> Row {
    Row {
        method: reqwest::Method::POST,
        path,
        body,
        status,
        says,
    }
}

fn put(path: String, status: u16) -> Row {
    Row {
        method: reqwest::Method::PUT,
        path,
        body: Value::Null,
        status,
        says: "",
    }
}

async fn send(client: &weft_e2e::Client, row: &Row) -> String {
    let body =
        (!row.body.is_null()).then(|| ("application/json", row.body.to_string().into_bytes()));
    let r = client
        .raw(row.method.clone(), &row.path, body)
        .await
        .unwrap();
    assert_eq!(
        r.status, row.status,
        "{} {}: {}",
        row.method, row.path, r.text
    );
    assert!(
        r.text.contains(row.says),
        "{} {}: {}",
        row.method,
        row.path,
        r.text
    );
    r.text
}

fn output_of(wf: &Value, task_ref: &str) -> Value {
    wf["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|t| t["referenceTaskName"] == task_ref)
        .map(|t| t["outputData"].clone())
        .unwrap_or(Value::Null)
}

/// Waits until every one of `refs` is pending (SCHEDULED or IN_PROGRESS).
async fn pending(client: &weft_e2e::Client, id: &str, refs: &[&str]) -> Value {
    for _ in 0..3_000 {
        let wf = client.get(id).await.unwrap();
        let all = refs.iter().all(|r| {
            matches!(
                latest_status(&wf, r).as_deref(),
                Some("SCHEDULED" | "IN_PROGRESS")
            )
        });
        if all {
            return wf;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{refs:?} never pending in {id}");
}

async fn task_updates_by_ref_by_id_and_signals_take_effect_or_are_refused(suite: Suite) {
    let client = suite.client();
    client.register(&definition()).await.unwrap();
    let id = client.start("updates", json!({})).await.unwrap();
    let wf = pending(client, &id, &["simple", "wait", "timed", "human"]).await;
    let human_id = wf["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["referenceTaskName"] == "human")
        .map(|t| t["taskId"].as_str().unwrap().to_owned())
        .unwrap();
    let by_ref = |r: &str, status: &str| format!("/api/tasks/{id}/{r}/{status}");
    let signal = |name: &str| format!("/api/workflow/{id}/signal/{name}");

    // Refused, and nothing changes: a task not scheduled yet, a ref or a signal the
    // definition does not have, a worker's task a signal cannot wait for.
    send(
        client,
        &post(
            by_ref("later", "COMPLETED"),
            json!({}),
            409,
            "not scheduled yet",
        ),
    )
    .await;
    send(
        client,
        &post(by_ref("nope", "COMPLETED"), json!({}), 404, "taskRef"),
    )
    .await;
    send(client, &post(signal("nope"), json!({}), 404, "nope")).await;
    send(
        client,
        &post(signal("later"), json!({}), 409, "not scheduled yet"),
    )
    .await;
    let wf = client.get(&id).await.unwrap();
    assert_eq!(latest_status(&wf, "later"), None, "{wf}");
    assert!(wf.get("pendingSignals").is_none(), "{wf}");

    // Kept, visibly: a signal for a WAIT the run has not reached.
    send(
        client,
        &post(signal("never"), json!({"n": 1}), 202, "\"held\":true"),
    )
    .await;
    let wf = client.get(&id).await.unwrap();
    assert_eq!(
        wf["pendingSignals"],
        json!([{"name": "never", "payload": {"n": 1}}]),
        "{wf}"
    );

    // Applied while PAUSED: a WAIT on its timer by ref, a WAIT by signal.
    send(client, &put(format!("/api/workflow/{id}/pause"), 200)).await;
    send(
        client,
        &post(by_ref("timed", "COMPLETED"), json!({"t": 1}), 200, ""),
    )
    .await;
    send(
        client,
        &post(signal("wait"), json!({"w": 2}), 200, "\"held\":false"),
    )
    .await;
    let wf = client.get(&id).await.unwrap();
    assert_eq!(wf["status"], "PAUSED", "{wf}");
    assert_eq!(
        latest_status(&wf, "timed").as_deref(),
        Some("COMPLETED"),
        "{wf}"
    );
    assert_eq!(output_of(&wf, "timed"), json!({"t": 1}));
    assert_eq!(
        latest_status(&wf, "wait").as_deref(),
        Some("COMPLETED"),
        "{wf}"
    );
    assert_eq!(output_of(&wf, "wait"), json!({"w": 2}));
    send(client, &put(format!("/api/workflow/{id}/resume"), 200)).await;

    // An ended task takes nothing more.
    send(
        client,
        &post(by_ref("wait", "COMPLETED"), json!({}), 409, "COMPLETED"),
    )
    .await;
    // By task id (a HUMAN task) and by ref (a worker's task): applied.
    let result = json!({"taskId": human_id, "status": "COMPLETED", "outputData": {"h": 3}});
    let answer = send(client, &post("/api/tasks".into(), result, 200, "")).await;
    assert_eq!(answer, human_id);
    send(
        client,
        &post(by_ref("simple", "COMPLETED"), json!({"s": 4}), 200, ""),
    )
    .await;
    let wf = pending(client, &id, &["later"]).await;
    assert_eq!(
        latest_status(&wf, "human").as_deref(),
        Some("COMPLETED"),
        "{wf}"
    );
    assert_eq!(output_of(&wf, "simple"), json!({"s": 4}));

    // The run ends with the signal nobody consumed: recorded, still shown.
    send(
        client,
        &post(by_ref("later", "COMPLETED"), json!({}), 200, ""),
    )
    .await;
    let wf = crate::ended(&suite, &id, "COMPLETED").await;
    assert_eq!(
        wf["pendingSignals"],
        json!([{"name": "never", "payload": {"n": 1}}]),
        "{wf}"
    );
    let history = client.history(&id).await.unwrap();
    let kinds: Vec<&str> = history.iter().map(|e| e.kind.as_str()).collect();
    let at = kinds
        .iter()
        .position(|k| *k == "SignalsUnconsumed")
        .expect("recorded");
    assert_eq!(kinds[at + 1], "WorkflowCompleted", "{kinds:?}");

    // An ended run takes nothing.
    send(client, &post(signal("wait"), json!({}), 409, "COMPLETED")).await;
    send(
        client,
        &post(by_ref("later", "COMPLETED"), json!({}), 409, "COMPLETED"),
    )
    .await;

    // The verdicts came pushed by the decider (after its commits), not only read from
    // the store (the fallback when no reply comes): docs/task-updates.md.
    let url = format!("{}/metrics", suite.gateway_url());
    let metrics = reqwest::get(&url).await.unwrap().text().await.unwrap();
    let pushed: f64 = metrics
        .lines()
        .find(|l| l.starts_with("weft_gateway_verdicts_total{source=\"pushed\"}"))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0);
    assert!(pushed > 0.0, "no verdict pushed:\n{metrics}");
}

async fn a_wait_failed_through_the_task_api_fails_its_run(suite: Suite) {
    let client = suite.client();
    client
        .register(&json!({"name": "gate", "version": 1, "tasks": [
            {"name": "gate", "taskReferenceName": "gate", "type": "WAIT"},
            {"name": "weft_unserved", "taskReferenceName": "after", "type": "SIMPLE"}]}))
        .await
        .unwrap();
    let id = client.start("gate", json!({})).await.unwrap();
    let wf = pending(client, &id, &["gate"]).await;
    let gate = wf["tasks"][0]["taskId"].as_str().unwrap().to_owned();
    let result = json!({"taskId": gate, "status": "FAILED", "reasonForIncompletion": "denied"});
    send(client, &post("/api/tasks".into(), result, 200, "")).await;
    let wf = crate::ended(&suite, &id, "FAILED").await;
    assert_eq!(
        latest_status(&wf, "gate").as_deref(),
        Some("FAILED"),
        "{wf}"
    );
    assert_eq!(
        latest_status(&wf, "after"),
        None,
        "nothing runs after it: {wf}"
    );
    assert!(
        wf["reasonForIncompletion"]
            .as_str()
            .unwrap_or_default()
            .contains("denied"),
        "{wf}"
    );
}

/// Every rule on every task type (docs/conductor.md, "Task definitions on every task
/// type"): a WAIT whose registered task definition gives it a retry, failed through the
/// task API, waits again as its second attempt, which a completion by ref completes; its
/// `inputTemplate` fills the WAIT's input.
async fn a_wait_whose_task_definition_retries_it_waits_again_when_failed(suite: Suite) {
    let client = suite.client();
    client
        .register_taskdefs(&json!([{"name": "gate_retried", "retryCount": 1,
            "retryDelaySeconds": 0, "responseTimeoutSeconds": 60,
            "inputTemplate": {"asked": "${workflow.input.who}"}}]))
        .await
        .unwrap();
    client
        .register(&json!({"name": "gate_retried", "version": 1, "tasks": [
            {"name": "gate_retried", "taskReferenceName": "gate", "type": "WAIT"},
            {"name": "weft_unserved", "taskReferenceName": "after", "type": "SIMPLE"}]}))
        .await
        .unwrap();
    let id = client
        .start("gate_retried", json!({"who": "ada"}))
        .await
        .unwrap();
    let wf = pending(client, &id, &["gate"]).await;
    // The registered definition's `inputTemplate` fills the WAIT's input too.
    assert_eq!(wf["tasks"][0]["inputData"]["asked"], "ada", "{wf}");
    let failed = json!({"reasonForIncompletion": "not yet"});
    send(
        client,
        &post(format!("/api/tasks/{id}/gate/FAILED"), failed, 200, ""),
    )
    .await;
    let wf = pending(client, &id, &["gate"]).await;
    assert_eq!(
        statuses(&wf),
        vec![
            ("gate".to_owned(), "FAILED".to_owned()),
            ("gate".to_owned(), "IN_PROGRESS".to_owned())
        ],
        "{wf}"
    );
    let attempts: Vec<&Value> = wf["tasks"].as_array().unwrap().iter().collect();
    assert_eq!(attempts[1]["retryCount"], 1, "{wf}");
    assert_eq!(attempts[1]["retriedTaskId"], attempts[0]["taskId"], "{wf}");
    let done = json!({"ok": true});
    send(
        client,
        &post(format!("/api/tasks/{id}/gate/COMPLETED"), done, 200, ""),
    )
    .await;
    let wf = pending(client, &id, &["after"]).await;
    assert_eq!(wf["status"], "RUNNING", "{wf}");
    assert_eq!(output_of(&wf, "gate"), json!({"ok": true}), "{wf}");
}

/// A concurrency or rate limit, or a poll timeout, means nothing on a WAIT: inline it is
/// refused at registration, registered under the WAIT's name it refuses the start, each
/// with a 400 naming the field and the type; nothing is started.
async fn a_worker_only_policy_on_a_wait_is_refused_at_registration_and_at_start(suite: Suite) {
    let client = suite.client();
    let inline = json!({"name": "limited_gate", "version": 1, "tasks": [
        {"name": "limited_gate", "taskReferenceName": "gate", "type": "WAIT",
         "taskDefinition": {"name": "limited_gate", "concurrentExecLimit": 2}}]});
    let r = client
        .raw(
            reqwest::Method::POST,
            "/api/metadata/workflow",
            Some(("application/json", inline.to_string().into_bytes())),
        )
        .await
        .unwrap();
    assert_eq!(r.status, 400, "{}", r.text);
    assert!(
        r.text
            .contains("tasks[0].taskDefinition.concurrentExecLimit")
            && r.text.contains("WAIT"),
        "{}",
        r.text
    );

    client
        .register_taskdefs(&json!([{"name": "limited_gate", "rateLimitPerFrequency": 5,
            "rateLimitFrequencyInSeconds": 1, "responseTimeoutSeconds": 60}]))
        .await
        .unwrap();
    client
        .register(&json!({"name": "limited_gate", "version": 1, "tasks": [
            {"name": "limited_gate", "taskReferenceName": "gate", "type": "WAIT"}]}))
        .await
        .unwrap();
    let r = client
        .post_json("/api/workflow/limited_gate", &json!({}))
        .await
        .unwrap();
    assert_eq!(r.status, 400, "{}", r.text);
    assert!(
        r.text
            .contains("tasks[0].taskDefinition.rateLimitPerFrequency")
            && r.text.contains("not WAIT"),
        "{}",
        r.text
    );
    let search = client
        .raw(
            reqwest::Method::GET,
            "/api/workflow/search?query=workflowType%3Dlimited_gate",
            None,
        )
        .await
        .unwrap();
    assert_eq!(search.status, 200, "{}", search.text);
    let found: Value = serde_json::from_str(&search.text).unwrap();
    assert_eq!(found["totalHits"], 0, "nothing started: {found}");
}
