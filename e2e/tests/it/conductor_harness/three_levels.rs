//! The setup `SubWorkflowRetrySpec`, `SubWorkflowRestartSpec` and `SubWorkflowRerunSpec`
//! share: a root run whose SUB_WORKFLOW task starts a mid-level run, whose SUB_WORKFLOW
//! task starts a leaf, all three FAILED because the leaf's `integration_task_2` failed;
//! and the steps the specs take through the three levels once an operation (retry,
//! restart, rerun) has set one of them going again.

use serde_json::{json, Value};
use weft_e2e::{Backend, Suite};

use super::{child_ids, poll_and_complete, poll_and_fail, setup, tasks, wait_for_tasks};

const WORKFLOW_WITH_SUBWORKFLOW: &str = "integration_test_wf_with_sub_wf";
const SIMPLE_WORKFLOW: &str = "integration_test_wf";
/// The worker the specs complete `integration_task_1` with.
pub(crate) const WORKER_1: &str = "task1.integration.worker";
/// The worker the specs fail `integration_task_2` with, and mostly complete it with.
pub(crate) const WORKER_2: &str = "task2.integration.worker";

/// The spec whose `setup()` the three runs follow: the specs register different
/// definitions and start the root with different correlation ids.
#[derive(Clone, Copy)]
pub(crate) enum Spec {
    Retry,
    Restart,
    Rerun,
}

impl Spec {
    /// The definitions the spec's `setup()` registers, in its order.
    fn files(self) -> &'static [&'static str] {
        match self {
            Spec::Retry | Spec::Restart => &[
                "simple_one_task_sub_workflow_integration_test.json",
                "simple_workflow_1_integration_test.json",
                "workflow_with_sub_workflow_1_integration_test.json",
            ],
            Spec::Rerun => &[
                "simple_workflow_1_integration_test.json",
                "workflow_with_sub_workflow_1_integration_test.json",
            ],
        }
    }

    /// The correlation id the spec starts the root with (`SubWorkflowRestartSpec`'s is
    /// `SubWorkflowRetrySpec`'s).
    fn correlation_id(self) -> &'static str {
        match self {
            Spec::Retry | Spec::Restart => "retry_on_root_in_3level_wf",
            Spec::Rerun => "rerun_on_root_in_3level_wf",
        }
    }
}

/// The three runs of the specs' setup, all FAILED.
pub(crate) struct Failed {
    pub(crate) suite: Suite,
    pub(crate) root: String,
    pub(crate) mid: String,
    pub(crate) leaf: String,
}

/// `['op': 'task1.done']`, the output most of the specs' workers complete with.
pub(crate) fn task1_done() -> Value {
    json!({"op": "task1.done"})
}

/// A root and a mid-level run: `integration_task_1`, then the SUB_WORKFLOW task.
pub(crate) fn parent_tasks(sub_workflow: &'static str) -> Vec<(&'static str, &'static str)> {
    vec![
        ("integration_task_1", "COMPLETED"),
        ("SUB_WORKFLOW", sub_workflow),
    ]
}

