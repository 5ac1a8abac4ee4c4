//! `SubWorkflowSpec`: a child run terminated by an operator terminates its parent; a
//! child retried resumes its parent (timed out, or failed with it).

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
    let (mut expected, child) = up_to_the_child(&suite, &id, "simple_task_in_sub_wf").await;

    let reason = "terminating from a test case";
    super::terminate(&suite, &child, reason).await;
    let canceled = [("simple_task_in_sub_wf", "CANCELED")];
    let sub = wait_for_tasks(&suite, &child, "TERMINATED", &canceled).await;
    assert_eq!(sub["reasonForIncompletion"], reason);

    expected[1].1 = "CANCELED";
    let wf = wait_for_tasks(&suite, &id, "TERMINATED", &expected).await;
    super::reason_contains(&wf, reason);
}

/// The parent's first steps: `integration_task_1` completed, the SUB_WORKFLOW task
/// IN_PROGRESS; returns the run's tasks as expected then and the child's id once it
/// waits for `first_in_child`.
async fn up_to_the_child(
    suite: &weft_e2e::Suite,
    id: &str,
    first_in_child: &str,
) -> (Vec<(&'static str, &'static str)>, String) {
    let mut expected = vec![("integration_task_1", "SCHEDULED")];
    wait_for_tasks(suite, id, "RUNNING", &expected).await;
    let output = json!({"op": "task1.done"});
    poll_and_complete(suite, "integration_task_1", WORKER, output).await;
    expected[0].1 = "COMPLETED";
    expected.push(("SUB_WORKFLOW", "IN_PROGRESS"));
    let wf = wait_for_tasks(suite, id, "RUNNING", &expected).await;
    let child = super::child_ids(&wf, &[1]).remove(0);
    wait_for_tasks(suite, &child, "RUNNING", &[(first_in_child, "SCHEDULED")]).await;
    (expected, child)
}

const WORKER: &str = "task1.integration.worker";

async fn test_retrying_a_subworkflow_where_parent_workflow_timed_out_due_to_workflow_timeout(
    backend: Backend,
) {
    let suite = setup(backend, &FILES).await;
    // "Register a workflow definition with a timeout policy set to timeout workflow":
    // the persisted definition's name, version, tasks, inputs and outputs, and owner.
    let persisted = super::definition("workflow_with_sub_workflow_1_integration_test.json");
    let mut modified = json!({"timeoutPolicy": "TIME_OUT_WF", "timeoutSeconds": 10});
    for key in [
        "name",
        "version",
        "tasks",
        "inputParameters",
        "outputParameters",
        "ownerEmail",
    ] {
        if let Some(v) = persisted.get(key) {
            modified[key] = v.clone();
        }
    }
    super::put_ok(&suite, "/api/metadata/workflow", &json!([modified])).await;

    let input = json!({"param1": "p1 value", "param2": "p2 value", "subwf": "sub_workflow"});
    let id = start_correlated(
        &suite,
        WORKFLOW_WITH_SUBWORKFLOW,
        "wf_with_subwf_test_1",
        input,
    )
    .await;
    let (mut expected, child) = up_to_the_child(&suite, &id, "simple_task_in_sub_wf").await;
    let wf = wait_for_tasks(&suite, &id, "RUNNING", &expected).await;
    let sub_workflow_task_id = tasks(&wf)[1]["taskId"].as_str().unwrap().to_owned();

    // After its 10 seconds, the run times out and its child is terminated.
    expected[1].1 = "CANCELED";
    super::wait_for_tasks_within(&suite, &id, "TIMED_OUT", &expected, 10).await;
    let mut in_child = vec![("simple_task_in_sub_wf", "CANCELED")];
    wait_for_tasks(&suite, &child, "TERMINATED", &in_child).await;

    super::retry(&suite, &child, false).await;
    in_child.push(("simple_task_in_sub_wf", "SCHEDULED"));
    wait_for_tasks(&suite, &child, "RUNNING", &in_child).await;
    expected[1].1 = "IN_PROGRESS";
    wait_for_tasks(&suite, &id, "RUNNING", &expected).await;

    let output = json!({"op": "simple_task_in_sub_wf.done"});
    poll_and_complete(&suite, "simple_task_in_sub_wf", WORKER, output).await;
    in_child[1].1 = "COMPLETED";
    wait_for_tasks(&suite, &child, "COMPLETED", &in_child).await;
    expected[1].1 = "COMPLETED";
    let wf = wait_for_tasks(&suite, &id, "COMPLETED", &expected).await;
    assert_eq!(wf["output"]["op"], "simple_task_in_sub_wf.done", "{wf}");
    // The SUB_WORKFLOW task, read by the id it had before the retry, completed.
    let path = format!("/api/tasks/{sub_workflow_task_id}");
    let r = super::get_ok(&suite, &path).await;
    let task: serde_json::Value = serde_json::from_str(&r.text).unwrap();
    assert_eq!(task["status"], "COMPLETED", "{task}");
}

async fn test_retrying_a_workflow_with_subworkflow_resume(backend: Backend) {
    let suite = setup(backend, &FILES).await;
    let changes = json!({"retryCount": 0});
    super::update_task_def(&suite, "integration_task_2", changes).await;
    let input = json!({"param1": "p1 value", "param2": "p2 value", "subwf": "integration_test_wf"});
    let correlation_id = "wf_retry_with_subwf_resume_test";
    let id = start_correlated(&suite, WORKFLOW_WITH_SUBWORKFLOW, correlation_id, input).await;
    let (mut expected, child) = up_to_the_child(&suite, &id, "integration_task_1").await;

    let output = json!({"op": "task1.done"});
    poll_and_complete(&suite, "integration_task_1", WORKER, output).await;
    let mut in_child = vec![
        ("integration_task_1", "COMPLETED"),
        ("integration_task_2", "SCHEDULED"),
    ];
    wait_for_tasks(&suite, &child, "RUNNING", &in_child).await;
    super::poll_and_fail(
        &suite,
        "integration_task_2",
        "task2.integration.worker",
        "failed",
    )
    .await;
    in_child[1].1 = "FAILED";
    wait_for_tasks(&suite, &child, "FAILED", &in_child).await;
    expected[1].1 = "FAILED";
    wait_for_tasks(&suite, &id, "FAILED", &expected).await;

    super::retry(&suite, &id, true).await;
    in_child.push(("integration_task_2", "SCHEDULED"));
    wait_for_tasks(&suite, &child, "RUNNING", &in_child).await;
    expected[1].1 = "IN_PROGRESS";
    wait_for_tasks(&suite, &id, "RUNNING", &expected).await;

    let output = json!({"op": "task2.done"});
    poll_and_complete(
        &suite,
        "integration_task_2",
        "task2.integration.worker",
        output,
    )
    .await;
    in_child[2].1 = "COMPLETED";
    wait_for_tasks(&suite, &child, "COMPLETED", &in_child).await;
    expected[1].1 = "COMPLETED";
    wait_for_tasks(&suite, &id, "COMPLETED", &expected).await;
}

super::harness_features!(
    test_terminating_a_subworkflow_terminates_parent_workflow,
    test_retrying_a_subworkflow_where_parent_workflow_timed_out_due_to_workflow_timeout,
    test_retrying_a_workflow_with_subworkflow_resume,
);
