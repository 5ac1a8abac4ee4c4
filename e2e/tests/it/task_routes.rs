//! Accepted means applied, task by task (docs/operations.md, "Every task route on every
//! task type"): each request that names a task — its result by id and by ref, a signal
//! named after it, a skip — sent for a task of each type that waits for something, in
//! each state the task can be in while its run runs. A 2xx must show its effect, read
//! back from the run (or, for a signal kept for later, from `pendingSignals`; for a skip
//! ahead, from history); a 4xx must change nothing. docs/operations.md's table shows every
//! answer as the test found it, so neither can fall behind the other.

use std::fmt::Write as _;
use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};
use weft::dsl::TaskType;
use weft_e2e::{Client, Suite};

use crate::constructs::{latest_status, statuses};

crate::on_both_backends!(every_task_route_applies_or_refuses_on_every_task_type_in_every_state);

/// The task types a request can name, each as the node `x` of its own workflow.
const TYPES: [(&str, &str); 9] = [
    ("SIMPLE", "task_routes_simple"),
    ("DYNAMIC", "task_routes_dynamic"),
    ("HTTP", "task_routes_http"),
    ("WAIT", "task_routes_wait"),
    ("WAIT duration", "task_routes_duration"),
    ("WAIT until", "task_routes_until"),
    ("HUMAN", "task_routes_human"),
    ("EVENT asyncComplete", "task_routes_event"),
    ("SUB_WORKFLOW", "task_routes_child"),
];

/// Types no request of the table can name while they wait, and why: they are done within
/// the decision that reaches them, or wait only for the tasks inside them (a request
/// names those).
const NOT_WAITING: [(TaskType, &str); 13] = [
    (TaskType::Inline, "done when reached"),
    (TaskType::Lambda, "done when reached"),
    (TaskType::JsonJqTransform, "done when reached"),
    (TaskType::SetVariable, "done when reached"),
    (TaskType::Noop, "done when reached"),
    (TaskType::Terminate, "done when reached"),
    (TaskType::StartWorkflow, "done when reached"),
    (TaskType::Switch, "done when reached; its case's tasks wait"),
    (
        TaskType::Decision,
        "done when reached; its case's tasks wait",
    ),
    (
        TaskType::ForkJoin,
        "done when reached; its branches' tasks wait",
    ),
    (TaskType::ForkJoinDynamic, "waits for the tasks it forked"),
    (TaskType::Join, "waits for the tasks it joins"),
    (TaskType::DoWhile, "waits for the tasks of its body"),
];

/// `ExclusiveJoin` waits for the tasks it joins too; listed apart to keep the array short.
const ALSO_NOT_WAITING: TaskType = TaskType::ExclusiveJoin;

/// `x` of each type: pending until a request ends it (no worker serves the SIMPLE task,
/// the HTTP task waits out an hour's `startDelay`, the timers are far off, the child waits).
fn node(kind: &str) -> Value {
    let x = |extra: Value| {
        let mut node = json!({"name": "x", "taskReferenceName": "x"});
        node.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        node
    };
    match kind {
        "SIMPLE" => x(json!({"name": "weft_unserved", "type": "SIMPLE"})),
        "DYNAMIC" => x(json!({"type": "DYNAMIC", "dynamicTaskNameParam": "t",
            "inputParameters": {"t": "weft_unserved"}})),
        "HTTP" => x(
            json!({"type": "HTTP", "startDelay": 3600, "inputParameters":
            {"http_request": {"uri": "http://127.0.0.1:9/", "method": "GET"}}}),
        ),
        "WAIT" => x(json!({"type": "WAIT"})),
        "WAIT duration" => x(json!({"type": "WAIT", "inputParameters": {"duration": "1 hour"}})),
        "WAIT until" => x(json!({"type": "WAIT",
            "inputParameters": {"until": "2099-01-01T00:00:00Z"}})),
        "HUMAN" => x(json!({"type": "HUMAN"})),
        "EVENT asyncComplete" => x(json!({"type": "EVENT", "sink": "conductor",
            "asyncComplete": true})),
        "SUB_WORKFLOW" => x(json!({"type": "SUB_WORKFLOW", "subWorkflowParam": {
            "name": "task_routes_inner", "workflowDefinition": {"name": "task_routes_inner",
            "tasks": [{"name": "inner", "taskReferenceName": "inner", "type": "WAIT"}]}}})),
        other => panic!("no node for {other}"),
    }
}

