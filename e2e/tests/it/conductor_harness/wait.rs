//! `WaitTaskSpec`: WAIT tasks completed through the task API, after a SET_VARIABLE.

use serde_json::json;
use weft_e2e::Backend;

use super::{complete_task_at, poll_and_complete, setup, start, wait_for_tasks};

const WAIT_BASED_WORKFLOW: &str = "test_wait_workflow";
const SET_VARIABLE_WORKFLOW: &str = "set_variable_workflow_integration_test";
// As the spec's setup.
const FILES: [&str; 2] = [
    "wait_workflow_integration_test.json",
    "set_variable_workflow_integration_test.json",
];

async fn test_workflow_with_set_variable_task(backend: Backend) {
    let suite = setup(backend, &FILES).await;
    let id = start(
        &suite,
        SET_VARIABLE_WORKFLOW,
        json!({"var": "var_test_value"}),
    )
    .await;
    wait_for_tasks(&suite, &id, "RUNNING", &[("simple", "SCHEDULED")]).await;

    poll_and_complete(&suite, "simple", "simple.worker", json!({"ok1": "ov1"})).await;
    let mut expected = [
        ("simple", "COMPLETED"),
        ("SET_VARIABLE", "COMPLETED"),
        ("WAIT", "IN_PROGRESS"),
    ];
    let wf = wait_for_tasks(&suite, &id, "RUNNING", &expected).await;
    assert_eq!(wf["variables"], json!({"var": "var_test_value"}));

    complete_task_at(&suite, &wf, 2).await;
    expected[2].1 = "COMPLETED";
    let wf = wait_for_tasks(&suite, &id, "COMPLETED", &expected).await;
    assert_eq!(wf["variables"], json!({"var": "var_test_value"}));
    assert_eq!(
        wf["output"],
        json!({"variables": {"var": "var_test_value"}})
    );
}

async fn verify_that_a_wait_based_simple_workflow_is_executed(backend: Backend) {
    let suite = setup(backend, &FILES).await;
    let id = start(&suite, WAIT_BASED_WORKFLOW, json!({})).await;
    let wf = wait_for_tasks(&suite, &id, "RUNNING", &[("WAIT", "IN_PROGRESS")]).await;

    complete_task_at(&suite, &wf, 0).await;
    let mut expected = [("WAIT", "COMPLETED"), ("integration_task_1", "SCHEDULED")];
    wait_for_tasks(&suite, &id, "RUNNING", &expected).await;

    poll_and_complete(
        &suite,
        "integration_task_1",
        "task1.integration.worker",
        json!({}),
    )
    .await;
    expected[1].1 = "COMPLETED";
    wait_for_tasks(&suite, &id, "COMPLETED", &expected).await;
}

super::harness_features!(
    test_workflow_with_set_variable_task,
    verify_that_a_wait_based_simple_workflow_is_executed,
);
