//! `DynamicForkJoinSpec`: a FORK_JOIN_DYNAMIC whose branches and their inputs come from
//! the output of the task before it; a branch that fails, the run retried, a branch that
//! runs a sub workflow, and inputs that are not what a dynamic fork needs.

use serde_json::{json, Value};
use weft_e2e::{Backend, Suite};

use super::{poll_and_complete, poll_and_fail, setup, start_correlated, tasks, wait_for_tasks};

const DYNAMIC_FORK_JOIN_WF: &str = "DynamicFanInOutTest";
// As the spec's setup.
const FILES: [&str; 2] = [
    "dynamic_fork_join_integration_test.json",
    "simple_workflow_3_integration_test.json",
];
const JOIN_REF: &str = "dynamicfanouttask_join";

/// A `new WorkflowTask()` with its name and reference, as a client serializes it (type
/// SIMPLE, WorkflowTask's default).
fn workflow_task(name: &str, reference: &str) -> Value {
    json!({"name": name, "taskReferenceName": reference, "type": "SIMPLE"})
}

/// The branches most features fork: `integration_task_2` as `xdt1`, `integration_task_3`
/// as `xdt2`.
fn two_branches() -> Value {
    json!([
        workflow_task("integration_task_2", "xdt1"),
        workflow_task("integration_task_3", "xdt2"),
    ])
}

/// Starts `DynamicFanInOutTest` (correlation id `correlation_id`, no input) and waits for
/// its first task.
async fn start_dynamic_fork(suite: &Suite, correlation_id: &str) -> String {
    let id = start_correlated(suite, DYNAMIC_FORK_JOIN_WF, correlation_id, json!({})).await;
    let first = [("integration_task_1", "SCHEDULED")];
    wait_for_tasks(suite, &id, "RUNNING", &first).await;
    id
}

/// `integration_task_1` polled and completed by `task1.worker` with the dynamic fork's
/// `dynamicTasks` and `dynamicTasksInput`.
async fn fork_with(suite: &Suite, dynamic_tasks: Value, dynamic_tasks_input: Value) {
    let output = json!({"dynamicTasks": dynamic_tasks, "dynamicTasksInput": dynamic_tasks_input});
    poll_and_complete(suite, "integration_task_1", "task1.worker", output).await;
}

/// `verifyPolledAndAcknowledgedTask(task, [key: value])`: the polled task had that input.
fn polled_with(task: &Value, key: &str, value: &str) {
    assert_eq!(task["inputData"][key], value, "{task}");
}

/// Task `i` is the dynamic fork's JOIN.
fn is_the_join(wf: &Value, i: usize) {
    let join = &tasks(wf)[i];
    assert_eq!(join["referenceTaskName"], JOIN_REF, "{join}");
}

/// The JOIN (task `i`) waits for `xdt1` and `xdt2`.
fn joins_on_both_branches(wf: &Value, i: usize) {
    is_the_join(wf, i);
    assert_eq!(tasks(wf)[i]["inputData"]["joinOn"], json!(["xdt1", "xdt2"]));
}

/// `DynamicFanInOutTest` through `integration_task_1`, whose output forks
/// `integration_task_2` (`xdt1`, input `{k1: v1}`) and `integration_task_3` (`xdt2`,
/// input `{k2: v2}`): the run's id and its tasks as expected then.
async fn forked(suite: &Suite) -> (String, Vec<(&'static str, &'static str)>) {
    let id = start_dynamic_fork(suite, "dynamic_fork_join_workflow").await;
    let input = json!({"xdt1": {"k1": "v1"}, "xdt2": {"k2": "v2"}});
    fork_with(suite, two_branches(), input).await;
    let expected = vec![
        ("integration_task_1", "COMPLETED"),
        ("FORK", "COMPLETED"),
        ("integration_task_2", "SCHEDULED"),
        ("integration_task_3", "SCHEDULED"),
        ("JOIN", "IN_PROGRESS"),
    ];
    let wf = wait_for_tasks(suite, &id, "RUNNING", &expected).await;
    is_the_join(&wf, 4);
    (id, expected)
}

