//! `DecisionTaskSpec`: DECISION tasks choosing, nesting, falling to the default case,
//! and leading to a fork.

use serde_json::json;
use weft_e2e::Backend;

use super::{
    complete_as_task1_worker, poll_and_complete, setup, start_correlated, task_is, tasks,
    wait_for_state,
};

const DECISION_WF: &str = "DecisionWorkflow";
const COND_TASK_WF: &str = "ConditionalTaskWF";
// As the spec's setup.
const FILES: [&str; 3] = [
    "simple_decision_task_integration_test.json",
    "decision_and_fork_join_integration_test.json",
    "conditional_task_workflow_integration_test.json",
];

async fn test_simple_decision_workflow(backend: Backend) {
    let suite = setup(backend, &FILES).await;
    let input = json!({"param1": "p1", "param2": "p2", "case": "c"});
    let id = start_correlated(&suite, DECISION_WF, "decision_workflow", input).await;
    let wf = wait_for_state(&suite, &id, "RUNNING", 2).await;
    task_is(&wf, 0, "DECISION", "COMPLETED");
    task_is(&wf, 1, "integration_task_1", "SCHEDULED");

    complete_as_task1_worker(&suite, "integration_task_1").await;
    let wf = wait_for_state(&suite, &id, "RUNNING", 3).await;
    task_is(&wf, 0, "DECISION", "COMPLETED");
    task_is(&wf, 1, "integration_task_1", "COMPLETED");
    task_is(&wf, 2, "integration_task_2", "SCHEDULED");

    complete_as_task1_worker(&suite, "integration_task_2").await;
    let wf = wait_for_state(&suite, &id, "RUNNING", 4).await;
    task_is(&wf, 2, "integration_task_2", "COMPLETED");
    task_is(&wf, 3, "integration_task_20", "SCHEDULED");

    complete_as_task1_worker(&suite, "integration_task_20").await;
    let wf = wait_for_state(&suite, &id, "COMPLETED", 4).await;
    task_is(&wf, 3, "integration_task_20", "COMPLETED");
}

async fn test_default_case_condition_execution_of_a_conditional_workflow(backend: Backend) {
    let suite = setup(backend, &FILES).await;
    let input = json!({"param1": "xxx", "param2": "two"});
    let id = start_correlated(&suite, COND_TASK_WF, "conditional_default", input).await;
    let wf = wait_for_state(&suite, &id, "RUNNING", 2).await;
    task_is(&wf, 0, "DECISION", "COMPLETED");
    assert_eq!(tasks(&wf)[0]["outputData"]["caseOutput"], json!(["xxx"]));
    task_is(&wf, 1, "integration_task_10", "SCHEDULED");

    complete_as_task1_worker(&suite, "integration_task_10").await;
    let wf = wait_for_state(&suite, &id, "COMPLETED", 3).await;
    task_is(&wf, 1, "integration_task_10", "COMPLETED");
    task_is(&wf, 2, "DECISION", "COMPLETED");
    assert_eq!(tasks(&wf)[2]["outputData"]["caseOutput"], json!(["null"]));
}

/// The spec's `@Unroll` feature "Test case 'nested' and '#caseValue' condition execution
/// of a conditional workflow", for one row of its `where:` table.
async fn nested_case(
    backend: Backend,
    case_value: &str,
    expected_task_name: &str,
    correlation_id: &str,
) {
    let suite = setup(backend, &FILES).await;
    let input = json!({"param1": "nested", "param2": case_value});
    let id = start_correlated(&suite, COND_TASK_WF, correlation_id, input).await;
    let wf = wait_for_state(&suite, &id, "RUNNING", 3).await;
    task_is(&wf, 0, "DECISION", "COMPLETED");
    assert_eq!(tasks(&wf)[0]["outputData"]["caseOutput"], json!(["nested"]));
    task_is(&wf, 1, "DECISION", "COMPLETED");
    assert_eq!(
        tasks(&wf)[1]["outputData"]["caseOutput"],
        json!([case_value])
    );
    task_is(&wf, 2, expected_task_name, "SCHEDULED");

    poll_and_complete(
        &suite,
        expected_task_name,
        "task.integration.worker",
        json!({}),
    )
    .await;
    let wf = wait_for_state(&suite, &id, "COMPLETED", 4).await;
    task_is(&wf, 2, expected_task_name, "COMPLETED");
    task_is(&wf, 3, "DECISION", "COMPLETED");
    assert_eq!(tasks(&wf)[3]["outputData"]["caseOutput"], json!(["null"]));
}

async fn test_case_nested_and_two_condition_execution_of_a_conditional_workflow(backend: Backend) {
    nested_case(
        backend,
        "two",
        "integration_task_2",
        "conditional_nested_two",
    )
    .await;
}

async fn test_case_nested_and_one_condition_execution_of_a_conditional_workflow(backend: Backend) {
    nested_case(
        backend,
        "one",
        "integration_task_1",
        "conditional_nested_one",
    )
    .await;
}

async fn test_three_case_condition_execution_of_a_conditional_workflow(backend: Backend) {
    let suite = setup(backend, &FILES).await;
    let input = json!({"param1": "three", "param2": "two", "finalCase": "notify"});
    let id = start_correlated(&suite, COND_TASK_WF, "conditional_three", input).await;
    let wf = wait_for_state(&suite, &id, "RUNNING", 2).await;
    task_is(&wf, 0, "DECISION", "COMPLETED");
    assert_eq!(tasks(&wf)[0]["outputData"]["caseOutput"], json!(["three"]));
    task_is(&wf, 1, "integration_task_3", "SCHEDULED");

    complete_as_task1_worker(&suite, "integration_task_3").await;
    let wf = wait_for_state(&suite, &id, "RUNNING", 4).await;
    task_is(&wf, 1, "integration_task_3", "COMPLETED");
    task_is(&wf, 2, "DECISION", "COMPLETED");
    assert_eq!(tasks(&wf)[2]["outputData"]["caseOutput"], json!(["notify"]));
    task_is(&wf, 3, "integration_task_4", "SCHEDULED");

    complete_as_task1_worker(&suite, "integration_task_4").await;
    let wf = wait_for_state(&suite, &id, "COMPLETED", 4).await;
    task_is(&wf, 1, "integration_task_3", "COMPLETED");
    task_is(&wf, 2, "DECISION", "COMPLETED");
    assert_eq!(tasks(&wf)[2]["outputData"]["caseOutput"], json!(["notify"]));
    task_is(&wf, 3, "integration_task_4", "COMPLETED");
}

async fn test_a_workflow_that_has_a_decision_task_that_leads_to_a_fork_join(backend: Backend) {
    super::switch_leading_to_a_fork_join(backend, &FILES, "DECISION").await;
}

super::harness_features!(
    test_simple_decision_workflow,
    test_default_case_condition_execution_of_a_conditional_workflow,
    test_case_nested_and_two_condition_execution_of_a_conditional_workflow,
    test_case_nested_and_one_condition_execution_of_a_conditional_workflow,
    test_three_case_condition_execution_of_a_conditional_workflow,
    test_a_workflow_that_has_a_decision_task_that_leads_to_a_fork_join,
);
