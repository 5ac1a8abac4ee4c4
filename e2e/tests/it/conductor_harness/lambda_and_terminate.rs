//! `LambdaAndTerminateTaskSpec`: LAMBDA tasks, and TERMINATE tasks ending a run as
//! COMPLETED or FAILED (with its failure workflow), also from a decision branch.

use serde_json::json;
use weft_e2e::Backend;

use super::{poll_and_complete, setup, start, tasks, wait_for, wait_for_tasks};

const WORKFLOW_WITH_TERMINATE_TASK: &str = "test_terminate_task_wf";
const WORKFLOW_WITH_TERMINATE_TASK_FAILED: &str = "test_terminate_task_failed_wf";
const WORKFLOW_WITH_LAMBDA_TASK: &str = "test_lambda_wf";
const WORKFLOW_WITH_DECISION_AND_TERMINATE: &str = "ConditionalTerminateWorkflow";
// As the spec's setup.
const FILES: [&str; 7] = [
    "failure_workflow_for_terminate_task_workflow.json",
    "terminate_task_completed_workflow_integration_test.json",
    "terminate_task_failed_workflow_integration.json",
    "simple_lambda_workflow_integration_test.json",
    "terminate_task_parent_workflow.json",
    "terminate_task_sub_workflow.json",
    "decision_and_terminate_integration_test.json",
];

/// `tasks[i].seq == i + 1` for every task of the run.
fn seq_counts_from_1(wf: &serde_json::Value) {
    for (i, t) in tasks(wf).iter().enumerate() {
        assert_eq!(t["seq"], i + 1, "{t}");
    }
}

async fn test_workflow_with_a_terminate_task_when_the_status_is_completed(backend: Backend) {
    let suite = setup(backend, &FILES).await;
    let id = start(&suite, WORKFLOW_WITH_TERMINATE_TASK, json!({"a": 1})).await;
    let expected = [("LAMBDA", "COMPLETED"), ("TERMINATE", "COMPLETED")];
    let wf = wait_for_tasks(&suite, &id, "COMPLETED", &expected).await;
    super::reason_contains(&wf, "Workflow is COMPLETED by TERMINATE task");
    seq_counts_from_1(&wf);
    // The terminate task's output, not the definition's outputParameters.
    assert_eq!(wf["output"], json!({"result": {"testvalue": true}}));
}

async fn test_workflow_with_a_terminate_task_when_the_status_is_failed(backend: Backend) {
    let suite = setup(backend, &FILES).await;
    let id = start(&suite, WORKFLOW_WITH_TERMINATE_TASK_FAILED, json!({"a": 1})).await;
    let expected = [("LAMBDA", "COMPLETED"), ("TERMINATE", "COMPLETED")];
    let wf = wait_for_tasks(&suite, &id, "FAILED", &expected).await;
    assert_eq!(wf["reasonForIncompletion"], "Early exit in terminate");
    seq_counts_from_1(&wf);
    let failure_workflow = wf["output"]["conductor.failure_workflow"]
        .as_str()
        .unwrap_or_else(|| panic!("no failure workflow in {}", wf["output"]))
        .to_owned();
    let failure = wait_for(&suite, &failure_workflow, "COMPLETED").await;
    assert_eq!(failure["input"]["workflowId"], json!(id));
    let ran: Vec<&serde_json::Value> = tasks(&failure).iter().map(|t| &t["taskType"]).collect();
    assert_eq!(ran, [&json!("LAMBDA")]);
}