/// Both branches polled and completed with `output`, each by its own worker, which was
/// handed its input from `dynamicTasksInput`.
async fn complete_both_branches(suite: &Suite, output: Value) {
    let polled =
        poll_and_complete(suite, "integration_task_2", "task2.worker", output.clone()).await;
    polled_with(&polled, "k1", "v1");
    let polled = poll_and_complete(suite, "integration_task_3", "task3.worker", output).await;
    polled_with(&polled, "k2", "v2");
}

/// Both branches (tasks `first` and `first + 1`) completed with `output`: the JOIN
/// (task 4) completes, and the run goes on to `integration_task_4`. Returns the run then.
async fn join_completed(
    suite: &Suite,
    id: &str,
    expected: &mut Vec<(&'static str, &'static str)>,
    output: Value,
    first: usize,
) -> Value {
    complete_both_branches(suite, output).await;
    for i in [first, first + 1, 4] {
        expected[i].1 = "COMPLETED";
    }
    expected.push(("integration_task_4", "SCHEDULED"));
    let wf = wait_for_tasks(suite, id, "RUNNING", expected).await;
    joins_on_both_branches(&wf, 4);
    wf
}

/// The JOIN's output: each branch's `{ok1: ov1}`, under its reference.
fn join_outputs_both_branches(wf: &Value) {
    assert_eq!(tasks(wf)[4]["outputData"]["xdt1"]["ok1"], "ov1");
    assert_eq!(tasks(wf)[4]["outputData"]["xdt2"]["ok1"], "ov1");
}

/// `integration_task_4`, the run's last task (task `i`), polled and completed: the run
/// completes.
async fn complete_last_task(
    suite: &Suite,
    id: &str,
    expected: &mut [(&'static str, &'static str)],
    i: usize,
) -> Value {
    poll_and_complete(suite, "integration_task_4", "task4.worker", json!({})).await;
    expected[i].1 = "COMPLETED";
    wait_for_tasks(suite, id, "COMPLETED", expected).await
}

/// "Make sure that the integration_task_2 does not have any retry count", then up to
/// `integration_task_2` failed by its worker: the run FAILED, the other branch and the
/// JOIN canceled. Returns the run's id and its tasks as expected then.
async fn failed_branch(suite: &Suite) -> (String, Vec<(&'static str, &'static str)>) {
    super::update_task_def(suite, "integration_task_2", json!({"retryCount": 0})).await;
    let (id, mut expected) = forked(suite).await;
    let worker = "task2.worker";
    let polled = poll_and_fail(suite, "integration_task_2", worker, "it is a failure..").await;
    polled_with(&polled, "k1", "v1");
    expected[2].1 = "FAILED";
    expected[3].1 = "CANCELED";
    expected[4].1 = "CANCELED";
    let wf = wait_for_tasks(suite, &id, "FAILED", &expected).await;
    joins_on_both_branches(&wf, 4);
    (id, expected)
}

async fn test_dynamic_fork_join_success_flow(backend: Backend) {
    let suite = setup(backend, &FILES).await;
    let (id, mut expected) = forked(&suite).await;

    let output = json!({"ok1": "ov1"});
    let wf = join_completed(&suite, &id, &mut expected, output, 2).await;
    join_outputs_both_branches(&wf);

    complete_last_task(&suite, &id, &mut expected, 5).await;
}

async fn test_dynamic_fork_join_failure_of_dynamic_forked_task_flow(backend: Backend) {
    let suite = setup(backend, &FILES).await;
    failed_branch(&suite).await;
}

async fn retry_a_failed_dynamic_fork_join_workflow(backend: Backend) {
    let suite = setup(backend, &FILES).await;
    let (id, mut expected) = failed_branch(&suite).await;

    super::retry(&suite, &id, false).await;
    expected[4].1 = "IN_PROGRESS";
    expected.extend([
        ("integration_task_2", "SCHEDULED"),
        ("integration_task_3", "SCHEDULED"),
    ]);
    let wf = wait_for_tasks(&suite, &id, "RUNNING", &expected).await;
    joins_on_both_branches(&wf, 4);

    let output = json!({"ok1": "ov1"});
    let wf = join_completed(&suite, &id, &mut expected, output, 5).await;
    join_outputs_both_branches(&wf);

    complete_last_task(&suite, &id, &mut expected, 7).await;
}

