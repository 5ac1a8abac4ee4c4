//! `SimpleWorkflowSpec`: the two-task linear workflow completed (with null inputs and
//! outputs too), failed by a terminal error, retried task by task and as a whole,
//! restarted on its own definition or on the latest one (and refused when running, or
//! when COMPLETED and not restartable); a task whose worker goes silent past its
//! `responseTimeoutSeconds`; tasks sent back IN_PROGRESS with a `callbackAfterSeconds`,
//! and those callbacks reset; definitions registered with and without `schemaVersion`.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{json, Value};
use weft_e2e::{poll_until, Backend, Suite};

use super::{
    complete_as_task1_worker, get_ok, poll_and_complete, poll_and_fail, poll_one, post_answered,
    put_ok, retried_by_next, setup, start_correlated, task_by_ref, tasks, update_task,
    update_task_def, wait_for, wait_for_tasks,
};

const LINEAR_WORKFLOW_T1_T2: &str = "integration_test_wf";
const INTEGRATION_TEST_WF_NON_RESTARTABLE: &str = "integration_test_wf_non_restartable";
// As the spec's setup.
const FILES: [&str; 2] = [
    "simple_workflow_1_integration_test.json",
    "simple_workflow_with_resp_time_out_integration_test.json",
];
const TASK_1: &str = "integration_task_1";
const TASK_2: &str = "integration_task_2";
const WORKER_1: &str = "task1.integration.worker";
const WORKER_2: &str = "task2.integration.worker";

/// The workflow input of every feature but "null inputs".
fn input() -> Value {
    json!({"param1": "p1 value", "param2": "p2 value"})
}

/// `metadataService.getWorkflowDef(name, 1)`: `GET /api/metadata/workflow/{name}?version=1`.
async fn workflow_def(suite: &Suite, name: &str) -> Value {
    let path = format!("/api/metadata/workflow/{name}?version=1");
    let r = get_ok(suite, &path).await;
    r.json.expect("a workflow definition")
}

/// `metadataService.updateWorkflowDef(def)`: `PUT /api/metadata/workflow` with `[def]`,
/// written without error.
async fn update_workflow_def(suite: &Suite, def: &Value) {
    let r = put_ok(suite, "/api/metadata/workflow", &json!([def])).await;
    let errors = r
        .json
        .as_ref()
        .and_then(|j| j["bulkErrorResults"].as_object());
    assert!(errors.is_none_or(|e| e.is_empty()), "{}", r.text);
}

/// `workflowDef.failureWorkflow` set and not blank (`StringUtils.isNotBlank`).
fn names_a_failure_workflow(def: &Value) {
    let failure = def["failureWorkflow"].as_str().unwrap_or_default();
    assert!(!failure.trim().is_empty(), "{def}");
}

/// `workflowExecutor.restart(id, useLatestDefinitions)`:
/// `POST /api/workflow/{id}/restart?useLatestDefinitions=`, answered `status` (204 when
/// restarted; 409 for Conductor's ConflictException, 404 for its NotFoundException).
async fn restart(suite: &Suite, id: &str, use_latest_definitions: bool, status: u16) {
    let path = format!("/api/workflow/{id}/restart?useLatestDefinitions={use_latest_definitions}");
    post_answered(suite, &path, status, "restart").await;
}

/// `workflowExecutionService.poll(type, worker)` handing out nothing: one
/// `GET /api/tasks/poll/{type}`, answered 204.
async fn nothing_to_poll(suite: &Suite, task_type: &str, worker: &str) {
    let r = super::poll_once(suite, task_type, worker).await;
    assert_eq!(
        r.status, 204,
        "a {task_type} task was handed out: {}",
        r.text
    );
}

