//! `DoWhileSpec`: DO_WHILE loops over system tasks, and a loop ending on a variable.

use serde_json::{json, Value};
use weft_e2e::Backend;

use super::{
    poll_and_complete, setup, start_correlated, task_by_ref, task_is, tasks, wait_for_state,
    wait_for_tasks,
};

// As the spec's setup.
const FILES: [&str; 11] = [
    "do_while_integration_test.json",
    "do_while_multiple_integration_test.json",
    "do_while_as_subtask_integration_test.json",
    "simple_one_task_sub_workflow_integration_test.json",
    "do_while_iteration_fix_test.json",
    "do_while_sub_workflow_integration_test.json",
    "do_while_five_loop_over_integration_test.json",
    "do_while_system_tasks.json",
    "do_while_with_decision_task.json",
    "do_while_set_variable_fix.json",
    "do_while_high_iteration_test.json",
];

/// `verifyTaskIteration(task, iteration)`: a polled loop task carries its iteration, in
/// its reference name's suffix too.
fn verify_task_iteration(task: &Value, iteration: i64) {
    let reference = task["referenceTaskName"].as_str().unwrap_or_default();
    assert!(
        reference.ends_with(&format!("__{}", task["iteration"])),
        "{task}"
    );
    assert_eq!(task["iteration"], iteration, "{task}");
}

/// `(taskType, status, iteration)` of task `i` (iteration `None`: not checked).
fn task_at(wf: &Value, i: usize, ty: &str, status: &str, iteration: Option<i64>) {
    task_is(wf, i, ty, status);
    if let Some(iteration) = iteration {
        assert_eq!(tasks(wf)[i]["iteration"], iteration, "task {i}");
    }
}

async fn test_workflow_with_2_iterations_of_five_tasks(backend: Backend) {
    let suite = setup(backend, &FILES).await;
    let id = start_correlated(
        &suite,
        "do_while_five_loop_over_integration_test",
        "looptest",
        json!({"loop": 2}),
    )
    .await;
    let worker = "integration.test.worker";
    let mut expected = vec![
        ("DO_WHILE", "IN_PROGRESS"),
        ("LAMBDA", "COMPLETED"),
        ("JSON_JQ_TRANSFORM", "COMPLETED"),
        ("integration_task_1", "SCHEDULED"),
    ];
    let wf = wait_for_tasks(&suite, &id, "RUNNING", &expected).await;
    for i in 1..=3 {
        assert_eq!(tasks(&wf)[i]["iteration"], 1, "task {i}");
    }

    // Each iteration: integration_task_1, a JQ transform, integration_task_2.
    for iteration in [1, 2] {
        let first = expected.len() - 1;
        let polled = poll_and_complete(&suite, "integration_task_1", worker, json!({})).await;
        verify_task_iteration(&polled, iteration);
        expected[first].1 = "COMPLETED";
        expected.extend([
            ("JSON_JQ_TRANSFORM", "COMPLETED"),
            ("integration_task_2", "SCHEDULED"),
        ]);
        wait_for_tasks(&suite, &id, "RUNNING", &expected).await;

        let polled = poll_and_complete(&suite, "integration_task_2", worker, json!({})).await;
        verify_task_iteration(&polled, iteration);
        expected[first + 2].1 = "COMPLETED";
        if iteration == 1 {
            expected.extend([
                ("LAMBDA", "COMPLETED"),
                ("JSON_JQ_TRANSFORM", "COMPLETED"),
                ("integration_task_1", "SCHEDULED"),
            ]);
        } else {
            expected[0].1 = "COMPLETED";
            expected.push(("integration_task_3", "SCHEDULED"));
        }
        let wf = wait_for_tasks(&suite, &id, "RUNNING", &expected).await;
        if iteration == 1 {
            for i in 6..=8 {
                assert_eq!(tasks(&wf)[i]["iteration"], 2, "task {i}");
            }
        } else {
            for i in 6..=10 {
                assert_eq!(tasks(&wf)[i]["iteration"], 2, "task {i}");
            }
            // Outside the loop.
            assert_eq!(tasks(&wf)[11]["iteration"], 0);
        }
    }

    poll_and_complete(&suite, "integration_task_3", worker, json!({})).await;
    expected[11].1 = "COMPLETED";
    let wf = wait_for_tasks(&suite, &id, "COMPLETED", &expected).await;
    assert_eq!(tasks(&wf)[11]["iteration"], 0);
}

