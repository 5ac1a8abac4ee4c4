//! `StartWorkflowSpec`: a START_WORKFLOW task starts another run, by name or from a
//! definition given inline, and fails the run when its input is not a start request.

use serde_json::{json, Value};
use weft_e2e::Backend;

use super::{setup, start_correlated, tasks, wait_for_tasks};

const WORKFLOW_THAT_STARTS_ANOTHER_WORKFLOW: &str = "workflow_that_starts_another_workflow";
// As the spec's setup.
const FILES: [&str; 2] = [
    "workflow_that_starts_another_workflow.json",
    "simple_workflow_1_integration_test.json",
];

/// The spec's `@Unroll` feature "start another workflow using #testCase.name", for one
/// row of its `where:` table.
async fn start_another_workflow(backend: Backend, workflow_input: Value) {
    let suite = setup(backend, &FILES).await;
    let correlation_id = weft::ids::new_id().to_string();
    let id = start_correlated(
        &suite,
        WORKFLOW_THAT_STARTS_ANOTHER_WORKFLOW,
        &correlation_id,
        workflow_input,
    )
    .await;
    // Conductor's test runs the START_WORKFLOW task itself; Weft's decider does at once.
    let wf = wait_for_tasks(&suite, &id, "COMPLETED", &[("START_WORKFLOW", "COMPLETED")]).await;
    let started = tasks(&wf)[0]["outputData"]["workflowId"]
        .as_str()
        .expect("the started workflow's id")
        .to_owned();
    let other = super::wait_for(&suite, &started, "RUNNING").await;
    assert_eq!(other["correlationId"], json!(correlation_id));
    assert!(!other["input"].is_null());
}

async fn start_another_workflow_using_name_and_version(backend: Backend) {
    let start = json!({"name": "integration_test_wf",
                       "input": {"param1": "value1", "param2": "value2"}});
    start_another_workflow(backend, json!({"startWorkflow": start})).await;
}

async fn start_another_workflow_using_workflow_definition(backend: Backend) {
    let task1 = json!({"name": "integration_task_1", "taskReferenceName": "t1", "type": "SIMPLE",
        "inputParameters": {"tp1": "${workflow.input.param1}", "tp2": "${workflow.input.param2}",
                            "tp3": "${CPEWF_TASK_ID}"}});
    let task2 = json!({"name": "integration_task_2", "taskReferenceName": "t2", "type": "SIMPLE",
        "inputParameters": {"tp1": "${workflow.input.param1}", "tp2": "${t1.output.op}",
                            "tp3": "${CPEWF_TASK_ID}"}});
    let def = json!({"name": "dynamic_wf", "version": 1, "tasks": [task1, task2],
                     "ownerEmail": "abc@abc.com"});
    let start = json!({"name": "dynamic_wf", "workflowDef": def});
    start_another_workflow(backend, json!({"startWorkflow": start})).await;
}

/// The `where:` row "name and version with external input": the starter's input is
/// read from Conductor's external payload storage (`workflowInputPath`, uploaded by the
/// spec's setup). Weft has none (docs/conductor.md): the start is refused, naming the
/// field, and nothing runs.
async fn start_another_workflow_using_name_and_version_with_external_input(backend: Backend) {
    let suite = setup(backend, &FILES).await;
    let request = json!({"name": WORKFLOW_THAT_STARTS_ANOTHER_WORKFLOW, "version": 1,
                         "correlationId": weft::ids::new_id().to_string(),
                         "externalInputPayloadStoragePath": "5f3c.json"});
    let r = suite
        .client()
        .post_json("/api/workflow", &request)
        .await
        .unwrap();
    assert_eq!(r.status, 400, "{}", r.text);
    let body = r.json.unwrap_or_default();
    assert_eq!(body["path"], "externalInputPayloadStoragePath", "{body}");
    let search = format!("/api/workflow/running/{WORKFLOW_THAT_STARTS_ANOTHER_WORKFLOW}");
    let running = suite
        .client()
        .raw(reqwest::Method::GET, &search, None)
        .await
        .unwrap();
    assert_eq!(running.json, Some(json!([])), "{}", running.text);
}

async fn start_workflow_does_not_conform_to_start_workflow_request(backend: Backend) {
    let suite = setup(backend, &FILES).await;
    let input = json!({"start_workflow": {"param1": "value1", "param2": "value2"}});
    let id = super::start(&suite, WORKFLOW_THAT_STARTS_ANOTHER_WORKFLOW, input).await;
    let wf = wait_for_tasks(&suite, &id, "FAILED", &[("START_WORKFLOW", "FAILED")]).await;
    assert!(
        tasks(&wf)[0]["reasonForIncompletion"].is_string(),
        "{}",
        tasks(&wf)[0]
    );
}

super::harness_features!(
    start_another_workflow_using_name_and_version,
    start_another_workflow_using_workflow_definition,
    start_another_workflow_using_name_and_version_with_external_input,
    start_workflow_does_not_conform_to_start_workflow_request,
);