/// `getTaskQueueSizes([type]).get(type) == size` (`GET /api/tasks/queue/sizes`), with a
/// deadline: the queue holds the task once the step that queued it has committed.
async fn wait_for_queue_size(suite: &Suite, task_type: &str, size: u64) {
    let path = format!("/api/tasks/queue/sizes?taskType={task_type}");
    let last = std::sync::Mutex::new(String::new());
    let found = poll_until(
        super::DEADLINE,
        Duration::from_millis(20),
        String::new,
        || async {
            let r = suite
                .client()
                .raw(reqwest::Method::GET, &path, None)
                .await?;
            anyhow::ensure!(
                r.status == 200,
                "queue sizes answered {}: {}",
                r.status,
                r.text
            );
            let seen = r.json.as_ref().map(|j| j[task_type].clone());
            *last.lock().unwrap() = r.text;
            Ok((seen == Some(json!(size))).then_some(()))
        },
    )
    .await;
    found.unwrap_or_else(|e| {
        let last = last.lock().unwrap();
        panic!("the {task_type} queue never held {size} ({e}); last seen: {last}")
    });
}

/// `new TaskResult(task)` with `status`: the polled task's ids, worker and output.
fn result_of(task: &Value, status: &str) -> Value {
    json!({
        "workflowInstanceId": task["workflowInstanceId"],
        "taskId": task["taskId"],
        "workerId": task["workerId"],
        "status": status,
        "outputData": task["outputData"],
    })
}

/// The spec's worker sending `task`, just polled, back IN_PROGRESS with `output` and
/// `callbackAfterSeconds` (`new TaskResult(task)`, `updateTask`), once the run shows the
/// poll (`polled`: the run's tasks, that one IN_PROGRESS), so that what the run shows
/// next is the update's doing.
async fn send_back_in_progress(
    suite: &Suite,
    id: &str,
    polled: &[(&str, &str)],
    task: &Value,
    output: Value,
    callback_after_seconds: i64,
) {
    wait_for_tasks(suite, id, "RUNNING", polled).await;
    let mut result = result_of(task, "IN_PROGRESS");
    for (k, v) in output.as_object().into_iter().flatten() {
        result["outputData"][k] = v.clone();
    }
    result["callbackAfterSeconds"] = json!(callback_after_seconds);
    update_task(suite, &result).await;
}

/// `verifyPolledAndAcknowledgedTask(polled, expected)`: each input of `expected` in the
/// polled task's `inputData`, with that value.
fn has_input(task: &Value, expected: &Value) {
    for (k, v) in expected.as_object().into_iter().flatten() {
        assert_eq!(task["inputData"].get(k), Some(v), "{k} of {task}");
    }
}

