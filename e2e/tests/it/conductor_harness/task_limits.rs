//! `TaskLimitsWorkflowSpec`: a task definition's rate limit and concurrency limit hold a
//! task back from a poll until they allow it.

use serde_json::{json, Value};
use weft_e2e::Backend;

use super::{poll_and_complete, setup, start, update_task, wait_for_tasks};

const RATE_LIMITED_SIMPLE_TASK_WORKFLOW: &str = "test_rate_limit_simple_task_workflow";
const CONCURRENCY_EXECUTION_LIMITED_WORKFLOW: &str = "test_concurrency_limits_workflow";
// As the spec's setup, but for `rate_limited_system_task_workflow_integration_test.json`:
// its USER_TASK is a task type the harness defines in its own test code, which Weft
// refuses at registration (below, and docs/conductor-harness.md).
const FILES: [&str; 2] = [
    "rate_limited_simple_task_workflow_integration_test.json",
    "concurrency_limited_task_workflow_integration_test.json",
];

/// `workflowExecutionService.poll(type, worker)`: one poll, the task or nothing.
async fn poll(suite: &weft_e2e::Suite, task_type: &str, worker: &str) -> Option<Value> {
    let r = super::poll_once(suite, task_type, worker).await;
    match r.status {
        200 => r.json,
        204 => None,
        other => panic!("poll answered {other}: {}", r.text),
    }
}

/// "Verify that the rate limiting for system tasks is honored" runs a USER_TASK, a system
/// task the harness implements in its own Java code (`UserTask`): no Conductor server
/// knows it without that code. Weft refuses the definition at registration with a 400
/// naming the task type, rather than running a task nothing can execute.
async fn verify_that_the_rate_limiting_for_system_tasks_is_honored(backend: Backend) {
    let suite = setup(backend, &FILES).await;
    let def = super::definition("rate_limited_system_task_workflow_integration_test.json");
    let r = suite
        .client()
        .post_json("/api/metadata/workflow", &def)
        .await
        .unwrap();
    assert_eq!(r.status, 400, "{}", r.text);
    assert!(r.text.contains("USER_TASK"), "{}", r.text);
    let r = suite
        .client()
        .start_request(&json!({"name": "test_rate_limit_system_task_workflow", "version": 1}))
        .await;
    assert!(r.is_err(), "a run started: {r:?}");
}

async fn verify_that_the_rate_limiting_for_simple_tasks_is_honored(backend: Backend) {
    let suite = setup(backend, &FILES).await;
    let task = "test_simple_task_with_rateLimits";
    let worker = "rate.limit.test.worker";
    // Weft's rate windows are aligned on the epoch (docs/task-limits.md), Conductor's
    // start at the first poll: begin at a window's start, so that both polls below fall
    // in the same one.
    let window = std::time::Duration::from_secs(10);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    let into_window = std::time::Duration::from_nanos((now.as_nanos() % window.as_nanos()) as u64);
    tokio::time::sleep(window - into_window).await;
    let id = start(&suite, RATE_LIMITED_SIMPLE_TASK_WORKFLOW, json!({})).await;
    wait_for_tasks(&suite, &id, "RUNNING", &[(task, "SCHEDULED")]).await;
    poll_and_complete(&suite, task, worker, json!({})).await;
    wait_for_tasks(&suite, &id, "COMPLETED", &[(task, "COMPLETED")]).await;

    let second = start(&suite, RATE_LIMITED_SIMPLE_TASK_WORKFLOW, json!({})).await;
    wait_for_tasks(&suite, &second, "RUNNING", &[(task, "SCHEDULED")]).await;
    // One per 10 s window (its task definition): held back.
    assert_eq!(poll(&suite, task, worker).await, None);
    // The spec sleeps the window out; this poll waits for it.
    poll_and_complete(&suite, task, worker, json!({})).await;
    wait_for_tasks(&suite, &second, "COMPLETED", &[(task, "COMPLETED")]).await;
}

async fn verify_that_concurrency_limited_tasks_are_honored_during_workflow_execution(
    backend: Backend,
) {
    let suite = setup(backend, &FILES).await;
    let task = "test_task_with_concurrency_limit";
    let worker = "test_task_worker";
    let first = start(&suite, CONCURRENCY_EXECUTION_LIMITED_WORKFLOW, json!({})).await;
    wait_for_tasks(&suite, &first, "RUNNING", &[(task, "SCHEDULED")]).await;
    let polled = super::poll_one(&suite, task, worker).await;
    assert_eq!(polled["taskType"], task);
    assert_eq!(polled["workflowInstanceId"], json!(first));

    let second = start(&suite, CONCURRENCY_EXECUTION_LIMITED_WORKFLOW, json!({})).await;
    wait_for_tasks(&suite, &second, "RUNNING", &[(task, "SCHEDULED")]).await;
    // One at a time (its task definition): held back while the first runs.
    assert_eq!(poll(&suite, task, worker).await, None);

    let result = json!({"workflowInstanceId": first, "taskId": polled["taskId"],
                        "workerId": worker, "status": "COMPLETED"});
    update_task(&suite, &result).await;
    wait_for_tasks(&suite, &first, "COMPLETED", &[(task, "COMPLETED")]).await;
    let polled = super::poll_one(&suite, task, worker).await;
    assert_eq!(polled["taskType"], task);
    assert_eq!(polled["workflowInstanceId"], json!(second));
}

super::harness_features!(
    verify_that_the_rate_limiting_for_system_tasks_is_honored,
    verify_that_the_rate_limiting_for_simple_tasks_is_honored,
    verify_that_concurrency_limited_tasks_are_honored_during_workflow_execution,
);
