//! `ForkJoinSpec`: forks and their JOINs, nested, with failures and sub workflows.

use serde_json::json;
use weft_e2e::Backend;

use super::{poll_and_complete, poll_and_fail, setup, start_correlated, tasks, wait_for_tasks};

const FORK_JOIN_WF: &str = "FanInOutTest";
// As the spec's setup.
const FILES: [&str; 11] = [
    "fork_join_integration_test.json",
    "fork_join_with_no_task_retry_integration_test.json",
    "fork_join_with_no_permissive_task_retry_integration_test.json",
    "nested_fork_join_integration_test.json",
    "simple_workflow_1_integration_test.json",
    "nested_fork_join_with_sub_workflow_integration_test.json",
    "simple_one_task_sub_workflow_integration_test.json",
    "fork_join_with_optional_sub_workflow_forks_integration_test.json",
    "fork_join_sub_workflow.json",
    "fork_join_permissive_integration_test.json",
    "fork_join_with_permissive_sub_workflow_forks_integration_test.json",
];

const WORKER: &str = "task1.worker";

/// `FanInOutTest` up to its fork's first branch done: `t1` then `t3` on one side, `t2`
/// still waiting on the other. Returns the run's tasks as expected then.
async fn first_branch_done(suite: &weft_e2e::Suite, id: &str) -> Vec<(&'static str, &'static str)> {
    let mut expected = vec![
        ("FORK", "COMPLETED"),
        ("integration_task_1", "SCHEDULED"),
        ("integration_task_2", "SCHEDULED"),
        ("JOIN", "IN_PROGRESS"),
    ];
    wait_for_tasks(suite, id, "RUNNING", &expected).await;

    poll_and_complete(suite, "integration_task_1", WORKER, json!({})).await;
    expected[1].1 = "COMPLETED";
    expected.push(("integration_task_3", "SCHEDULED"));
    wait_for_tasks(suite, id, "RUNNING", &expected).await;
    expected
}

async fn test_a_simple_workflow_with_fork_join_success_flow(backend: Backend) {
    let suite = setup(backend, &FILES).await;
    let id = start_correlated(&suite, FORK_JOIN_WF, "fanoutTest", json!({})).await;
    let mut expected = first_branch_done(&suite, &id).await;

    poll_and_complete(&suite, "integration_task_3", WORKER, json!({})).await;
    expected[4].1 = "COMPLETED";
    wait_for_tasks(&suite, &id, "RUNNING", &expected).await;

    poll_and_complete(&suite, "integration_task_2", WORKER, json!({})).await;
    expected[2].1 = "COMPLETED";
    expected[3].1 = "COMPLETED";
    expected.push(("integration_task_4", "SCHEDULED"));
    wait_for_tasks(&suite, &id, "RUNNING", &expected).await;

    poll_and_complete(&suite, "integration_task_4", WORKER, json!({})).await;
    expected[5].1 = "COMPLETED";
    wait_for_tasks(&suite, &id, "COMPLETED", &expected).await;
}

async fn test_a_simple_workflow_with_fork_join_failure_flow(backend: Backend) {
    let suite = setup(backend, &FILES).await;
    // "Ensure that 'integration_task_2' has a retry count of 0".
    let changes = json!({"retryCount": 0, "timeoutSeconds": 0});
    super::update_task_def(&suite, "integration_task_2", changes).await;
    let id = start_correlated(&suite, FORK_JOIN_WF, "fanoutTest", json!({})).await;
    let mut expected = first_branch_done(&suite, &id).await;

    poll_and_fail(&suite, "integration_task_2", WORKER, "Failed....").await;
    expected[2].1 = "FAILED";
    expected[3].1 = "CANCELED";
    expected[4].1 = "CANCELED";
    wait_for_tasks(&suite, &id, "FAILED", &expected).await;
}

