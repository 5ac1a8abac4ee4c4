//! Accepted means applied, route by route (docs/operations.md, "Every route in every
//! state"): every request that changes a run, sent to a run in each state, either takes
//! effect — read back from the run — or is refused with a 4xx and changes nothing. The
//! routes come from the gateway's own route table (`ROUTES`, which every request is
//! checked against): a new route that changes runs without its rows here fails the test,
//! and so does a row docs/operations.md's table does not show as the test found it.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use reqwest::Method;
use serde_json::{json, Value};
use weft_e2e::{Client, Suite};
use weft_gateway::auth::scopes::{Need, ROUTES};

use crate::constructs::{latest_status, statuses};

crate::on_both_backends!(every_route_that_changes_a_run_applies_or_refuses_in_every_state);

/// The states a run is put in before a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Running,
    Paused,
    Completed,
    Failed,
    Terminated,
    /// No such workflow.
    Unknown,
}

const STATES: [State; 6] = [
    State::Running,
    State::Paused,
    State::Completed,
    State::Failed,
    State::Terminated,
    State::Unknown,
];

impl State {
    fn name(self) -> &'static str {
        match self {
            State::Running => "RUNNING",
            State::Paused => "PAUSED",
            State::Completed => "COMPLETED",
            State::Failed => "FAILED",
            State::Terminated => "TERMINATED",
            State::Unknown => "unknown",
        }
    }
}

