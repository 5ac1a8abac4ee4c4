//! Conductor's own sample definitions (`shared/tests/conductor-samples`, copied from its
//! test harness) over REST, on both back-ends: every one registers, or is refused with a
//! 400 naming what Weft does not run; then each registered one is started with a worker
//! that completes every SIMPLE task, and where it ends is checked against what Conductor's
//! harness expects of it.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;
use weft::worker::Worker;
use weft_e2e::Suite;

use crate::RUN_TIMEOUT;

/// The samples, by file name.
fn samples() -> Vec<(String, Value)> {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/tests/conductor-samples");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (
                name,
                serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap(),
            )
        })
        .collect()
}

/// Every SIMPLE task name in a definition's tree.
fn simple_names(tasks: &Value, out: &mut BTreeSet<String>) {
    for t in tasks.as_array().into_iter().flatten() {
        if t["type"].as_str().unwrap_or("SIMPLE") == "SIMPLE" {
            if let Some(n) = t["name"].as_str() {
                out.insert(n.to_owned());
            }
        }
        if let Some(cases) = t["decisionCases"].as_object() {
            for c in cases.values() {
                simple_names(c, out);
            }
        }
        simple_names(&t["defaultCase"], out);
        simple_names(&t["loopOver"], out);
        for b in t["forkTasks"].as_array().into_iter().flatten() {
            simple_names(b, out);
        }
    }
}

/// Samples Weft refuses at registration, and the field the 400 names.
const REFUSED: [(&str, &str); 3] = [
    // A custom system task of Conductor's test harness.
    (
        "blocking_system_task_workflow_integration_test.json",
        "tasks[0].type",
    ),
    // The harness's custom USER_TASK.
    (
        "simple_workflow_with_async_complete_system_task_integration_test.json",
        "tasks[1].type",
    ),
    // An event handler, not a workflow definition.
    ("sqs-complete-wait-event-handler.json", "tasks"),
];

/// How a started sample ends with an empty input and a worker completing every SIMPLE
/// task: its status, and a piece of its `reasonForIncompletion` (or of the start's
/// refusal, for a start answered 404). RUNNING means it waits on a WAIT task.
const OUTCOMES: [(&str, &str, &str); 39] = [
    (
        "conditional_switch_task_workflow_integration_test.json",
        "COMPLETED",
        "",
    ),
    (
        "conditional_task_workflow_integration_test.json",
        "COMPLETED",
        "",
    ),
    (
        "decision_and_terminate_integration_test.json",
        "COMPLETED",
        "",
    ),
    // Weft's scripts are deterministic (docs/conductor.md): no Math.random().
    (
        "do_while_cleanup_demo.json",
        "FAILED",
        "Math.random() is not available",
    ),
    ("do_while_high_iteration_test.json", "COMPLETED", ""),
    ("do_while_iteration_fix_test.json", "COMPLETED", ""),
    ("do_while_set_variable_fix.json", "COMPLETED", ""),
    ("do_while_system_tasks.json", "COMPLETED", ""),
    // Needs its `list` input (the spec gives one): without it the script reads null.
    ("do_while_with_decision_task.json", "FAILED", "of null"),
    ("event_workflow_integration_test.json", "COMPLETED", ""),
    ("exclusive_join_integration_test.json", "COMPLETED", ""),
    (
        "failure_workflow_for_terminate_task_workflow.json",
        "COMPLETED",
        "",
    ),
    (
        "fork_join_permissive_integration_test.json",
        "COMPLETED",
        "",
    ),
    ("fork_join_sync_mode_integration_test.json", "COMPLETED", ""),
    (
        "fork_join_sync_optional_fail_integration_test.json",
        "COMPLETED",
        "",
    ),
    (
        "fork_join_with_no_task_retry_integration_test.json",
        "COMPLETED",
        "",
    ),
    // Its child definitions come from the harness's setup, not from the samples; a start
    // names the missing one (children are frozen at start).
    (
        "fork_join_with_permissive_sub_workflow_forks_integration_test.json",
        "404",
        "sub_workflow",
    ),
    // Calls a public HTTPS API: no TLS in the test build of the HTTP worker (and no
    // outside network here).
    (
        "json_jq_transform_result_integration_test.json",
        "FAILED",
        "https",
    ),
    ("kitchensink.json", "404", "sub_flow_1"),
    // The sub-workflow's name is an input expression, resolved when the task is
    // scheduled: this input has none, so the task fails when reached, saying so.
    (
        "nested_fork_join_swf.json",
        "FAILED",
        "subWorkflowParam.name names no workflow",
    ),
    (
        "rate_limited_simple_task_workflow_integration_test.json",
        "COMPLETED",
        "",
    ),
    (
        "sequential_json_jq_transform_integration_test.json",
        "COMPLETED",
        "",
    ),
    ("signal_sub_wf_child_integration_test.json", "RUNNING", ""),
    (
        "simple_decision_task_integration_test.json",
        "COMPLETED",
        "",
    ),
    (
        "simple_json_jq_transform_integration_test.json",
        "COMPLETED",
        "",
    ),
    (
        "simple_lambda_workflow_integration_test.json",
        "COMPLETED",
        "",
    ),
    (
        "simple_set_variable_workflow_integration_test.json",
        "COMPLETED",
        "",
    ),
    (
        "simple_wait_task_workflow_integration_test.json",
        "RUNNING",
        "",
    ),
    ("simple_workflow_1_integration_test.json", "COMPLETED", ""),
    (
        "simple_workflow_with_permissive_optional_task_integration_test.json",
        "COMPLETED",
        "",
    ),
    (
        "simple_workflow_with_resp_time_out_integration_test.json",
        "COMPLETED",
        "",
    ),
    (
        "switch_and_fork_join_integration_test.json",
        "COMPLETED",
        "",
    ),
    (
        "switch_with_no_default_case_integration_test.json",
        "COMPLETED",
        "",
    ),
    (
        "terminate_task_failed_workflow_integration.json",
        "FAILED",
        "Early exit in terminate",
    ),
    ("terminate_task_sub_workflow.json", "COMPLETED", ""),
    (
        "terminate_task_terminated_status_test.json",
        "TERMINATED",
        "Early exit with TERMINATED status",
    ),
    (
        "test_task_failed_sub_workflow.json",
        "FAILED",
        "Workflow is FAILED by TERMINATE task",
    ),
    // Its input names the workflow to start; an empty one names none.
    (
        "workflow_that_starts_another_workflow.json",
        "FAILED",
        "names no workflow to start",
    ),
    // Its jq program indexes an object the harness's worker returns as `op`; this
    // worker's `op` is a string, and jq's error fails the task (and the run) as in
    // Conductor.
    (
        "workflow_with_synchronous_system_task.json",
        "FAILED",
        "cannot index",
    ),
];

