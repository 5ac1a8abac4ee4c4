//! Conductor's system tasks, on both back-ends: a NOOP completes at once, a LAMBDA returns
//! its script's result, a HUMAN task waits IN_PROGRESS until the task API completes it by
//! id, its output taken from the update; START_WORKFLOW and DYNAMIC; JSON_JQ_TRANSFORM
//! reshapes data with a jq program; EXCLUSIVE_JOIN takes the output of the branch that ran.

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

    // Conductor's pending-tasks query lists it (and is not offered for activities).
    let task_id = human["taskId"].as_str().unwrap();
    let pending = |path: &'static str| async move {
        client.raw(reqwest::Method::GET, path, None).await.unwrap()
    };
    let listed = pending("/api/admin/task/HUMAN").await;
    assert_eq!(listed.status, 200, "{}", listed.text);
    let listed = listed.json.unwrap();
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed}");
    assert_eq!(listed[0]["taskId"], task_id, "{listed}");
    assert_eq!(listed[0]["workflowType"], "review", "{listed}");
    assert_eq!(pending("/api/admin/task/SIMPLE").await.status, 501);

    // Giving a HUMAN task back is refused (it is not handed out to workers); completing
    // it works. (Failing it fails the run, as Conductor's: `task_updates`.)
    let refused = client
        .post_json(
            "/api/tasks",
            &json!({"taskId": task_id, "workflowInstanceId": id, "status": "IN_PROGRESS",
                    "callbackAfterSeconds": 5}),
        )
        .await
        .unwrap();
    assert_eq!(refused.status, 400, "{}", refused.text);
    assert!(refused.text.contains("not handed out"), "{}", refused.text);
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
    let after = pending("/api/admin/task/HUMAN").await.json.unwrap();
    assert_eq!(
        after,
        json!([]),
        "a completed HUMAN task is no longer pending"
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
    // As Conductor's DynamicTaskMapper: the task's type is the name it resolved to.
    assert_eq!(task["taskType"], json!("shout"), "{task}");
    assert_eq!(task["taskDefName"], json!("shout"), "{task}");
}

crate::on_both_backends!(a_jq_transform_reshapes_data_and_a_failing_program_fails_the_run);

async fn a_jq_transform_reshapes_data_and_a_failing_program_fails_the_run(suite: Suite) {
    let client = suite.client();
    // A program that does not compile is refused at registration, naming the field.
    let refused = client
        .post_json(
            "/api/metadata/workflow",
            &json!({"name": "broken_jq", "version": 1, "tasks": [
                {"name": "j", "taskReferenceName": "j", "type": "JSON_JQ_TRANSFORM",
                 "inputParameters": {"queryExpression": ".a | nosuch"}}]}),
        )
        .await
        .unwrap();
    assert_eq!(refused.status, 400, "{}", refused.text);
    assert!(
        refused
            .text
            .contains("tasks[0].inputParameters.queryExpression")
            && refused.text.contains("undefined filter nosuch/0"),
        "{}",
        refused.text
    );

    // A worker's output reshaped for the next worker; the program may also come from input.
    client
        .register(&json!({"name": "jq_shaper", "version": 1, "tasks": [
            {"name": "make_name", "taskReferenceName": "n",
             "inputParameters": {"first": "${workflow.input.first}"}},
            {"name": "shape", "taskReferenceName": "shape", "type": "JSON_JQ_TRANSFORM",
             "inputParameters": {"name": "${n.output.name}", "tags": "${workflow.input.tags}",
                                 "queryExpression": "{text: (\"hello \" + .name), tags: (.tags | map(ascii_upcase))}, (.tags | length)"}},
            {"name": "shout", "taskReferenceName": "s",
             "inputParameters": {"text": "${shape.output.result.text}"}},
            {"name": "extra", "taskReferenceName": "extra", "type": "JSON_JQ_TRANSFORM",
             "inputParameters": {"queryExpression": "${workflow.input.program}"}}],
         "outputParameters": {"shout": "${s.output.text}", "all": "${shape.output.resultList}"}}))
        .await
        .unwrap();
    let id = client
        .start(
            "jq_shaper",
            json!({"first": "Ada", "tags": ["x", "y"], "program": "[1, 2] | add"}),
        )
        .await
        .unwrap();
    let run = client
        .wait_for_status(&id, &["COMPLETED"], RUN_TIMEOUT)
        .await
        .unwrap();
    assert_eq!(
        run["output"],
        json!({"shout": "HELLO ADA WEFT",
               "all": [{"text": "hello Ada Weft", "tags": ["X", "Y"]}, 2]}),
        "{run}"
    );
    let shape = task_of(&run, "shape");
    assert_eq!(shape["taskType"], json!("JSON_JQ_TRANSFORM"), "{shape}");
    assert_eq!(shape["status"], json!("COMPLETED"), "{shape}");
    assert_eq!(
        shape["outputData"]["result"],
        json!({"text": "hello Ada Weft", "tags": ["X", "Y"]}),
        "{shape}"
    );
    assert_eq!(
        task_of(&run, "extra")["outputData"]["result"],
        json!(3),
        "{run}"
    );

    // A program that fails: the task FAILED with the message as reason and `error`.
    let id = client
        .start(
            "jq_shaper",
            json!({"first": "Bo", "tags": [], "program": "error(\"no \\(1 + 1)\")"}),
        )
        .await
        .unwrap();
    let run = client
        .wait_for_status(&id, &["FAILED"], RUN_TIMEOUT)
        .await
        .unwrap();
    let extra = task_of(&run, "extra");
    assert_eq!(extra["status"], json!("FAILED"), "{extra}");
    assert_eq!(extra["reasonForIncompletion"], json!("no 2"), "{extra}");
    assert_eq!(extra["outputData"], json!({"error": "no 2"}), "{extra}");
    assert_eq!(
        run["reasonForIncompletion"],
        json!("task \"extra\": no 2"),
        "{run}"
    );

    // Conductor's own sample: one program computes the next one.
    let sample: serde_json::Value = serde_json::from_str(include_str!(
        "../../../shared/tests/conductor-samples/sequential_json_jq_transform_integration_test.json"
    ))
    .unwrap();
    client.register(&sample).await.unwrap();
    let id = client
        .start(
            "sequential_json_jq_transform_wf",
            json!({"body": {"name": "Ada"}, "requestTransform": ".body.name"}),
        )
        .await
        .unwrap();
    let run = client
        .wait_for_status(&id, &["COMPLETED"], RUN_TIMEOUT)
        .await
        .unwrap();
    assert_eq!(
        task_of(&run, "request_transform")["outputData"]["result"],
        json!("Ada"),
        "{run}"
    );
}