async fn test_workflow_with_2_iterations_of_3_system_tasks(backend: Backend) {
    let suite = setup(backend, &FILES).await;
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

async fn test_workflow_with_do_while_task_contains_set_variable_task(backend: Backend) {
    let suite = setup(backend, &FILES).await;
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

/// The fork of `Do_While_Workflow`'s body in iteration `iteration`, after its first task
/// completed: `expected` lists the run's tasks up to that one; the fork's tasks are added
/// as the run shows them, `integration_task_1` and `integration_task_2` are polled and
/// completed; the JOIN is left IN_PROGRESS in `expected` (what follows depends on the
/// feature).
async fn through_the_fork(
    suite: &weft_e2e::Suite,
    id: &str,
    expected: &mut Vec<(&str, &'static str)>,
    iteration: i64,
) {
    let worker = "integration.test.worker";
    let fork = expected.len();
    expected.extend([
        ("FORK", "COMPLETED"),
        ("integration_task_1", "SCHEDULED"),
        ("integration_task_2", "SCHEDULED"),
        ("JOIN", "IN_PROGRESS"),
    ]);
    let wf = wait_for_tasks(suite, id, "RUNNING", expected).await;
    let join = format!("join__{iteration}");
    assert_eq!(task_by_ref(&wf, &join)["taskType"], "JOIN");

    let polled = poll_and_complete(suite, "integration_task_1", worker, json!({})).await;
    verify_task_iteration(&polled, iteration);
    expected[fork + 1].1 = "COMPLETED";
    wait_for_tasks(suite, id, "RUNNING", expected).await;

    let polled = poll_and_complete(suite, "integration_task_2", worker, json!({})).await;
    verify_task_iteration(&polled, iteration);
    expected[fork + 2].1 = "COMPLETED";
}

/// The first steps of "a single iteration Do While task" and of its variant with a sub
/// workflow: the loop's first task, then its fork. Returns the run's tasks as expected
/// once the JOIN completes.
async fn single_iteration_through_the_fork(
    suite: &weft_e2e::Suite,
    id: &str,
) -> Vec<(&'static str, &'static str)> {
    let worker = "integration.test.worker";
    let mut expected = vec![
        ("DO_WHILE", "IN_PROGRESS"),
        ("integration_task_0", "SCHEDULED"),
    ];
    wait_for_tasks(suite, id, "RUNNING", &expected).await;
    let polled = poll_and_complete(suite, "integration_task_0", worker, json!({})).await;
    verify_task_iteration(&polled, 1);
    expected[1].1 = "COMPLETED";
    through_the_fork(suite, id, &mut expected, 1).await;
    expected[5].1 = "COMPLETED";
    expected
}

async fn test_workflow_with_a_single_iteration_do_while_task(backend: Backend) {
    let suite = setup(backend, &FILES).await;
    let id = start_correlated(&suite, "Do_While_Workflow", "looptest", json!({"loop": 1})).await;
    let mut expected = single_iteration_through_the_fork(&suite, &id).await;
    expected[0].1 = "COMPLETED";
    wait_for_tasks(&suite, &id, "COMPLETED", &expected).await;
}

async fn test_workflow_with_a_single_iteration_do_while_task_with_sub_workflow(backend: Backend) {
    let suite = setup(backend, &FILES).await;
    let name = "Do_While_Sub_Workflow";
    let id = start_correlated(&suite, name, "looptest", json!({"loop": 1})).await;
    let mut expected = single_iteration_through_the_fork(&suite, &id).await;
    expected.push(("SUB_WORKFLOW", "IN_PROGRESS"));
    let wf = wait_for_tasks(&suite, &id, "RUNNING", &expected).await;

    let child = task_by_ref(&wf, "st1__1")["subWorkflowId"]
        .as_str()
        .expect("the child's id")
        .to_owned();
    let in_child = "simple_task_in_sub_wf";
    wait_for_tasks(&suite, &child, "RUNNING", &[(in_child, "SCHEDULED")]).await;
    poll_and_complete(&suite, in_child, "subworkflow.task.worker", json!({})).await;
    wait_for_tasks(&suite, &child, "COMPLETED", &[(in_child, "COMPLETED")]).await;

    expected[0].1 = "COMPLETED";
    expected[6].1 = "COMPLETED";
    wait_for_tasks(&suite, &id, "COMPLETED", &expected).await;
}

async fn test_workflow_with_multiple_do_while_tasks_with_multiple_iterations(backend: Backend) {
    let suite = setup(backend, &FILES).await;
    let input = json!({"loop": 2, "loop2": 1});
    let id = start_correlated(&suite, "Do_While_Multiple", "looptest", input).await;
    let worker = "integration.test.worker";
    // The first loop's first iteration, as the single-iteration feature.
    let mut expected = single_iteration_through_the_fork(&suite, &id).await;
    expected.push(("integration_task_0", "SCHEDULED"));
    wait_for_tasks(&suite, &id, "RUNNING", &expected).await;

    // Its second iteration.
    let polled = poll_and_complete(&suite, "integration_task_0", worker, json!({})).await;
    verify_task_iteration(&polled, 2);
    expected[6].1 = "COMPLETED";
    through_the_fork(&suite, &id, &mut expected, 2).await;

    // The first loop ends; the second starts.
    expected[0].1 = "COMPLETED";
    expected[10].1 = "COMPLETED";
    expected.extend([
        ("DO_WHILE", "IN_PROGRESS"),
        ("integration_task_3", "SCHEDULED"),
    ]);
    wait_for_tasks(&suite, &id, "RUNNING", &expected).await;

    let polled = poll_and_complete(&suite, "integration_task_3", worker, json!({})).await;
    verify_task_iteration(&polled, 1);
    expected[11].1 = "COMPLETED";
    expected[12].1 = "COMPLETED";
    wait_for_tasks(&suite, &id, "COMPLETED", &expected).await;
}

async fn test_retrying_a_failed_do_while_workflow(backend: Backend) {
    let suite = setup(backend, &FILES).await;
    // "Update the task definition with no retries".
    let changes = json!({"retryCount": 0});
    super::update_task_def(&suite, "integration_task_0", changes).await;

    let id = start_correlated(&suite, "Do_While_Workflow", "looptest", json!({"loop": 1})).await;
    let worker = "integration.test.worker";
    let mut expected = vec![
        ("DO_WHILE", "IN_PROGRESS"),
        ("integration_task_0", "SCHEDULED"),
    ];
    wait_for_tasks(&suite, &id, "RUNNING", &expected).await;

    let polled =
        super::poll_and_fail(&suite, "integration_task_0", worker, "induced..failure").await;
    verify_task_iteration(&polled, 1);
    expected[0].1 = "CANCELED";
    expected[1].1 = "FAILED";
    wait_for_tasks(&suite, &id, "FAILED", &expected).await;

    super::retry(&suite, &id, false).await;
    expected[0].1 = "IN_PROGRESS";
    expected.push(("integration_task_0", "SCHEDULED"));
    wait_for_tasks(&suite, &id, "RUNNING", &expected).await;

    let polled = poll_and_complete(&suite, "integration_task_0", worker, json!({})).await;
    verify_task_iteration(&polled, 1);
    expected[2].1 = "COMPLETED";
    through_the_fork(&suite, &id, &mut expected, 1).await;
    expected[0].1 = "COMPLETED";
    expected[6].1 = "COMPLETED";
    wait_for_tasks(&suite, &id, "COMPLETED", &expected).await;
}

async fn test_auto_retrying_a_failed_do_while_workflow(backend: Backend) {
    let suite = setup(backend, &FILES).await;
    // "Update the task definition with retryCount to 1 and retryDelaySeconds to 0".
    let changes = json!({"retryCount": 1, "retryDelaySeconds": 0});
    super::update_task_def(&suite, "integration_task_0", changes).await;

    let id = start_correlated(&suite, "Do_While_Workflow", "looptest", json!({"loop": 1})).await;
    let worker = "integration.test.worker";
    wait_for_tasks(
        &suite,
        &id,
        "RUNNING",
        &[
            ("DO_WHILE", "IN_PROGRESS"),
            ("integration_task_0", "SCHEDULED"),
        ],
    )
    .await;

    let polled =
        super::poll_and_fail(&suite, "integration_task_0", worker, "induced..failure").await;
    verify_task_iteration(&polled, 1);
    let wf = wait_for_tasks(
        &suite,
        &id,
        "RUNNING",
        &[
            ("DO_WHILE", "IN_PROGRESS"),
            ("integration_task_0", "FAILED"),
            ("integration_task_0", "SCHEDULED"),
        ],
    )
    .await;
    let (failed, retry) = (&tasks(&wf)[1], &tasks(&wf)[2]);
    assert_eq!(failed["retried"], true, "{failed}");
    assert_eq!(retry["retryCount"], 1, "{retry}");
    super::retried_by_next(&wf, 1);

    let polled = poll_and_complete(&suite, "integration_task_0", worker, json!({})).await;
    verify_task_iteration(&polled, 1);
    let mut expected = vec![
        ("DO_WHILE", "IN_PROGRESS"),
        ("integration_task_0", "FAILED"),
        ("integration_task_0", "COMPLETED"),
    ];
    through_the_fork(&suite, &id, &mut expected, 1).await;
    expected[0].1 = "COMPLETED";
    expected[6].1 = "COMPLETED";
    wait_for_tasks(&suite, &id, "COMPLETED", &expected).await;
}

async fn test_workflow_with_a_iteration_do_while_task_as_subtask_of_a_forkjoin_task(
    backend: Backend,
) {
    let suite = setup(backend, &FILES).await;
    let id = start_correlated(&suite, "Do_While_SubTask", "looptest", json!({"loop": 1})).await;
    let worker = "integration.test.worker";
    let mut expected = vec![
        ("FORK", "COMPLETED"),
        ("DO_WHILE", "IN_PROGRESS"),
        ("integration_task_2", "SCHEDULED"),
        ("JOIN", "IN_PROGRESS"),
        ("integration_task_0", "SCHEDULED"),
    ];
    let wf = wait_for_tasks(&suite, &id, "RUNNING", &expected).await;
    assert_eq!(task_by_ref(&wf, "join")["taskType"], "JOIN");

    let polled = poll_and_complete(&suite, "integration_task_0", worker, json!({})).await;
    verify_task_iteration(&polled, 1);
    expected[4].1 = "COMPLETED";
    expected.push(("integration_task_1", "SCHEDULED"));
    wait_for_tasks(&suite, &id, "RUNNING", &expected).await;

    let polled = poll_and_complete(&suite, "integration_task_1", worker, json!({})).await;
    verify_task_iteration(&polled, 1);
    expected[1].1 = "COMPLETED";
    expected[5].1 = "COMPLETED";
    wait_for_tasks(&suite, &id, "RUNNING", &expected).await;

    poll_and_complete(&suite, "integration_task_2", worker, json!({})).await;
    for i in [2, 3] {
        expected[i].1 = "COMPLETED";
    }
    wait_for_tasks(&suite, &id, "COMPLETED", &expected).await;
}

async fn test_workflow_with_do_while_task_contains_loop_over_task_that_use_iteration_in_script_expression(
    backend: Backend,
) {
    let suite = setup(backend, &FILES).await;
    let name = "Do_While_Workflow_Iteration_Fix";
    let id = start_correlated(&suite, name, "looptest", json!({"loop": 2})).await;
    let wf = wait_for_tasks(
        &suite,
        &id,
        "COMPLETED",
        &[
            ("DO_WHILE", "COMPLETED"),
            ("LAMBDA", "COMPLETED"),
            ("LAMBDA", "COMPLETED"),
        ],
    )
    .await;
    assert_eq!(tasks(&wf)[1]["outputData"]["result"], 0);
    assert_eq!(tasks(&wf)[2]["outputData"]["result"], 1);
}

async fn test_workflow_with_do_while_task_contains_decision_task(backend: Backend) {
    let suite = setup(backend, &FILES).await;
    let name = "DO_While_with_Decision_task";
    let id = start_correlated(&suite, name, "looptest", json!({"list": [1, 2]})).await;
    let mut expected = vec![
        ("DO_WHILE", "IN_PROGRESS"),
        ("INLINE", "COMPLETED"),
        ("SWITCH", "COMPLETED"),
        ("WAIT", "IN_PROGRESS"),
    ];
    let wf = wait_for_tasks(&suite, &id, "RUNNING", &expected).await;

    super::complete_task_at(&suite, &wf, 3).await;
    expected[3].1 = "COMPLETED";
    expected.extend([
        ("INLINE", "COMPLETED"),
        ("INLINE", "COMPLETED"),
        ("SWITCH", "COMPLETED"),
        ("WAIT", "IN_PROGRESS"),
    ]);
    let wf = wait_for_tasks(&suite, &id, "RUNNING", &expected).await;
    assert_eq!(tasks(&wf)[0]["iteration"], 2);

    super::complete_task_at(&suite, &wf, 7).await;
    expected[0].1 = "COMPLETED";
    expected[7].1 = "COMPLETED";
    expected.push(("INLINE", "COMPLETED"));
    let wf = wait_for_tasks(&suite, &id, "COMPLETED", &expected).await;
    assert_eq!(tasks(&wf)[0]["iteration"], 2);
}

async fn test_do_while_with_500_lambda_iterations_completes_without_stack_overflow_error(
    backend: Backend,
) {
    let suite = setup(backend, &FILES).await;
    let name = "do_while_high_iteration_test";
    let id = start_correlated(&suite, name, "overflow-regression", json!({"loop": 500})).await;
    let wf = wait_for_state(&suite, &id, "COMPLETED", 501).await;
    task_at(&wf, 0, "DO_WHILE", "COMPLETED", Some(500));
    task_at(&wf, 1, "LAMBDA", "COMPLETED", Some(1));
    task_at(&wf, 500, "LAMBDA", "COMPLETED", Some(500));
}

async fn test_do_while_iteration_counter_is_correct_at_500_iterations_issue_799(backend: Backend) {
    let suite = setup(backend, &FILES).await;
    let name = "Do_While_Workflow_Iteration_Fix";
    let input = json!({"loop": 500});
    let id = start_correlated(&suite, name, "iteration-count-regression", input).await;
    let wf = wait_for_state(&suite, &id, "COMPLETED", 501).await;
    task_at(&wf, 0, "DO_WHILE", "COMPLETED", Some(500));
    task_at(&wf, 1, "LAMBDA", "COMPLETED", None);
    assert_eq!(tasks(&wf)[1]["outputData"]["result"], 0);
    task_at(&wf, 500, "LAMBDA", "COMPLETED", None);
    assert_eq!(tasks(&wf)[500]["outputData"]["result"], 499);
}

super::harness_features!(
    test_workflow_with_do_while_task_contains_loop_over_task_that_use_iteration_in_script_expression,
    test_workflow_with_2_iterations_of_five_tasks,
    test_workflow_with_2_iterations_of_3_system_tasks,
    test_workflow_with_do_while_task_contains_set_variable_task,
    test_workflow_with_a_single_iteration_do_while_task,
    test_workflow_with_a_single_iteration_do_while_task_with_sub_workflow,
    test_workflow_with_multiple_do_while_tasks_with_multiple_iterations,
    test_auto_retrying_a_failed_do_while_workflow,
    test_retrying_a_failed_do_while_workflow,
    test_workflow_with_a_iteration_do_while_task_as_subtask_of_a_forkjoin_task,
    test_workflow_with_do_while_task_contains_decision_task,
    test_do_while_with_500_lambda_iterations_completes_without_stack_overflow_error,
    test_do_while_iteration_counter_is_correct_at_500_iterations_issue_799,
);
