//! Conductor's own integration specs (`test-harness/.../integration/*Spec.groovy`),
//! ported feature by feature as REST tests against the real services, over the harness's
//! definitions copied unedited into `e2e/conductor-harness/`. Where a spec drives
//! Conductor's internals (a sweep, a system task's execution), the test waits, with a
//! deadline, for Weft to get there on its own. Which features are ported and which fail
//! on Weft: `docs/conductor-harness.md`.

/// Each feature (an `async fn(Backend)`) as two tests, `<feature>::on_services` and
/// `<feature>::on_weft_dev`: the specs pass on both shapes of Weft.
macro_rules! harness_features {
    ($($feature:ident),* $(,)?) => {$(
        mod $feature {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn on_services() {
                super::$feature(weft_e2e::Backend::Services).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn on_weft_dev() {
                super::$feature(weft_e2e::Backend::Dev).await;
            }
        }
    )*};
}
use harness_features;

mod decision;
mod do_while;
mod dynamic_fork_join;
mod event;
mod exclusive_join;
mod failure_workflow;
mod fork_join;
mod json_jq_transform;
mod lambda_and_terminate;
mod retry_policy;
mod set_variable;
mod signal;
mod simple_workflow;
mod start_workflow;
mod sub_workflow;
mod sub_workflow_rerun;
mod sub_workflow_restart;
mod sub_workflow_retry;
mod switch;
mod task_limits;
mod three_levels;
mod wait;

use std::time::Duration;

use serde_json::{json, Value};
use weft_e2e::{poll_until, Backend, RawResponse, Suite};

/// How long a feature may take to reach the state its spec checks: each test is meant to
/// finish well under 20 s.
pub(crate) const DEADLINE: Duration = Duration::from_secs(15);

/// A harness definition, by file name, exactly as Conductor ships it.
pub(crate) fn definition(file: &str) -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("conductor-harness")
        .join(file);
    serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap()
}

/// The task definitions every spec runs with (`WorkflowTestUtil.taskDefinitions()`):
/// Conductor's `TaskDef(name, description, ownerEmail, retryCount, timeoutSeconds,
/// responseTimeoutSeconds)` and the named ones, with TaskDef's defaults for the rest.
pub(crate) fn task_definitions() -> Value {
    let def = |name: String, retry_count: i64, timeout: i64| {
        json!({"name": name, "description": name, "ownerEmail": OWNER, "retryCount": retry_count,
               "timeoutSeconds": timeout, "responseTimeoutSeconds": timeout})
    };
    let mut defs: Vec<Value> = (0..=20)
        .map(|i| def(format!("integration_task_{i}"), 1, 120))
        .chain((0..=4).map(|i| def(format!("integration_task_0_RT_{i}"), 0, 120)))
        .collect();
    defs.push(def("short_time_out".into(), 1, 5));
    defs.extend([
        json!({"name": "task_rt", "timeoutSeconds": 120, "retryCount": 1,
               "retryDelaySeconds": 0, "responseTimeoutSeconds": 10}),
        json!({"name": "task_optional", "timeoutSeconds": 5, "retryCount": 1,
               "timeoutPolicy": "RETRY", "retryDelaySeconds": 0, "responseTimeoutSeconds": 5}),
        json!({"name": "simple_task_in_sub_wf", "retryCount": 0}),
        json!({"name": "sub_workflow_task", "retryCount": 1, "responseTimeoutSeconds": 5,
               "retryDelaySeconds": 0}),
        json!({"name": "waitTimeout", "timeoutSeconds": 2, "responseTimeoutSeconds": 2,
               "retryCount": 1, "timeoutPolicy": "RETRY", "retryDelaySeconds": 10}),
        json!({"name": "user_task", "timeoutSeconds": 20, "responseTimeoutSeconds": 20,
               "retryCount": 1, "timeoutPolicy": "RETRY", "retryDelaySeconds": 10}),
        json!({"name": "eventX", "timeoutSeconds": 10, "responseTimeoutSeconds": 10}),
        json!({"name": "test_task_with_rateLimits", "rateLimitFrequencyInSeconds": 10,
               "rateLimitPerFrequency": 1}),
        json!({"name": "test_simple_task_with_rateLimits", "rateLimitFrequencyInSeconds": 10,
               "rateLimitPerFrequency": 1}),
        json!({"name": "test_task_with_concurrency_limit", "concurrentExecLimit": 1}),
    ]);
    for d in &mut defs[26..] {
        d["ownerEmail"] = json!(OWNER);
    }
    Value::Array(defs)
}

