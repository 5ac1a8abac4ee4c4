//! `SetVariableTaskSpec`: a SET_VARIABLE task sets the run's variables, within the size
//! the harness allows them (2 kilobytes).

use serde_json::json;
use weft_e2e::Backend;

use super::{setup, start, tasks, wait_for};

const SET_VARIABLE_WF: &str = "test_set_variable_wf";
const FILES: [&str; 1] = ["simple_set_variable_workflow_integration_test.json"];

async fn test_workflow_with_set_variable_task(backend: Backend) {
    let suite = setup(backend, &FILES).await;
    // given: workflow input
    let input = json!({"var": "var_test_value"});
    // when: the workflow which has the set variable task is started
    let id = start(&suite, SET_VARIABLE_WF, input).await;
    // then: the task is completed and the variables were set
    let wf = wait_for(&suite, &id, "COMPLETED").await;
    let t = tasks(&wf);
    assert_eq!(t.len(), 1);
    assert_eq!(t[0]["taskType"], "SET_VARIABLE");
    assert_eq!(t[0]["status"], "COMPLETED");
    assert_eq!(wf["variables"], json!({"var": "var_test_value"}));
    assert_eq!(
        wf["output"],
        json!({"variables": {"var": "var_test_value"}})
    );
}

async fn test_workflow_with_set_variable_task_passing_variables_payload_size_threshold(
    backend: Backend,
) {
    // The harness's `conductor.app.maxWorkflowVariablesPayloadSizeThreshold`.
    let max_threshold = 2;
    let settings = [("WEFT_MAX_VARIABLES_KB", "2")];
    let suite = super::setup_with(backend, &FILES, &settings).await;
    let var = "01234567".repeat(1 + max_threshold * 1024 / 8);
    let id = start(&suite, SET_VARIABLE_WF, json!({ "var": var })).await;
    // `{"var":"…"}`: 17 bytes around the value, as Conductor counts them.
    let extra_hashmap_size = 17;
    let expected_error_message = format!(
        "The variables payload size: {} of workflow: {id} is greater than the permissible \
         limit: {max_threshold} kilobytes",
        extra_hashmap_size + max_threshold * 1024 + 1
    );
    let wf = wait_for(&suite, &id, "FAILED").await;
    let t = tasks(&wf);
    assert_eq!(t.len(), 1);
    assert_eq!(t[0]["taskType"], "SET_VARIABLE");
    assert_eq!(t[0]["status"], "FAILED_WITH_TERMINAL_ERROR");
    assert_eq!(t[0]["reasonForIncompletion"], json!(expected_error_message));
    assert_eq!(wf["variables"], json!({}));
    assert_eq!(wf["output"], json!({"variables": {}}));
}

super::harness_features!(
    test_workflow_with_set_variable_task,
    test_workflow_with_set_variable_task_passing_variables_payload_size_threshold,
);
