//! `SubWorkflowRetrySpec`: retries at each level of three runs (root, mid-level, leaf)
//! that failed together because a task of the leaf failed, with and without
//! `resumeSubworkflowTasks`.

use serde_json::{json, Value};
use weft_e2e::{Backend, Suite};

use super::{child_ids, poll_and_complete, poll_and_fail, setup, tasks, wait_for_tasks};

const WORKFLOW_WITH_SUBWORKFLOW: &str = "integration_test_wf_with_sub_wf";
const SIMPLE_WORKFLOW: &str = "integration_test_wf";
// As the spec's setup.
const FILES: [&str; 3] = [
    "simple_one_task_sub_workflow_integration_test.json",
    "simple_workflow_1_integration_test.json",
    "workflow_with_sub_workflow_1_integration_test.json",
];
const WORKER_1: &str = "task1.integration.worker";
const WORKER_2: &str = "task2.integration.worker";

/// The three runs of the spec's setup, all FAILED.
struct Failed {
    suite: Suite,
    root: String,
    mid: String,
    leaf: String,
}

/// A root and a mid-level run: `integration_task_1`, then the SUB_WORKFLOW task.
fn parent_tasks(sub_workflow: &'static str) -> Vec<(&'static str, &'static str)> {
    vec![
        ("integration_task_1", "COMPLETED"),
        ("SUB_WORKFLOW", sub_workflow),
    ]
}

/// The spec's `setup()`: `integration_task_2` without retries, a root run whose child
/// (mid-level) runs a child (leaf) of `integration_test_wf`, whose `integration_task_2`
/// fails: the three runs end FAILED.
async fn three_failed_runs(backend: Backend) -> Failed {
    let suite = setup(backend, &FILES).await;
    let changes = json!({"retryCount": 0});
    super::update_task_def(&suite, "integration_task_2", changes).await;
    let input = json!({"param1": "p1 value", "param2": "p2 value",
                       "subwf": WORKFLOW_WITH_SUBWORKFLOW, "nextSubwf": SIMPLE_WORKFLOW});
    let root = super::start_correlated(
        &suite,
        WORKFLOW_WITH_SUBWORKFLOW,
        "retry_on_root_in_3level_wf",
        input,
    )
    .await;
    let mid = through_to_the_child(&suite, &root).await;
    let leaf = through_to_the_child(&suite, &mid).await;
    waits_for_task_1(&suite, &leaf).await;

    poll_and_complete(
        &suite,
        "integration_task_1",
        WORKER_1,
        json!({"op": "task1.done"}),
    )
    .await;
    poll_and_fail(&suite, "integration_task_2", WORKER_2, "failed").await;
    let leaf_failed = [
        ("integration_task_1", "COMPLETED"),
        ("integration_task_2", "FAILED"),
    ];
    wait_for_tasks(&suite, &leaf, "FAILED", &leaf_failed).await;
    wait_for_tasks(&suite, &mid, "FAILED", &parent_tasks("FAILED")).await;
    wait_for_tasks(&suite, &root, "FAILED", &parent_tasks("FAILED")).await;
    Failed {
        suite,
        root,
        mid,
        leaf,
    }
}

/// Run `id` waiting for its first task, `integration_task_1`.
async fn waits_for_task_1(suite: &Suite, id: &str) {
    let first = [("integration_task_1", "SCHEDULED")];
    wait_for_tasks(suite, id, "RUNNING", &first).await;
}

/// A root or mid-level run `id` through its `integration_task_1`: its SUB_WORKFLOW task
/// starts a child, whose id is returned once the child waits for its first task.
async fn through_to_the_child(suite: &Suite, id: &str) -> String {
    waits_for_task_1(suite, id).await;
    let output = json!({"op": "task1.done"});
    poll_and_complete(suite, "integration_task_1", WORKER_1, output).await;
    let wf = wait_for_tasks(suite, id, "RUNNING", &parent_tasks("IN_PROGRESS")).await;
    child_ids(&wf, &[1]).remove(0)
}

/// `tasks[i]` was retried by `tasks[i + 1]`, and is marked so.
fn retried_by_next(wf: &Value, i: usize) {
    let failed = &tasks(wf)[i];
    assert_eq!(failed["retried"], true, "{failed}");
    super::retried_by_next(wf, i);
}

/// A parent retried with a new SUB_WORKFLOW task: the failed one, then its retry with a
/// new child run, which is returned once it waits for `integration_task_1`.
async fn new_child_of(suite: &Suite, id: &str, old_child: &str) -> String {
    let mut expected = parent_tasks("FAILED");
    expected.push(("SUB_WORKFLOW", "IN_PROGRESS"));
    let wf = wait_for_tasks(suite, id, "RUNNING", &expected).await;
    retried_by_next(&wf, 1);
    let child = child_ids(&wf, &[2]).remove(0);
    assert_ne!(child, old_child, "a new child run");
    waits_for_task_1(suite, &child).await;
    child
}

