//! Conductor's synchronous execution and the execution endpoints its SDKs call, on both
//! back-ends: `execute` answers a `greet` run once it has completed, a run blocked on a
//! WAIT as soon as it blocks, the run at a named task once that task ends, and the run
//! as it stands at the deadline; variables are updated in the run's order and the next
//! task sees them; runs are found by correlation id; an ended workflow is removed and a
//! running one is refused.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use weft_e2e::{greet, Suite};

use crate::ended;

crate::on_both_backends!(synchronous_execution_variables_correlation_and_removal);

async fn execute(suite: &Suite, path: &str, body: &Value) -> Value {
    let r = suite.client().post_json(path, body).await.unwrap();
    assert_eq!(r.status, 200, "POST {path}: {}", r.text);
    r.json
        .unwrap_or_else(|| panic!("POST {path}: not JSON: {}", r.text))
}

async fn synchronous_execution_variables_correlation_and_removal(suite: Suite) {
    let client = suite.client();
    client.register(&greet::definition()).await.unwrap();
    client
        .register(&json!({"name": "gate", "version": 1, "tasks": [
            {"name": "make_name", "taskReferenceName": "first",
             "inputParameters": {"first": "${workflow.input.first}", "last": "${workflow.variables.last}"}},
            {"name": "hold", "taskReferenceName": "hold", "type": "WAIT"},
            {"name": "make_name", "taskReferenceName": "second",
             "inputParameters": {"first": "${workflow.input.first}", "last": "${workflow.variables.last}"}}],
         "variables": {"last": "Lovelace"}}))
        .await
        .unwrap();

    // A run that ends: the answer is the completed run with its tasks.
    let done = execute(
        &suite,
        "/api/workflow/execute/greet/1?requestId=req-1&waitForSeconds=60",
        &json!({"input": greet::input("Ada", 2), "correlationId": "order-7"}),
    )
    .await;
    assert_eq!(done["status"], "COMPLETED", "{done}");
    assert_eq!(done["requestId"], "req-1");
    assert_eq!(done["responseType"], "TARGET_WORKFLOW");
    assert_eq!(done["targetWorkflowStatus"], "COMPLETED");
    assert_eq!(done["correlationId"], "order-7");
    assert_eq!(done["output"], greet::expected_output("Ada", 2), "{done}");
    assert_eq!(done["tasks"].as_array().map(Vec::len), Some(3), "{done}");
    assert!(done.get("signalTimeout").is_none(), "{done}");
    let done_id = done["workflowId"].as_str().unwrap().to_owned();
    // The example worker's claims are its polls: Conductor's poll data names it.
    let deadline = tokio::time::Instant::now() + crate::RUN_TIMEOUT;
    loop {
        let polls = client
            .raw(
                reqwest::Method::GET,
                "/api/tasks/queue/polldata?taskType=make_name",
                None,
            )
            .await
            .unwrap();
        assert_eq!(polls.status, 200, "{}", polls.text);
        let polls = polls.json.unwrap();
        if polls.as_array().is_some_and(|p| !p.is_empty()) {
            assert_eq!(polls[0]["queueName"], "make_name", "{polls}");
            assert!(
                polls[0]["workerId"].as_str().is_some_and(|w| !w.is_empty()),
                "{polls}"
            );
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no poll data: {polls}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // A run that blocks on a WAIT without a timer: answered as soon as it blocks, well
    // before the deadline (a bound on the wake, not a timing).
    let asked = Instant::now();
    let blocked = execute(
        &suite,
        "/api/workflow/execute/gate/0?waitForSeconds=90",
        &json!({"input": {"first": "Ada"}, "correlationId": "order-7"}),
    )
    .await;
    assert!(
        asked.elapsed() < Duration::from_secs(80),
        "answered at the deadline, not when the run blocked: {blocked}"
    );
    assert_eq!(blocked["status"], "RUNNING", "{blocked}");
    let gate = blocked["workflowId"].as_str().unwrap().to_owned();
    let hold = blocked["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["referenceTaskName"] == "hold")
        .unwrap_or_else(|| panic!("the WAIT is reached: {blocked}"));
    assert_eq!(hold["status"], "IN_PROGRESS");

    // The same with BLOCKING_TASK: the WAIT task itself.
    let task = execute(
        &suite,
        "/api/workflow/execute/gate/1?returnStrategy=BLOCKING_TASK",
        &json!({"input": {"first": "Bob"}}),
    )
    .await;
    assert_eq!(task["referenceTaskName"], "hold", "{task}");
    assert_eq!(task["taskType"], "WAIT");

    // Variables: merged in the run's order; the task after the WAIT reads them.
    let r = client
        .post_json(
            &format!("/api/workflow/{gate}/variables"),
            &json!({"last": "Byron", "extra": 1}),
        )
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.text);
    let updated = r.json.unwrap();
    assert_eq!(
        updated["variables"],
        json!({"last": "Byron", "extra": 1}),
        "{updated}"
    );
    let r = client
        .post_json(&format!("/api/workflow/{gate}/signal/hold"), &json!({}))
        .await
        .unwrap();
    assert_eq!(r.status, 200, "the WAIT consumed it: {}", r.text);
    let finished = ended(&suite, &gate, "COMPLETED").await;
    let input_of = |run: &Value, task_ref: &str| {
        run["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["referenceTaskName"] == task_ref)
            .map(|t| t["inputData"]["last"].clone())
            .unwrap_or_else(|| panic!("no task {task_ref}: {run}"))
    };
    assert_eq!(input_of(&finished, "first"), "Lovelace", "{finished}");
    assert_eq!(input_of(&finished, "second"), "Byron", "{finished}");
    let bad = client
        .post_json(&format!("/api/workflow/{gate}/variables"), &json!([1]))
        .await
        .unwrap();
    assert_eq!(bad.status, 400, "{}", bad.text);
    let closed = client
        .post_json(&format!("/api/workflow/{gate}/variables"), &json!({"x": 1}))
        .await
        .unwrap();
    assert_eq!(closed.status, 409, "an ended run: {}", closed.text);

    // waitUntilTaskRef: answered once `first` has ended, the run still RUNNING at the WAIT.
    let at_first = execute(
        &suite,
        "/api/workflow/execute/gate/1?waitUntilTaskRef=first,nothing",
        &json!({"input": {"first": "Cy"}}),
    )
    .await;
    let first = at_first["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["referenceTaskName"] == "first")
        .unwrap_or_else(|| panic!("{at_first}"));
    assert_eq!(first["status"], "COMPLETED", "{at_first}");

    // The deadline: a run that never blocks nor ends within it is answered as it stands.
    client
        .register(&json!({"name": "slow", "version": 1, "tasks": [
            {"name": "pause", "taskReferenceName": "pause", "type": "WAIT",
             "inputParameters": {"duration": "1 hour"}}]}))
        .await
        .unwrap();
    let late = execute(
        &suite,
        "/api/workflow/execute/slow/1?waitForSeconds=1",
        &json!({}),
    )
    .await;
    assert_eq!(late["status"], "RUNNING", "{late}");
    assert_eq!(late["signalTimeout"], true, "{late}");
    let bad = client
        .post_json(
            "/api/workflow/execute/slow/1?returnStrategy=SOMETIMES",
            &json!({}),
        )
        .await
        .unwrap();
    assert_eq!(bad.status, 400, "{}", bad.text);
    assert_eq!(bad.json.unwrap()["path"], "returnStrategy");
    let unknown = client
        .post_json("/api/workflow/execute/nothing/1", &json!({}))
        .await
        .unwrap();
    assert_eq!(unknown.status, 404, "{}", unknown.text);

    // Correlation: both runs with order-7, the ended one only with includeClosed.
    let open = client
        .raw(
            reqwest::Method::GET,
            "/api/workflow/gate/correlated/order-7",
            None,
        )
        .await
        .unwrap();
    assert_eq!(open.json.unwrap(), json!([]), "the gate run has ended");
    let all = client
        .raw(
            reqwest::Method::GET,
            "/api/workflow/greet/correlated/order-7?includeClosed=true&includeTasks=true",
            None,
        )
        .await
        .unwrap()
        .json
        .unwrap();
    assert_eq!(all[0]["workflowId"], done_id.as_str(), "{all}");
    assert_eq!(all[0]["tasks"].as_array().map(Vec::len), Some(3));

    // Removal: refused while running, then the ended run goes.
    let late_id = late["workflowId"].as_str().unwrap();
    let refused = client
        .raw(
            reqwest::Method::DELETE,
            &format!("/api/workflow/{late_id}/remove"),
            None,
        )
        .await
        .unwrap();
    assert_eq!(refused.status, 409, "{}", refused.text);
    let removed = client
        .raw(
            reqwest::Method::DELETE,
            &format!("/api/workflow/{done_id}/remove"),
            None,
        )
        .await
        .unwrap();
    assert_eq!(removed.status, 200, "{}", removed.text);
    assert!(client.try_get(&done_id).await.unwrap().is_none());
    let gone = client
        .raw(
            reqwest::Method::DELETE,
            &format!("/api/workflow/{late_id}/terminate-remove?reason=done"),
            None,
        )
        .await
        .unwrap();
    assert_eq!(gone.status, 200, "{}", gone.text);
    assert!(client.try_get(late_id).await.unwrap().is_none());
}