/// `!tasks[i].subworkflowChanged` (absent counts as false, as in Groovy).
fn subworkflow_unchanged(wf: &Value, i: usize) {
    let task = &tasks(wf)[i];
    assert_ne!(task["subworkflowChanged"], true, "{task}");
}

async fn retry_a_failed_dynamic_fork_join_workflow_with_forked_subworkflow(backend: Backend) {
    let suite = setup(backend, &FILES).await;
    super::update_task_def(&suite, "integration_task_2", json!({"retryCount": 0})).await;
    let id = start_dynamic_fork(&suite, "dynamic_fork_join_wf_subwf").await;

    // The first task's output forks a sub workflow (`xdt1`) and `integration_task_10`.
    let sub_workflow = json!({"name": "sub_wf_task", "taskReferenceName": "xdt1",
        "type": "SUB_WORKFLOW",
        "subWorkflowParam": {"name": "integration_test_wf3", "version": 1}});
    let branches = json!([sub_workflow, workflow_task("integration_task_10", "xdt10")]);
    let input = json!({"xdt1": {"p1": "q1", "p2": "q2"}, "xdt10": {"k2": "v2"}});
    fork_with(&suite, branches, input).await;
    let mut expected = vec![
        ("integration_task_1", "COMPLETED"),
        ("FORK", "COMPLETED"),
        ("SUB_WORKFLOW", "IN_PROGRESS"),
        ("integration_task_10", "SCHEDULED"),
        ("JOIN", "IN_PROGRESS"),
    ];
    // The spec checks the run twice here, before and after it reads the JOIN's id.
    let wf = wait_for_tasks(&suite, &id, "RUNNING", &expected).await;
    is_the_join(&wf, 4);
    let child = super::child_ids(&wf, &[2]).remove(0);
    let first = [("integration_task_1", "SCHEDULED")];
    wait_for_tasks(&suite, &child, "RUNNING", &first).await;

    poll_and_complete(&suite, "integration_task_10", "task10.worker", json!({})).await;
    expected[3].1 = "COMPLETED";
    let wf = wait_for_tasks(&suite, &id, "RUNNING", &expected).await;
    is_the_join(&wf, 4);

    // The child's tasks: `integration_task_2` fails, without retries; the child fails,
    // and the run with it.
    poll_and_complete(&suite, "integration_task_1", "task1.worker", json!({})).await;
    let mut in_child = vec![
        ("integration_task_1", "COMPLETED"),
        ("integration_task_2", "SCHEDULED"),
    ];
    wait_for_tasks(&suite, &child, "RUNNING", &in_child).await;
    poll_and_fail(&suite, "integration_task_2", "task2.worker", "failure").await;
    in_child[1].1 = "FAILED";
    wait_for_tasks(&suite, &child, "FAILED", &in_child).await;
    expected[2].1 = "FAILED";
    expected[4].1 = "CANCELED";
    let wf = wait_for_tasks(&suite, &id, "FAILED", &expected).await;
    is_the_join(&wf, 4);

    // Retried with resumeSubworkflowTasks: the child retries its failed task, the run's
    // SUB_WORKFLOW task and JOIN wait again.
    super::retry(&suite, &id, true).await;
    expected[2].1 = "IN_PROGRESS";
    expected[4].1 = "IN_PROGRESS";
    let wf = wait_for_tasks(&suite, &id, "RUNNING", &expected).await;
    is_the_join(&wf, 4);
    in_child.push(("integration_task_2", "SCHEDULED"));
    wait_for_tasks(&suite, &child, "RUNNING", &in_child).await;
    // "the workflow is evaluated": the JOIN still waits.
    let wf = wait_for_tasks(&suite, &id, "RUNNING", &expected).await;
    subworkflow_unchanged(&wf, 2);
    is_the_join(&wf, 4);

    poll_and_complete(&suite, "integration_task_2", "task2.worker", json!({})).await;
    in_child[2].1 = "COMPLETED";
    in_child.push(("integration_task_3", "SCHEDULED"));
    wait_for_tasks(&suite, &child, "RUNNING", &in_child).await;

    poll_and_complete(&suite, "integration_task_3", "task3.worker", json!({})).await;
    in_child[3].1 = "COMPLETED";
    wait_for_tasks(&suite, &child, "COMPLETED", &in_child).await;
    expected[2].1 = "COMPLETED";
    expected[4].1 = "COMPLETED";
    expected.push(("integration_task_4", "SCHEDULED"));
    let wf = wait_for_tasks(&suite, &id, "RUNNING", &expected).await;
    subworkflow_unchanged(&wf, 2);
    is_the_join(&wf, 4);

    let wf = complete_last_task(&suite, &id, &mut expected, 5).await;
    subworkflow_unchanged(&wf, 2);
    is_the_join(&wf, 4);
}