/// `metadataService.updateTaskDef(...)`: the harness's definition of `name` with
/// `changes` (its fields) applied, written with `PUT /api/metadata/taskdefs`.
pub(crate) async fn update_task_def(suite: &Suite, name: &str, changes: Value) {
    let mut def = task_definitions()
        .as_array()
        .into_iter()
        .flatten()
        .find(|d| d["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("the harness defines no task {name}"));
    for (k, v) in changes.as_object().into_iter().flatten() {
        def[k] = v.clone();
    }
    put_ok(suite, "/api/metadata/taskdefs", &def).await;
}

/// `GET path`, answered 200: a spec's read through a Conductor service (`getWorkflowDef`,
/// `getTask`), over REST.
pub(crate) async fn get_ok(suite: &Suite, path: &str) -> RawResponse {
    let r = suite
        .client()
        .raw(reqwest::Method::GET, path, None)
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.text);
    r
}

/// `PUT path` with `body`, answered 200: a spec's `metadataService.update...`, over REST.
pub(crate) async fn put_ok(suite: &Suite, path: &str, body: &Value) -> RawResponse {
    let body = ("application/json", body.to_string().into_bytes());
    let r = suite
        .client()
        .raw(reqwest::Method::PUT, path, Some(body))
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.text);
    r
}

/// `POST path` without a body, answered `status`: a spec's operation on a run (`retry`,
/// `restart`, ...), over REST; `operation` names it in the failure message.
pub(crate) async fn post_answered(suite: &Suite, path: &str, status: u16, operation: &str) {
    let r = suite
        .client()
        .raw(reqwest::Method::POST, path, None)
        .await
        .unwrap();
    assert_eq!(
        r.status, status,
        "{operation} answered {}: {}",
        r.status, r.text
    );
}

/// `workflowExecutionService.poll(type, worker)`: one `GET /api/tasks/poll/{type}`,
/// whatever the answer, for a spec that checks what a single poll hands out (nothing,
/// where a limit or a callback holds the task back).
pub(crate) async fn poll_once(suite: &Suite, task_type: &str, worker: &str) -> RawResponse {
    let path = format!("/api/tasks/poll/{task_type}?workerid={worker}");
    suite
        .client()
        .raw(reqwest::Method::GET, &path, None)
        .await
        .unwrap()
}

/// `DEFAULT_EMAIL_ADDRESS` of the harness.
const OWNER: &str = "test@harness.com";

/// Starts Weft on `backend`, registers the harness's task definitions and the spec's
/// workflow definitions, as `WorkflowTestUtil` and the spec's `setup()` do.
pub(crate) async fn setup(backend: Backend, files: &[&str]) -> Suite {
    setup_with(backend, files, &[]).await
}

/// [`setup`] with the harness's own configuration `settings` (`WEFT_*` variables) for
/// every part of Weft, as a spec's `application-integrationtest.properties` sets it.
pub(crate) async fn setup_with(
    backend: Backend,
    files: &[&str],
    settings: &[(&str, &str)],
) -> Suite {
    let options = weft_e2e::env::EnvOptions {
        extra_env: settings
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        ..weft_e2e::env::EnvOptions::default()
    };
    let suite = Suite::start_on_with(backend, options).await.unwrap();
    suite
        .client()
        .register_taskdefs(&task_definitions())
        .await
        .unwrap();
    for f in files {
        suite.client().register(&definition(f)).await.unwrap();
    }
    suite
}

