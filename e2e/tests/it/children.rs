//! Dynamic forks, sub-workflows, groups of children and failure workflows over the real
//! services.

use serde_json::{json, Value};
use weft_e2e::{Suite, TestEnv};

crate::on_both_backends!(
    dynamic_forks_run_what_the_input_lists,
    dynamic_forks_run_tasks_of_every_kind,
    sub_workflows_run_as_child_runs_and_report_back,
    a_group_of_children_succeeds_or_fails_by_its_success_percent,
    a_sub_workflow_named_by_an_earlier_task_runs_the_registered_definition,
    every_failed_run_starts_its_own_failure_workflow_children_and_started_runs_too,
);

async fn dynamic_forks_run_what_the_input_lists(suite: Suite) {
    let client = suite.client();
    client
        .register(&json!({"name": "fan_out", "version": 1, "tasks": [
            {"name": "names", "taskReferenceName": "names", "type": "FORK_JOIN_DYNAMIC",
             "inputParameters": {"forkTaskName": "make_name",
                                 "forkTaskInputs": "${workflow.input.people}"}},
            {"name": "join_names", "taskReferenceName": "join_names", "type": "JOIN"},
            {"name": "mixed", "taskReferenceName": "mixed", "type": "FORK_JOIN_DYNAMIC",
             "dynamicForkTasksParam": "tasks", "dynamicForkTasksInputParamName": "inputs",
             "inputParameters": {"tasks": "${workflow.input.tasks}",
                                 "inputs": "${workflow.input.inputs}"}},
            {"name": "join_mixed", "taskReferenceName": "join_mixed", "type": "JOIN"}],
         "outputParameters": {"names": "${join_names.output}", "mixed": "${join_mixed.output}"}}))
        .await
        .unwrap();
    let id = client
        .start(
            "fan_out",
            json!({
                "people": [{"first": "Ada"}, {"first": "Bo"}],
                "tasks": [{"name": "shout", "taskReferenceName": "loud", "type": "SIMPLE"},
                          {"name": "count", "taskReferenceName": "many", "type": "SIMPLE"}],
                "inputs": {"loud": {"text": "hey"}, "many": {"text": "hey", "n": 2}}
            }),
        )
        .await
        .unwrap();
    let wf = crate::ended(&suite, &id, "COMPLETED").await;
    assert_eq!(
        wf["output"],
        json!({
            "names": {"make_name_0": {"name": "Ada Weft"}, "make_name_1": {"name": "Bo Weft"}},
            "mixed": {"loud": {"text": "HEY"}, "many": {"result": "hey x2"}}
        })
    );
}