async fn test_dynamic_fork_join_empty_output(backend: Backend) {
    let suite = setup(backend, &FILES).await;
    let (id, mut expected) = forked(&suite).await;

    let wf = join_completed(&suite, &id, &mut expected, json!({}), 2).await;
    // The JOIN's output leaves out the branches that output nothing.
    assert_eq!(tasks(&wf)[4]["outputData"], json!({}));

    complete_last_task(&suite, &id, &mut expected, 5).await;
}

/// `dynamicTasksInput` whose inputs are not maps.
fn invalid_dynamic_tasks_input() -> Value {
    json!({"xdt1": "v1", "xdt2": "v2"})
}

async fn test_dynamic_fork_join_fail_when_task_input_is_invalid(backend: Backend) {
    let suite = setup(backend, &FILES).await;
    let id = start_dynamic_fork(&suite, "dynamic_fork_join_workflow").await;
    fork_with(&suite, two_branches(), invalid_dynamic_tasks_input()).await;
    let done = [("integration_task_1", "COMPLETED")];
    wait_for_tasks(&suite, &id, "FAILED", &done).await;
}

async fn test_dynamic_fork_join_return_failed_workflow_when_start_with_invalid_input(
    backend: Backend,
) {
    let suite = setup(backend, &FILES).await;
    let fork = json!({"name": "dynamicfanouttask", "taskReferenceName": "dynamicfanouttask",
        "type": "FORK_JOIN_DYNAMIC",
        "inputParameters": {"dynamicTasks": "${workflow.input.dynamicTasks}",
                            "dynamicTasksInput": "${workflow.input.dynamicTasksInput}"},
        "dynamicForkTasksParam": "dynamicTasks",
        "dynamicForkTasksInputParamName": "dynamicTasksInput"});
    let def = json!({"name": "DynamicForkJoinStartTest", "version": 1, "tasks": [fork],
                     "ownerEmail": "test@harness.com"});
    let input = json!({"dynamicTasks": two_branches(),
                       "dynamicTasksInput": invalid_dynamic_tasks_input()});
    // `workflowExecutor.startWorkflow` with the definition inline: over REST, a
    // StartWorkflowRequest with `workflowDef`. Conductor starts the run and fails it
    // with no tasks; Weft refuses the definition, whose dynamic fork is not followed by a
    // JOIN, with a 400 naming the task, and starts nothing (docs/conductor.md).
    let request = json!({"name": "DynamicForkJoinStartTest", "version": 1, "input": input,
                         "workflowDef": def});
    let r = suite
        .client()
        .post_json("/api/workflow", &request)
        .await
        .unwrap();
    assert_eq!(r.status, 400, "{}", r.text);
    assert!(
        r.text.contains("must be followed by a JOIN task"),
        "{}",
        r.text
    );
    assert!(r.text.contains("workflowDef"), "{}", r.text);
}

super::harness_features!(
    test_dynamic_fork_join_success_flow,
    test_dynamic_fork_join_failure_of_dynamic_forked_task_flow,
    retry_a_failed_dynamic_fork_join_workflow,
    test_dynamic_fork_join_empty_output,
    test_dynamic_fork_join_fail_when_task_input_is_invalid,
    test_dynamic_fork_join_return_failed_workflow_when_start_with_invalid_input,
    retry_a_failed_dynamic_fork_join_workflow_with_forked_subworkflow,
);