/// `startWorkflow(name, 1, '', input, null)`.
pub(crate) async fn start(suite: &Suite, name: &str, input: Value) -> String {
    start_correlated(suite, name, "", input).await
}

/// `startWorkflow(name, 1, correlationId, input, null)`.
pub(crate) async fn start_correlated(
    suite: &Suite,
    name: &str,
    correlation_id: &str,
    input: Value,
) -> String {
    let mut request = json!({"name": name, "version": 1, "input": input});
    if !correlation_id.is_empty() {
        request["correlationId"] = json!(correlation_id);
    }
    suite.client().start_request(&request).await.unwrap()
}

/// The run once it is `status` with `count` tasks: where a spec checks a running run
/// right after a step, Weft gets there asynchronously.
pub(crate) async fn wait_for_state(suite: &Suite, id: &str, status: &str, count: usize) -> Value {
    // The last run seen, for the failure message.
    let last = std::sync::Mutex::new(Value::Null);
    let found = poll_until(DEADLINE, Duration::from_millis(20), String::new, || async {
        let wf = suite.client().get(id).await?;
        let done = wf["status"] == status && tasks(&wf).len() == count;
        *last.lock().unwrap() = wf.clone();
        Ok(done.then_some(wf))
    })
    .await;
    found.unwrap_or_else(|e| {
        panic!(
            "{id} never {status} with {count} tasks ({e}); last seen: {}",
            weft_e2e::client::summarize_types(&last.lock().unwrap())
        )
    })
}

/// The run once it is `status` with exactly the tasks `expected` lists (`(taskType,
/// status)` each, in order): where a spec checks a run right after a step that Conductor
/// takes synchronously, Weft's tasks reach those statuses one commit after the other.
pub(crate) async fn wait_for_tasks(
    suite: &Suite,
    id: &str,
    status: &str,
    expected: &[(&str, &str)],
) -> Value {
    wait_for_tasks_until(suite, id, status, expected, DEADLINE).await
}

/// [`wait_for_tasks`] for a step that takes `seconds` of its own (a timeout) on top of
/// the usual deadline.
pub(crate) async fn wait_for_tasks_within(
    suite: &Suite,
    id: &str,
    status: &str,
    expected: &[(&str, &str)],
    seconds: u64,
) -> Value {
    let deadline = DEADLINE + Duration::from_secs(seconds);
    wait_for_tasks_until(suite, id, status, expected, deadline).await
}

async fn wait_for_tasks_until(
    suite: &Suite,
    id: &str,
    status: &str,
    expected: &[(&str, &str)],
    deadline: Duration,
) -> Value {
    let matches = |wf: &Value| {
        wf["status"] == status
            && tasks(wf).len() == expected.len()
            && tasks(wf)
                .iter()
                .zip(expected)
                .all(|(t, (ty, st))| t["taskType"] == *ty && t["status"] == *st)
    };
    let last = std::sync::Mutex::new(Value::Null);
    let found = poll_until(deadline, Duration::from_millis(20), String::new, || async {
        let wf = suite.client().get(id).await?;
        let done = matches(&wf);
        *last.lock().unwrap() = wf.clone();
        Ok(done.then_some(wf))
    })
    .await;
    found.unwrap_or_else(|e| {
        panic!(
            "{id} never {status} with {expected:?} ({e}); last seen: {}",
            weft_e2e::client::summarize_types(&last.lock().unwrap())
        )
    })
}

/// The run once it has reached `status` (with its tasks).
pub(crate) async fn wait_for(suite: &Suite, id: &str, status: &str) -> Value {
    suite
        .client()
        .wait_for_status(id, &[status], DEADLINE)
        .await
        .unwrap()
}

/// The run's tasks.
pub(crate) fn tasks(wf: &Value) -> &Vec<Value> {
    wf["tasks"].as_array().expect("tasks")
}

/// `tasks[i].taskType == ty && tasks[i].status == status`.
fn task_is(wf: &Value, i: usize, ty: &str, status: &str) {
    let t = &tasks(wf)[i];
    assert_eq!(
        (t["taskType"].as_str(), t["status"].as_str()),
        (Some(ty), Some(status)),
        "task {i}: {t}"
    );
}

