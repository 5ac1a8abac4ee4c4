//! `DoWhileSpec`: DO_WHILE loops over system tasks, and a loop ending on a variable.

use serde_json::json;

use super::{poll_and_complete, setup, start_correlated, task_is, tasks, wait_for_state};

// The definitions of the ported features only: the spec's setup also registers those of
// features not ported (docs/conductor-harness.md).
const FILES: [&str; 2] = [
    "do_while_system_tasks.json",
    "do_while_set_variable_fix.json",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_workflow_with_2_iterations_of_3_system_tasks() {
    let suite = setup(&FILES).await;
    let id = start_correlated(
        &suite,
        "do_while_system_tasks",
        "looptest",
        json!({"loop": 2}),
    )
    .await;
    let wf = wait_for_state(&suite, &id, "RUNNING", 8).await;
    task_is(&wf, 0, "DO_WHILE", "COMPLETED");
    let expected = [
        ("LAMBDA", 1),
        ("JSON_JQ_TRANSFORM", 1),
        ("JSON_JQ_TRANSFORM", 1),
        ("LAMBDA", 2),
        ("JSON_JQ_TRANSFORM", 2),
        ("JSON_JQ_TRANSFORM", 2),
    ];
    for (i, (ty, iteration)) in expected.iter().enumerate() {
        task_is(&wf, i + 1, ty, "COMPLETED");
        assert_eq!(tasks(&wf)[i + 1]["iteration"], *iteration, "task {}", i + 1);
    }
    task_is(&wf, 7, "integration_task_1", "SCHEDULED");
    // Outside the loop.
    assert_eq!(tasks(&wf)[7]["iteration"], 0);

    poll_and_complete(
        &suite,
        "integration_task_1",
        "integration.test.worker",
        json!({}),
    )
    .await;
    let wf = wait_for_state(&suite, &id, "COMPLETED", 8).await;
    task_is(&wf, 7, "integration_task_1", "COMPLETED");
    assert_eq!(tasks(&wf)[7]["iteration"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_workflow_with_do_while_task_contains_set_variable_task() {
    let suite = setup(&FILES).await;
    let id = start_correlated(
        &suite,
        "do_while_Set_variable_fix",
        "looptest",
        json!({"value": 2}),
    )
    .await;
    let wf = wait_for_state(&suite, &id, "COMPLETED", 2).await;
    task_is(&wf, 0, "DO_WHILE", "COMPLETED");
    task_is(&wf, 1, "SET_VARIABLE", "COMPLETED");
    assert_eq!(tasks(&wf)[1]["inputData"]["value"], "0");
}
