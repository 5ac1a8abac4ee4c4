//! `SetVariableTaskSpec`: a SET_VARIABLE task sets the run's variables.

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

super::harness_features!(test_workflow_with_set_variable_task,);