/// A WAIT `gate` (holding `x` back until it is completed), `x`, then a worker's task.
fn definition(name: &str, kind: &str) -> Value {
    json!({"name": name, "version": 1, "tasks": [
        {"name": "gate", "taskReferenceName": "gate", "type": "WAIT"},
        node(kind),
        {"name": "weft_unserved", "taskReferenceName": "after", "type": "SIMPLE"}]})
}

/// The state of `x` a request meets (its run RUNNING).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Scheduled or in progress, waiting for what ends it.
    Pending,
    /// A worker's task taken by a worker (IN_PROGRESS, held by `task_routes`); other
    /// types have no such state.
    Taken,
    /// Ended COMPLETED.
    Completed,
    /// Not scheduled yet: the run is at `gate`.
    NotReached,
    /// The request names a ref (or a task id) the run does not have.
    Unknown,
}

const STATES: [State; 5] = [
    State::Pending,
    State::Taken,
    State::Completed,
    State::NotReached,
    State::Unknown,
];

impl State {
    fn name(self) -> &'static str {
        match self {
            State::Pending => "pending",
            State::Taken => "taken by a worker",
            State::Completed => "COMPLETED",
            State::NotReached => "not reached",
            State::Unknown => "unknown",
        }
    }
}

/// A request that names a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    ResultById,
    CompletedByRef,
    FailedByRef,
    Signal,
    Skip,
}

const ROUTES: [Route; 5] = [
    Route::ResultById,
    Route::CompletedByRef,
    Route::FailedByRef,
    Route::Signal,
    Route::Skip,
];

impl Route {
    fn name(self) -> &'static str {
        match self {
            Route::ResultById => "POST /api/tasks (COMPLETED)",
            Route::CompletedByRef => "POST /api/tasks/{workflow_id}/{task_ref}/COMPLETED",
            Route::FailedByRef => "POST /api/tasks/{workflow_id}/{task_ref}/FAILED",
            Route::Signal => "POST /api/workflow/{id}/signal/{task_ref}",
            Route::Skip => "PUT /api/workflow/{id}/skiptask/{task_ref}",
        }
    }

    /// The method, path and body naming `task_ref` (or `task_id`) of run `id`; `None`
    /// when the request cannot be written (by id, for a task that has no id yet).
    fn request(
        self,
        id: &str,
        task_ref: &str,
        task_id: Option<&str>,
    ) -> Option<(Method, String, Value)> {
        let output = json!({"by": "task_routes"});
        Some(match self {
            Route::ResultById => (
                Method::POST,
                "/api/tasks".to_owned(),
                json!({"workflowInstanceId": id, "taskId": task_id?, "status": "COMPLETED",
                       "outputData": output}),
            ),
            Route::CompletedByRef => (
                Method::POST,
                format!("/api/tasks/{id}/{task_ref}/COMPLETED"),
                output,
            ),
            Route::FailedByRef => (
                Method::POST,
                format!("/api/tasks/{id}/{task_ref}/FAILED"),
                json!({}),
            ),
            Route::Signal => (
                Method::POST,
                format!("/api/workflow/{id}/signal/{task_ref}"),
                output,
            ),
            Route::Skip => (
                Method::PUT,
                format!("/api/workflow/{id}/skiptask/{task_ref}"),
                Value::Null,
            ),
        })
    }
}

