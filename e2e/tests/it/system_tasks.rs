//! Conductor's NOOP, LAMBDA and HUMAN tasks, on both back-ends: a NOOP completes at once,
//! a LAMBDA returns its script's result, a HUMAN task waits IN_PROGRESS until the task
//! API completes it by id, its output taken from the update.

use std::time::Duration;

use serde_json::json;
use weft_e2e::Suite;

use crate::RUN_TIMEOUT;

crate::on_both_backends!(noop_lambda_and_a_human_task_completed_through_the_task_api);

async fn noop_lambda_and_a_human_task_completed_through_the_task_api(suite: Suite) {
    let client = suite.client();
    client
        .register(&json!({"name": "review", "version": 1, "tasks": [
            {"name": "nothing", "taskReferenceName": "nothing", "type": "NOOP"},
            {"name": "score", "taskReferenceName": "score", "type": "LAMBDA",
             "inputParameters": {"amount": "${workflow.input.amount}",
                                 "scriptExpression": "if ($.amount > 100) { return {risk: 'high'} } return {risk: 'low'}"}},
            {"name": "approve", "taskReferenceName": "approve", "type": "HUMAN",
             "inputParameters": {"risk": "${score.output.result.risk}"}}],
         "outputParameters": {"risk": "${score.output.result.risk}",
                              "approvedBy": "${approve.output.approvedBy}"}}))
        .await
        .unwrap();
    let id = client
        .start("review", json!({"amount": 250}))
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + RUN_TIMEOUT;
    let human = loop {
        let run = client.get(&id).await.unwrap();
        let found = run["tasks"].as_array().and_then(|tasks| {
            tasks
                .iter()
                .find(|t| t["referenceTaskName"] == json!("approve"))
                .cloned()
        });
        if let Some(task) = found {
            break task;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no HUMAN task: {run}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(human["status"], json!("IN_PROGRESS"), "{human}");
    assert_eq!(human["taskType"], json!("HUMAN"), "{human}");
    assert_eq!(human["inputData"]["risk"], json!("high"), "{human}");
    let run = client.get(&id).await.unwrap();
    assert_eq!(run["status"], json!("RUNNING"));
    let nothing = run["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["referenceTaskName"] == json!("nothing"))
        .cloned()
        .unwrap();
    assert_eq!(nothing["status"], json!("COMPLETED"), "{nothing}");

    // Failing a HUMAN task through the task API is refused; completing it works.
    let task_id = human["taskId"].as_str().unwrap();
    let refused = client
        .post_json(
            "/api/tasks",
            &json!({"taskId": task_id, "workflowInstanceId": id, "status": "FAILED"}),
        )
        .await
        .unwrap();
    assert_eq!(refused.status, 400, "{}", refused.text);
    let r = client
        .post_json(
            "/api/tasks",
            &json!({"taskId": task_id, "workflowInstanceId": id, "status": "COMPLETED",
                    "outputData": {"approvedBy": "Grace"}}),
        )
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.text);
    let run = client
        .wait_for_status(&id, &["COMPLETED"], RUN_TIMEOUT)
        .await
        .unwrap();
    assert_eq!(
        run["output"],
        json!({"risk": "high", "approvedBy": "Grace"}),
        "{run}"
    );
}

crate::on_both_backends!(start_workflow_starts_another_run_and_goes_on);

async fn start_workflow_starts_another_run_and_goes_on(suite: Suite) {
    let client = suite.client();
    let launcher = json!({"name": "launcher", "version": 1, "tasks": [
        {"name": "launch", "taskReferenceName": "launch", "type": "START_WORKFLOW",
         "inputParameters": {"startWorkflow": {
             "name": "greet", "correlationId": "${workflow.input.order}",
             "input": {"first": "${workflow.input.first}", "n": 2}}}}],
     "outputParameters": {"started": "${launch.output.workflowId}"}});
    client.register(&launcher).await.unwrap();
    // The started definition is frozen when the launcher starts: it must exist then.
    let refused = client
        .post_json("/api/workflow/launcher", &json!({"first": "Sam"}))
        .await
        .unwrap();
    assert_eq!(refused.status, 404, "{}", refused.text);
    assert!(refused.text.contains("greet"), "{}", refused.text);
    client
        .register(&weft_e2e::greet::definition())
        .await
        .unwrap();

    let id = client
        .start("launcher", json!({"first": "Sam", "order": "o-5"}))
        .await
        .unwrap();
    let run = client
        .wait_for_status(&id, &["COMPLETED"], RUN_TIMEOUT)
        .await
        .unwrap();
    let started = run["output"]["started"].as_str().unwrap().to_owned();
    assert_ne!(started, id);
    let greet = client
        .wait_for_status(&started, &["COMPLETED"], RUN_TIMEOUT)
        .await
        .unwrap();
    assert_eq!(greet["correlationId"], json!("o-5"), "{greet}");
    assert_eq!(greet["output"], weft_e2e::greet::expected_output("Sam", 2));

    // Conductor's own sample: the whole request from the run's input, read when the task
    // runs (the registered definition then); an unregistered one fails the task.
    let sample: serde_json::Value = serde_json::from_str(include_str!(
        "../../../shared/tests/conductor-samples/workflow_that_starts_another_workflow.json"
    ))
    .unwrap();
    client.register(&sample).await.unwrap();
    let id = client
        .start(
            "workflow_that_starts_another_workflow",
            json!({"startWorkflow": {"name": "greet", "version": 1,
                                     "input": {"first": "Kim", "n": 1}}}),
        )
        .await
        .unwrap();
    let run = client
        .wait_for_status(&id, &["COMPLETED"], RUN_TIMEOUT)
        .await
        .unwrap();
    let started = run["tasks"][0]["outputData"]["workflowId"]
        .as_str()
        .unwrap()
        .to_owned();
    let greet = client
        .wait_for_status(&started, &["COMPLETED"], RUN_TIMEOUT)
        .await
        .unwrap();
    assert_eq!(greet["output"], weft_e2e::greet::expected_output("Kim", 1));
    let id = client
        .start(
            "workflow_that_starts_another_workflow",
            json!({"startWorkflow": {"name": "nowhere"}}),
        )
        .await
        .unwrap();
    let run = client
        .wait_for_status(&id, &["FAILED"], RUN_TIMEOUT)
        .await
        .unwrap();
    let reason = run["reasonForIncompletion"].as_str().unwrap_or_default();
    assert!(
        reason.contains("nowhere") && reason.contains("not registered"),
        "{run}"
    );
}

crate::on_both_backends!(a_dynamic_task_runs_the_worker_task_its_input_names);

async fn a_dynamic_task_runs_the_worker_task_its_input_names(suite: Suite) {
    let client = suite.client();
    client
        .register(&json!({"name": "picky", "version": 1, "tasks": [
            {"name": "pick", "taskReferenceName": "pick", "type": "DYNAMIC",
             "dynamicTaskNameParam": "taskToRun",
             "inputParameters": {"taskToRun": "${workflow.input.which}",
                                 "text": "${workflow.input.text}"}}],
         "outputParameters": {"text": "${pick.output.text}"}}))
        .await
        .unwrap();
    let id = client
        .start("picky", json!({"which": "shout", "text": "quiet"}))
        .await
        .unwrap();
    let run = client
        .wait_for_status(&id, &["COMPLETED"], RUN_TIMEOUT)
        .await
        .unwrap();
    assert_eq!(run["output"], json!({"text": "QUIET"}), "{run}");
    let task = &run["tasks"][0];
    assert_eq!(task["taskType"], json!("SIMPLE"), "{task}");
    assert_eq!(task["taskDefName"], json!("shout"), "{task}");
}
