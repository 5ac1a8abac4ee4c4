//! `SubWorkflowRerunSpec`: reruns at each level of three runs (root, mid-level, leaf)
//! that failed together because a task of the leaf failed, from the start and from the
//! run's first task by id. The run rerun starts over under the same id: a parent rerun
//! starts a new child; a child rerun has its parents' SUB_WORKFLOW tasks wait for it
//! again.

use serde_json::{json, Value};
use weft_e2e::{Backend, Suite};

use super::tasks;
use super::three_levels::{
    leaf_starts_over, mid_starts_over, root_starts_over, three_failed_runs, Spec,
};

/// `workflowExecutor.rerun(request)`: `POST /api/workflow/{id}/rerun` with `request`
/// (a `RerunWorkflowRequest`), answered 200 with the workflow id.
async fn rerun(suite: &Suite, id: &str, request: Value) {
    let path = format!("/api/workflow/{id}/rerun");
    let body = ("application/json", request.to_string().into_bytes());
    let r = suite
        .client()
        .raw(reqwest::Method::POST, &path, Some(body))
        .await
        .unwrap();
    assert_eq!(r.status, 200, "rerun answered {}: {}", r.status, r.text);
    assert_eq!(r.text, id, "the rerun answers the workflow id");
}

/// A rerun of `id` from the start: `reRunFromWorkflowId` only.
async fn rerun_workflow(suite: &Suite, id: &str) {
    rerun(suite, id, json!({"reRunFromWorkflowId": id})).await;
}

/// A rerun of `id` from its first task: `reRunFromTaskId` is the run's `tasks[0].taskId`.
async fn rerun_from_task_1(suite: &Suite, id: &str) {
    let wf = suite.client().get(id).await.unwrap();
    let task_1 = &tasks(&wf)[0]["taskId"];
    rerun(
        suite,
        id,
        json!({"reRunFromWorkflowId": id, "reRunFromTaskId": task_1}),
    )
    .await;
}

async fn test_rerun_on_the_root_level_in_a_3_level_subworkflow(backend: Backend) {
    let f = three_failed_runs(backend, Spec::Rerun).await;
    rerun_workflow(&f.suite, &f.root).await;
    root_starts_over(&f).await;
}

async fn test_rerun_on_the_root_level_with_task_id_in_a_3_level_subworkflow(backend: Backend) {
    let f = three_failed_runs(backend, Spec::Rerun).await;
    rerun_from_task_1(&f.suite, &f.root).await;
    root_starts_over(&f).await;
}

async fn test_rerun_on_the_mid_level_in_a_3_level_subworkflow(backend: Backend) {
    let f = three_failed_runs(backend, Spec::Rerun).await;
    rerun_workflow(&f.suite, &f.mid).await;
    mid_starts_over(&f).await;
}

async fn test_rerun_on_the_mid_level_with_task_id_in_a_3_level_subworkflow(backend: Backend) {
    let f = three_failed_runs(backend, Spec::Rerun).await;
    rerun_from_task_1(&f.suite, &f.mid).await;
    mid_starts_over(&f).await;
}

async fn test_rerun_on_the_leaf_level_in_a_3_level_subworkflow(backend: Backend) {
    let f = three_failed_runs(backend, Spec::Rerun).await;
    rerun_workflow(&f.suite, &f.leaf).await;
    leaf_starts_over(&f).await;
}

async fn test_rerun_on_the_leaf_level_with_task_id_in_a_3_level_subworkflow(backend: Backend) {
    let f = three_failed_runs(backend, Spec::Rerun).await;
    rerun_from_task_1(&f.suite, &f.leaf).await;
    leaf_starts_over(&f).await;
}

super::harness_features!(
    test_rerun_on_the_root_level_in_a_3_level_subworkflow,
    test_rerun_on_the_root_level_with_task_id_in_a_3_level_subworkflow,
    test_rerun_on_the_mid_level_in_a_3_level_subworkflow,
    test_rerun_on_the_mid_level_with_task_id_in_a_3_level_subworkflow,
    test_rerun_on_the_leaf_level_in_a_3_level_subworkflow,
    test_rerun_on_the_leaf_level_with_task_id_in_a_3_level_subworkflow,
);
