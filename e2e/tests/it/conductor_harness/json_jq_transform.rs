//! `JsonJQTransformSpec`: JSON_JQ_TRANSFORM tasks, alone, in sequence, feeding DECISIONs,
//! and a failed one rerun with a fixed input.

use serde_json::{json, Value};
use weft_e2e::Backend;

use super::{setup, start, tasks, wait_for};

const JSON_JQ_TRANSFORM_WF: &str = "test_json_jq_transform_wf";
const SEQUENTIAL_JSON_JQ_TRANSFORM_WF: &str = "sequential_json_jq_transform_wf";
const JSON_JQ_TRANSFORM_RESULT_WF: &str = "json_jq_transform_result_wf";
// As the spec's setup.
const FILES: [&str; 3] = [
    "simple_json_jq_transform_integration_test.json",
    "sequential_json_jq_transform_integration_test.json",
    "json_jq_transform_result_integration_test.json",
];

/// `outputData.containsKey("result") && outputData.containsKey("resultList")`.
fn has_result_and_list(task: &Value) {
    let out = task["outputData"].as_object().expect("outputData");
    assert!(
        out.contains_key("result") && out.contains_key("resultList"),
        "{task}"
    );
}

async fn test_workflow_with_json_jq_transform_task_succeeds(backend: Backend) {
    let suite = setup(backend, &FILES).await;
    let input = json!({"in1": {"array": ["a", "b"]}, "in2": {"array": ["c", "d"]}});
    let id = start(&suite, JSON_JQ_TRANSFORM_WF, input).await;
    let wf = wait_for(&suite, &id, "COMPLETED").await;
    let t = tasks(&wf);
    assert_eq!(t.len(), 1);
    assert_eq!(t[0]["status"], "COMPLETED");
    assert_eq!(t[0]["taskType"], "JSON_JQ_TRANSFORM");
    has_result_and_list(&t[0]);
}

async fn test_json_jq_transform_task_with_nested_json_object_succeeds(backend: Backend) {
    let suite = setup(backend, &FILES).await;
    let input = json!({
        "method": "POST",
        "body": {"name": "Beary Beariston", "title": "the Brown Bear"},
        "requestTransform": "{name: (.body.name + \" you are \" + .body.title) }",
        "responseTransform": "{result: \"reply: \" + .response.body.message}",
    });
    let id = start(&suite, SEQUENTIAL_JSON_JQ_TRANSFORM_WF, input.clone()).await;
    let wf = wait_for(&suite, &id, "COMPLETED").await;
    let t = tasks(&wf);
    assert_eq!(t.len(), 2);
    assert_eq!(t[0]["status"], "COMPLETED");
    assert_eq!(t[0]["taskType"], "JSON_JQ_TRANSFORM");
    has_result_and_list(&t[0]);
    let result1 = &t[0]["outputData"]["result"];
    assert_eq!(result1["method"], input["method"]);
    assert_eq!(result1["requestTransform"], input["requestTransform"]);
    assert_eq!(result1["responseTransform"], input["responseTransform"]);
    assert_eq!(t[1]["status"], "COMPLETED");
    assert_eq!(t[1]["taskType"], "JSON_JQ_TRANSFORM");
    has_result_and_list(&t[1]);
    assert_eq!(
        t[1]["outputData"]["result"]["name"],
        "Beary Beariston you are the Brown Bear"
    );
}

async fn test_json_jq_transform_task_with_different_json_object_results_succeeds(backend: Backend) {
    let suite = setup(backend, &FILES).await;
    let input = json!({"requestedAction": "redeliver"});
    let id = start(&suite, JSON_JQ_TRANSFORM_RESULT_WF, input).await;
    let expected = [
        ("JSON_JQ_TRANSFORM", "COMPLETED"),
        ("DECISION", "COMPLETED"),
        ("JSON_JQ_TRANSFORM", "COMPLETED"),
        ("DECISION", "COMPLETED"),
    ];
    let wf = super::wait_for_tasks(&suite, &id, "COMPLETED", &expected).await;
    let all = tasks(&wf);
    has_result_and_list(&all[0]);
    assert_eq!(all[0]["outputData"]["result"], "CREATE");
    assert_eq!(all[1]["inputData"]["case"], "CREATE");
    has_result_and_list(&all[2]);
    let result = all[2]["outputData"]["result"]
        .as_array()
        .expect("a list result");
    assert_eq!(result.len(), 3, "{result:?}");
    assert!(result.contains(&json!("redeliver")), "{result:?}");
    assert_eq!(all[3]["inputData"]["case"], "true");
}

/// jq's error for `.in1.array` on a string, as Weft's jq (jaq) words it; Conductor's
/// jackson-jq says `Cannot index string with string "array"` (docs/conductor.md).
const CANNOT_INDEX: &str = "cannot index \"a\" with \"array\"";

/// The run of `test_json_jq_transform_wf` on an input its program cannot index: FAILED,
/// its one task FAILED with jq's error.
async fn failed_on_a_string(suite: &weft_e2e::Suite) -> String {
    let id = start(suite, JSON_JQ_TRANSFORM_WF, json!({"in1": "a", "in2": "b"})).await;
    let wf = super::wait_for_tasks(suite, &id, "FAILED", &[("JSON_JQ_TRANSFORM", "FAILED")]).await;
    assert_eq!(tasks(&wf)[0]["reasonForIncompletion"], CANNOT_INDEX);
    id
}

async fn test_workflow_with_json_jq_transform_task_fails(backend: Backend) {
    let suite = setup(backend, &FILES).await;
    failed_on_a_string(&suite).await;
}

async fn test_rerun_workflow_with_failed_json_jq_transform_task(backend: Backend) {
    let suite = setup(backend, &FILES).await;
    let id = failed_on_a_string(&suite).await;
    let wf = suite.client().get(&id).await.unwrap();
    let rerun_task = tasks(&wf)[0]["taskId"].clone();
    let valid = json!({
        "input": {"in1": {"array": ["a", "b"]}, "in2": {"array": ["c", "d"]}},
        "queryExpression": ".input as $_ | { out: ($_.in1.array + $_.in2.array) }",
    });
    let rerun = json!({"reRunFromWorkflowId": id, "reRunFromTaskId": rerun_task,
                       "taskInput": valid});
    let path = format!("/api/workflow/{id}/rerun");
    let r = suite.client().post_json(&path, &rerun).await.unwrap();
    assert_eq!(r.status, 200, "{}", r.text);
    let wf = super::wait_for_tasks(
        &suite,
        &id,
        "COMPLETED",
        &[("JSON_JQ_TRANSFORM", "COMPLETED")],
    )
    .await;
    has_result_and_list(&tasks(&wf)[0]);
    assert_eq!(
        tasks(&wf)[0]["outputData"]["result"],
        json!({"out": ["a", "b", "c", "d"]})
    );
}

super::harness_features!(
    test_workflow_with_json_jq_transform_task_fails,
    test_rerun_workflow_with_failed_json_jq_transform_task,
    test_workflow_with_json_jq_transform_task_succeeds,
    test_json_jq_transform_task_with_nested_json_object_succeeds,
    test_json_jq_transform_task_with_different_json_object_results_succeeds,
);