/// Waits until `task_ref` of `id` reads one of `statuses`; returns the run.
async fn until_task(client: &Client, id: &str, task_ref: &str, wanted: &[&str]) -> Value {
    for _ in 0..1_500 {
        let wf = client.get(id).await.unwrap();
        if latest_status(&wf, task_ref).is_some_and(|s| wanted.contains(&s.as_str())) {
            return wf;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{task_ref} of {id} never {wanted:?}");
}

fn task_of(wf: &Value, task_ref: &str) -> Option<Value> {
    wf["tasks"]
        .as_array()?
        .iter()
        .rev()
        .find(|t| t["referenceTaskName"] == task_ref)
        .cloned()
}

/// Answers 2xx with, as the decider's verdict comes after it applied the change.
async fn ok(client: &Client, method: Method, path: &str, body: Value) {
    let body = (!body.is_null()).then(|| ("application/json", body.to_string().into_bytes()));
    let r = client.raw(method, path, body).await.unwrap();
    assert!(
        (200..300).contains(&r.status),
        "{path}: {} {}",
        r.status,
        r.text
    );
}

/// A run of `workflow` with `x` in `state`: its id and `x`'s task id, if it has one.
/// A taken task is put in a domain of its own, so that the poll takes it and no other.
async fn run_in(client: &Client, workflow: &str, state: State) -> (String, Option<String>) {
    let domain = format!("d{}", uuid::Uuid::new_v4().simple());
    let id = match state {
        State::Taken => client
            .start_request(&json!({"name": workflow, "input": {},
                                   "taskToDomain": {"weft_unserved": domain}}))
            .await
            .unwrap(),
        _ => client.start(workflow, json!({})).await.unwrap(),
    };
    until_task(client, &id, "gate", &["SCHEDULED", "IN_PROGRESS"]).await;
    if state == State::NotReached {
        return (id, None);
    }
    ok(
        client,
        Method::POST,
        &format!("/api/tasks/{id}/gate/COMPLETED"),
        json!({}),
    )
    .await;
    let mut wf = until_task(client, &id, "x", &["SCHEDULED", "IN_PROGRESS"]).await;
    if state == State::Taken {
        let path = format!("/api/tasks/poll/weft_unserved?workerid=task_routes&domain={domain}");
        for _ in 0..1_500 {
            let r = client.raw(Method::GET, &path, None).await.unwrap();
            if r.status == 200 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        wf = until_task(client, &id, "x", &["IN_PROGRESS"]).await;
    }
    let x = task_of(&wf, "x").unwrap();
    if state == State::Completed {
        match x["outputData"]["subWorkflowId"].as_str() {
            Some(child) => {
                until_task(client, child, "inner", &["SCHEDULED", "IN_PROGRESS"]).await;
                let path = format!("/api/tasks/{child}/inner/COMPLETED");
                ok(client, Method::POST, &path, json!({})).await;
            }
            None => {
                let path = format!("/api/tasks/{id}/x/COMPLETED");
                ok(client, Method::POST, &path, json!({})).await;
            }
        }
        until_task(client, &id, "x", &["COMPLETED"]).await;
    }
    let task_id = match state {
        State::Unknown => uuid::Uuid::new_v4().to_string(),
        _ => x["taskId"].as_str().unwrap().to_owned(),
    };
    (id, Some(task_id))
}

/// What a reader sees of a run: status, each task's status, signals kept.
fn view(wf: &Value) -> Value {
    json!({"status": wf["status"], "tasks": statuses(wf), "pendingSignals": wf["pendingSignals"]})
}

/// The effect a 2xx of `route` must have had on `x`, read back; `None` when it holds.
async fn effect_missing(client: &Client, id: &str, route: Route, state: State) -> Option<String> {
    let wf = client.get(id).await.unwrap();
    let x = latest_status(&wf, "x");
    let holds = match (route, state) {
        (Route::FailedByRef, _) => x.as_deref() == Some("FAILED") && wf["status"] == "FAILED",
        (Route::Skip, State::NotReached) => {
            let history = client.history(id).await.unwrap();
            history.iter().any(|e| e.kind == "SkipRequested")
        }
        (Route::Skip, _) => x.as_deref() == Some("SKIPPED"),
        (Route::Signal, State::NotReached) => {
            wf["pendingSignals"] == json!([{"name": "x", "payload": {"by": "task_routes"}}])
        }
        _ => {
            x.as_deref() == Some("COMPLETED")
                && task_of(&wf, "x").unwrap()["outputData"]["by"] == "task_routes"
        }
    };
    (!holds).then(|| format!("the effect does not show: {}", view(&wf)))
}

async fn every_task_route_applies_or_refuses_on_every_task_type_in_every_state(suite: Suite) {
    // Every type is in the table, or said not to wait for anything a request could give.
    for kind in TaskType::ALL {
        let rows = TYPES
            .iter()
            .any(|(name, _)| name.split(' ').next() == Some(kind.as_str()));
        let apart = kind == ALSO_NOT_WAITING || NOT_WAITING.iter().any(|(k, _)| *k == kind);
        assert!(
            rows != apart,
            "{}: rows in TYPES, or a reason in NOT_WAITING (not both)",
            kind.as_str()
        );
    }
    let client = suite.client();
    for (kind, workflow) in TYPES {
        client.register(&definition(workflow, kind)).await.unwrap();
    }
    let mut wrong = String::new();
    let mut found: Vec<(Route, &str, Vec<String>)> = Vec::new();
    for route in ROUTES {
        for (kind, workflow) in TYPES {
            let mut cells = Vec::new();
            for state in STATES {
                if state == State::Taken && !matches!(kind, "SIMPLE" | "DYNAMIC") {
                    cells.push("—".to_owned());
                    continue;
                }
                let (id, task_id) = run_in(client, workflow, state).await;
                let task_ref = match state {
                    State::Unknown => "nope",
                    _ => "x",
                };
                let Some((method, path, body)) = route.request(&id, task_ref, task_id.as_deref())
                else {
                    cells.push("—".to_owned());
                    continue;
                };
                let before = view(&client.get(&id).await.unwrap());
                let body = (!body.is_null()).then(|| ("application/json", body.to_string()));
                let body = body.map(|(t, b)| (t, b.into_bytes()));
                let r = client.raw(method, &path, body).await.unwrap();
                cells.push(r.status.to_string());
                let cell = format!("{} on {kind} {}", route.name(), state.name());
                if (200..300).contains(&r.status) {
                    if let Some(why) = effect_missing(client, &id, route, state).await {
                        let _ = writeln!(wrong, "{cell}: answered {}, yet {why}", r.status);
                    }
                } else if !(400..500).contains(&r.status) {
                    let _ = writeln!(wrong, "{cell}: answered {}: {}", r.status, r.text);
                } else {
                    let after = view(&client.get(&id).await.unwrap());
                    if before != after {
                        let _ = writeln!(
                            wrong,
                            "{cell}: refused ({}) yet changed: {before} -> {after}",
                            r.status
                        );
                    }
                    if !r.text.contains("\"message\"") {
                        let _ = writeln!(wrong, "{cell}: refused without a reason: {}", r.text);
                    }
                }
            }
            found.push((route, kind, cells));
        }
    }
    assert!(wrong.is_empty(), "cells that do not hold:\n{wrong}");
    check_against_docs(&found);
}

/// docs/operations.md's table ("Every task route on every task type") shows each answer
/// as this test found it; when it does not, the message is the table to put there.
fn check_against_docs(found: &[(Route, &str, Vec<String>)]) {
    let docs = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/operations.md"
    ))
    .expect("docs/operations.md");
    let names: Vec<&str> = STATES.iter().map(|s| s.name()).collect();
    let mut table = format!(
        "| route | task type | {} |\n|---|---|{}\n",
        names.join(" | "),
        "---|".repeat(STATES.len())
    );
    for (route, kind, cells) in found {
        let _ = writeln!(
            table,
            "| `{}` | {kind} | {} |",
            route.name(),
            cells.join(" | ")
        );
    }
    assert!(
        docs.contains(&table),
        "docs/operations.md's table of every task route on every task type is not what \
         the routes answer; the table as found:\n{table}"
    );
}