/// The specs' most frequent step, `pollAndCompleteTask(type, 'task1.integration.worker',
/// [:])`: [`poll_and_complete`] by that worker with an empty output.
pub(crate) async fn complete_as_task1_worker(suite: &Suite, task_type: &str) -> Value {
    poll_and_complete(suite, task_type, "task1.integration.worker", json!({})).await
}

/// `workflowTestUtil.pollAndCompleteTask(type, worker, output)` over Conductor's task
/// REST API: polls one task of `task_type` and completes it with `output`. Returns the
/// polled task.
pub(crate) async fn poll_and_complete(
    suite: &Suite,
    task_type: &str,
    worker: &str,
    output: Value,
) -> Value {
    poll_and_update(
        suite,
        task_type,
        worker,
        json!({"status": "COMPLETED", "outputData": output}),
    )
    .await
}

/// `workflowTestUtil.pollAndFailTask(type, worker, reason)`: polls one task of
/// `task_type` and fails it with `reason`. Returns the polled task.
pub(crate) async fn poll_and_fail(
    suite: &Suite,
    task_type: &str,
    worker: &str,
    reason: &str,
) -> Value {
    let result = json!({"status": "FAILED", "reasonForIncompletion": reason});
    poll_and_update(suite, task_type, worker, result).await
}

/// Polls one task of `task_type` as `worker` and updates it with `result`'s fields.
async fn poll_and_update(suite: &Suite, task_type: &str, worker: &str, fields: Value) -> Value {
    let task = poll_one(suite, task_type, worker).await;
    // verifyPolledAndAcknowledgedTask: a task of that type was handed out.
    assert_eq!(task["taskType"], task_type, "{task}");
    let mut result = json!({
        "workflowInstanceId": task["workflowInstanceId"],
        "taskId": task["taskId"],
        "workerId": worker,
    });
    for (k, v) in fields.as_object().into_iter().flatten() {
        result[k] = v.clone();
    }
    update_task(suite, &result).await;
    task
}

/// Polls `task_type` as `worker` until a task comes (long polls, with a deadline).
pub(crate) async fn poll_one(suite: &Suite, task_type: &str, worker: &str) -> Value {
    crate::http_tasks::poll_one(suite, task_type, worker).await
}

/// `POST /api/tasks` with `result` (a `TaskResult`), answered 200.
pub(crate) async fn update_task(suite: &Suite, result: &Value) {
    let r = suite
        .client()
        .post_json("/api/tasks", result)
        .await
        .unwrap();
    assert_eq!(
        r.status, 200,
        "task update answered {}: {}",
        r.status, r.text
    );
}

/// SwitchTaskSpec's and DecisionTaskSpec's "a workflow that has a `switch_type` task that
/// leads to a fork join" (`ForkConditionalTest`): the same steps, with the fork's first
/// branch opening with a SWITCH or a DECISION.
pub(crate) async fn switch_leading_to_a_fork_join(
    backend: Backend,
    files: &[&str],
    switch_type: &str,
) {
    let suite = setup(backend, files).await;
    let input = json!({"param1": "p1", "param2": "p2", "case": "c"});
    let correlation_id = format!("{}_forkjoin", switch_type.to_lowercase());
    let id = start_correlated(&suite, "ForkConditionalTest", &correlation_id, input).await;
    let mut expected = vec![
        ("FORK", "COMPLETED"),
        (switch_type, "COMPLETED"),
        ("integration_task_1", "SCHEDULED"),
        ("integration_task_10", "SCHEDULED"),
        ("JOIN", "IN_PROGRESS"),
    ];
    wait_for_tasks(&suite, &id, "RUNNING", &expected).await;

    complete_as_task1_worker(&suite, "integration_task_1").await;
    complete_as_task1_worker(&suite, "integration_task_10").await;
    expected[2].1 = "COMPLETED";
    expected[3].1 = "COMPLETED";
    expected.push(("integration_task_2", "SCHEDULED"));
    let wf = wait_for_tasks(&suite, &id, "RUNNING", &expected).await;
    assert_eq!(tasks(&wf)[4]["inputData"]["joinOn"], json!(["t20", "t10"]));

    complete_as_task1_worker(&suite, "integration_task_2").await;
    expected[5].1 = "COMPLETED";
    expected.push(("integration_task_20", "SCHEDULED"));
    let wf = wait_for_tasks(&suite, &id, "RUNNING", &expected).await;
    assert_eq!(tasks(&wf)[4]["inputData"]["joinOn"], json!(["t20", "t10"]));

    complete_as_task1_worker(&suite, "integration_task_20").await;
    expected[4].1 = "COMPLETED";
    expected[6].1 = "COMPLETED";
    let wf = wait_for_tasks(&suite, &id, "COMPLETED", &expected).await;
    assert_eq!(tasks(&wf)[4]["inputData"]["joinOn"], json!(["t20", "t10"]));
}

