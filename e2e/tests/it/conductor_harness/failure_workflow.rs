//! `FailureWorkflowSpec`: a failed run starts its failure workflow with the failed run's
//! id, the task that failed it and the failed workflow, under the run's correlation id.

use serde_json::{json, Value};
use weft_e2e::Backend;

use super::{setup, start_correlated, tasks, wait_for, wait_for_tasks};

const WORKFLOW_WITH_TERMINATE_TASK_FAILED: &str = "test_terminate_task_failed_wf";
const PARENT_WORKFLOW_WITH_FAILURE_TASK: &str = "test_task_failed_parent_wf";
// As the spec's setup.
const FILES: [&str; 4] = [
    "failure_workflow_for_terminate_task_workflow.json",
    "terminate_task_failed_workflow_integration.json",
    "test_task_failed_parent_workflow.json",
    "test_task_failed_sub_workflow.json",
];

/// The failure workflow `wf` (FAILED) started, checked as the spec does: COMPLETED, under
/// `wf`'s correlation id, its input naming `wf` and its task `failure_task`.
async fn failure_workflow_ran(suite: &weft_e2e::Suite, wf: &Value, failure_task: &Value) {
    let failure = wf["output"]["conductor.failure_workflow"]
        .as_str()
        .unwrap_or_else(|| panic!("no failure workflow in {}", wf["output"]))
        .to_owned();
    let ran = wait_for(suite, &failure, "COMPLETED").await;
    assert_eq!(ran["correlationId"], wf["correlationId"]);
    assert_eq!(ran["input"]["workflowId"], wf["workflowId"]);
    assert_eq!(ran["input"]["failureTaskId"], failure_task["taskId"]);
    let types: Vec<&Value> = tasks(&ran).iter().map(|t| &t["taskType"]).collect();
    assert_eq!(types, [&json!("LAMBDA")]);
    assert!(
        !ran["input"]["failedWorkflow"].is_null(),
        "{}",
        ran["input"]
    );
}

async fn test_workflow_with_a_task_that_failed(backend: Backend) {
    let suite = setup(backend, &FILES).await;
    let input = json!({"a": 1});
    let id = start_correlated(&suite, WORKFLOW_WITH_TERMINATE_TASK_FAILED, "testId", input).await;
    let expected = [("LAMBDA", "COMPLETED"), ("TERMINATE", "COMPLETED")];
    let wf = wait_for_tasks(&suite, &id, "FAILED", &expected).await;
    assert_eq!(wf["reasonForIncompletion"], "Early exit in terminate");
    failure_workflow_ran(&suite, &wf, &tasks(&wf)[1]).await;
}

async fn test_workflow_with_a_task_failed_in_subworkflow(backend: Backend) {
    let suite = setup(backend, &FILES).await;
    let id = super::start(&suite, PARENT_WORKFLOW_WITH_FAILURE_TASK, json!({"a": 1})).await;
    let expected = [("LAMBDA", "COMPLETED"), ("SUB_WORKFLOW", "FAILED")];
    let wf = wait_for_tasks(&suite, &id, "FAILED", &expected).await;
    assert_eq!(tasks(&wf)[0]["referenceTaskName"], "lambdaTask1");
    let child = tasks(&wf)[1]["subWorkflowId"]
        .as_str()
        .expect("the child's id")
        .to_owned();
    let sub = [("LAMBDA", "COMPLETED"), ("TERMINATE", "COMPLETED")];
    let sub = wait_for_tasks(&suite, &child, "FAILED", &sub).await;
    super::reason_contains(&sub, "Workflow is FAILED by TERMINATE task");
    failure_workflow_ran(&suite, &wf, &tasks(&wf)[1]).await;
}

super::harness_features!(
    test_workflow_with_a_task_that_failed,
    test_workflow_with_a_task_failed_in_subworkflow,
);
