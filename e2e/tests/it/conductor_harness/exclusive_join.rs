//! `ExclusiveJoinSpec`: an EXCLUSIVE_JOIN after nested DECISIONs takes the output of the
//! branch that ran (its default included).

use serde_json::json;
use weft_e2e::Backend;

use super::{poll_and_complete, setup, start_correlated, tasks, wait_for_tasks};

const EXCLUSIVE_JOIN_WF: &str = "ExclusiveJoinTestWorkflow";
// As the spec's setup.
const FILES: [&str; 1] = ["exclusive_join_integration_test.json"];

const DECISION: (&str, &str) = ("DECISION", "COMPLETED");

/// `integration_task_<n>`.
fn name(n: u32) -> &'static str {
    [
        "integration_task_1",
        "integration_task_2",
        "integration_task_3",
        "integration_task_4",
        "integration_task_5",
    ][n as usize - 1]
}

/// `integration_task_<n>` in `status`.
fn task(n: u32, status: &'static str) -> (&'static str, &'static str) {
    (name(n), status)
}

/// One feature: the run is started with `input`; each step completes `integration_task_<n>`
/// (its worker `task<n>.integration.worker`, output `{"taskReferenceName": "task<n>"}`)
/// and the run then shows `then` (RUNNING, or COMPLETED after the last step); the
/// EXCLUSIVE_JOIN ends with the last task's output.
async fn feature(backend: Backend, input: serde_json::Value, steps: &[(u32, Vec<(&str, &str)>)]) {
    let suite = setup(backend, &FILES).await;
    let id = start_correlated(&suite, EXCLUSIVE_JOIN_WF, "exclusive_join_workflow", input).await;
    wait_for_tasks(&suite, &id, "RUNNING", &[task(1, "SCHEDULED")]).await;
    for (i, (n, then)) in steps.iter().enumerate() {
        let output = json!({"taskReferenceName": format!("task{n}")});
        let worker = format!("task{n}.integration.worker");
        poll_and_complete(&suite, name(*n), &worker, output).await;
        let last = i + 1 == steps.len();
        let wf = wait_for_tasks(
            &suite,
            &id,
            if last { "COMPLETED" } else { "RUNNING" },
            then,
        )
        .await;
        if last {
            let join = tasks(&wf).last().expect("the join");
            assert_eq!(join["taskType"], "EXCLUSIVE_JOIN");
            assert_eq!(join["outputData"]["taskReferenceName"], format!("task{n}"));
        }
    }
}

const JOINED: (&str, &str) = ("EXCLUSIVE_JOIN", "COMPLETED");

async fn test_that_the_default_decision_is_run(backend: Backend) {
    let done = vec![task(1, "COMPLETED"), DECISION, JOINED];
    feature(backend, json!({"decision_1": "null"}), &[(1, done)]).await;
}

async fn test_when_the_one_decision_is_true_and_the_other_is_decision_null(backend: Backend) {
    let t1 = vec![task(1, "COMPLETED"), DECISION, task(2, "SCHEDULED")];
    let t2 = vec![
        task(1, "COMPLETED"),
        DECISION,
        task(2, "COMPLETED"),
        DECISION,
        JOINED,
    ];
    let input = json!({"decision_1": "true", "decision_2": "null"});
    feature(backend, input, &[(1, t1), (2, t2)]).await;
}

async fn test_when_both_the_decisions_decision_1_and_decision_2_are_true(backend: Backend) {
    let t1 = vec![task(1, "COMPLETED"), DECISION, task(2, "SCHEDULED")];
    let mut t2 = vec![
        task(1, "COMPLETED"),
        DECISION,
        task(2, "COMPLETED"),
        DECISION,
    ];
    t2.push(task(3, "SCHEDULED"));
    let mut t3 = t2.clone();
    t3[4] = task(3, "COMPLETED");
    t3.push(JOINED);
    let input = json!({"decision_1": "true", "decision_2": "true"});
    feature(backend, input, &[(1, t1), (2, t2), (3, t3)]).await;
}

async fn test_when_decision_1_is_false_and_decision_3_is_default(backend: Backend) {
    let t1 = vec![task(1, "COMPLETED"), DECISION, task(4, "SCHEDULED")];
    let t4 = vec![
        task(1, "COMPLETED"),
        DECISION,
        task(4, "COMPLETED"),
        DECISION,
        JOINED,
    ];
    let input = json!({"decision_1": "false", "decision_3": "null"});
    feature(backend, input, &[(1, t1), (4, t4)]).await;
}

async fn test_when_decision_1_is_false_and_decision_3_is_true(backend: Backend) {
    let t1 = vec![task(1, "COMPLETED"), DECISION, task(4, "SCHEDULED")];
    let mut t4 = vec![
        task(1, "COMPLETED"),
        DECISION,
        task(4, "COMPLETED"),
        DECISION,
    ];
    t4.push(task(5, "SCHEDULED"));
    let mut t5 = t4.clone();
    t5[4] = task(5, "COMPLETED");
    t5.push(JOINED);
    let input = json!({"decision_1": "false", "decision_3": "true"});
    feature(backend, input, &[(1, t1), (4, t4), (5, t5)]).await;
}

super::harness_features!(
    test_that_the_default_decision_is_run,
    test_when_the_one_decision_is_true_and_the_other_is_decision_null,
    test_when_both_the_decisions_decision_1_and_decision_2_are_true,
    test_when_decision_1_is_false_and_decision_3_is_default,
    test_when_decision_1_is_false_and_decision_3_is_true,
);