/// A list of names as the set the spec compares it with (`as HashSet`); empty when
/// absent.
fn name_set(names: &Value) -> BTreeSet<&str> {
    names
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

/// `failedReferenceTaskNames == [reference]` and `failedTaskNames == [name]`, as sets.
fn failed_tasks_are(wf: &Value, reference: &str, name: &str) {
    let (refs, names) = (&wf["failedReferenceTaskNames"], &wf["failedTaskNames"]);
    assert_eq!(name_set(refs), BTreeSet::from([reference]), "{refs}");
    assert_eq!(name_set(names), BTreeSet::from([name]), "{names}");
}

/// `tasks[i].inputData.p3 == tasks[i].taskId` (`${CPEWF_TASK_ID}`).
fn p3_is_task_id(wf: &Value, i: usize) {
    let t = &tasks(wf)[i];
    assert_eq!(t["inputData"]["p3"], t["taskId"], "task {i}: {t}");
}

/// `integration_task_1` polled and completed with `op: task1.done`: the run goes on to
/// `integration_task_2`. Returns the run then.
async fn complete_task_1(suite: &Suite, id: &str) -> Value {
    let output = json!({"op": "task1.done"});
    poll_and_complete(suite, TASK_1, WORKER_1, output).await;
    let expected = [(TASK_1, "COMPLETED"), (TASK_2, "SCHEDULED")];
    wait_for_tasks(suite, id, "RUNNING", &expected).await
}

/// `integration_task_2` polled, given `param1` and task 1's `op`, and completed: the run
/// completes. Returns it.
async fn complete_task_2(suite: &Suite, id: &str) -> Value {
    let polled = poll_and_complete(suite, TASK_2, WORKER_2, json!({})).await;
    has_input(&polled, &json!({"tp2": "task1.done", "tp1": "p1 value"}));
    let expected = [(TASK_1, "COMPLETED"), (TASK_2, "COMPLETED")];
    wait_for_tasks(suite, id, "COMPLETED", &expected).await
}

async fn test_simple_workflow_completion(backend: Backend) {
    let suite = setup(backend, &FILES).await;
    workflow_def(&suite, LINEAR_WORKFLOW_T1_T2).await;
    let id = start_correlated(&suite, LINEAR_WORKFLOW_T1_T2, "unit_test_1", input()).await;
    wait_for_tasks(&suite, &id, "RUNNING", &[(TASK_1, "SCHEDULED")]).await;

    complete_task_1(&suite, &id).await;
    let wf = complete_task_2(&suite, &id).await;
    assert!(wf["output"].get("o3").is_some(), "{}", wf["output"]);
}

async fn test_simple_workflow_with_null_inputs(backend: Backend) {
    let suite = setup(backend, &FILES).await;
    let def = workflow_def(&suite, LINEAR_WORKFLOW_T1_T2).await;
    let first = &def["tasks"][0]["inputParameters"];
    assert!(first.get("someNullKey").is_some(), "{first}");

    let input = json!({"param1": "p1 value", "param2": null});
    let id = start_correlated(&suite, LINEAR_WORKFLOW_T1_T2, "unit_test_1", input).await;
    let wf = wait_for_tasks(&suite, &id, "RUNNING", &[(TASK_1, "SCHEDULED")]).await;
    assert!(wf["input"]["param2"].is_null(), "{}", wf["input"]);
    let task = &tasks(&wf)[0];
    assert!(task["inputData"]["someNullKey"].is_null(), "{task}");

    let output = json!({"someOtherKey": {"a": 1, "A": null}, "someKey": null});
    poll_and_complete(&suite, TASK_1, WORKER_1, output).await;
    let expected = [(TASK_1, "COMPLETED"), (TASK_2, "SCHEDULED")];
    let wf = wait_for_tasks(&suite, &id, "RUNNING", &expected).await;
    let output = &tasks(&wf)[0]["outputData"];
    assert_eq!(output.get("someKey"), Some(&Value::Null), "{output}");
    assert_eq!(
        output["someOtherKey"].get("A"),
        Some(&Value::Null),
        "{output}"
    );
}

const NON_TRANSIENT_ERROR: &str =
    "NON TRANSIENT ERROR OCCURRED: An integration point required to complete the task is down";

async fn test_simple_workflow_terminal_error_condition(backend: Backend) {
    let suite = setup(backend, &FILES).await;
    update_task_def(&suite, TASK_1, json!({"retryCount": 1})).await;
    let mut def = workflow_def(&suite, LINEAR_WORKFLOW_T1_T2).await;
    def["outputParameters"]["validationErrors"] = json!("${t1.output.ErrorMessage}");
    update_workflow_def(&suite, &def).await;

    let id = start_correlated(&suite, LINEAR_WORKFLOW_T1_T2, "unit_test_1", input()).await;
    wait_for_tasks(&suite, &id, "RUNNING", &[(TASK_1, "SCHEDULED")]).await;
    // A running run is not restarted (rewound).
    restart(&suite, &id, false, 409).await;

    let polled = poll_one(&suite, TASK_1, WORKER_1).await;
    let mut result = result_of(&polled, "FAILED_WITH_TERMINAL_ERROR");
    result["reasonForIncompletion"] = json!(NON_TRANSIENT_ERROR);
    result["outputData"]["TERMINAL_ERROR"] = json!("Integration endpoint down: FOOBAR");
    result["outputData"]["ErrorMessage"] = json!("There was a terminal error");
    update_task(&suite, &result).await;
    assert_eq!(polled["taskType"], TASK_1, "{polled}");
    assert_eq!(polled["workflowInstanceId"], json!(id), "{polled}");

    let wf = wait_for(&suite, &id, "FAILED").await;
    let t1 = task_by_ref(&wf, "t1");
    let reason = format!(
        "Task {} failed with status: FAILED and reason: '{NON_TRANSIENT_ERROR}'",
        t1["taskId"].as_str().unwrap_or_default()
    );
    assert_eq!(wf["reasonForIncompletion"], json!(reason));
    assert_eq!(wf["output"]["o1"], "p1 value", "{}", wf["output"]);
    let validation_errors = &wf["output"]["validationErrors"];
    assert_eq!(
        validation_errors, "There was a terminal error",
        "{}",
        wf["output"]
    );
    assert_eq!(t1["retryCount"], 0, "{t1}");
    failed_tasks_are(&wf, "t1", TASK_1);
}

async fn test_simple_workflow_with_response_timeout(backend: Backend) {
    let suite = setup(backend, &FILES).await;
    let worker = "task1.integration.worker.testTimeout";
    let id = start_correlated(&suite, "RTOWF", "unit_test_1", input()).await;
    let mut expected = vec![("task_rt", "SCHEDULED")];
    wait_for_tasks(&suite, &id, "RUNNING", &expected).await;
    wait_for_queue_size(&suite, "task_rt", 1).await;

    let polled = poll_one(&suite, "task_rt", worker).await;
    assert_eq!(polled["taskType"], "task_rt", "{polled}");
    assert_eq!(polled["workflowInstanceId"], json!(id), "{polled}");
    assert_eq!(polled["status"], "IN_PROGRESS", "{polled}");
    nothing_to_poll(&suite, "task_rt", worker).await;

    // The worker stays silent past the task's responseTimeoutSeconds (10): the task
    // times out, and a retry (its retryCount is 1) is queued in its place.
    expected[0].1 = "TIMED_OUT";
    expected.push(("task_rt", "SCHEDULED"));
    super::wait_for_tasks_within(&suite, &id, "RUNNING", &expected, 10).await;
    wait_for_queue_size(&suite, "task_rt", 1).await;

    let polled = poll_one(&suite, "task_rt", worker).await;
    expected[1].1 = "IN_PROGRESS";
    send_back_in_progress(&suite, &id, &expected, &polled, json!({}), 2).await;
    expected[1].1 = "SCHEDULED";
    wait_for_tasks(&suite, &id, "RUNNING", &expected).await;

    // Handed out again once its callback is due (the spec sleeps it out, the poll waits).
    let output = json!({"op": "task1.done"});
    poll_and_complete(&suite, "task_rt", worker, output).await;
    poll_and_complete(&suite, TASK_2, worker, json!({})).await;
    wait_for(&suite, &id, "COMPLETED").await;
}

async fn test_if_the_workflow_definitions_with_and_without_schema_version_can_be_registered(
    backend: Backend,
) {
    let suite = setup(backend, &FILES).await;
    let task = json!({"name": TASK_1, "taskReferenceName": "t1", "type": "SIMPLE"});
    let without = json!({"name": "Test_schema_version1", "version": 1,
                         "ownerEmail": "test@harness.com", "tasks": [task]});
    update_workflow_def(&suite, &without).await;
    let mut with_version = without.clone();
    with_version["name"] = json!("Test_schema_version2");
    with_version["schemaVersion"] = json!(2);
    update_workflow_def(&suite, &with_version).await;

    // The schema version is 2 by default.
    for name in ["Test_schema_version1", "Test_schema_version2"] {
        let found = workflow_def(&suite, name).await;
        assert_eq!(found["schemaVersion"], 2, "{found}");
    }
}

/// The restart features' opening: `integration_task_1` without retries, a run of the
/// simple workflow (whose definition names a failure workflow) failed by it. Returns the
/// run's id and the definition.
async fn failed_run(suite: &Suite) -> (String, Value) {
    update_task_def(suite, TASK_1, json!({"retryCount": 0})).await;
    let def = workflow_def(suite, LINEAR_WORKFLOW_T1_T2).await;
    names_a_failure_workflow(&def);
    let correlation_id = format!("integration_test_1{}", weft::ids::new_id());
    let id = start_correlated(suite, LINEAR_WORKFLOW_T1_T2, &correlation_id, input()).await;
    wait_for_tasks(suite, &id, "RUNNING", &[(TASK_1, "SCHEDULED")]).await;

    poll_and_fail(suite, TASK_1, WORKER_1, "failed..").await;
    wait_for_tasks(suite, &id, "FAILED", &[(TASK_1, "FAILED")]).await;
    (id, def)
}

/// A run restarted from its first task: `integration_task_1`, then `integration_task_2`,
/// each completed by the first worker. Returns the run's tasks as expected then.
async fn restarted_through_both_tasks(
    suite: &Suite,
    id: &str,
) -> Vec<(&'static str, &'static str)> {
    let mut expected = vec![(TASK_1, "SCHEDULED")];
    wait_for_tasks(suite, id, "RUNNING", &expected).await;
    complete_as_task1_worker(suite, TASK_1).await;
    expected[0].1 = "COMPLETED";
    expected.push((TASK_2, "SCHEDULED"));
    wait_for_tasks(suite, id, "RUNNING", &expected).await;
    complete_as_task1_worker(suite, TASK_2).await;
    expected[1].1 = "COMPLETED";
    expected
}

async fn test_simple_workflow_restart_without_using_the_latest_definition(backend: Backend) {
    let suite = setup(backend, &FILES).await;
    let (id, _) = failed_run(&suite).await;
    restart(&suite, &id, false, 204).await;
    let expected = restarted_through_both_tasks(&suite, &id).await;
    wait_for_tasks(&suite, &id, "COMPLETED", &expected).await;
}

async fn test_simple_workflow_restart_with_the_latest_definition(backend: Backend) {
    let suite = setup(backend, &FILES).await;
    let (id, mut def) = failed_run(&suite).await;
    // Version 2: one more task.
    let added =
        json!({"name": "integration_task_20", "taskReferenceName": "task_added", "type": "SIMPLE"});
    def["tasks"].as_array_mut().expect("tasks").push(added);
    def["version"] = json!(2);
    update_workflow_def(&suite, &def).await;

    restart(&suite, &id, true, 204).await;
    let mut expected = restarted_through_both_tasks(&suite, &id).await;
    expected.push(("integration_task_20", "SCHEDULED"));
    wait_for_tasks(&suite, &id, "RUNNING", &expected).await;

    let polled = complete_as_task1_worker(&suite, "integration_task_20").await;
    assert_eq!(polled["workflowInstanceId"], json!(id), "{polled}");
    assert_eq!(polled["referenceTaskName"], "task_added", "{polled}");
    expected[2].1 = "COMPLETED";
    wait_for_tasks(&suite, &id, "COMPLETED", &expected).await;
}

async fn test_simple_workflow_with_task_retries(backend: Backend) {
    let suite = setup(backend, &FILES).await;
    let changes = json!({"retryCount": 3, "retryDelaySeconds": 2});
    update_task_def(&suite, TASK_2, changes).await;
    let id = start_correlated(&suite, LINEAR_WORKFLOW_T1_T2, "integration_test_1", input()).await;
    wait_for_tasks(&suite, &id, "RUNNING", &[(TASK_1, "SCHEDULED")]).await;

    let polled = poll_one(&suite, TASK_1, WORKER_1).await;
    let given = |key: &str| {
        polled["inputData"][key]
            .as_str()
            .unwrap_or("null")
            .to_owned()
    };
    let op = format!("task1.output -> {}.{}", given("p1"), given("p2"));
    let mut result = result_of(&polled, "COMPLETED");
    result["outputData"]["op"] = json!(op);
    update_task(&suite, &result).await;
    has_input(&polled, &json!({"p1": "p1 value", "p2": "p2 value"}));

    // Failed twice, then completed; each retry is due 2 s after the failure, which the
    // polls wait for (the spec sleeps it out).
    let task_2_input = json!({"tp2": op, "tp1": "p1 value"});
    for _ in 0..2 {
        let polled = poll_and_fail(&suite, TASK_2, WORKER_2, "failure...0").await;
        has_input(&polled, &task_2_input);
    }
    let polled = poll_and_complete(&suite, TASK_2, WORKER_2, json!({})).await;
    has_input(&polled, &task_2_input);
    let expected = [
        (TASK_1, "COMPLETED"),
        (TASK_2, "FAILED"),
        (TASK_2, "FAILED"),
        (TASK_2, "COMPLETED"),
    ];
    let wf = wait_for_tasks(&suite, &id, "COMPLETED", &expected).await;
    retried_by_next(&wf, 1);
    retried_by_next(&wf, 2);
    failed_tasks_are(&wf, "t2", TASK_2);
}

async fn test_simple_workflow_with_retry_at_workflow_level(backend: Backend) {
    let suite = setup(backend, &FILES).await;
    let changes = json!({"retryCount": 1, "retryDelaySeconds": 0});
    update_task_def(&suite, TASK_1, changes).await;
    let correlation_id = format!("retry_test{}", weft::ids::new_id());
    let id = start_correlated(&suite, LINEAR_WORKFLOW_T1_T2, &correlation_id, input()).await;
    let mut expected = vec![(TASK_1, "SCHEDULED")];
    let wf = wait_for_tasks(&suite, &id, "RUNNING", &expected).await;
    p3_is_task_id(&wf, 0);
    names_a_failure_workflow(&workflow_def(&suite, LINEAR_WORKFLOW_T1_T2).await);

    poll_and_fail(&suite, TASK_1, WORKER_1, "failure...0").await;
    expected[0].1 = "FAILED";
    expected.push((TASK_1, "SCHEDULED"));
    let wf = wait_for_tasks(&suite, &id, "RUNNING", &expected).await;
    p3_is_task_id(&wf, 1);

    poll_and_fail(&suite, TASK_1, WORKER_1, "failure...0").await;
    expected[1].1 = "FAILED";
    wait_for_tasks(&suite, &id, "FAILED", &expected).await;

    super::retry(&suite, &id, false).await;
    expected.push((TASK_1, "SCHEDULED"));
    let wf = wait_for_tasks(&suite, &id, "RUNNING", &expected).await;
    p3_is_task_id(&wf, 2);

    poll_and_complete(&suite, TASK_1, WORKER_2, json!({})).await;
    expected[2].1 = "COMPLETED";
    expected.push((TASK_2, "SCHEDULED"));
    wait_for_tasks(&suite, &id, "RUNNING", &expected).await;

    poll_and_complete(&suite, TASK_2, WORKER_2, json!({})).await;
    expected[3].1 = "COMPLETED";
    let wf = wait_for_tasks(&suite, &id, "COMPLETED", &expected).await;
    failed_tasks_are(&wf, "t1", TASK_1);
}

/// The callback features' opening: a run started, its `integration_task_1` in its queue.
async fn started_with_task_1_queued(suite: &Suite) -> String {
    let id = start_correlated(suite, LINEAR_WORKFLOW_T1_T2, "integration_test_1", input()).await;
    wait_for_tasks(suite, &id, "RUNNING", &[(TASK_1, "SCHEDULED")]).await;
    wait_for_queue_size(suite, TASK_1, 1).await;
    id
}

/// `integration_task_1` polled (given `param1` and `param2`) and sent back IN_PROGRESS
/// with `op: task1.in.progress` and `callbackAfterSeconds`: it is in its queue again.
async fn task_1_sent_back(suite: &Suite, id: &str, callback_after_seconds: i64) {
    let polled = poll_one(suite, TASK_1, WORKER_1).await;
    let output = json!({"op": "task1.in.progress"});
    let seen = [(TASK_1, "IN_PROGRESS")];
    send_back_in_progress(suite, id, &seen, &polled, output, callback_after_seconds).await;
    has_input(&polled, &json!({"p1": "p1 value"}));
    assert!(polled["inputData"].get("p2").is_some(), "{polled}");
    wait_for_queue_size(suite, TASK_1, 1).await;
}

/// The callback features' end: `integration_task_1` handed out again and completed, then
/// `integration_task_2`.
async fn completed_after_the_callback(suite: &Suite, id: &str) {
    let wf = complete_task_1(suite, id).await;
    let output = &tasks(&wf)[0]["outputData"];
    assert_eq!(output["op"], "task1.done", "{output}");
    complete_task_2(suite, id).await;
}

async fn test_long_running_simple_workflow(backend: Backend) {
    let suite = setup(backend, &FILES).await;
    let id = started_with_task_1_queued(&suite).await;
    task_1_sent_back(&suite, &id, 5).await;
    nothing_to_poll(&suite, TASK_1, WORKER_1).await;
    // Handed out again after 5 s (the spec sleeps them out, the poll waits).
    completed_after_the_callback(&suite, &id).await;
}

async fn test_simple_workflow_when_the_tasks_call_back_after_seconds_are_reset(backend: Backend) {
    let suite = setup(backend, &FILES).await;
    let id = started_with_task_1_queued(&suite).await;
    task_1_sent_back(&suite, &id, 3600).await;
    nothing_to_poll(&suite, TASK_1, WORKER_1).await;
    nothing_to_poll(&suite, TASK_1, WORKER_1).await;

    // `workflowExecutor.resetCallbacksForWorkflow(id)`: the task is due at once.
    let path = format!("/api/workflow/{id}/resetcallbacks");
    post_answered(&suite, &path, 204, "resetcallbacks").await;
    completed_after_the_callback(&suite, &id).await;
}

async fn test_non_restartable_simple_workflow(backend: Backend) {
    let suite = setup(backend, &FILES).await;
    update_task_def(&suite, TASK_1, json!({"retryCount": 0})).await;
    let mut def = workflow_def(&suite, LINEAR_WORKFLOW_T1_T2).await;
    def["name"] = json!(INTEGRATION_TEST_WF_NON_RESTARTABLE);
    def["restartable"] = json!(false);
    update_workflow_def(&suite, &def).await;

    let correlation_id = "integration_test_1";
    let id = start_correlated(
        &suite,
        INTEGRATION_TEST_WF_NON_RESTARTABLE,
        correlation_id,
        input(),
    )
    .await;
    poll_and_fail(&suite, TASK_1, WORKER_1, "failure...0").await;
    wait_for_tasks(&suite, &id, "FAILED", &[(TASK_1, "FAILED")]).await;

    // A FAILED run is restarted (rewound), restartable or not.
    restart(&suite, &id, false, 204).await;
    complete_task_1(&suite, &id).await;
    let wf = complete_task_2(&suite, &id).await;
    assert_eq!(wf["output"]["o3"], "task1.done", "{}", wf["output"]);

    // A COMPLETED one is not: Conductor throws NotFoundException (404); Weft answers 409,
    // the run's state forbidding it (docs/conductor.md).
    restart(&suite, &id, false, 409).await;
}

/// `integration_task_1` SCHEDULED again, with `callbackAfterSeconds`.
async fn task_1_scheduled_with_callback(suite: &Suite, id: &str, seconds: i64) {
    let wf = wait_for_tasks(suite, id, "RUNNING", &[(TASK_1, "SCHEDULED")]).await;
    let task = &tasks(&wf)[0];
    assert_eq!(task["callbackAfterSeconds"], seconds, "{task}");
}

async fn test_simple_workflow_when_update_tasks_result_with_call_back_after_seconds(
    backend: Backend,
) {
    let suite = setup(backend, &FILES).await;
    let id = started_with_task_1_queued(&suite).await;
    // Sent back without a callback: queued again at once.
    task_1_sent_back(&suite, &id, 0).await;
    task_1_scheduled_with_callback(&suite, &id, 0).await;

    // Sent back with a callback: queued again, handed out after it.
    task_1_sent_back(&suite, &id, 3600).await;
    task_1_scheduled_with_callback(&suite, &id, 3600).await;
    nothing_to_poll(&suite, TASK_1, WORKER_1).await;
}

super::harness_features!(
    test_simple_workflow_completion,
    test_simple_workflow_with_null_inputs,
    test_simple_workflow_terminal_error_condition,
    test_simple_workflow_with_response_timeout,
    test_if_the_workflow_definitions_with_and_without_schema_version_can_be_registered,
    test_simple_workflow_restart_without_using_the_latest_definition,
    test_simple_workflow_restart_with_the_latest_definition,
    test_long_running_simple_workflow,
    test_simple_workflow_with_task_retries,
    test_simple_workflow_with_retry_at_workflow_level,
    test_simple_workflow_when_the_tasks_call_back_after_seconds_are_reset,
    test_non_restartable_simple_workflow,
    test_simple_workflow_when_update_tasks_result_with_call_back_after_seconds,
);