async fn test_workflow_with_a_terminate_task_within_a_decision_branch(backend: Backend) {
    let suite = setup(backend, &FILES).await;
    let input = json!({"param1": "p1", "param2": "p2", "case": "two"});
    let id = start(&suite, WORKFLOW_WITH_DECISION_AND_TERMINATE, input).await;
    let wf = wait_for_tasks(
        &suite,
        &id,
        "RUNNING",
        &[("integration_task_1", "SCHEDULED")],
    )
    .await;
    seq_counts_from_1(&wf);

    let output = json!({"op": "task1 completed"});
    poll_and_complete(
        &suite,
        "integration_task_1",
        "task1.integration.worker",
        output,
    )
    .await;
    let expected = [
        ("integration_task_1", "COMPLETED"),
        ("DECISION", "COMPLETED"),
        ("TERMINATE", "COMPLETED"),
    ];
    let wf = wait_for_tasks(&suite, &id, "FAILED", &expected).await;
    assert_eq!(wf["output"], json!({"output": "task1 completed"}));
    super::reason_contains(&wf, "Workflow is FAILED by TERMINATE task");
    assert_eq!(tasks(&wf)[0]["outputData"]["op"], "task1 completed");
    seq_counts_from_1(&wf);
}

async fn test_workflow_with_lambda_task(backend: Backend) {
    let suite = setup(backend, &FILES).await;
    let id = start(&suite, WORKFLOW_WITH_LAMBDA_TASK, json!({"a": 1})).await;

    let wf = wait_for(&suite, &id, "COMPLETED").await;
    let all = tasks(&wf);
    assert_eq!(all.len(), 1, "{wf}");
    assert_eq!(all[0]["status"], "COMPLETED");
    assert_eq!(all[0]["taskType"], "LAMBDA");
    assert_eq!(
        all[0]["outputData"],
        json!({"result": {"testvalue": true}}),
        "{}",
        all[0]
    );
    assert_eq!(all[0]["seq"], 1);
}

async fn test_workflow_with_a_terminate_task_when_the_workflow_has_a_subworkflow(backend: Backend) {
    let suite = setup(backend, &FILES).await;
    let id = start(&suite, "test_terminate_task_parent_wf", json!({"a": 1})).await;
    let mut expected = vec![
        ("FORK", "COMPLETED"),
        ("LAMBDA", "COMPLETED"),
        ("LAMBDA", "COMPLETED"),
        ("JOIN", "IN_PROGRESS"),
        ("SUB_WORKFLOW", "IN_PROGRESS"),
        ("WAIT", "IN_PROGRESS"),
    ];
    let wf = wait_for_tasks(&suite, &id, "RUNNING", &expected).await;
    seq_counts_from_1(&wf);
    assert_eq!(tasks(&wf)[1]["referenceTaskName"], "lambdaTask1");
    assert_eq!(tasks(&wf)[2]["referenceTaskName"], "lambdaTask2");
    let child = tasks(&wf)[4]["subWorkflowId"]
        .as_str()
        .expect("the child's id")
        .to_owned();
    wait_for_tasks(
        &suite,
        &child,
        "RUNNING",
        &[("integration_task_3", "SCHEDULED")],
    )
    .await;

    // Completing the WAIT runs the TERMINATE task.
    super::complete_task_at(&suite, &wf, 5).await;
    expected[3].1 = "CANCELED";
    expected[4].1 = "CANCELED";
    expected[5].1 = "COMPLETED";
    expected.push(("TERMINATE", "COMPLETED"));
    let wf = wait_for_tasks(&suite, &id, "COMPLETED", &expected).await;
    super::reason_contains(&wf, "Workflow is COMPLETED by TERMINATE task");
    seq_counts_from_1(&wf);

    let canceled = [("integration_task_3", "CANCELED")];
    let sub = wait_for_tasks(&suite, &child, "TERMINATED", &canceled).await;
    super::reason_contains(
        &sub,
        "Parent workflow has been terminated with reason: Workflow is COMPLETED by TERMINATE task",
    );
}

super::harness_features!(
    test_workflow_with_a_terminate_task_when_the_status_is_completed,
    test_workflow_with_a_terminate_task_when_the_status_is_failed,
    test_workflow_with_a_terminate_task_within_a_decision_branch,
    test_workflow_with_lambda_task,
    test_workflow_with_a_terminate_task_when_the_workflow_has_a_subworkflow,
);