/// What a 2xx answer must have done, read back from the workflow.
#[derive(Debug, Clone, Copy)]
enum Effect {
    /// The run reads this status.
    Status(&'static str),
    /// The task of this ref reads this status.
    Task(&'static str, &'static str),
    /// A new run of the workflow (a reset's), RUNNING.
    NewRun,
    /// The workflow is gone.
    Removed,
    /// `variables.v` is 1.
    Variable,
    /// Nothing a reader can see (a heartbeat, a log line, a decision already made).
    Seen,
}

/// A request of the table: its route (as the route table names it) and how to send it.
struct Request {
    method: &'static str,
    route: &'static str,
    /// The path, given the workflow id and the `work` task's id.
    path: fn(&str, &str) -> String,
    /// The body, given the workflow id and the `work` task's id.
    body: fn(&str, &str) -> Value,
    /// The answer in each state (in [`STATES`]' order): a 2xx with its effect, or the
    /// 4xx that refuses it.
    answers: [(u16, Option<Effect>); 6],
}

const fn ok(effect: Effect) -> (u16, Option<Effect>) {
    (200, Some(effect))
}
const fn no(status: u16) -> (u16, Option<Effect>) {
    (status, None)
}
const fn empty(_: &str, _: &str) -> Value {
    Value::Null
}

/// A FORK of a WAIT (`gate`) and a worker's task no worker serves (`work`): both stay
/// pending until a request ends them.
fn definition() -> Value {
    json!({"name": "routes", "version": 1, "tasks": [
        {"name": "fork", "taskReferenceName": "fork", "type": "FORK_JOIN", "forkTasks": [
            [{"name": "gate", "taskReferenceName": "gate", "type": "WAIT"}],
            [{"name": "weft_unserved", "taskReferenceName": "work", "type": "SIMPLE"}]]},
        {"name": "join", "taskReferenceName": "join", "type": "JOIN",
         "joinOn": ["gate", "work"]}]})
}

use Effect::{NewRun, Removed, Seen, Variable};

fn table() -> Vec<Request> {
    let terminated = Effect::Status("TERMINATED");
    let paused = Effect::Status("PAUSED");
    let running = Effect::Status("RUNNING");
    let gate_done = Effect::Task("gate", "COMPLETED");
    let work_done = Effect::Task("work", "COMPLETED");
    vec![
        Request {
            method: "DELETE",
            route: "/api/workflow/{id}",
            path: |id, _| format!("/api/workflow/{id}?reason=table"),
            body: empty,
            answers: [
                ok(terminated),
                ok(terminated),
                no(409),
                no(409),
                no(409),
                no(404),
            ],
        },
        Request {
            method: "PUT",
            route: "/api/workflow/{id}/pause",
            path: |id, _| format!("/api/workflow/{id}/pause"),
            body: empty,
            answers: [ok(paused), no(409), no(409), no(409), no(409), no(404)],
        },
        Request {
            method: "PUT",
            route: "/api/workflow/{id}/resume",
            path: |id, _| format!("/api/workflow/{id}/resume"),
            body: empty,
            answers: [no(409), ok(running), no(409), no(409), no(409), no(404)],
        },
        Request {
            method: "POST",
            route: "/api/workflow/{id}/resetcallbacks",
            path: |id, _| format!("/api/workflow/{id}/resetcallbacks"),
            body: empty,
            answers: [ok(Seen), ok(Seen), no(409), no(409), no(409), no(404)],
        },
        Request {
            method: "PUT",
            route: "/api/workflow/{id}/skiptask/{task_ref}",
            path: |id, _| format!("/api/workflow/{id}/skiptask/gate"),
            body: empty,
            answers: [
                ok(Effect::Task("gate", "SKIPPED")),
                ok(Effect::Task("gate", "SKIPPED")),
                no(409),
                no(409),
                no(409),
                no(404),
            ],
        },
        Request {
            method: "POST",
            route: "/api/workflow/{id}/reset",
            path: |id, _| format!("/api/workflow/{id}/reset"),
            body: |_, _| json!({"taskRef": "gate"}),
            answers: [
                ok(NewRun),
                ok(NewRun),
                ok(NewRun),
                ok(NewRun),
                ok(NewRun),
                no(404),
            ],
        },
        Request {
            method: "POST",
            route: "/api/workflow/{id}/rerun",
            path: |id, _| format!("/api/workflow/{id}/rerun"),
            body: |_, _| json!({"reRunFromTaskRef": "gate"}),
            answers: [
                ok(NewRun),
                ok(NewRun),
                ok(NewRun),
                ok(NewRun),
                ok(NewRun),
                no(404),
            ],
        },
        Request {
            method: "POST",
            route: "/api/workflow/{id}/retry",
            path: |id, _| format!("/api/workflow/{id}/retry"),
            body: empty,
            answers: [no(409), no(409), no(409), ok(NewRun), ok(NewRun), no(404)],
        },
        Request {
            method: "POST",
            route: "/api/workflow/{id}/restart",
            path: |id, _| format!("/api/workflow/{id}/restart"),
            body: empty,
            answers: [
                no(409),
                no(409),
                ok(NewRun),
                ok(NewRun),
                ok(NewRun),
                no(404),
            ],
        },
        Request {
            method: "POST",
            route: "/api/workflow/{id}/variables",
            path: |id, _| format!("/api/workflow/{id}/variables"),
            body: |_, _| json!({"v": 1}),
            answers: [
                ok(Variable),
                ok(Variable),
                no(409),
                no(409),
                no(409),
                no(404),
            ],
        },
        Request {
            method: "PUT",
            route: "/api/workflow/decide/{id}",
            path: |id, _| format!("/api/workflow/decide/{id}"),
            body: empty,
            answers: [ok(Seen), ok(Seen), ok(Seen), ok(Seen), ok(Seen), no(404)],
        },
        Request {
            method: "DELETE",
            route: "/api/workflow/{id}/remove",
            path: |id, _| format!("/api/workflow/{id}/remove"),
            body: empty,
            answers: [
                no(409),
                no(409),
                ok(Removed),
                ok(Removed),
                ok(Removed),
                no(404),
            ],
        },
        Request {
            method: "DELETE",
            route: "/api/workflow/{id}/terminate-remove",
            path: |id, _| format!("/api/workflow/{id}/terminate-remove"),
            body: empty,
            answers: [
                ok(Removed),
                ok(Removed),
                ok(Removed),
                ok(Removed),
                ok(Removed),
                no(404),
            ],
        },
        Request {
            method: "POST",
            route: "/api/workflow/{id}/signal/{name}",
            path: |id, _| format!("/api/workflow/{id}/signal/gate"),
            body: |_, _| json!({"by": "signal"}),
            answers: [
                ok(gate_done),
                ok(gate_done),
                no(409),
                no(409),
                no(409),
                no(404),
            ],
        },
        Request {
            method: "POST",
            route: "/api/tasks/{workflow_id}/{task_ref}/{status}",
            path: |id, _| format!("/api/tasks/{id}/gate/COMPLETED"),
            body: |_, _| json!({"by": "ref"}),
            answers: [
                ok(gate_done),
                ok(gate_done),
                no(409),
                no(409),
                no(409),
                no(404),
            ],
        },
        Request {
            method: "POST",
            route: "/api/tasks/{workflow_id}/{task_ref}/{status}/sync",
            path: |id, _| format!("/api/tasks/{id}/work/COMPLETED/sync"),
            body: |_, _| json!({"by": "ref"}),
            answers: [
                ok(work_done),
                ok(work_done),
                no(409),
                no(409),
                no(409),
                no(404),
            ],
        },
        Request {
            method: "POST",
            route: "/api/tasks/{workflow_id}/{task_ref}/signal",
            path: |id, _| format!("/api/tasks/{id}/COMPLETED/signal"),
            body: |_, _| json!({"by": "blocking signal"}),
            answers: [
                ok(gate_done),
                ok(gate_done),
                no(404),
                no(404),
                no(404),
                no(404),
            ],
        },
        Request {
            method: "POST",
            route: "/api/tasks/{workflow_id}/{task_ref}/signal/sync",
            path: |id, _| format!("/api/tasks/{id}/COMPLETED/signal/sync"),
            body: |_, _| json!({"by": "blocking signal"}),
            answers: [
                ok(gate_done),
                ok(gate_done),
                no(404),
                no(404),
                no(404),
                no(404),
            ],
        },
        Request {
            method: "POST",
            route: "/api/tasks",
            path: |_, _| "/api/tasks".into(),
            body: |_, work| json!({"taskId": work, "status": "COMPLETED", "outputData": {"by": "id"}}),
            answers: [
                ok(work_done),
                ok(work_done),
                no(409),
                no(409),
                no(409),
                no(404),
            ],
        },
        Request {
            method: "POST",
            route: "/api/tasks/update-v2",
            path: |_, _| "/api/tasks/update-v2".into(),
            body: |_, work| json!({"taskId": work, "status": "COMPLETED", "outputData": {"by": "id"}}),
            answers: [
                ok(work_done),
                ok(work_done),
                no(409),
                no(409),
                no(409),
                no(404),
            ],
        },
        Request {
            method: "POST",
            route: "/api/tasks/{task_id}/heartbeat",
            path: |_, work| format!("/api/tasks/{work}/heartbeat"),
            body: |_, _| json!({}),
            answers: [ok(Seen), ok(Seen), ok(Seen), ok(Seen), ok(Seen), no(404)],
        },
        Request {
            method: "POST",
            route: "/api/tasks/heartbeat",
            path: |_, _| "/api/tasks/heartbeat".into(),
            body: |_, work| json!({"taskIds": [work]}),
            answers: [ok(Seen), ok(Seen), ok(Seen), ok(Seen), ok(Seen), ok(Seen)],
        },
        Request {
            method: "POST",
            route: "/api/tasks/{task_id}/log",
            path: |_, work| format!("/api/tasks/{work}/log"),
            body: |_, _| json!("a line"),
            answers: [ok(Seen), ok(Seen), ok(Seen), ok(Seen), ok(Seen), no(404)],
        },
        Request {
            method: "PUT",
            route: "/api/workflow/bulk/pause",
            path: |_, _| "/api/workflow/bulk/pause".into(),
            body: |id, _| json!([id]),
            answers: [ok(paused), no(409), no(409), no(409), no(409), no(404)],
        },
        Request {
            method: "PUT",
            route: "/api/workflow/bulk/resume",
            path: |_, _| "/api/workflow/bulk/resume".into(),
            body: |id, _| json!([id]),
            answers: [no(409), ok(running), no(409), no(409), no(409), no(404)],
        },
        Request {
            method: "POST",
            route: "/api/workflow/bulk/restart",
            path: |_, _| "/api/workflow/bulk/restart".into(),
            body: |id, _| json!([id]),
            answers: [
                no(409),
                no(409),
                ok(NewRun),
                ok(NewRun),
                ok(NewRun),
                no(404),
            ],
        },
        Request {
            method: "POST",
            route: "/api/workflow/bulk/retry",
            path: |_, _| "/api/workflow/bulk/retry".into(),
            body: |id, _| json!([id]),
            answers: [no(409), no(409), no(409), ok(NewRun), ok(NewRun), no(404)],
        },
        Request {
            method: "POST",
            route: "/api/workflow/bulk/terminate",
            path: |_, _| "/api/workflow/bulk/terminate".into(),
            body: |id, _| json!([id]),
            answers: [
                ok(terminated),
                ok(terminated),
                no(409),
                no(409),
                no(409),
                no(404),
            ],
        },
        Request {
            method: "DELETE",
            route: "/api/workflow/bulk/remove",
            path: |_, _| "/api/workflow/bulk/remove".into(),
            body: |id, _| json!([id]),
            answers: [
                no(409),
                no(409),
                ok(Removed),
                ok(Removed),
                ok(Removed),
                no(404),
            ],
        },
        Request {
            method: "DELETE",
            route: "/api/workflow/bulk/terminate-remove",
            path: |_, _| "/api/workflow/bulk/terminate-remove".into(),
            body: |id, _| json!([id]),
            answers: [
                ok(Removed),
                ok(Removed),
                ok(Removed),
                ok(Removed),
                ok(Removed),
                no(404),
            ],
        },
    ]
}

/// The routes of the gateway's route table that change runs: every operator operation,
/// task results, heartbeats and logs, signals and updates by ref.
fn routes_that_change_runs() -> BTreeSet<(String, String)> {
    ROUTES
        .iter()
        .filter(|r| r.method != "GET")
        .filter(|r| {
            r.need == Need::Any(&[weft_gateway::auth::scopes::Scope::Operate])
                || r.need == Need::Any(&[weft_gateway::auth::scopes::Scope::Work])
                || r.path.contains("{workflow_id}")
                || r.path.contains("/signal/")
        })
        .map(|r| (r.method.to_owned(), r.path.to_owned()))
        .collect()
}

/// The answer in a bulk response for `id`: 200 when applied, else the status its
/// message names (409 for a state, 404 for an unknown workflow).
fn bulk_status(answer: &Value, id: &str) -> u16 {
    if answer["bulkSuccessfulResults"]
        .as_array()
        .is_some_and(|ok| ok.iter().any(|x| x == id))
    {
        return 200;
    }
    match answer["bulkErrorResults"][id].as_str() {
        Some(why) if why.contains("not found") => 404,
        Some(_) => 409,
        None => 0,
    }
}

/// Puts a new run of `routes` in `state`: its workflow id and its `work` task's id.
async fn run_in(client: &Client, state: State) -> (String, String) {
    if state == State::Unknown {
        return ("no-such-workflow".into(), weft::ids::new_id().to_string());
    }
    let id = client.start("routes", json!({})).await.unwrap();
    let wf = pending(client, &id).await;
    let work = task_id_of(&wf, "work");
    let send = |method: Method, path: String| async move {
        let r = client.raw(method, &path, None).await.unwrap();
        assert!(r.status < 300, "{path}: {} {}", r.status, r.text);
    };
    match state {
        State::Running | State::Unknown => {}
        State::Paused => send(Method::PUT, format!("/api/workflow/{id}/pause")).await,
        State::Completed => {
            send(Method::POST, format!("/api/tasks/{id}/gate/COMPLETED")).await;
            send(Method::POST, format!("/api/tasks/{id}/work/COMPLETED")).await;
        }
        State::Failed => {
            send(
                Method::POST,
                format!("/api/tasks/{id}/work/FAILED_WITH_TERMINAL_ERROR"),
            )
            .await
        }
        State::Terminated => send(Method::DELETE, format!("/api/workflow/{id}")).await,
    }
    let wanted = state.name();
    client
        .wait_for_status(&id, &[wanted], crate::RUN_TIMEOUT)
        .await
        .unwrap();
    (id, work)
}

async fn pending(client: &Client, id: &str) -> Value {
    for _ in 0..3_000 {
        let wf = client.get(id).await.unwrap();
        let all = ["gate", "work"].iter().all(|r| {
            statuses(&wf)
                .iter()
                .any(|(x, s)| x == r && matches!(s.as_str(), "SCHEDULED" | "IN_PROGRESS"))
        });
        if all {
            return wf;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("the tasks of {id} never got pending");
}

fn task_id_of(wf: &Value, task_ref: &str) -> String {
    wf["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|t| t["referenceTaskName"] == task_ref)
        .and_then(|t| t["taskId"].as_str())
        .unwrap()
        .to_owned()
}

/// What a reader sees of a run: status, run id, each task's status, variables.
fn view(wf: &Option<Value>) -> Value {
    match wf {
        None => Value::Null,
        Some(wf) => json!({
            "status": wf["status"], "runId": wf["runId"],
            "tasks": statuses(wf), "variables": wf["variables"],
        }),
    }
}

/// Checks `effect` on the workflow as read after the request; `None` when it holds.
fn effect_missing(effect: Effect, before: &Option<Value>, after: &Option<Value>) -> Option<String> {
    let Some(wf) = after else {
        return (!matches!(effect, Removed | Seen)).then(|| "the workflow is gone".to_owned());
    };
    let holds = match effect {
        Effect::Status(status) => wf["status"] == status,
        Effect::Task(task_ref, status) => latest_status(wf, task_ref).as_deref() == Some(status),
        NewRun => before.as_ref().is_some_and(|b| b["runId"] != wf["runId"]),
        Removed => false,
        Variable => wf["variables"]["v"] == 1,
        Seen => true,
    };
    (!holds).then(|| format!("{effect:?} does not hold: {}", view(after)))
}

async fn every_route_that_changes_a_run_applies_or_refuses_in_every_state(suite: Suite) {
    let client = suite.client();
    client.register(&definition()).await.unwrap();
    let table = table();

    // The table covers every route of the route table that changes runs, and no other.
    let covered: BTreeSet<(String, String)> = table
        .iter()
        .map(|r| (r.method.to_owned(), r.route.to_owned()))
        .collect();
    assert_eq!(
        covered,
        routes_that_change_runs(),
        "a route that changes runs needs its rows in this table"
    );

    let mut wrong = String::new();
    let mut found = Vec::new();
    for request in &table {
        for (state, (want, effect)) in STATES.iter().zip(request.answers) {
            let (id, work) = run_in(client, *state).await;
            let before = client.try_get(&id).await.unwrap();
            let body = (request.body)(&id, &work);
            let body =
                (!body.is_null()).then(|| ("application/json", body.to_string().into_bytes()));
            let method = Method::from_bytes(request.method.as_bytes()).unwrap();
            let path = (request.path)(&id, &work);
            let r = client.raw(method, &path, body).await.unwrap();
            let got = if request.route.starts_with("/api/workflow/bulk/") {
                let answer: Value = serde_json::from_str(&r.text).unwrap_or(Value::Null);
                bulk_status(&answer, &id)
            } else {
                r.status
            };
            found.push((request.method, request.route, state.name(), got));
            // The decider applies an accepted change before its verdict: read it back.
            let after = client.try_get(&id).await.unwrap();
            let cell = format!("{} {} in {}", request.method, request.route, state.name());
            let accepted = (200..300).contains(&got);
            if accepted != (want == 200) || (!accepted && got != want) {
                let _ = writeln!(wrong, "{cell}: answered {got} (want {want}): {}", r.text);
                continue;
            }
            match effect {
                Some(effect) => {
                    if let Some(why) = effect_missing(effect, &before, &after) {
                        let _ = writeln!(wrong, "{cell}: {why}");
                    }
                }
                None if view(&before) != view(&after) => {
                    let _ = writeln!(
                        wrong,
                        "{cell}: refused ({got}) yet changed: {} -> {}",
                        view(&before),
                        view(&after)
                    );
                }
                None => {}
            }
        }
    }
    assert!(wrong.is_empty(), "cells that do not hold:\n{wrong}");
    check_against_docs(&found);
}

/// docs/operations.md's table ("Every route in every state") shows each route's answer
/// in each state as this test found it; when it does not, the message is the table to
/// put there.
fn check_against_docs(found: &[(&str, &str, &str, u16)]) {
    let docs = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/operations.md"
    ))
    .expect("docs/operations.md");
    let mut table = String::from(
        "| route | RUNNING | PAUSED | COMPLETED | FAILED | TERMINATED | unknown |\n\
         |---|---|---|---|---|---|---|\n",
    );
    for row in found.chunks(STATES.len()) {
        let (method, route) = (row[0].0, row[0].1);
        let cells: Vec<String> = row
            .iter()
            .map(|(_, _, _, status)| status.to_string())
            .collect();
        let _ = writeln!(table, "| `{method} {route}` | {} |", cells.join(" | "));
    }
    assert!(
        docs.contains(&table),
        "docs/operations.md's table of every route in every state is not what the routes \
         answer; the table as found:\n{table}"
    );
}