/// A dynamic fork's branches may be of any type Conductor forks but a container: system
/// tasks the decider runs (INLINE, SET_VARIABLE, JSON_JQ_TRANSFORM), a WAIT completed over
/// REST, a SUB_WORKFLOW, a worker's SIMPLE task; and 200 INLINE tasks by `forkTaskType`.
/// Before, only SIMPLE, HTTP and SUB_WORKFLOW branches ran ("dynamic forks run SIMPLE,
/// HTTP or …").
async fn dynamic_forks_run_tasks_of_every_kind(suite: Suite) {
    const CALCS: usize = 200;
    let client = suite.client();
    client
        .register(&json!({"name": "doubler", "version": 1, "tasks": [
            {"name": "double", "taskReferenceName": "d", "type": "INLINE",
             "inputParameters": {"evaluatorType": "javascript", "expression": "$.x * 2",
                                 "x": "${workflow.input.x}"}}],
         "outputParameters": {"y": "${d.output.result}"}}))
        .await
        .unwrap();
    client
        .register(&json!({"name": "fan_any", "version": 1, "tasks": [
            {"name": "any", "taskReferenceName": "any", "type": "FORK_JOIN_DYNAMIC",
             "dynamicForkTasksParam": "tasks", "dynamicForkTasksInputParamName": "inputs",
             "inputParameters": {"tasks": "${workflow.input.tasks}",
                                 "inputs": "${workflow.input.inputs}"}},
            {"name": "join_any", "taskReferenceName": "join_any", "type": "JOIN"},
            {"name": "calcs", "taskReferenceName": "calcs", "type": "FORK_JOIN_DYNAMIC",
             "inputParameters": {"forkTaskName": "calc", "forkTaskType": "INLINE",
                                 "forkTaskInputs": "${workflow.input.calcs}"}},
            {"name": "join_calcs", "taskReferenceName": "join_calcs", "type": "JOIN"}],
         "outputParameters": {"any": "${join_any.output}", "calcs": "${join_calcs.output}",
                              "who": "${workflow.variables.who}"}}))
        .await
        .unwrap();
    let calcs: Vec<Value> = (0..CALCS)
        .map(|i| json!({"evaluatorType": "javascript", "expression": "$.i * 2", "i": i}))
        .collect();
    let id = client
        .start(
            "fan_any",
            json!({
                "tasks": [
                    {"name": "calc", "taskReferenceName": "six", "type": "INLINE"},
                    {"name": "sv", "taskReferenceName": "sv", "type": "SET_VARIABLE"},
                    {"name": "jq", "taskReferenceName": "jq", "type": "JSON_JQ_TRANSFORM"},
                    {"name": "hold", "taskReferenceName": "hold", "type": "WAIT"},
                    {"name": "kid", "taskReferenceName": "kid", "type": "SUB_WORKFLOW",
                     "subWorkflowParam": {"name": "doubler", "version": 1}},
                    {"name": "shout", "taskReferenceName": "loud", "type": "SIMPLE"}],
                "inputs": {
                    "six": {"evaluatorType": "javascript", "expression": "$.a * $.b", "a": 2, "b": 3},
                    "sv": {"who": "Ada"},
                    "jq": {"queryExpression": ".a + 1", "a": 41},
                    "hold": {},
                    "kid": {"x": 5},
                    "loud": {"text": "hey"}},
                "calcs": calcs
            }),
        )
        .await
        .unwrap();
    // The WAIT branch holds the fork until it is completed by reference.
    weft_e2e::poll_until(
        crate::RUN_TIMEOUT,
        std::time::Duration::from_millis(100),
        || format!("{id}: the WAIT branch is waiting"),
        || async {
            let run = client.get(&id).await?;
            let waiting = run["tasks"].as_array().is_some_and(|tasks| {
                tasks
                    .iter()
                    .any(|t| t["referenceTaskName"] == "hold" && t["status"] == "IN_PROGRESS")
            });
            Ok(waiting.then_some(()))
        },
    )
    .await
    .unwrap();
    let answer = client
        .post_json(
            &format!("/api/tasks/{id}/hold/COMPLETED"),
            &json!({"ok": true}),
        )
        .await
        .unwrap();
    assert_eq!(answer.status, 200, "{}", answer.text);

    let wf = crate::ended(&suite, &id, "COMPLETED").await;
    let any = &wf["output"]["any"];
    assert_eq!(any["six"]["result"], json!(6), "{any:#}");
    assert_eq!(any["jq"]["result"], json!(42), "{any:#}");
    assert_eq!(any["hold"]["ok"], json!(true), "{any:#}");
    assert_eq!(any["kid"]["y"], json!(10), "{any:#}");
    assert_eq!(any["loud"]["text"], json!("HEY"), "{any:#}");
    assert_eq!(wf["output"]["who"], json!("Ada"));
    let joined = wf["output"]["calcs"].as_object().unwrap();
    assert_eq!(joined.len(), CALCS, "one output a branch");
    for i in [0, 1, CALCS / 2, CALCS - 1] {
        assert_eq!(joined[&format!("calc_{i}")]["result"], json!(i * 2));
    }
}