/// `spec`'s `setup()`: `integration_task_2` without retries, a root run whose child
/// (mid-level) runs a child (leaf) of `integration_test_wf`, whose `integration_task_2`
/// fails: the three runs end FAILED.
pub(crate) async fn three_failed_runs(backend: Backend, spec: Spec) -> Failed {
    let suite = setup(backend, spec.files()).await;
    let changes = json!({"retryCount": 0});
    super::update_task_def(&suite, "integration_task_2", changes).await;
    let input = json!({"param1": "p1 value", "param2": "p2 value",
                       "subwf": WORKFLOW_WITH_SUBWORKFLOW, "nextSubwf": SIMPLE_WORKFLOW});
    let correlation_id = spec.correlation_id();
    let root =
        super::start_correlated(&suite, WORKFLOW_WITH_SUBWORKFLOW, correlation_id, input).await;
    let mid = through_to_the_child(&suite, &root, task1_done()).await;
    let leaf = through_to_the_child(&suite, &mid, task1_done()).await;

    poll_and_complete(&suite, "integration_task_1", WORKER_1, task1_done()).await;
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
pub(crate) async fn waits_for_task_1(suite: &Suite, id: &str) {
    let first = [("integration_task_1", "SCHEDULED")];
    wait_for_tasks(suite, id, "RUNNING", &first).await;
}

/// A root or mid-level run `id` through its `integration_task_1` (completed with
/// `output`): its SUB_WORKFLOW task starts a child, whose id is returned once the child
/// waits for its own `integration_task_1`.
pub(crate) async fn through_to_the_child(suite: &Suite, id: &str, output: Value) -> String {
    waits_for_task_1(suite, id).await;
    poll_and_complete(suite, "integration_task_1", WORKER_1, output).await;
    let wf = wait_for_tasks(suite, id, "RUNNING", &parent_tasks("IN_PROGRESS")).await;
    let child = child_ids(&wf, &[1]).remove(0);
    waits_for_task_1(suite, &child).await;
    child
}

/// [`through_to_the_child`] for a parent that starts over: its child is a new run, not
/// `old_child`.
async fn new_child_of(suite: &Suite, id: &str, output: Value, old_child: &str) -> String {
    let child = through_to_the_child(suite, id, output).await;
    assert_ne!(child, old_child, "a new child run");
    child
}

/// A leaf run's two tasks completed (`integration_task_2` by `task_2_worker`, with
/// `task_2_output`): the leaf is COMPLETED.
pub(crate) async fn complete_leaf(
    suite: &Suite,
    leaf: &str,
    task_2_worker: &str,
    task_2_output: Value,
) {
    poll_and_complete(suite, "integration_task_1", WORKER_1, task1_done()).await;
    poll_and_complete(suite, "integration_task_2", task_2_worker, task_2_output).await;
    let done = [
        ("integration_task_1", "COMPLETED"),
        ("integration_task_2", "COMPLETED"),
    ];
    wait_for_tasks(suite, leaf, "COMPLETED", &done).await;
}

/// Each of `parents` RUNNING again, its SUB_WORKFLOW task waiting for its child: what a
/// child set going again under its own id (retried in place, restarted, rerun) does to
/// the runs above it.
pub(crate) async fn parents_resumed(suite: &Suite, parents: &[&str]) {
    let resumed = parent_tasks("IN_PROGRESS");
    for parent in parents {
        wait_for_tasks(suite, parent, "RUNNING", &resumed).await;
    }
}

/// The mid-level run `mid` and the root, COMPLETED after their leaf, returned in that
/// order.
pub(crate) async fn parents_completed(suite: &Suite, mid: &str, root: &str) -> (Value, Value) {
    let completed = parent_tasks("COMPLETED");
    let mid = wait_for_tasks(suite, mid, "COMPLETED", &completed).await;
    let root = wait_for_tasks(suite, root, "COMPLETED", &completed).await;
    (mid, root)
}

/// `!tasks[i].subworkflowChanged` (absent counts as false, as in Groovy).
fn subworkflow_unchanged(wf: &Value, i: usize) {
    let task = &tasks(wf)[i];
    assert_ne!(task["subworkflowChanged"], true, "{task}");
}

/// The root starting over (restarted or rerun): its SUB_WORKFLOW task starts a new
/// mid-level run, which starts a new leaf; the new leaf completes, and the new mid-level
/// run and the root with it.
pub(crate) async fn root_starts_over(f: &Failed) {
    // The spec completes the root's `integration_task_1` with `op1`.
    let output = json!({"op1": "task1.done"});
    let new_mid = new_child_of(&f.suite, &f.root, output, &f.mid).await;
    let new_leaf = new_child_of(&f.suite, &new_mid, task1_done(), &f.leaf).await;
    let output = json!({"op": "task2.done"});
    complete_leaf(&f.suite, &new_leaf, WORKER_2, output).await;
    parents_completed(&f.suite, &new_mid, &f.root).await;
}

/// Child `id` starting over (restarted or rerun): it waits for its `integration_task_1`,
/// and each of its `parents` waits for it again.
async fn child_starts_over(suite: &Suite, id: &str, parents: &[&str]) {
    waits_for_task_1(suite, id).await;
    parents_resumed(suite, parents).await;
}

/// The mid-level run starting over (restarted or rerun): the root waits for it again; it
/// starts a new leaf, which completes, and the mid-level run and the root with it.
pub(crate) async fn mid_starts_over(f: &Failed) {
    child_starts_over(&f.suite, &f.mid, &[f.root.as_str()]).await;
    let new_leaf = new_child_of(&f.suite, &f.mid, task1_done(), &f.leaf).await;
    // As the spec: the new leaf's `integration_task_2` completed by task 1's worker.
    complete_leaf(&f.suite, &new_leaf, WORKER_1, task1_done()).await;
    let (_, root) = parents_completed(&f.suite, &f.mid, &f.root).await;
    subworkflow_unchanged(&root, 1);
}

/// The leaf starting over (restarted or rerun): both parents wait for their child again;
/// the leaf completes, and the mid-level run and the root with it.
pub(crate) async fn leaf_starts_over(f: &Failed) {
    child_starts_over(&f.suite, &f.leaf, &[f.mid.as_str(), f.root.as_str()]).await;
    let output = json!({"op": "task2.done"});
    complete_leaf(&f.suite, &f.leaf, WORKER_2, output).await;
    let (mid, root) = parents_completed(&f.suite, &f.mid, &f.root).await;
    subworkflow_unchanged(&mid, 1);
    subworkflow_unchanged(&root, 1);
}
