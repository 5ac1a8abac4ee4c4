//! `EventTaskSpec`: an EVENT task publishes to the `conductor` sink and completes, or,
//! `asyncComplete`, waits IN_PROGRESS until the task API completes it.

use serde_json::json;
use weft_e2e::Backend;

use super::{complete_task_at, poll_and_complete, setup, start, tasks, wait_for_tasks};

const EVENT_BASED_WORKFLOW: &str = "test_event_workflow";
// As the spec's setup.
const FILES: [&str; 1] = ["event_workflow_integration_test.json"];

/// `tasks[0].outputData['event_produced']` is there.
fn event_produced(wf: &serde_json::Value) {
    let out = &tasks(wf)[0]["outputData"];
    assert!(
        out["event_produced"]
            .as_str()
            .is_some_and(|e| !e.is_empty()),
        "{out}"
    );
}

/// From the EVENT task done: `integration_task_1` runs and the run completes.
async fn runs_on_after_the_event(suite: &weft_e2e::Suite, id: &str) {
    let mut expected = [("EVENT", "COMPLETED"), ("integration_task_1", "SCHEDULED")];
    event_produced(&wait_for_tasks(suite, id, "RUNNING", &expected).await);
    let worker = "task1.integration.worker";
    poll_and_complete(suite, "integration_task_1", worker, json!({})).await;
    expected[1].1 = "COMPLETED";
    event_produced(&wait_for_tasks(suite, id, "COMPLETED", &expected).await);
}

async fn verify_that_a_event_based_simple_workflow_is_executed(backend: Backend) {
    let suite = setup(backend, &FILES).await;
    let id = start(&suite, EVENT_BASED_WORKFLOW, json!({})).await;
    runs_on_after_the_event(&suite, &id).await;
}

async fn test_a_workflow_with_event_task_that_is_async_complete(backend: Backend) {
    let suite = setup(backend, &FILES).await;
    // "Register a workflow definition with event task as asyncComplete".
    let mut def = super::definition(FILES[0]);
    def["tasks"][0]["asyncComplete"] = json!(true);
    suite.client().register_overwrite(&def).await.unwrap();

    let id = start(&suite, EVENT_BASED_WORKFLOW, json!({})).await;
    let wf = wait_for_tasks(&suite, &id, "RUNNING", &[("EVENT", "IN_PROGRESS")]).await;
    event_produced(&wf);
    complete_task_at(&suite, &wf, 0).await;
    runs_on_after_the_event(&suite, &id).await;
}

super::harness_features!(
    verify_that_a_event_based_simple_workflow_is_executed,
    test_a_workflow_with_event_task_that_is_async_complete,
);
