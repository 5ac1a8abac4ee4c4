//! Control-flow constructs (SWITCH, FORK_JOIN/JOIN, SET_VARIABLE, TERMINATE, retries)
//! executed by the real decider, with the example worker running the activities.

use serde_json::{json, Value};
use weft_e2e::{Suite, TestEnv};

use crate::RUN_TIMEOUT;

fn branches() -> Value {
    json!({"name": "branches", "version": 1, "tasks": [
        {"name": "sv", "taskReferenceName": "sv", "type": "SET_VARIABLE",
         "inputParameters": {"who": "${workflow.input.first}"}},
        {"name": "pick", "taskReferenceName": "pick", "type": "SWITCH",
         "evaluatorType": "value-param", "expression": "loud",
         "inputParameters": {"loud": "${workflow.input.loud}"},
         "decisionCases": {"yes": [
             {"name": "shout", "taskReferenceName": "s1", "type": "SIMPLE",
              "inputParameters": {"text": "${workflow.variables.who}"}}]},
         "defaultCase": [
             {"name": "make_name", "taskReferenceName": "m1", "type": "SIMPLE",
              "inputParameters": {"first": "${workflow.variables.who}"}}]},
        {"name": "f", "taskReferenceName": "f", "type": "FORK_JOIN", "forkTasks": [
            [{"name": "make_name", "taskReferenceName": "fa", "type": "SIMPLE",
              "inputParameters": {"first": "${workflow.input.first}"}},
             {"name": "shout", "taskReferenceName": "fa2", "type": "SIMPLE",
              "inputParameters": {"text": "${fa.output.name}"}}],
            [{"name": "count", "taskReferenceName": "fb", "type": "SIMPLE",
              "inputParameters": {"text": "x", "n": 2}}]]},
        {"name": "j", "taskReferenceName": "j", "type": "JOIN", "joinOn": ["fa2", "fb"]}],
     "outputParameters": {"picked": "${pick.output.selectedCase}", "joined": "${j.output}",
                          "loud": "${s1.output.text}", "plain": "${m1.output.name}"}})
}

