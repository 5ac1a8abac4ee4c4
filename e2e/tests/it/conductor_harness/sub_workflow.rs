//! `SubWorkflowSpec`: a child run terminated by an operator terminates its parent.

use serde_json::json;
use weft_e2e::Backend;

use super::{poll_and_complete, setup, start_correlated, tasks, wait_for_tasks};

const WORKFLOW_WITH_SUBWORKFLOW: &str = "integration_test_wf_with_sub_wf";
// As the spec's setup.
const FILES: [&str; 3] = [
    "simple_one_task_sub_workflow_integration_test.json",
    "simple_workflow_1_integration_test.json",
    "workflow_with_sub_workflow_1_integration_test.json",
];

async fn test_terminating_a_subworkflow_terminates_parent_workflow(backend: Backend) {
    let suite = setup(backend, &FILES).await;
    let correlation_id = weft::ids::new_id().to_string();
    let input = json!({"param1": "p1 value", "param2": "p2 value", "subwf": "sub_workflow"});
    let id = start_correlated(&suite, WORKFLOW_WITH_SUBWORKFLOW, &correlation_id, input).await;
    let mut expected = vec![("integration_task_1", "SCHEDULED")];
    wait_for_tasks(&suite, &id, "RUNNING", &expected).await;

    let output = json!({"op": "task1.done"});
    poll_and_complete(
        &suite,
        "integration_task_1",
        "task1.integration.worker",
        output,
    )
    .await;
    expected[0].1 = "COMPLETED";
    expected.push(("SUB_WORKFLOW", "IN_PROGRESS"));
    let wf = wait_for_tasks(&suite, &id, "RUNNING", &expected).await;
    let child = tasks(&wf)[1]["subWorkflowId"]
        .as_str()
        .expect("the child's id")
        .to_owned();
    let in_child = [("simple_task_in_sub_wf", "SCHEDULED")];
    wait_for_tasks(&suite, &child, "RUNNING", &in_child).await;

    let reason = "terminating from a test case";
    super::terminate(&suite, &child, reason).await;
    let canceled = [("simple_task_in_sub_wf", "CANCELED")];
    let sub = wait_for_tasks(&suite, &child, "TERMINATED", &canceled).await;
    assert_eq!(sub["reasonForIncompletion"], reason);

    expected[1].1 = "CANCELED";
    let wf = wait_for_tasks(&suite, &id, "TERMINATED", &expected).await;
    super::reason_contains(&wf, reason);
}

super::harness_features!(test_terminating_a_subworkflow_terminates_parent_workflow,);
