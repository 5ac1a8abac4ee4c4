//! `LambdaAndTerminateTaskSpec`: a LAMBDA task. The spec's TERMINATE features fail on
//! Weft today; docs/conductor-harness.md says how.

use serde_json::json;

use super::{setup, start, tasks, wait_for};

const WORKFLOW_WITH_LAMBDA_TASK: &str = "test_lambda_wf";
// The definition this feature uses, of the seven the spec's setup registers.
const FILES: [&str; 1] = ["simple_lambda_workflow_integration_test.json"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_workflow_with_lambda_task() {
    let suite = setup(&FILES).await;
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