crate::on_both_backends!(conductor_samples_register_and_run_as_expected);

async fn conductor_samples_register_and_run_as_expected(mut suite: Suite) {
    let client = suite.client();
    let mut names = BTreeSet::new();
    let mut registered = Vec::new();
    for (file, doc) in samples() {
        let defs = match &doc {
            Value::Array(items) => items.clone(),
            other => vec![other.clone()],
        };
        for def in defs {
            let r = client
                .post_json("/api/metadata/workflow?overwrite=true", &def)
                .await
                .unwrap();
            match REFUSED.iter().find(|(f, _)| *f == file) {
                Some((_, path)) => {
                    assert_eq!(r.status, 400, "{file}: {}", r.text);
                    assert_eq!(
                        r.json.as_ref().unwrap()["path"],
                        *path,
                        "{file}: {}",
                        r.text
                    );
                }
                None => {
                    assert_eq!(r.status, 200, "{file} registers: {}", r.text);
                    simple_names(&def["tasks"], &mut names);
                    let name = def["name"].as_str().unwrap_or_default().to_owned();
                    registered.push((file.clone(), name));
                }
            }
        }
    }
    for name in &names {
        suite.delete_queue_on_cleanup(name);
    }
    let client = suite.client();
    // Every sample is either refused or has an expected outcome.
    for (file, _) in &registered {
        assert!(
            OUTCOMES.iter().any(|(f, _, _)| f == file),
            "no expected outcome for {file}"
        );
    }
    let worker = names
        .iter()
        .fold(Worker::builder(&suite.worker_config()), |b, name| {
            let name = name.clone();
            b.handler(name.clone(), move |task| {
                let name = name.clone();
                async move { Ok(json!({"op": format!("{name} done"), "uuid": task.task_id})) }
            })
        })
        .build();
    let shutdown = CancellationToken::new();
    let running = suite.run_worker(worker, &shutdown);
    let starts = registered.iter().map(|(file, name)| {
        let client = client.clone();
        async move {
            let (_, status, reason) = OUTCOMES.iter().find(|(f, _, _)| f == file).unwrap();
            let r = client
                .post_json("/api/workflow", &json!({"name": name, "input": {}}))
                .await
                .unwrap();
            if *status == "404" {
                assert_eq!(r.status, 404, "{file}: {}", r.text);
                assert!(r.text.contains(reason), "{file}: {}", r.text);
                return;
            }
            assert_eq!(r.status, 200, "{file}: {}", r.text);
            let id = r.text;
            let wf = match *status {
                // Waits on a WAIT task: IN_PROGRESS once reached.
                "RUNNING" => wait_for_a_pending_wait(&client, &id).await,
                _ => client
                    .wait_for_status(&id, &[status], RUN_TIMEOUT)
                    .await
                    .unwrap_or_else(|e| panic!("{file}: {e:#}")),
            };
            let why = wf["reasonForIncompletion"].as_str().unwrap_or_default();
            assert!(
                why.contains(reason),
                "{file}: {why:?} lacks {reason:?}: {wf}"
            );
        }
    });
    futures_util::future::join_all(starts).await;
    shutdown.cancel();
    let _ = running.await;
}

/// Run `id` once a WAIT task of it is IN_PROGRESS (and the run RUNNING).
async fn wait_for_a_pending_wait(client: &weft_e2e::Client, id: &str) -> Value {
    let deadline = tokio::time::Instant::now() + RUN_TIMEOUT;
    loop {
        let wf = client.get(id).await.unwrap();
        let waiting = wf["tasks"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|t| t["taskType"] == "WAIT" && t["status"] == "IN_PROGRESS");
        if wf["status"] == "RUNNING" && waiting {
            return wf;
        }
        assert!(
            tokio::time::Instant::now() < deadline && wf["status"] == "RUNNING",
            "{id} never waited on a WAIT task: {wf}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