/// `workflowExecutor.updateTask(new TaskResult(task))` with the task's status set to
/// COMPLETED: `POST /api/tasks` for task `i` of the run.
pub(crate) async fn complete_task_at(suite: &Suite, wf: &Value, i: usize) {
    let task = &tasks(wf)[i];
    let result = json!({
        "workflowInstanceId": task["workflowInstanceId"],
        "taskId": task["taskId"],
        "status": "COMPLETED",
        "outputData": task["outputData"],
    });
    update_task(suite, &result).await;
}

/// `reasonForIncompletion.contains(text)`, as the specs check it.
pub(crate) fn reason_contains(wf: &Value, text: &str) {
    let reason = wf["reasonForIncompletion"].as_str().unwrap_or_default();
    assert!(reason.contains(text), "{text:?} not in {reason:?}");
}

/// `workflowExecutor.terminateWorkflow(id, reason)`: `DELETE /api/workflow/{id}?reason=`.
pub(crate) async fn terminate(suite: &Suite, id: &str, reason: &str) {
    let path = format!("/api/workflow/{id}?reason={}", reason.replace(' ', "%20"));
    let r = suite
        .client()
        .raw(reqwest::Method::DELETE, &path, None)
        .await
        .unwrap();
    assert!(
        r.status < 300,
        "terminate answered {}: {}",
        r.status,
        r.text
    );
}

/// Conductor's `retry(workflowId, resumeSubworkflowTasks)`, over REST: 204.
pub(crate) async fn retry(suite: &Suite, id: &str, resume_subworkflow_tasks: bool) {
    let path =
        format!("/api/workflow/{id}/retry?resumeSubworkflowTasks={resume_subworkflow_tasks}");
    post_answered(suite, &path, 204, "retry").await;
}

/// `getTaskByRefName(reference)`: the run's newest task of that reference (a retried or
/// looped task has several).
pub(crate) fn task_by_ref<'a>(wf: &'a Value, reference: &str) -> &'a Value {
    tasks(wf)
        .iter()
        .rev()
        .find(|t| t["referenceTaskName"] == reference)
        .unwrap_or_else(|| {
            panic!(
                "no task {reference}: {}",
                weft_e2e::client::summarize_types(wf)
            )
        })
}

/// `tasks[i + 1].retriedTaskId == tasks[i].taskId`: a retry comes right after the task it
/// retries.
pub(crate) fn retried_by_next(wf: &Value, i: usize) {
    let (failed, retry) = (&tasks(wf)[i], &tasks(wf)[i + 1]);
    assert_eq!(retry["retriedTaskId"], failed["taskId"], "{retry}");
}

/// The child run ids (`subWorkflowId`) of the run's SUB_WORKFLOW tasks at `positions`.
pub(crate) fn child_ids(wf: &Value, positions: &[usize]) -> Vec<String> {
    positions
        .iter()
        .map(|&i| {
            tasks(wf)[i]["subWorkflowId"]
                .as_str()
                .unwrap_or_else(|| panic!("task {i} has no child: {}", tasks(wf)[i]))
                .to_owned()
        })
        .collect()
}
