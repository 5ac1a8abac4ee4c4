//! `SubWorkflowRestartSpec`: restarts at each level of three runs (root, mid-level, leaf)
//! that failed together because a task of the leaf failed. The restarted run starts over
//! under the same id: a restarted parent starts a new child; a restarted child has its
//! parents' SUB_WORKFLOW tasks wait for it again.

use weft_e2e::{Backend, Suite};

use super::three_levels::{
    leaf_starts_over, mid_starts_over, root_starts_over, three_failed_runs, Spec,
};

/// `workflowExecutor.restart(id, false)`: `POST
/// /api/workflow/{id}/restart?useLatestDefinitions=false`, answered 204.
async fn restart(suite: &Suite, id: &str) {
    let path = format!("/api/workflow/{id}/restart?useLatestDefinitions=false");
    super::post_answered(suite, &path, 204, "restart").await;
}

async fn test_restart_on_the_root_in_a_3_level_subworkflow(backend: Backend) {
    let f = three_failed_runs(backend, Spec::Restart).await;
    restart(&f.suite, &f.root).await;
    root_starts_over(&f).await;
}

async fn test_restart_on_the_mid_level_in_a_3_level_subworkflow(backend: Backend) {
    let f = three_failed_runs(backend, Spec::Restart).await;
    restart(&f.suite, &f.mid).await;
    mid_starts_over(&f).await;
}

async fn test_restart_on_the_leaf_in_a_3_level_subworkflow(backend: Backend) {
    let f = three_failed_runs(backend, Spec::Restart).await;
    restart(&f.suite, &f.leaf).await;
    leaf_starts_over(&f).await;
}

super::harness_features!(
    test_restart_on_the_root_in_a_3_level_subworkflow,
    test_restart_on_the_mid_level_in_a_3_level_subworkflow,
    test_restart_on_the_leaf_in_a_3_level_subworkflow,
);