async fn sub_workflows_run_as_child_runs_and_report_back(suite: Suite) {
    let client = suite.client();
    let mut child = weft_e2e::greet::definition();
    child["name"] = json!("greet_child");
    let mut broken = child.clone();
    broken["name"] = json!("broken_child");
    broken["tasks"][2]["inputParameters"] = json!({"text": "${s.output.text}"}); // no `n`
    client
        .register(&json!({"name": "family", "version": 1, "tasks": [
            {"name": "kid", "taskReferenceName": "kid", "type": "SUB_WORKFLOW",
             "inputParameters": {"first": "${workflow.input.first}", "n": 2},
             "subWorkflowParam": {"name": "greet_child", "workflowDefinition": child}},
            {"name": "shout", "taskReferenceName": "s2", "type": "SIMPLE",
             "inputParameters": {"text": "${kid.output.result}"}}],
         "outputParameters": {"child": "${kid.output.subWorkflowId}", "loud": "${s2.output.text}"}}))
        .await
        .unwrap();
    client
        .register(&json!({"name": "broken_family", "version": 1, "tasks": [
            {"name": "kid", "taskReferenceName": "kid", "type": "SUB_WORKFLOW",
             "inputParameters": {"first": "x"},
             "subWorkflowParam": {"name": "broken_child", "workflowDefinition": broken}}]}))
        .await
        .unwrap();

    let id = client
        .start("family", json!({"first": "Ada"}))
        .await
        .unwrap();
    let broken_id = client.start("broken_family", json!({})).await.unwrap();

    let wf = crate::ended(&suite, &id, "COMPLETED").await;
    assert_eq!(wf["output"]["loud"], json!("ADA WEFT X2"));
    let child_id = wf["output"]["child"].as_str().unwrap().to_owned();
    let child = client.get(&child_id).await.unwrap();
    assert_eq!(child["status"], json!("COMPLETED"));
    assert_eq!(child["parentWorkflowId"], json!(id));
    assert_eq!(
        child["output"],
        json!({"result": "ADA WEFT x2", "name": "Ada Weft"})
    );

    let wf = crate::ended(&suite, &broken_id, "FAILED").await;
    let reason = wf["reasonForIncompletion"].as_str().unwrap_or_default();
    assert!(
        reason.contains("child workflow") && reason.contains("FAILED"),
        "{reason}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_run_starts_its_failure_workflow() {
    let suite = Suite::start(TestEnv::new().await.unwrap()).await.unwrap();
    let client = suite.client();
    client
        .register(&json!({"name": "cleanup", "version": 1, "tasks": [
            {"name": "make_name", "taskReferenceName": "n", "type": "SIMPLE",
             "inputParameters": {"first": "${workflow.input.failureStatus}"}}],
         "outputParameters": {"seen": "${n.output.name}", "failed": "${workflow.input.workflowId}",
                              "order": "${workflow.input.order}"}}))
        .await
        .unwrap();
    client
        .register(
            &json!({"name": "fragile", "version": 1, "failureWorkflow": "cleanup",
         "tasks": [{"name": "count", "taskReferenceName": "c", "type": "SIMPLE",
                    "inputParameters": {"text": "x"}}]}),
        )
        .await
        .unwrap();
    let id = client.start("fragile", json!({"order": 42})).await.unwrap();
    crate::ended(&suite, &id, "FAILED").await;
    let mut cleanup_id = None;
    for _ in 0..2_000 {
        cleanup_id = sqlx::query_scalar::<_, String>(
            "SELECT workflow_id FROM runs WHERE parent_workflow_id = $1",
        )
        .bind(&id)
        .fetch_optional(suite.env().pool())
        .await
        .unwrap();
        if cleanup_id.is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let cleanup_id = cleanup_id.expect("the failure workflow was started");
    let wf = crate::ended(&suite, &cleanup_id, "COMPLETED").await;
    assert_eq!(
        wf["output"],
        json!({"seen": "FAILED Weft", "failed": id, "order": 42})
    );

    // A failure workflow that is not registered refuses the start, naming it.
    client
        .register(
            &json!({"name": "fragile2", "version": 1, "failureWorkflow": "nobody",
         "tasks": [{"name": "count", "taskReferenceName": "c", "type": "SIMPLE"}]}),
        )
        .await
        .unwrap();
    let r = client
        .raw(
            reqwest::Method::POST,
            "/api/workflow",
            Some(("application/json", br#"{"name": "fragile2"}"#.to_vec())),
        )
        .await
        .unwrap();
    assert_eq!(r.status, 404, "{}", r.text);
    assert!(r.text.contains("nobody"), "{}", r.text);
}

async fn a_group_of_children_succeeds_or_fails_by_its_success_percent(suite: Suite) {
    let client = suite.client();
    client
        .register(&weft_e2e::greet::definition())
        .await
        .unwrap();
    client
        .register(&json!({"name": "group", "version": 1, "tasks": [
            {"name": "kids", "taskReferenceName": "kids", "type": "FORK_JOIN_DYNAMIC",
             "inputParameters": {"forkTaskWorkflow": "greet",
                                 "forkTaskInputs": "${workflow.input.kids}"}},
            {"name": "all", "taskReferenceName": "all", "type": "JOIN", "successPercent": 70}],
         "outputParameters": {"succeeded": "${all.output.succeeded}",
                              "children": "${all.output.children}"}}))
        .await
        .unwrap();
    // A child without `n` fails (the example worker's `count` needs it).
    let kids = |failing: usize| -> Value {
        (0..10)
            .map(|i| {
                if i < failing {
                    json!({"first": format!("K{i}")})
                } else {
                    json!({"first": format!("K{i}"), "n": 1})
                }
            })
            .collect()
    };
    let two_fail = client
        .start("group", json!({"kids": kids(2)}))
        .await
        .unwrap();
    let four_fail = client
        .start("group", json!({"kids": kids(4)}))
        .await
        .unwrap();

    let wf = crate::ended(&suite, &two_fail, "COMPLETED").await;
    assert_eq!(wf["output"]["succeeded"], json!(8));
    let children = wf["output"]["children"].as_array().unwrap();
    assert_eq!(children.len(), 10);
    let failed: Vec<&Value> = children
        .iter()
        .filter(|c| c["status"] != "COMPLETED")
        .collect();
    assert_eq!(
        failed.len(),
        2,
        "failed children did not cancel their siblings"
    );
    for c in children {
        assert!(c["workflowId"].is_string(), "{c}");
    }
    let done = children
        .iter()
        .find(|c| c["status"] == "COMPLETED")
        .unwrap();
    assert_eq!(
        done["output"]["result"],
        json!(format!("{} WEFT x1", "K2".to_uppercase()))
    );

    let wf = crate::ended(&suite, &four_fail, "FAILED").await;
    let reason = wf["reasonForIncompletion"].as_str().unwrap_or_default();
    assert!(
        reason.contains("6 of 10") && reason.contains("successPercent"),
        "{reason}"
    );
}

/// A SUB_WORKFLOW whose name an earlier task's output gives (Conductor resolves
/// `subWorkflowParam` when it schedules the task): the registered definition, read then
/// with its task definitions, runs as the child; a name that is not registered fails the
/// task for good, and the run, saying so.
async fn a_sub_workflow_named_by_an_earlier_task_runs_the_registered_definition(suite: Suite) {
    let client = suite.client();
    let taskdef = json!([{"name": "late_kid_step", "retryCount": 0, "ownerEmail": "e2e@weft.dev"}]);
    client.register_taskdefs(&taskdef).await.unwrap();
    client
        .register(&json!({"name": "late_kid", "version": 1, "tasks": [
            {"name": "late_kid_step", "taskReferenceName": "step", "type": "SIMPLE"}],
         "outputParameters": {"said": "${step.output.said}"}}))
        .await
        .unwrap();
    client
        .register(&json!({"name": "late_parent", "version": 1, "tasks": [
            {"name": "late_pick", "taskReferenceName": "pick", "type": "SIMPLE"},
            {"name": "late_child", "taskReferenceName": "child", "type": "SUB_WORKFLOW",
             "subWorkflowParam": {"name": "${pick.output.flow}"}}],
         "outputParameters": {"said": "${child.output.said}"}}))
        .await
        .unwrap();

    let id = client.start("late_parent", json!({})).await.unwrap();
    let pick = crate::http_tasks::poll_one(&suite, "late_pick", "late-worker").await;
    complete(&suite, pick, json!({"flow": "late_kid"})).await;
    let step = crate::http_tasks::poll_one(&suite, "late_kid_step", "late-worker").await;
    complete(&suite, step, json!({"said": "hi"})).await;
    let wf = crate::ended(&suite, &id, "COMPLETED").await;
    assert_eq!(wf["output"], json!({"said": "hi"}), "{wf}");

    let id = client.start("late_parent", json!({})).await.unwrap();
    let pick = crate::http_tasks::poll_one(&suite, "late_pick", "late-worker").await;
    complete(&suite, pick, json!({"flow": "no_such_flow"})).await;
    let wf = crate::ended(&suite, &id, "FAILED").await;
    let reason = wf["reasonForIncompletion"].as_str().unwrap_or_default();
    assert!(
        reason.contains("workflow definition no_such_flow is not registered"),
        "{wf}"
    );

    // Conductor's dynamic sub-workflow: the child's definition itself from the input.
    client
        .register(&json!({"name": "inline_parent", "version": 1, "tasks": [
            {"name": "inline_child", "taskReferenceName": "child", "type": "SUB_WORKFLOW",
             "subWorkflowParam": {"name": "unregistered_kid",
                                  "workflowDefinition": "${workflow.input.kid}"}}],
         "outputParameters": {"said": "${child.output.said}"}}))
        .await
        .unwrap();
    let kid = json!({"name": "unregistered_kid", "version": 1, "tasks": [
        {"name": "late_kid_step", "taskReferenceName": "step", "type": "SIMPLE"}],
        "outputParameters": {"said": "${step.output.said}"}});
    let id = client
        .start("inline_parent", json!({"kid": kid}))
        .await
        .unwrap();
    let step = crate::http_tasks::poll_one(&suite, "late_kid_step", "late-worker").await;
    complete(&suite, step, json!({"said": "inline"})).await;
    let wf = crate::ended(&suite, &id, "COMPLETED").await;
    assert_eq!(wf["output"], json!({"said": "inline"}), "{wf}");
}

/// A run's `failureWorkflow` starts when that run fails, whoever started it: a child
/// embedded at its parent's start, a child named at run time, a START_WORKFLOW's run named
/// at run time (the gateway freezes only the started run's own; the decider freezes the
/// others' when it starts them). A run whose failure workflow is not registered runs
/// without it.
async fn every_failed_run_starts_its_own_failure_workflow_children_and_started_runs_too(
    suite: Suite,
) {
    let client = suite.client();
    client
        .register(&json!({"name": "kid_cleanup", "version": 1, "tasks": [
            {"name": "note", "taskReferenceName": "note", "type": "SET_VARIABLE",
             "inputParameters": {"seen": "${workflow.input.workflowId}"}}],
         "outputParameters": {"failed": "${workflow.input.workflowId}",
                              "status": "${workflow.input.failureStatus}"}}))
        .await
        .unwrap();
    let doomed = |name: &str, failure: &str| {
        json!({"name": name, "version": 1, "failureWorkflow": failure, "tasks": [
            {"name": "boom", "taskReferenceName": "boom", "type": "INLINE",
             "inputParameters": {"evaluatorType": "javascript",
                                 "expression": "(function () { throw 'boom'; })()"}}]})
    };
    client
        .register(&doomed("doomed_kid", "kid_cleanup"))
        .await
        .unwrap();
    client
        .register(&doomed("doomed_kid_by_input", "$workflow.input.cleanup"))
        .await
        .unwrap();
    client
        .register(&doomed("orphan_kid", "no_such_cleanup"))
        .await
        .unwrap();
    client
        .register(&json!({"name": "kids_parent", "version": 1, "tasks": [
            {"name": "fixed", "taskReferenceName": "fixed", "type": "SUB_WORKFLOW",
             "optional": true, "subWorkflowParam": {"name": "doomed_kid"}},
            {"name": "late", "taskReferenceName": "late", "type": "SUB_WORKFLOW",
             "optional": true, "subWorkflowParam": {"name": "${workflow.input.kid}"},
             "inputParameters": {"cleanup": "kid_cleanup"}},
            {"name": "started", "taskReferenceName": "started", "type": "START_WORKFLOW",
             "inputParameters": {"startWorkflow": {"name": "${workflow.input.kid}",
                                                   "input": {"cleanup": "kid_cleanup"}}}},
            {"name": "orphan", "taskReferenceName": "orphan", "type": "SUB_WORKFLOW",
             "optional": true, "subWorkflowParam": {"name": "${workflow.input.orphan}"}}]}))
        .await
        .unwrap();
    let input = json!({"kid": "doomed_kid_by_input", "orphan": "orphan_kid"});
    let id = client.start("kids_parent", input).await.unwrap();
    let parent = crate::ended(&suite, &id, "COMPLETED").await;
    let tasks = parent["tasks"].as_array().unwrap();
    let task = |r: &str| tasks.iter().find(|t| t["referenceTaskName"] == r).unwrap();
    let fixed = task("fixed")["subWorkflowId"].as_str().unwrap().to_owned();
    let late = task("late")["subWorkflowId"].as_str().unwrap().to_owned();
    let started = task("started")["outputData"]["workflowId"]
        .as_str()
        .unwrap()
        .to_owned();
    for kid in [&fixed, &late, &started] {
        let failed = crate::ended(&suite, kid, "FAILED").await;
        // Conductor names the failure workflow it started in the failed run's output.
        let cleanup = failed["output"]["conductor.failure_workflow"]
            .as_str()
            .unwrap_or_else(|| panic!("run {kid} names no failure workflow: {failed}"));
        let wf = crate::ended(&suite, cleanup, "COMPLETED").await;
        assert_eq!(wf["workflowName"], "kid_cleanup", "{wf}");
        assert_eq!(
            wf["output"],
            json!({"failed": kid, "status": "FAILED"}),
            "{wf}"
        );
    }
    // A failure workflow that is not registered: the child runs without it (as
    // Conductor's), fails, and starts nothing.
    let orphan = task("orphan")["subWorkflowId"].as_str().unwrap().to_owned();
    let failed = crate::ended(&suite, &orphan, "FAILED").await;
    assert!(
        failed["output"].get("conductor.failure_workflow").is_none(),
        "{failed}"
    );
}

/// `POST /api/tasks`: `task` COMPLETED with `output`.
async fn complete(suite: &Suite, task: Value, output: Value) {
    let done = json!({"taskId": task["taskId"], "status": "COMPLETED", "outputData": output});
    let r = suite.client().post_json("/api/tasks", &done).await.unwrap();
    assert_eq!(r.status, 200, "{}", r.text);
}
