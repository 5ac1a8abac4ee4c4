//! `SignalTaskSpec`: `POST /api/tasks/{workflowId}/{status}/signal` completes the WAIT a
//! run (or one of its child runs) is blocked on.

use serde_json::json;
use weft_e2e::Backend;

use super::{complete_task_at, setup, start, wait_for_tasks};

const WAIT_WORKFLOW: &str = "test_wait_workflow";
const SIGNAL_SUB_WF_PARENT: &str = "signal_sub_wf_parent";
// As the spec's setup.
const FILES: [&str; 3] = [
    "wait_workflow_integration_test.json",
    "signal_sub_wf_child_integration_test.json",
    "signal_sub_wf_parent_integration_test.json",
];

/// `taskService.signalTask(workflowId, COMPLETED, output)` over REST: its status.
async fn signal(suite: &weft_e2e::Suite, workflow_id: &str, output: serde_json::Value) -> u16 {
    let path = format!("/api/tasks/{workflow_id}/COMPLETED/signal");
    let r = suite.client().post_json(&path, &output).await.unwrap();
    r.status
}

async fn signal_completes_a_blocked_wait_task_and_advances_the_workflow(backend: Backend) {
    let suite = setup(backend, &FILES).await;
    let id = start(&suite, WAIT_WORKFLOW, json!({})).await;
    wait_for_tasks(&suite, &id, "RUNNING", &[("WAIT", "IN_PROGRESS")]).await;

    assert_eq!(signal(&suite, &id, json!({"result": "done"})).await, 200);
    let expected = [("WAIT", "COMPLETED"), ("integration_task_1", "SCHEDULED")];
    let wf = wait_for_tasks(&suite, &id, "RUNNING", &expected).await;
    assert_eq!(
        super::tasks(&wf)[0]["outputData"],
        json!({"result": "done"})
    );
}

/// Conductor answers 200 and changes nothing (`signalTask` returns null); Weft answers 404
/// with the reason, as every state-changing endpoint that would change nothing
/// (docs/conductor.md).
async fn signal_on_a_workflow_with_no_blocking_task_returns_null(backend: Backend) {
    let suite = setup(backend, &FILES).await;
    let id = start(&suite, WAIT_WORKFLOW, json!({})).await;
    let wf = wait_for_tasks(&suite, &id, "RUNNING", &[("WAIT", "IN_PROGRESS")]).await;
    complete_task_at(&suite, &wf, 0).await;
    let expected = [("WAIT", "COMPLETED"), ("integration_task_1", "SCHEDULED")];
    wait_for_tasks(&suite, &id, "RUNNING", &expected).await;

    assert_eq!(signal(&suite, &id, json!({})).await, 404);
    wait_for_tasks(&suite, &id, "RUNNING", &expected).await;
}

async fn signal_on_a_non_existent_workflow_throws_not_found_exception(backend: Backend) {
    let suite = setup(backend, &FILES).await;
    assert_eq!(signal(&suite, "non-existent-wf-id", json!({})).await, 404);
}

async fn signal_descends_into_a_sub_workflow_to_complete_its_blocked_wait_task(backend: Backend) {
    let suite = setup(backend, &FILES).await;
    let parent = start(&suite, SIGNAL_SUB_WF_PARENT, json!({})).await;
    let wf = wait_for_tasks(
        &suite,
        &parent,
        "RUNNING",
        &[("SUB_WORKFLOW", "IN_PROGRESS")],
    )
    .await;
    let child = super::tasks(&wf)[0]["subWorkflowId"]
        .as_str()
        .expect("the child's id")
        .to_owned();
    wait_for_tasks(&suite, &child, "RUNNING", &[("WAIT", "IN_PROGRESS")]).await;

    assert_eq!(
        signal(&suite, &parent, json!({"result": "sub-done"})).await,
        200
    );
    let sub = super::wait_for(&suite, &child, "COMPLETED").await;
    assert_eq!(super::tasks(&sub)[0]["taskType"], "WAIT");
    assert_eq!(super::tasks(&sub)[0]["status"], "COMPLETED");
    super::wait_for(&suite, &parent, "COMPLETED").await;
}

super::harness_features!(
    signal_completes_a_blocked_wait_task_and_advances_the_workflow,
    signal_on_a_workflow_with_no_blocking_task_returns_null,
    signal_on_a_non_existent_workflow_throws_not_found_exception,
    signal_descends_into_a_sub_workflow_to_complete_its_blocked_wait_task,
);