fn statuses(wf: &Value) -> Vec<(String, String)> {
    wf["tasks"]
        .as_array()
        .map(|tasks| {
            tasks
                .iter()
                .map(|t| {
                    (
                        t["referenceTaskName"]
                            .as_str()
                            .unwrap_or_default()
                            .to_owned(),
                        t["status"].as_str().unwrap_or_default().to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switch_fork_join_and_variables_run_over_the_real_services() {
    let suite = Suite::start(TestEnv::new().await.unwrap()).await.unwrap();
    let client = suite.client();
    client.register(&branches()).await.unwrap();

    let loud = client
        .start("branches", json!({"first": "Ada", "loud": "yes"}))
        .await
        .unwrap();
    let quiet = client
        .start("branches", json!({"first": "Bo", "loud": "no"}))
        .await
        .unwrap();

    let wf = client
        .wait_for_status(&loud, &["COMPLETED"], RUN_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", suite.describe()));
    assert_eq!(wf["output"]["picked"], json!("yes"));
    assert_eq!(wf["output"]["loud"], json!("ADA"));
    assert_eq!(
        wf["output"]["plain"],
        Value::Null,
        "the default case did not run"
    );
    assert_eq!(
        wf["output"]["joined"],
        json!({"fa2": {"text": "ADA WEFT"}, "fb": {"result": "x x2"}})
    );
    assert_eq!(wf["variables"], json!({"who": "Ada"}));
    let tasks = statuses(&wf);
    assert!(tasks.iter().all(|(_, s)| s == "COMPLETED"), "{tasks:?}");
    let refs: Vec<&str> = tasks.iter().map(|(r, _)| r.as_str()).collect();
    assert!(!refs.contains(&"m1"), "{refs:?}");
    assert_eq!(refs.last(), Some(&"j"), "the join comes last: {refs:?}");

    let wf = client
        .wait_for_status(&quiet, &["COMPLETED"], RUN_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", suite.describe()));
    assert_eq!(wf["output"]["picked"], json!("no"));
    assert_eq!(wf["output"]["plain"], json!("Bo Weft"));
    assert_eq!(wf["output"]["loud"], Value::Null);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminate_task_and_exhausted_retries_end_the_run_as_declared() {
    let suite = Suite::start(TestEnv::new().await.unwrap()).await.unwrap();
    let client = suite.client();
    client
        .register(&json!({"name": "stop_early", "version": 1, "tasks": [
            {"name": "make_name", "taskReferenceName": "n", "type": "SIMPLE",
             "inputParameters": {"first": "${workflow.input.first}"}},
            {"name": "t", "taskReferenceName": "t", "type": "TERMINATE",
             "inputParameters": {"terminationStatus": "TERMINATED",
                                 "terminationReason": "seen ${n.output.name}",
                                 "workflowOutput": {"name": "${n.output.name}"}}},
            {"name": "shout", "taskReferenceName": "never", "type": "SIMPLE"}]}))
        .await
        .unwrap();
    // The example worker reports `count` without `n` as a terminal failure, so the
    // run fails after the first attempt whatever retryCount allows.
    client
        .register(&json!({"name": "doomed", "version": 1, "tasks": [
            {"name": "count", "taskReferenceName": "c", "type": "SIMPLE", "retryCount": 2,
             "inputParameters": {"text": "x"}}]}))
        .await
        .unwrap();

    let stopped = client
        .start("stop_early", json!({"first": "Ada"}))
        .await
        .unwrap();
    let doomed = client.start("doomed", json!({})).await.unwrap();

    let wf = client
        .wait_for_status(&stopped, &["TERMINATED"], RUN_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", suite.describe()));
    assert_eq!(wf["subStatus"], json!("TERMINATED"));
    assert_eq!(wf["reasonForIncompletion"], json!("seen Ada Weft"));
    assert_eq!(wf["output"], json!({"name": "Ada Weft"}));
    let refs: Vec<String> = statuses(&wf).into_iter().map(|(r, _)| r).collect();
    assert_eq!(refs, vec!["n", "t"]);

    let wf = client
        .wait_for_status(&doomed, &["FAILED"], RUN_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", suite.describe()));
    assert_eq!(wf["failedReferenceTaskNames"], json!(["c"]));
    let tasks = statuses(&wf);
    assert_eq!(
        tasks,
        vec![("c".to_owned(), "FAILED_WITH_TERMINAL_ERROR".to_owned())]
    );
}

/// A tiny HTTP service on loopback for the HTTP task to call: `POST /orders/{id}`
/// echoes the JSON body with the id; `GET /missing` answers 404.
async fn order_service() -> std::net::SocketAddr {
    use axum::extract::Path;
    use axum::routing::post;
    use axum::Json;
    let app = axum::Router::new().route(
        "/orders/{id}",
        post(
            |Path(id): Path<String>, Json(body): Json<Value>| async move {
                Json(json!({"id": id, "received": body}))
            },
        ),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_task_calls_a_service_and_feeds_the_next_task() {
    let addr = order_service().await;
    let suite = Suite::start(TestEnv::new().await.unwrap()).await.unwrap();
    let client = suite.client();
    client
        .register(&json!({"name": "call_out", "version": 1, "tasks": [
            {"name": "place_order", "taskReferenceName": "order", "type": "HTTP",
             "inputParameters": {"http_request": {
                 "uri": format!("http://{addr}/orders/${{workflow.input.id}}"),
                 "method": "POST", "body": {"qty": "${workflow.input.qty}"}}}},
            {"name": "shout", "taskReferenceName": "s", "type": "SIMPLE",
             "inputParameters": {"text": "${order.output.response.body.id}"}},
            {"name": "missing", "taskReferenceName": "gone", "type": "HTTP", "optional": true,
             "inputParameters": {"http_request": {"uri": format!("http://{addr}/missing")}}}],
         "outputParameters": {"status": "${order.output.response.statusCode}",
                              "echo": "${order.output.response.body.received}",
                              "shouted": "${s.output.text}"}}))
        .await
        .unwrap();
    let id = client
        .start("call_out", json!({"id": "a-7", "qty": 3}))
        .await
        .unwrap();
    let wf = client
        .wait_for_status(&id, &["COMPLETED"], RUN_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", suite.describe()));
    assert_eq!(wf["output"]["status"], json!(200));
    assert_eq!(wf["output"]["echo"], json!({"qty": 3}));
    assert_eq!(wf["output"]["shouted"], json!("A-7"));
    let tasks = statuses(&wf);
    assert_eq!(
        tasks.last(),
        Some(&("gone".to_owned(), "COMPLETED_WITH_ERRORS".to_owned())),
        "a 404 fails the optional HTTP task, and the run goes on: {tasks:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn do_while_loops_and_a_javascript_switch_picks_the_branch() {
    let suite = Suite::start(TestEnv::new().await.unwrap()).await.unwrap();
    let client = suite.client();
    client
        .register(&json!({"name": "loops", "version": 1, "tasks": [
            {"name": "loop", "taskReferenceName": "loop", "type": "DO_WHILE",
             "loopCondition": "$.loop['iteration'] < $.times",
             "inputParameters": {"times": "${workflow.input.times}"},
             "loopOver": [
                {"name": "count", "taskReferenceName": "c", "type": "SIMPLE",
                 "inputParameters": {"text": "${workflow.input.text}", "n": 2}}]},
            {"name": "pick", "taskReferenceName": "pick", "type": "SWITCH",
             "evaluatorType": "javascript", "expression": "$.iters >= 3 ? 'many' : 'few'",
             "inputParameters": {"iters": "${loop.output.iteration}"},
             "decisionCases": {"many": [
                {"name": "shout", "taskReferenceName": "s", "type": "SIMPLE",
                 "inputParameters": {"text": "${c.output.result}"}}]}}],
         "outputParameters": {"iterations": "${loop.output.iteration}",
                              "picked": "${pick.output.selectedCase}",
                              "shouted": "${s.output.text}"}}))
        .await
        .unwrap();
    let id = client
        .start("loops", json!({"times": 3, "text": "hi"}))
        .await
        .unwrap();
    let wf = client
        .wait_for_status(&id, &["COMPLETED"], RUN_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", suite.describe()));
    assert_eq!(
        wf["output"],
        json!({"iterations": 3, "picked": "many", "shouted": "HI X2"})
    );
    let iterations: Vec<i64> = wf["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["referenceTaskName"] == "c")
        .map(|t| t["iteration"].as_i64().unwrap_or_default())
        .collect();
    assert_eq!(iterations, vec![1, 2, 3], "one task record per iteration");
}

async fn post_json(client: &weft_e2e::Client, path: &str, body: Value) -> (u16, String) {
    let r = client
        .raw(
            reqwest::Method::POST,
            path,
            Some(("application/json", body.to_string().into_bytes())),
        )
        .await
        .unwrap();
    (r.status, r.text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_tasks_complete_on_signals_sent_before_or_after_they_are_reached() {
    let suite = Suite::start(TestEnv::new().await.unwrap()).await.unwrap();
    let client = suite.client();
    client
        .register(&json!({"name": "approve", "version": 1, "tasks": [
            {"name": "make_name", "taskReferenceName": "n", "type": "SIMPLE",
             "inputParameters": {"first": "${workflow.input.first}"}},
            {"name": "approval", "taskReferenceName": "approval", "type": "WAIT"},
            {"name": "shout", "taskReferenceName": "s", "type": "SIMPLE",
             "inputParameters": {"text": "${approval.output.note}"}}],
         "outputParameters": {"approved": "${s.output.text}"}}))
        .await
        .unwrap();

    // Signalled after the WAIT is reached.
    let late = client
        .start("approve", json!({"first": "Ada"}))
        .await
        .unwrap();
    let mut reached = false;
    for _ in 0..2_000 {
        let wf = client.get(&late).await.unwrap();
        if statuses(&wf)
            .iter()
            .any(|(r, s)| r == "approval" && s == "IN_PROGRESS")
        {
            assert_eq!(
                wf["subStatus"],
                json!("RUNNING"),
                "waiting for a signal, not a worker"
            );
            reached = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(reached, "the WAIT task was never reached");
    let (status, body) = post_json(
        client,
        &format!("/api/workflow/{late}/signal/approval"),
        json!({"note": "ok by ops"}),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    let wf = client
        .wait_for_status(&late, &["COMPLETED"], RUN_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", suite.describe()));
    assert_eq!(wf["output"], json!({"approved": "OK BY OPS"}));

    // Signalled at once, through Conductor's task-by-ref endpoint: kept until reached.
    let early = client
        .start("approve", json!({"first": "Bo"}))
        .await
        .unwrap();
    let (status, body) = post_json(
        client,
        &format!("/api/tasks/{early}/approval/COMPLETED"),
        json!({"note": "pre-approved"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let wf = client
        .wait_for_status(&early, &["COMPLETED"], RUN_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", suite.describe()));
    assert_eq!(wf["output"], json!({"approved": "PRE-APPROVED"}));

    // Bad requests: unknown workflow, finished run, malformed payload.
    let (status, body) = post_json(client, "/api/workflow/nope/signal/approval", json!({})).await;
    assert_eq!(status, 404, "{body}");
    let (status, body) = post_json(
        client,
        &format!("/api/workflow/{early}/signal/approval"),
        json!({}),
    )
    .await;
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("COMPLETED"), "{body}");
    let r = client
        .raw(
            reqwest::Method::POST,
            &format!("/api/workflow/{late}/signal/approval"),
            Some(("application/json", b"{not json".to_vec())),
        )
        .await
        .unwrap();
    assert_eq!(r.status, 400, "{}", r.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_with_a_duration_is_woken_by_the_history_services_timer() {
    let suite = Suite::start(TestEnv::new().await.unwrap()).await.unwrap();
    let client = suite.client();
    client
        .register(&json!({"name": "nap", "version": 1, "tasks": [
            {"name": "nap", "taskReferenceName": "nap", "type": "WAIT",
             "inputParameters": {"duration": "1s"}},
            {"name": "make_name", "taskReferenceName": "n", "type": "SIMPLE",
             "inputParameters": {"first": "Nap"}}]}))
        .await
        .unwrap();
    let id = client.start("nap", json!({})).await.unwrap();
    let wf = client
        .wait_for_status(&id, &["COMPLETED"], RUN_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", suite.describe()));
    let nap = wf["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["referenceTaskName"] == "nap")
        .cloned()
        .unwrap();
    assert_eq!(nap["status"], json!("COMPLETED"));
    let slept_ms = nap["endTime"].as_i64().unwrap() - nap["scheduledTime"].as_i64().unwrap();
    assert!(
        slept_ms >= 1_000,
        "the WAIT ended before its timer was due: {slept_ms} ms"
    );
    let events: Vec<String> = client
        .history(&id)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect();
    assert!(
        events.contains(&"TimerStarted".to_owned()) && events.contains(&"TimerFired".to_owned()),
        "{events:?}"
    );
}

/// A loopback service whose `/flaky` answers 500 twice, then 200 `{"calls": n}`.
async fn flaky_service() -> std::net::SocketAddr {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;
    let calls = Arc::new(AtomicU32::new(0));
    let app = axum::Router::new().route(
        "/flaky",
        axum::routing::get(move || {
            let calls = calls.clone();
            async move {
                let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
                if n <= 2 {
                    (
                        axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                        axum::Json(json!({"calls": n})),
                    )
                } else {
                    (axum::http::StatusCode::OK, axum::Json(json!({"calls": n})))
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_back_off_on_timers_and_timeouts_end_runs() {
    let addr = flaky_service().await;
    let suite = Suite::start(TestEnv::new().await.unwrap()).await.unwrap();
    let client = suite.client();
    client
        .register(&json!({"name": "persistent", "version": 1, "tasks": [
            {"name": "call", "taskReferenceName": "call", "type": "HTTP",
             "taskDefinition": {"retryCount": 2, "retryDelaySeconds": 1, "retryLogic": "FIXED"},
             "inputParameters": {"http_request": {"uri": format!("http://{addr}/flaky")}}}],
         "outputParameters": {"calls": "${call.output.response.body.calls}"}}))
        .await
        .unwrap();
    client
        .register(
            &json!({"name": "impatient", "version": 1, "timeoutSeconds": 1, "tasks": [
            {"name": "approval", "taskReferenceName": "approval", "type": "WAIT"}]}),
        )
        .await
        .unwrap();

    let persistent = client.start("persistent", json!({})).await.unwrap();
    let impatient = client.start("impatient", json!({})).await.unwrap();

    let wf = client
        .wait_for_status(&persistent, &["COMPLETED"], RUN_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", suite.describe()));
    assert_eq!(wf["output"], json!({"calls": 3}));
    let attempts: Vec<(String, i64)> = wf["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["status"].as_str().unwrap_or_default().to_owned(),
                t["retryCount"].as_i64().unwrap_or(-1),
            )
        })
        .collect();
    assert_eq!(
        attempts,
        vec![
            ("FAILED".to_owned(), 0),
            ("FAILED".to_owned(), 1),
            ("COMPLETED".to_owned(), 2)
        ]
    );
    let tasks = wf["tasks"].as_array().unwrap();
    for pair in tasks.windows(2) {
        let gap = pair[1]["scheduledTime"].as_i64().unwrap() - pair[0]["endTime"].as_i64().unwrap();
        assert!(
            gap >= 1_000,
            "the retry came before its 1 s back-off: {gap} ms"
        );
    }

    let wf = client
        .wait_for_status(&impatient, &["TIMED_OUT"], RUN_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", suite.describe()));
    assert_eq!(wf["subStatus"], json!("TIMED_OUT"));
    assert!(
        wf["reasonForIncompletion"]
            .as_str()
            .unwrap_or_default()
            .contains("timeoutSeconds"),
        "{wf}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamic_forks_run_what_the_input_lists() {
    let suite = Suite::start(TestEnv::new().await.unwrap()).await.unwrap();
    let client = suite.client();
    client
        .register(&json!({"name": "fan_out", "version": 1, "tasks": [
            {"name": "names", "taskReferenceName": "names", "type": "FORK_JOIN_DYNAMIC",
             "inputParameters": {"forkTaskName": "make_name",
                                 "forkTaskInputs": "${workflow.input.people}"}},
            {"name": "join_names", "taskReferenceName": "join_names", "type": "JOIN"},
            {"name": "mixed", "taskReferenceName": "mixed", "type": "FORK_JOIN_DYNAMIC",
             "dynamicForkTasksParam": "tasks", "dynamicForkTasksInputParamName": "inputs",
             "inputParameters": {"tasks": "${workflow.input.tasks}",
                                 "inputs": "${workflow.input.inputs}"}},
            {"name": "join_mixed", "taskReferenceName": "join_mixed", "type": "JOIN"}],
         "outputParameters": {"names": "${join_names.output}", "mixed": "${join_mixed.output}"}}))
        .await
        .unwrap();
    let id = client
        .start(
            "fan_out",
            json!({
                "people": [{"first": "Ada"}, {"first": "Bo"}],
                "tasks": [{"name": "shout", "taskReferenceName": "loud", "type": "SIMPLE"},
                          {"name": "count", "taskReferenceName": "many", "type": "SIMPLE"}],
                "inputs": {"loud": {"text": "hey"}, "many": {"text": "hey", "n": 2}}
            }),
        )
        .await
        .unwrap();
    let wf = client
        .wait_for_status(&id, &["COMPLETED"], RUN_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", suite.describe()));
    assert_eq!(
        wf["output"],
        json!({
            "names": {"make_name_0": {"name": "Ada Weft"}, "make_name_1": {"name": "Bo Weft"}},
            "mixed": {"loud": {"text": "HEY"}, "many": {"result": "hey x2"}}
        })
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sub_workflows_run_as_child_runs_and_report_back() {
    let suite = Suite::start(TestEnv::new().await.unwrap()).await.unwrap();
    let client = suite.client();
    let mut child = weft_e2e::greet::definition();
    child["name"] = json!("greet_child");
    let mut broken = child.clone();
    broken["name"] = json!("broken_child");
    broken["tasks"][2]["inputParameters"] = json!({"text": "${s.output.text}"}); // no `n`
    client
        .register(&json!({"name": "family", "version": 1, "tasks": [
            {"name": "kid", "taskReferenceName": "kid", "type": "SUB_WORKFLOW",
             "inputParameters": {"first": "${workflow.input.first}", "n": 2},
             "subWorkflowParam": {"name": "greet_child", "workflowDefinition": child}},
            {"name": "shout", "taskReferenceName": "s2", "type": "SIMPLE",
             "inputParameters": {"text": "${kid.output.result}"}}],
         "outputParameters": {"child": "${kid.output.subWorkflowId}", "loud": "${s2.output.text}"}}))
        .await
        .unwrap();
    client
        .register(&json!({"name": "broken_family", "version": 1, "tasks": [
            {"name": "kid", "taskReferenceName": "kid", "type": "SUB_WORKFLOW",
             "inputParameters": {"first": "x"},
             "subWorkflowParam": {"name": "broken_child", "workflowDefinition": broken}}]}))
        .await
        .unwrap();

    let id = client
        .start("family", json!({"first": "Ada"}))
        .await
        .unwrap();
    let broken_id = client.start("broken_family", json!({})).await.unwrap();

    let wf = client
        .wait_for_status(&id, &["COMPLETED"], RUN_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", suite.describe()));
    assert_eq!(wf["output"]["loud"], json!("ADA WEFT X2"));
    let child_id = wf["output"]["child"].as_str().unwrap().to_owned();
    let child = client.get(&child_id).await.unwrap();
    assert_eq!(child["status"], json!("COMPLETED"));
    assert_eq!(child["parentWorkflowId"], json!(id));
    assert_eq!(
        child["output"],
        json!({"result": "ADA WEFT x2", "name": "Ada Weft"})
    );

    let wf = client
        .wait_for_status(&broken_id, &["FAILED"], RUN_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", suite.describe()));
    let reason = wf["reasonForIncompletion"].as_str().unwrap_or_default();
    assert!(
        reason.contains("child workflow") && reason.contains("FAILED"),
        "{reason}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_run_starts_its_failure_workflow() {
    let suite = Suite::start(TestEnv::new().await.unwrap()).await.unwrap();
    let client = suite.client();
    client
        .register(&json!({"name": "cleanup", "version": 1, "tasks": [
            {"name": "make_name", "taskReferenceName": "n", "type": "SIMPLE",
             "inputParameters": {"first": "${workflow.input.failureStatus}"}}],
         "outputParameters": {"seen": "${n.output.name}", "failed": "${workflow.input.workflowId}",
                              "order": "${workflow.input.order}"}}))
        .await
        .unwrap();
    client
        .register(
            &json!({"name": "fragile", "version": 1, "failureWorkflow": "cleanup",
         "tasks": [{"name": "count", "taskReferenceName": "c", "type": "SIMPLE",
                    "inputParameters": {"text": "x"}}]}),
        )
        .await
        .unwrap();
    let id = client.start("fragile", json!({"order": 42})).await.unwrap();
    client
        .wait_for_status(&id, &["FAILED"], RUN_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", suite.describe()));
    let mut cleanup_id = None;
    for _ in 0..2_000 {
        cleanup_id = sqlx::query_scalar::<_, String>(
            "SELECT workflow_id FROM runs WHERE parent_workflow_id = $1",
        )
        .bind(&id)
        .fetch_optional(suite.env().pool())
        .await
        .unwrap();
        if cleanup_id.is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let cleanup_id = cleanup_id.expect("the failure workflow was started");
    let wf = client
        .wait_for_status(&cleanup_id, &["COMPLETED"], RUN_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", suite.describe()));
    assert_eq!(
        wf["output"],
        json!({"seen": "FAILED Weft", "failed": id, "order": 42})
    );

    // A failure workflow that is not registered refuses the start, naming it.
    client
        .register(
            &json!({"name": "fragile2", "version": 1, "failureWorkflow": "nobody",
         "tasks": [{"name": "count", "taskReferenceName": "c", "type": "SIMPLE"}]}),
        )
        .await
        .unwrap();
    let r = client
        .raw(
            reqwest::Method::POST,
            "/api/workflow",
            Some(("application/json", br#"{"name": "fragile2"}"#.to_vec())),
        )
        .await
        .unwrap();
    assert_eq!(r.status, 404, "{}", r.text);
    assert!(r.text.contains("nobody"), "{}", r.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_of_children_succeeds_or_fails_by_its_success_percent() {
    let suite = Suite::start(TestEnv::new().await.unwrap()).await.unwrap();
    let client = suite.client();
    client
        .register(&weft_e2e::greet::definition())
        .await
        .unwrap();
    client
        .register(&json!({"name": "group", "version": 1, "tasks": [
            {"name": "kids", "taskReferenceName": "kids", "type": "FORK_JOIN_DYNAMIC",
             "inputParameters": {"forkTaskWorkflow": "greet",
                                 "forkTaskInputs": "${workflow.input.kids}"}},
            {"name": "all", "taskReferenceName": "all", "type": "JOIN", "successPercent": 70}],
         "outputParameters": {"succeeded": "${all.output.succeeded}",
                              "children": "${all.output.children}"}}))
        .await
        .unwrap();
    // A child without `n` fails (the example worker's `count` needs it).
    let kids = |failing: usize| -> Value {
        (0..10)
            .map(|i| {
                if i < failing {
                    json!({"first": format!("K{i}")})
                } else {
                    json!({"first": format!("K{i}"), "n": 1})
                }
            })
            .collect()
    };
    let two_fail = client
        .start("group", json!({"kids": kids(2)}))
        .await
        .unwrap();
    let four_fail = client
        .start("group", json!({"kids": kids(4)}))
        .await
        .unwrap();

    let wf = client
        .wait_for_status(&two_fail, &["COMPLETED"], RUN_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", suite.describe()));
    assert_eq!(wf["output"]["succeeded"], json!(8));
    let children = wf["output"]["children"].as_array().unwrap();
    assert_eq!(children.len(), 10);
    let failed: Vec<&Value> = children
        .iter()
        .filter(|c| c["status"] != "COMPLETED")
        .collect();
    assert_eq!(
        failed.len(),
        2,
        "failed children did not cancel their siblings"
    );
    for c in children {
        assert!(c["workflowId"].is_string(), "{c}");
    }
    let done = children
        .iter()
        .find(|c| c["status"] == "COMPLETED")
        .unwrap();
    assert_eq!(
        done["output"]["result"],
        json!(format!("{} WEFT x1", "K2".to_uppercase()))
    );

    let wf = client
        .wait_for_status(&four_fail, &["FAILED"], RUN_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", suite.describe()));
    let reason = wf["reasonForIncompletion"].as_str().unwrap_or_default();
    assert!(
        reason.contains("6 of 10") && reason.contains("successPercent"),
        "{reason}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loop_inside_a_fork_inside_a_decision_with_a_sub_workflow_runs_to_the_expected_output() {
    let suite = Suite::start(TestEnv::new().await.unwrap()).await.unwrap();
    let client = suite.client();
    client.register(&weft_e2e::greet::definition()).await.unwrap();
    client
        .register(&json!({"name": "nested", "version": 1, "tasks": [
            {"name": "route", "taskReferenceName": "route", "type": "DECISION",
             "caseValueParam": "mode", "inputParameters": {"mode": "${workflow.input.mode}"},
             "decisionCases": {"deep": [
                {"name": "f", "taskReferenceName": "f", "type": "FORK_JOIN", "forkTasks": [
                    [{"name": "loop", "taskReferenceName": "loop", "type": "DO_WHILE",
                      "loopCondition": "$.loop['iteration'] < 2",
                      "loopOver": [
                        {"name": "count", "taskReferenceName": "tick", "type": "SIMPLE",
                         "inputParameters": {"text": "t", "n": "${loop.output.iteration}"}}]}],
                    [{"name": "kid", "taskReferenceName": "kid", "type": "SUB_WORKFLOW",
                      "inputParameters": {"first": "${workflow.input.first}", "n": 2},
                      "subWorkflowParam": {"name": "greet"}}]]},
                {"name": "j", "taskReferenceName": "j", "type": "JOIN", "joinOn": ["loop", "kid"]}]},
             "defaultCase": []}],
         "outputParameters": {"ticks": "${loop.output.iteration}", "last": "${tick.output.result}",
                              "kid": "${kid.output.result}"}}))
        .await
        .unwrap();
    let id = client
        .start("nested", json!({"mode": "deep", "first": "Ada"}))
        .await
        .unwrap();
    let wf = client
        .wait_for_status(&id, &["COMPLETED"], RUN_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", suite.describe()));
    assert_eq!(
        wf["output"],
        json!({"ticks": 2, "last": "t x2", "kid": "ADA WEFT x2"})
    );
}
