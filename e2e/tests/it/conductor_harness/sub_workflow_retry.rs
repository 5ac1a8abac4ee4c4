//! `SubWorkflowRetrySpec`: retries at each level of three runs (root, mid-level, leaf)
//! that failed together because a task of the leaf failed, with and without
//! `resumeSubworkflowTasks`.

use serde_json::{json, Value};
use weft_e2e::{Backend, Suite};

use super::three_levels::{
    complete_leaf, parent_tasks, parents_completed, parents_resumed, task1_done, three_failed_runs,
    through_to_the_child, waits_for_task_1, Failed, Spec, WORKER_1, WORKER_2,
};
use super::{child_ids, poll_and_complete, tasks, wait_for_tasks};

/// `tasks[i]` was retried by `tasks[i + 1]`, and is marked so.
fn retried_by_next(wf: &Value, i: usize) {
    let failed = &tasks(wf)[i];
    assert_eq!(failed["retried"], true, "{failed}");
    super::retried_by_next(wf, i);
}

/// A parent retried with a new SUB_WORKFLOW task: the failed one, then its retry with a
/// new child run, which is returned once it waits for `integration_task_1`.
async fn retried_child_of(suite: &Suite, id: &str, old_child: &str) -> String {
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
    parents_resumed(&f.suite, &[f.mid.as_str(), f.root.as_str()]).await;

    poll_and_complete(&f.suite, "integration_task_2", WORKER_1, task1_done()).await;
    leaf[2].1 = "COMPLETED";
    let wf = wait_for_tasks(&f.suite, &f.leaf, "COMPLETED", &leaf).await;
    retried_by_next(&wf, 1);
    parents_completed(&f.suite, &f.mid, &f.root).await;
}

/// A new leaf run's two tasks completed, `integration_task_2` by its worker.
async fn complete_new_leaf(suite: &Suite, leaf: &str) {
    complete_leaf(suite, leaf, WORKER_2, json!({"op": "task2.done"})).await;
}

async fn test_retry_on_the_root_in_a_3_level_subworkflow(backend: Backend) {
    let f = three_failed_runs(backend, Spec::Retry).await;
    super::retry(&f.suite, &f.root, false).await;
    // The root's retried SUB_WORKFLOW task starts a new mid-level run, which starts a
    // new leaf.
    let new_mid = retried_child_of(&f.suite, &f.root, &f.mid).await;
    // Returned once the new leaf waits for its `integration_task_1`.
    let new_leaf = through_to_the_child(&f.suite, &new_mid, task1_done()).await;
    assert_ne!(new_leaf, f.leaf, "a new leaf run");
    complete_new_leaf(&f.suite, &new_leaf).await;

    wait_for_tasks(&f.suite, &new_mid, "COMPLETED", &parent_tasks("COMPLETED")).await;
    let mut root = parent_tasks("FAILED");
    root.push(("SUB_WORKFLOW", "COMPLETED"));
    let wf = wait_for_tasks(&f.suite, &f.root, "COMPLETED", &root).await;
    retried_by_next(&wf, 1);
}

async fn test_retry_on_the_root_with_resume_flag_in_a_3_level_subworkflow(backend: Backend) {
    let f = three_failed_runs(backend, Spec::Retry).await;
    super::retry(&f.suite, &f.root, true).await;
    leaf_retried_in_place(&f).await;
}

async fn test_retry_on_the_mid_level_in_a_3_level_subworkflow(backend: Backend) {
    let f = three_failed_runs(backend, Spec::Retry).await;
    super::retry(&f.suite, &f.mid, false).await;
    let new_leaf = retried_child_of(&f.suite, &f.mid, &f.leaf).await;
    // The root's SUB_WORKFLOW task waits for the mid-level run again.
    parents_resumed(&f.suite, &[f.root.as_str()]).await;
    complete_new_leaf(&f.suite, &new_leaf).await;

    let mut mid = parent_tasks("FAILED");
    mid.push(("SUB_WORKFLOW", "COMPLETED"));
    let wf = wait_for_tasks(&f.suite, &f.mid, "COMPLETED", &mid).await;
    retried_by_next(&wf, 1);
    wait_for_tasks(&f.suite, &f.root, "COMPLETED", &parent_tasks("COMPLETED")).await;
}

async fn test_retry_on_the_mid_level_with_resume_flag_in_a_3_level_subworkflow(backend: Backend) {
    let f = three_failed_runs(backend, Spec::Retry).await;
    super::retry(&f.suite, &f.mid, true).await;
    leaf_retried_in_place(&f).await;
}

async fn test_retry_on_the_leaf_in_a_3_level_subworkflow(backend: Backend) {
    let f = three_failed_runs(backend, Spec::Retry).await;
    super::retry(&f.suite, &f.leaf, false).await;
    leaf_retried_in_place(&f).await;
}

async fn test_retry_on_the_leaf_with_resume_flag_in_a_3_level_subworkflow(backend: Backend) {
    let f = three_failed_runs(backend, Spec::Retry).await;
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