/// The leaf retried in place: its failed `integration_task_2` and the retry, scheduled;
/// each parent's SUB_WORKFLOW task waits for its child again. Then the retry completes,
/// and all three runs with it.
async fn leaf_retried_in_place(f: &Failed) {
    let mut leaf = vec![
        ("integration_task_1", "COMPLETED"),
        ("integration_task_2", "FAILED"),
        ("integration_task_2", "SCHEDULED"),
    ];
    let wf = wait_for_tasks(&f.suite, &f.leaf, "RUNNING", &leaf).await;
    retried_by_next(&wf, 1);
    let resumed = parent_tasks("IN_PROGRESS");
    wait_for_tasks(&f.suite, &f.mid, "RUNNING", &resumed).await;
    wait_for_tasks(&f.suite, &f.root, "RUNNING", &resumed).await;

    let output = json!({"op": "task1.done"});
    poll_and_complete(&f.suite, "integration_task_2", WORKER_1, output).await;
    leaf[2].1 = "COMPLETED";
    let wf = wait_for_tasks(&f.suite, &f.leaf, "COMPLETED", &leaf).await;
    retried_by_next(&wf, 1);
    let completed = parent_tasks("COMPLETED");
    wait_for_tasks(&f.suite, &f.mid, "COMPLETED", &completed).await;
    wait_for_tasks(&f.suite, &f.root, "COMPLETED", &completed).await;
}

/// A new leaf run's two tasks completed.
async fn complete_new_leaf(suite: &Suite, leaf: &str) {
    poll_and_complete(
        suite,
        "integration_task_1",
        WORKER_1,
        json!({"op": "task1.done"}),
    )
    .await;
    poll_and_complete(
        suite,
        "integration_task_2",
        WORKER_2,
        json!({"op": "task2.done"}),
    )
    .await;
    let done = [
        ("integration_task_1", "COMPLETED"),
        ("integration_task_2", "COMPLETED"),
    ];
    wait_for_tasks(suite, leaf, "COMPLETED", &done).await;
}

async fn test_retry_on_the_root_in_a_3_level_subworkflow(backend: Backend) {
    let f = three_failed_runs(backend).await;
    super::retry(&f.suite, &f.root, false).await;
    // The root's retried SUB_WORKFLOW task starts a new mid-level run, which starts a
    // new leaf.
    let new_mid = new_child_of(&f.suite, &f.root, &f.mid).await;
    let new_leaf = through_to_the_child(&f.suite, &new_mid).await;
    assert_ne!(new_leaf, f.leaf, "a new leaf run");
    waits_for_task_1(&f.suite, &new_leaf).await;
    complete_new_leaf(&f.suite, &new_leaf).await;

    wait_for_tasks(&f.suite, &new_mid, "COMPLETED", &parent_tasks("COMPLETED")).await;
    let mut root = parent_tasks("FAILED");
    root.push(("SUB_WORKFLOW", "COMPLETED"));
    let wf = wait_for_tasks(&f.suite, &f.root, "COMPLETED", &root).await;
    retried_by_next(&wf, 1);
}

async fn test_retry_on_the_root_with_resume_flag_in_a_3_level_subworkflow(backend: Backend) {
    let f = three_failed_runs(backend).await;
    super::retry(&f.suite, &f.root, true).await;
    leaf_retried_in_place(&f).await;
}

async fn test_retry_on_the_mid_level_in_a_3_level_subworkflow(backend: Backend) {
    let f = three_failed_runs(backend).await;
    super::retry(&f.suite, &f.mid, false).await;
    let new_leaf = new_child_of(&f.suite, &f.mid, &f.leaf).await;
    // The root's SUB_WORKFLOW task waits for the mid-level run again.
    let resumed = parent_tasks("IN_PROGRESS");
    wait_for_tasks(&f.suite, &f.root, "RUNNING", &resumed).await;
    complete_new_leaf(&f.suite, &new_leaf).await;

    let mut mid = parent_tasks("FAILED");
    mid.push(("SUB_WORKFLOW", "COMPLETED"));
    let wf = wait_for_tasks(&f.suite, &f.mid, "COMPLETED", &mid).await;
    retried_by_next(&wf, 1);
    wait_for_tasks(&f.suite, &f.root, "COMPLETED", &parent_tasks("COMPLETED")).await;
}

async fn test_retry_on_the_mid_level_with_resume_flag_in_a_3_level_subworkflow(backend: Backend) {
    let f = three_failed_runs(backend).await;
    super::retry(&f.suite, &f.mid, true).await;
    leaf_retried_in_place(&f).await;
}

async fn test_retry_on_the_leaf_in_a_3_level_subworkflow(backend: Backend) {
    let f = three_failed_runs(backend).await;
    super::retry(&f.suite, &f.leaf, false).await;
    leaf_retried_in_place(&f).await;
}

async fn test_retry_on_the_leaf_with_resume_flag_in_a_3_level_subworkflow(backend: Backend) {
    let f = three_failed_runs(backend).await;
    super::retry(&f.suite, &f.leaf, true).await;
    leaf_retried_in_place(&f).await;
}

super::harness_features!(
    test_retry_on_the_root_in_a_3_level_subworkflow,
    test_retry_on_the_root_with_resume_flag_in_a_3_level_subworkflow,
    test_retry_on_the_mid_level_in_a_3_level_subworkflow,
    test_retry_on_the_mid_level_with_resume_flag_in_a_3_level_subworkflow,
    test_retry_on_the_leaf_in_a_3_level_subworkflow,
    test_retry_on_the_leaf_with_resume_flag_in_a_3_level_subworkflow,
);