/// The steps of "Test retrying a failed fork join workflow" and its permissive variant
/// (`FanInOutTest_2`, `FanInOutPermissiveTest_2`, whose tasks of type `<prefix>_RT_n` have
/// no retry): up to the failed run, the retry, and the run completed.
async fn retry_a_failed_fork(backend: Backend, workflow: &str, prefix: &str, permissive: bool) {
    let suite = setup(backend, &FILES).await;
    let types: Vec<String> = (0..=4).map(|n| format!("{prefix}_RT_{n}")).collect();
    let ty = |n: usize| types[n].as_str();
    let id = start_correlated(&suite, workflow, "fanoutTest", json!({})).await;
    let mut expected = vec![
        ("FORK", "COMPLETED"),
        (ty(1), "SCHEDULED"),
        (ty(2), "SCHEDULED"),
        ("JOIN", "IN_PROGRESS"),
    ];
    wait_for_tasks(&suite, &id, "RUNNING", &expected).await;

    poll_and_complete(&suite, ty(1), WORKER, json!({})).await;
    expected[1].1 = "COMPLETED";
    expected.push((ty(3), "SCHEDULED"));
    wait_for_tasks(&suite, &id, "RUNNING", &expected).await;

    poll_and_fail(&suite, ty(2), WORKER, "Failed....").await;
    expected[2].1 = "FAILED";
    if permissive {
        // "the workflow is not in the failed state, until the completion of the
        // permissive forked tasks"
        wait_for_tasks(&suite, &id, "RUNNING", &expected).await;
        poll_and_fail(&suite, ty(3), WORKER, "Failed....").await;
        expected[3].1 = "FAILED";
        expected[4].1 = "FAILED";
    } else {
        expected[3].1 = "CANCELED";
        expected[4].1 = "CANCELED";
    }
    wait_for_tasks(&suite, &id, "FAILED", &expected).await;

    super::retry(&suite, &id, false).await;
    expected[3].1 = "IN_PROGRESS";
    expected.extend([(ty(2), "SCHEDULED"), (ty(3), "SCHEDULED")]);
    wait_for_tasks(&suite, &id, "RUNNING", &expected).await;

    poll_and_complete(&suite, ty(3), WORKER, json!({})).await;
    poll_and_complete(&suite, ty(2), WORKER, json!({})).await;
    expected[5].1 = "COMPLETED";
    expected[6].1 = "COMPLETED";
    expected[3].1 = "COMPLETED";
    expected.push((ty(4), "SCHEDULED"));
    wait_for_tasks(&suite, &id, "RUNNING", &expected).await;
    poll_and_complete(&suite, ty(4), WORKER, json!({})).await;
    expected[7].1 = "COMPLETED";
    wait_for_tasks(&suite, &id, "COMPLETED", &expected).await;
}

async fn test_retrying_a_failed_fork_join_workflow(backend: Backend) {
    retry_a_failed_fork(backend, "FanInOutTest_2", "integration_task_0", false).await;
}

async fn test_retrying_a_failed_permissive_fork_join_workflow(backend: Backend) {
    let workflow = "FanInOutPermissiveTest_2";
    retry_a_failed_fork(backend, workflow, "integration_p_task_0", true).await;
}