crate::on_both_backends!(an_exclusive_join_takes_the_output_of_the_branch_that_ran);

async fn an_exclusive_join_takes_the_output_of_the_branch_that_ran(suite: Suite) {
    let client = suite.client();
    let join = |join_on: serde_json::Value| {
        json!({"name": "routed", "version": 1, "tasks": [
            {"name": "make_name", "taskReferenceName": "n",
             "inputParameters": {"first": "${workflow.input.first}"}},
            {"name": "route", "taskReferenceName": "route", "type": "DECISION",
             "caseValueParam": "how", "inputParameters": {"how": "${workflow.input.how}"},
             "decisionCases": {
                 "loud": [{"name": "shout", "taskReferenceName": "loud",
                           "inputParameters": {"text": "${n.output.name}"}}],
                 "counted": [{"name": "count", "taskReferenceName": "counted",
                              "inputParameters": {"text": "${n.output.name}", "n": 2}}]}},
            {"name": "xj", "taskReferenceName": "xj", "type": "EXCLUSIVE_JOIN",
             "joinOn": join_on, "defaultExclusiveJoinTask": ["n"]}],
         "outputParameters": {"joined": "${xj.output}"}})
    };
    // joinOn names tasks that run before the join.
    let refused = client
        .post_json("/api/metadata/workflow", &join(json!(["loud", "xj"])))
        .await
        .unwrap();
    assert_eq!(refused.status, 400, "{}", refused.text);
    assert!(
        refused.text.contains("tasks[2].joinOn[1]"),
        "{}",
        refused.text
    );
    client
        .register(&join(json!(["loud", "counted"])))
        .await
        .unwrap();

    for (how, joined) in [
        ("loud", json!({"text": "ADA WEFT"})),
        ("counted", json!({"result": "Ada Weft x2"})),
        // No case ran: the default, the first task.
        ("quiet", json!({"name": "Ada Weft"})),
    ] {
        let id = client
            .start("routed", json!({"first": "Ada", "how": how}))
            .await
            .unwrap();
        let run = client
            .wait_for_status(&id, &["COMPLETED"], RUN_TIMEOUT)
            .await
            .unwrap();
        assert_eq!(run["output"], json!({ "joined": joined }), "{how}: {run}");
        let xj = task_of(&run, "xj");
        assert_eq!(xj["taskType"], json!("EXCLUSIVE_JOIN"), "{xj}");
        assert_eq!(xj["status"], json!("COMPLETED"), "{xj}");
        if how == "loud" {
            // The flowchart draws each case's last task into the join.
            let graph = client
                .raw(
                    reqwest::Method::GET,
                    &format!("/api/workflow/{id}/graph"),
                    None,
                )
                .await
                .unwrap();
            assert_eq!(graph.status, 200, "{}", graph.text);
            let edges = graph.json.as_ref().unwrap()["edges"]
                .as_array()
                .unwrap()
                .clone();
            let into_join: Vec<(String, String, bool)> = edges
                .iter()
                .filter(|e| e["to"] == json!("xj"))
                .map(|e| {
                    (
                        e["from"].as_str().unwrap().to_owned(),
                        e["kind"].as_str().unwrap().to_owned(),
                        e["followed"].as_bool().unwrap(),
                    )
                })
                .collect();
            assert!(
                into_join.contains(&("loud".into(), "join".into(), true))
                    && into_join.contains(&("counted".into(), "join".into(), false)),
                "{into_join:?}"
            );
        }
    }
}

/// The task of `run` with reference `task_ref` (the newest).
fn task_of(run: &serde_json::Value, task_ref: &str) -> serde_json::Value {
    run["tasks"]
        .as_array()
        .and_then(|tasks| {
            tasks
                .iter()
                .rev()
                .find(|t| t["referenceTaskName"] == json!(task_ref))
                .cloned()
        })
        .unwrap_or_else(|| panic!("no task {task_ref} in {run}"))
}
