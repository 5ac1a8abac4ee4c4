//! Conductor's task domains (docs/domains.md): a run started with `taskToDomain` sends
//! its workers' tasks to their domain's queue, where only workers polling that domain —
//! over HTTP (`?domain=`) or with the SDK (`WorkerBuilder::domain`) — take them; a child
//! run keeps its parent's domains; a domain nobody can route to is refused at start.

use std::time::Duration;

use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;
use weft::worker::Worker;
use weft_e2e::Suite;

crate::on_both_backends!(
    tasks_of_a_domain_go_to_the_workers_polling_it,
    children_keep_their_parents_domains_and_the_sdk_worker_takes_them,
);

const TASK: &str = "weft_domain_task";

async fn poll(suite: &Suite, domain: Option<&str>) -> (u16, Value) {
    let query = domain.map_or_else(String::new, |d| format!("&domain={d}"));
    let path = format!("/api/tasks/poll/{TASK}?workerid=w{query}");
    let r = suite
        .client()
        .raw(reqwest::Method::GET, &path, None)
        .await
        .unwrap();
    (r.status, r.json.unwrap_or(Value::Null))
}

/// Polls `domain` until a task comes.
async fn poll_until_given(suite: &Suite, domain: Option<&str>) -> Value {
    for _ in 0..1_500 {
        if let (200, task) = poll(suite, domain).await {
            return task;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no {TASK} in domain {domain:?}");
}

async fn tasks_of_a_domain_go_to_the_workers_polling_it(suite: Suite) {
    let client = suite.client();
    client
        .register(&json!({"name": "domained", "version": 1, "tasks": [
            {"name": TASK, "taskReferenceName": "a", "type": "SIMPLE"}]}))
        .await
        .unwrap();

    // Bad domains are refused at start, naming the field.
    for (domains, field) in [
        (json!({TASK: "blue,green"}), format!("taskToDomain.{TASK}")),
        (json!({TASK: "no spaces"}), format!("taskToDomain.{TASK}")),
        (json!(["blue"]), "taskToDomain".to_owned()),
    ] {
        let r = client
            .post_json(
                "/api/workflow",
                &json!({"name": "domained", "taskToDomain": domains}),
            )
            .await
            .unwrap();
        assert_eq!(r.status, 400, "{}", r.text);
        assert_eq!(r.json.unwrap()["path"], json!(field));
    }

    let id = client
        .start_request(&json!({"name": "domained", "taskToDomain": {TASK: "blue"}}))
        .await
        .unwrap();
    // Scheduled in domain blue: a poller of no domain, or of another, gets nothing.
    let wf = client
        .wait_for_status(&id, &["RUNNING"], crate::RUN_TIMEOUT)
        .await
        .unwrap();
    for _ in 0..500 {
        let wf = client.get(&id).await.unwrap();
        if wf["tasks"][0]["domain"] == "blue" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let wf = client.get(&id).await.unwrap_or(wf);
    assert_eq!(wf["tasks"][0]["domain"], json!("blue"), "{wf}");
    // Its queue is the domain's: counted there (Conductor's `queue/size?domain=`), not in
    // the task's queue of no domain.
    let size = |domain: &str| {
        let path = format!("/api/tasks/queue/size?taskType={TASK}{domain}");
        async move {
            let r = client.raw(reqwest::Method::GET, &path, None).await.unwrap();
            assert_eq!(r.status, 200, "{path}: {}", r.text);
            r.json.unwrap_or(Value::Null)
        }
    };
    for _ in 0..500 {
        if size("&domain=blue").await == json!(1) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(size("&domain=blue").await, json!(1));
    assert_eq!(size("").await, json!(0));
    assert_eq!(poll(&suite, None).await.0, 204);
    assert_eq!(poll(&suite, Some("green")).await.0, 204);
    let task = poll_until_given(&suite, Some("blue")).await;
    assert_eq!(task["workflowInstanceId"], json!(id), "{task}");
    assert_eq!(task["domain"], json!("blue"), "{task}");
    let result = json!({"taskId": task["taskId"], "status": "COMPLETED", "outputData": {"ok": 1}});
    let r = client.post_json("/api/tasks", &result).await.unwrap();
    assert_eq!(r.status, 200, "{}", r.text);
    crate::ended(&suite, &id, "COMPLETED").await;

    // `*` names every task; NO_DOMAIN, none.
    let any = client
        .start_request(&json!({"name": "domained", "taskToDomain": {"*": "green"}}))
        .await
        .unwrap();
    let task = poll_until_given(&suite, Some("green")).await;
    assert_eq!(task["workflowInstanceId"], json!(any));
    let plain = client
        .start_request(&json!({"name": "domained", "taskToDomain": {TASK: "NO_DOMAIN"}}))
        .await
        .unwrap();
    let task = poll_until_given(&suite, None).await;
    assert_eq!(task["workflowInstanceId"], json!(plain));
    assert!(task.get("domain").is_none(), "{task}");
}

async fn children_keep_their_parents_domains_and_the_sdk_worker_takes_them(suite: Suite) {
    let client = suite.client();
    client
        .register(&json!({"name": "domain_child", "version": 1, "tasks": [
            {"name": TASK, "taskReferenceName": "c", "type": "SIMPLE"}]}))
        .await
        .unwrap();
    client
        .register(&json!({"name": "domain_parent", "version": 1, "tasks": [
            {"name": "child", "taskReferenceName": "child", "type": "SUB_WORKFLOW",
             "subWorkflowParam": {"name": "domain_child", "version": 1}}]}))
        .await
        .unwrap();
    let id = client
        .start_request(&json!({"name": "domain_parent", "taskToDomain": {TASK: "red"}}))
        .await
        .unwrap();

    // A worker of no domain never sees the child's task; one of domain red runs it.
    let plain = Worker::builder(&suite.worker_config())
        .activity(
            TASK,
            |_task, _ctx| async move { Ok(json!({"by": "plain"})) },
        )
        .build();
    let red = Worker::builder(&suite.worker_config())
        .domain("red")
        .activity(TASK, |_task, _ctx| async move { Ok(json!({"by": "red"})) })
        .build();
    let shutdown = CancellationToken::new();
    let running = [
        suite.run_worker(plain, &shutdown),
        suite.run_worker(red, &shutdown),
    ];
    let wf = crate::ended(&suite, &id, "COMPLETED").await;
    shutdown.cancel();
    for r in running {
        let _ = r.await;
    }
    let child = wf["tasks"][0]["subWorkflowId"].as_str().unwrap().to_owned();
    let child = client.get(&child).await.unwrap();
    assert_eq!(child["tasks"][0]["domain"], json!("red"), "{child}");
    assert_eq!(
        child["tasks"][0]["outputData"],
        json!({"by": "red"}),
        "{child}"
    );
}