/// Sets the newest of `expected`'s tasks of type `ty` to `status`.
fn mark(expected: &mut [(&str, &'static str)], ty: &str, status: &'static str) {
    let task = expected.iter_mut().rev().find(|(t, _)| *t == ty);
    task.unwrap_or_else(|| panic!("no {ty} expected")).1 = status;
}

/// The tasks `FanInOutNestedTest` starts with: the outer fork's first branch, the inner
/// fork and its tasks and JOIN, the outer JOIN.
fn nested_forks_first_tasks() -> Vec<(&'static str, &'static str)> {
    vec![
        ("FORK", "COMPLETED"),
        ("integration_task_11", "SCHEDULED"),
        ("FORK", "COMPLETED"),
        ("integration_task_12", "SCHEDULED"),
        ("integration_task_13", "SCHEDULED"),
        ("JOIN", "IN_PROGRESS"),
        ("JOIN", "IN_PROGRESS"),
    ]
}

/// The inner JOIN (task 5) waits for `t14` and `t20`, the outer one (task `outer`) for
/// `outer_join_on`.
fn joins_wait_for(wf: &serde_json::Value, outer: usize, outer_join_on: serde_json::Value) {
    let tasks = super::tasks(wf);
    assert_eq!(tasks[5]["inputData"]["joinOn"], json!(["t14", "t20"]));
    assert_eq!(tasks[outer]["inputData"]["joinOn"], outer_join_on);
}

/// The nested forks' tasks (`FanInOutNestedTest` and its variant with a sub workflow),
/// from the first tasks of their branches to `integration_task_19` scheduled; `joins`
/// checks the JOINs' `joinOn` at each step.
async fn nested_forks_up_to_t19(
    suite: &weft_e2e::Suite,
    id: &str,
    expected: &mut Vec<(&'static str, &'static str)>,
    joins: &dyn Fn(&serde_json::Value),
) {
    let wf = wait_for_tasks(suite, id, "RUNNING", expected).await;
    joins(&wf);
    let refs: Vec<&str> = super::tasks(&wf)
        .iter()
        .filter_map(|t| t["referenceTaskName"].as_str())
        .collect();
    for r in ["t11", "t12", "t13", "fork1", "fork2"] {
        assert!(refs.contains(&r), "{r} in {refs:?}");
    }
    for r in ["t1", "t2", "t16"] {
        assert!(!refs.contains(&r), "{r} in {refs:?}");
    }

    for n in [11, 12, 13] {
        let ty = format!("integration_task_{n}");
        poll_and_complete(suite, &ty, &format!("task{n}.worker"), json!({})).await;
    }
    for ty in [
        "integration_task_11",
        "integration_task_12",
        "integration_task_13",
    ] {
        mark(expected, ty, "COMPLETED");
    }
    expected.extend([
        ("integration_task_14", "SCHEDULED"),
        ("DECISION", "COMPLETED"),
        ("integration_task_16", "SCHEDULED"),
    ]);
    joins(&wait_for_tasks(suite, id, "RUNNING", expected).await);

    poll_and_complete(suite, "integration_task_16", "task16.worker", json!({})).await;
    poll_and_complete(suite, "integration_task_14", "task14.worker", json!({})).await;
    mark(expected, "integration_task_14", "COMPLETED");
    mark(expected, "integration_task_16", "COMPLETED");
    expected.push(("integration_task_19", "SCHEDULED"));
    joins(&wait_for_tasks(suite, id, "RUNNING", expected).await);
}

/// The nested forks' last tasks, from `integration_task_19` to the run's completion.
async fn nested_forks_from_t19(
    suite: &weft_e2e::Suite,
    id: &str,
    expected: &mut Vec<(&'static str, &'static str)>,
    joins: &dyn Fn(&serde_json::Value),
) {
    poll_and_complete(suite, "integration_task_19", "task19.worker", json!({})).await;
    mark(expected, "integration_task_19", "COMPLETED");
    expected.push(("integration_task_20", "SCHEDULED"));
    joins(&wait_for_tasks(suite, id, "RUNNING", expected).await);

    poll_and_complete(suite, "integration_task_20", "task20.worker", json!({})).await;
    mark(expected, "integration_task_20", "COMPLETED");
    for task in expected.iter_mut().filter(|(ty, _)| *ty == "JOIN") {
        task.1 = "COMPLETED";
    }
    expected.push(("integration_task_15", "SCHEDULED"));
    joins(&wait_for_tasks(suite, id, "RUNNING", expected).await);

    poll_and_complete(suite, "integration_task_15", "task15.worker", json!({})).await;
    mark(expected, "integration_task_15", "COMPLETED");
    wait_for_tasks(suite, id, "COMPLETED", expected).await;
}

async fn test_nested_fork_join_workflow_success_flow(backend: Backend) {
    let suite = setup(backend, &FILES).await;
    let input = json!({"case": "a"});
    let id = start_correlated(&suite, "FanInOutNestedTest", "fork_join_nested_test", input).await;
    let mut expected = nested_forks_first_tasks();
    let joins = |wf: &serde_json::Value| joins_wait_for(wf, 6, json!(["t11", "join2"]));
    nested_forks_up_to_t19(&suite, &id, &mut expected, &joins).await;
    nested_forks_from_t19(&suite, &id, &mut expected, &joins).await;
}

async fn test_nested_workflow_which_contains_a_sub_workflow_task(backend: Backend) {
    let suite = setup(backend, &FILES).await;
    let input = json!({"case": "a"});
    let name = "FanInOutNestedSubWorkflowTest";
    let id = start_correlated(&suite, name, "fork_join_nested_test", input).await;
    let mut expected = nested_forks_first_tasks();
    expected.insert(6, ("SUB_WORKFLOW", "IN_PROGRESS"));
    let joins = |wf: &serde_json::Value| joins_wait_for(wf, 7, json!(["t11", "join2", "sw1"]));
    nested_forks_up_to_t19(&suite, &id, &mut expected, &joins).await;

    // The child runs `integration_test_wf`: two tasks.
    let wf = suite.client().get(&id).await.unwrap();
    let child = super::tasks(&wf)[6]["subWorkflowId"]
        .as_str()
        .expect("the child's id")
        .to_owned();
    wait_for_tasks(
        &suite,
        &child,
        "RUNNING",
        &[("integration_task_1", "SCHEDULED")],
    )
    .await;
    poll_and_complete(&suite, "integration_task_1", "task1.worker", json!({})).await;
    poll_and_complete(&suite, "integration_task_2", "task2.worker", json!({})).await;
    let done = [
        ("integration_task_1", "COMPLETED"),
        ("integration_task_2", "COMPLETED"),
    ];
    wait_for_tasks(&suite, &child, "COMPLETED", &done).await;
    mark(&mut expected, "SUB_WORKFLOW", "COMPLETED");
    joins(&wait_for_tasks(&suite, &id, "RUNNING", &expected).await);

    nested_forks_from_t19(&suite, &id, &mut expected, &joins).await;
}

/// Starts `name`, a fork of two SUB_WORKFLOW tasks (`st1`, `st2`) and its JOIN, until both
/// children run: the run's id, its tasks as expected then, the children's ids.
async fn fork_of_two_children(
    suite: &weft_e2e::Suite,
    name: &str,
) -> (String, Vec<(&'static str, &'static str)>, Vec<String>) {
    let input = json!({"param1": "p1 value", "param2": "p2 value"});
    let id = super::start(suite, name, input).await;
    let expected = vec![
        ("FORK", "COMPLETED"),
        ("SUB_WORKFLOW", "IN_PROGRESS"),
        ("SUB_WORKFLOW", "IN_PROGRESS"),
        ("JOIN", "IN_PROGRESS"),
    ];
    let wf = wait_for_tasks(suite, &id, "RUNNING", &expected).await;
    assert_eq!(
        super::tasks(&wf)[3]["inputData"]["joinOn"],
        json!(["st1", "st2"])
    );
    let children = super::child_ids(&wf, &[1, 2]);
    for child in &children {
        super::wait_for(suite, child, "RUNNING").await;
    }
    (id, expected, children)
}

async fn test_fork_join_with_sub_workflows_containing_optional_tasks(backend: Backend) {
    let suite = setup(backend, &FILES).await;
    let name = "integration_test_fork_join_optional_sw";
    let (id, mut expected, children) = fork_of_two_children(&suite, name).await;
    let in_child = "simple_task_in_sub_wf";
    for child in &children {
        wait_for_tasks(&suite, child, "RUNNING", &[(in_child, "SCHEDULED")]).await;
    }

    for _ in &children {
        poll_and_fail(&suite, in_child, "task1.worker", "Failed....").await;
    }
    for child in &children {
        wait_for_tasks(&suite, child, "FAILED", &[(in_child, "FAILED")]).await;
    }
    for task in &mut expected[1..=3] {
        task.1 = "COMPLETED_WITH_ERRORS";
    }
    wait_for_tasks(&suite, &id, "COMPLETED", &expected).await;

    // "do a rerun on the sub workflow": the child runs again; its parent stays as it is.
    let rerun = json!({"reRunFromWorkflowId": children[0]});
    let path = format!("/api/workflow/{}/rerun", children[0]);
    let r = suite.client().post_json(&path, &rerun).await.unwrap();
    assert_eq!(r.status, 200, "{}", r.text);
    wait_for_tasks(&suite, &children[0], "RUNNING", &[(in_child, "SCHEDULED")]).await;
    wait_for_tasks(&suite, &id, "COMPLETED", &expected).await;
}

async fn test_fork_join_with_sub_workflow_task_using_task_definition(backend: Backend) {
    let suite = setup(backend, &FILES).await;
    let input = json!({"param1": "p1 value", "param2": "p2 value"});
    let id = super::start(&suite, "integration_test_fork_join_sw", input).await;
    let mut expected = vec![
        ("FORK", "COMPLETED"),
        ("SUB_WORKFLOW", "IN_PROGRESS"),
        ("integration_task_2", "SCHEDULED"),
        ("JOIN", "IN_PROGRESS"),
    ];
    let child_at = |wf: &serde_json::Value, i: usize| {
        assert_eq!(
            super::tasks(wf)[3]["inputData"]["joinOn"],
            json!(["st1", "t2"])
        );
        super::tasks(wf)[i]["subWorkflowId"]
            .as_str()
            .expect("the child's id")
            .to_owned()
    };
    let wf = wait_for_tasks(&suite, &id, "RUNNING", &expected).await;
    let child = child_at(&wf, 1);
    let in_child = "simple_task_in_sub_wf";
    wait_for_tasks(&suite, &child, "RUNNING", &[(in_child, "SCHEDULED")]).await;

    // The child fails; `sub_workflow_task` is retried once (its task definition).
    poll_and_fail(&suite, in_child, "task1.worker", "Failed....").await;
    wait_for_tasks(&suite, &child, "FAILED", &[(in_child, "FAILED")]).await;
    expected[1].1 = "FAILED";
    expected.push(("SUB_WORKFLOW", "IN_PROGRESS"));
    let wf = wait_for_tasks(&suite, &id, "RUNNING", &expected).await;
    assert_eq!(super::tasks(&wf)[4]["retryCount"], 1);
    let retried_child = child_at(&wf, 4);
    assert_ne!(retried_child, child, "the retry runs a new child");

    wait_for_tasks(
        &suite,
        &retried_child,
        "RUNNING",
        &[(in_child, "SCHEDULED")],
    )
    .await;
    poll_and_complete(&suite, in_child, "subworkflow.task.worker", json!({})).await;
    let done = [(in_child, "COMPLETED")];
    wait_for_tasks(&suite, &retried_child, "COMPLETED", &done).await;
    expected[4].1 = "COMPLETED";
    wait_for_tasks(&suite, &id, "RUNNING", &expected).await;

    poll_and_complete(&suite, "integration_task_2", "task2.worker", json!({})).await;
    expected[2].1 = "COMPLETED";
    expected[3].1 = "COMPLETED";
    wait_for_tasks(&suite, &id, "COMPLETED", &expected).await;
}

async fn test_a_simple_workflow_with_fork_join_permissive_failure_flow(backend: Backend) {
    let suite = setup(backend, &FILES).await;
    // "Ensure that 'integration_task_1' has a retry count of 0".
    let changes = json!({"retryCount": 0, "timeoutSeconds": 0});
    super::update_task_def(&suite, "integration_task_1", changes).await;
    let id = start_correlated(&suite, "FanInOutPermissiveTest", "fanoutTest", json!({})).await;
    let mut expected = vec![
        ("FORK", "COMPLETED"),
        ("integration_task_1", "SCHEDULED"),
        ("integration_task_2", "SCHEDULED"),
        ("JOIN", "IN_PROGRESS"),
    ];
    let wf = wait_for_tasks(&suite, &id, "RUNNING", &expected).await;
    for t in &tasks(&wf)[1..3] {
        assert_eq!(t["workflowTask"]["permissive"], true, "{t}");
    }

    poll_and_fail(&suite, "integration_task_1", WORKER, "Failed...").await;
    expected[1].1 = "FAILED";
    wait_for_tasks(&suite, &id, "RUNNING", &expected).await;

    poll_and_complete(&suite, "integration_task_2", WORKER, json!({})).await;
    expected[2].1 = "COMPLETED";
    expected[3].1 = "FAILED";
    wait_for_tasks(&suite, &id, "FAILED", &expected).await;
}

async fn test_fork_join_with_permissive_sub_workflow_forks_terminated_by_the_user(
    backend: Backend,
) {
    let suite = setup(backend, &FILES).await;
    let name = "integration_test_fork_join_permissive_sw";
    let (id, mut expected, children) = fork_of_two_children(&suite, name).await;

    // "both the sub workflows are terminated by the user"
    let reason = "terminated by the user";
    for child in &children {
        super::terminate(&suite, child, reason).await;
    }
    for child in &children {
        super::wait_for(&suite, child, "TERMINATED").await;
    }
    for task in &mut expected[1..] {
        task.1 = "CANCELED";
    }
    wait_for_tasks(&suite, &id, "TERMINATED", &expected).await;
}

super::harness_features!(
    test_fork_join_with_permissive_sub_workflow_forks_terminated_by_the_user,
    test_a_simple_workflow_with_fork_join_success_flow,
    test_a_simple_workflow_with_fork_join_failure_flow,
    test_nested_fork_join_workflow_success_flow,
    test_nested_workflow_which_contains_a_sub_workflow_task,
    test_fork_join_with_sub_workflows_containing_optional_tasks,
    test_fork_join_with_sub_workflow_task_using_task_definition,
    test_a_simple_workflow_with_fork_join_permissive_failure_flow,
    test_retrying_a_failed_fork_join_workflow,
    test_retrying_a_failed_permissive_fork_join_workflow,
);
