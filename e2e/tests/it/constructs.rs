//! Control flow over the real services: SWITCH/DECISION, FORK_JOIN/JOIN, SET_VARIABLE,
//! TERMINATE, DO_WHILE, and all of them nested.

use serde_json::{json, Value};
use weft_e2e::Suite;

crate::on_both_backends!(
    switch_fork_join_and_variables_run_over_the_real_services,
    terminate_task_and_exhausted_retries_end_the_run_as_declared,
    do_while_loops_and_a_javascript_switch_picks_the_branch,
    a_loop_inside_a_fork_inside_a_decision_with_a_sub_workflow_runs_to_the_expected_output,
    a_failing_fork_branch_cancels_its_running_sibling_and_stops_its_worker,
);

fn branches() -> Value {
    json!({"name": "branches", "version": 1, "tasks": [
        {"name": "sv", "taskReferenceName": "sv", "type": "SET_VARIABLE",
         "inputParameters": {"who": "${workflow.input.first}"}},
        {"name": "pick", "taskReferenceName": "pick", "type": "SWITCH",
         "evaluatorType": "value-param", "expression": "loud",
         "inputParameters": {"loud": "${workflow.input.loud}"},
         "decisionCases": {"yes": [
             {"name": "shout", "taskReferenceName": "s1", "type": "SIMPLE",
              "inputParameters": {"text": "${workflow.variables.who}"}}]},
         "defaultCase": [
             {"name": "make_name", "taskReferenceName": "m1", "type": "SIMPLE",
              "inputParameters": {"first": "${workflow.variables.who}"}}]},
        {"name": "f", "taskReferenceName": "f", "type": "FORK_JOIN", "forkTasks": [
            [{"name": "make_name", "taskReferenceName": "fa", "type": "SIMPLE",
              "inputParameters": {"first": "${workflow.input.first}"}},
             {"name": "shout", "taskReferenceName": "fa2", "type": "SIMPLE",
              "inputParameters": {"text": "${fa.output.name}"}}],
            [{"name": "count", "taskReferenceName": "fb", "type": "SIMPLE",
              "inputParameters": {"text": "x", "n": 2}}]]},
        {"name": "j", "taskReferenceName": "j", "type": "JOIN", "joinOn": ["fa2", "fb"]}],
     "outputParameters": {"picked": "${pick.output.selectedCase}", "joined": "${j.output}",
                          "loud": "${s1.output.text}", "plain": "${m1.output.name}"}})
}

/// The status of the newest task of `task_ref` in `wf`.
pub(crate) fn latest_status(wf: &Value, task_ref: &str) -> Option<String> {
    statuses(wf)
        .into_iter()
        .rev()
        .find(|(r, _)| r == task_ref)
        .map(|(_, s)| s)
}

pub(crate) fn statuses(wf: &Value) -> Vec<(String, String)> {
    wf["tasks"]
        .as_array()
        .map(|tasks| {
            tasks
                .iter()
                .map(|t| {
                    (
                        t["referenceTaskName"]
                            .as_str()
                            .unwrap_or_default()
                            .to_owned(),
                        t["status"].as_str().unwrap_or_default().to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

async fn switch_fork_join_and_variables_run_over_the_real_services(suite: Suite) {
    let client = suite.client();
    client.register(&branches()).await.unwrap();

    let loud = client
        .start("branches", json!({"first": "Ada", "loud": "yes"}))
        .await
        .unwrap();
    let quiet = client
        .start("branches", json!({"first": "Bo", "loud": "no"}))
        .await
        .unwrap();

    let wf = crate::ended(&suite, &loud, "COMPLETED").await;
    assert_eq!(wf["output"]["picked"], json!("yes"));
    assert_eq!(wf["output"]["loud"], json!("ADA"));
    assert_eq!(
        wf["output"]["plain"],
        Value::Null,
        "the default case did not run"
    );
    assert_eq!(
        wf["output"]["joined"],
        json!({"fa2": {"text": "ADA WEFT"}, "fb": {"result": "x x2"}})
    );
    assert_eq!(wf["variables"], json!({"who": "Ada"}));
    let tasks = statuses(&wf);
    assert!(tasks.iter().all(|(_, s)| s == "COMPLETED"), "{tasks:?}");
    let refs: Vec<&str> = tasks.iter().map(|(r, _)| r.as_str()).collect();
    assert!(!refs.contains(&"m1"), "{refs:?}");
    // As Conductor lists a fork: the branches' first tasks, then the JOIN (started when
    // they were scheduled), then what the branches ran after their first tasks.
    assert_eq!(
        refs[refs.len() - 5..],
        ["f", "fa", "fb", "j", "fa2"],
        "the join follows the branches' first tasks: {refs:?}"
    );

    let wf = crate::ended(&suite, &quiet, "COMPLETED").await;
    assert_eq!(wf["output"]["picked"], json!("no"));
    assert_eq!(wf["output"]["plain"], json!("Bo Weft"));
    assert_eq!(wf["output"]["loud"], Value::Null);
}

async fn terminate_task_and_exhausted_retries_end_the_run_as_declared(suite: Suite) {
    let client = suite.client();
    client
        .register(&json!({"name": "stop_early", "version": 1, "tasks": [
            {"name": "make_name", "taskReferenceName": "n", "type": "SIMPLE",
             "inputParameters": {"first": "${workflow.input.first}"}},
            {"name": "t", "taskReferenceName": "t", "type": "TERMINATE",
             "inputParameters": {"terminationStatus": "TERMINATED",
                                 "terminationReason": "seen ${n.output.name}",
                                 "workflowOutput": {"name": "${n.output.name}"}}},
            {"name": "shout", "taskReferenceName": "never", "type": "SIMPLE"}]}))
        .await
        .unwrap();
    // The example worker reports `count` without `n` as a terminal failure, so the
    // run fails after the first attempt whatever retryCount allows.
    client
        .register(&json!({"name": "doomed", "version": 1, "tasks": [
            {"name": "count", "taskReferenceName": "c", "type": "SIMPLE", "retryCount": 2,
             "inputParameters": {"text": "x"}}]}))
        .await
        .unwrap();

    let stopped = client
        .start("stop_early", json!({"first": "Ada"}))
        .await
        .unwrap();
    let doomed = client.start("doomed", json!({})).await.unwrap();

    let wf = crate::ended(&suite, &stopped, "TERMINATED").await;
    assert_eq!(wf["subStatus"], json!("TERMINATED"));
    assert_eq!(wf["reasonForIncompletion"], json!("seen Ada Weft"));
    assert_eq!(wf["output"], json!({"name": "Ada Weft"}));
    let refs: Vec<String> = statuses(&wf).into_iter().map(|(r, _)| r).collect();
    assert_eq!(refs, vec!["n", "t"]);

    let wf = crate::ended(&suite, &doomed, "FAILED").await;
    assert_eq!(wf["failedReferenceTaskNames"], json!(["c"]));
    let tasks = statuses(&wf);
    assert_eq!(
        tasks,
        vec![("c".to_owned(), "FAILED_WITH_TERMINAL_ERROR".to_owned())]
    );
}

async fn do_while_loops_and_a_javascript_switch_picks_the_branch(suite: Suite) {
    let client = suite.client();
    client
        .register(&json!({"name": "loops", "version": 1, "tasks": [
            {"name": "loop", "taskReferenceName": "loop", "type": "DO_WHILE",
             "loopCondition": "$.loop['iteration'] < $.times",
             "inputParameters": {"times": "${workflow.input.times}"},
             "loopOver": [
                {"name": "count", "taskReferenceName": "c", "type": "SIMPLE",
                 "inputParameters": {"text": "${workflow.input.text}", "n": 2}}]},
            {"name": "pick", "taskReferenceName": "pick", "type": "SWITCH",
             "evaluatorType": "javascript", "expression": "$.iters >= 3 ? 'many' : 'few'",
             "inputParameters": {"iters": "${loop.output.iteration}"},
             "decisionCases": {"many": [
                {"name": "shout", "taskReferenceName": "s", "type": "SIMPLE",
                 "inputParameters": {"text": "${c.output.result}"}}]}}],
         "outputParameters": {"iterations": "${loop.output.iteration}",
                              "picked": "${pick.output.selectedCase}",
                              "shouted": "${s.output.text}"}}))
        .await
        .unwrap();
    let id = client
        .start("loops", json!({"times": 3, "text": "hi"}))
        .await
        .unwrap();
    let wf = crate::ended(&suite, &id, "COMPLETED").await;
    assert_eq!(
        wf["output"],
        json!({"iterations": 3, "picked": "many", "shouted": "HI X2"})
    );
    let iterations: Vec<i64> = wf["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["taskDefName"] == "count")
        .map(|t| {
            let i = t["iteration"].as_i64().unwrap_or_default();
            // Named as Conductor names a loop task: with its iteration.
            assert_eq!(t["referenceTaskName"], format!("c__{i}"), "{t}");
            i
        })
        .collect();
    assert_eq!(iterations, vec![1, 2, 3], "one task record per iteration");
}

async fn a_loop_inside_a_fork_inside_a_decision_with_a_sub_workflow_runs_to_the_expected_output(
    suite: Suite,
) {
    let client = suite.client();
    client
        .register(&weft_e2e::greet::definition())
        .await
        .unwrap();
    client
        .register(&json!({"name": "nested", "version": 1, "tasks": [
            {"name": "route", "taskReferenceName": "route", "type": "DECISION",
             "caseValueParam": "mode", "inputParameters": {"mode": "${workflow.input.mode}"},
             "decisionCases": {"deep": [
                {"name": "f", "taskReferenceName": "f", "type": "FORK_JOIN", "forkTasks": [
                    [{"name": "loop", "taskReferenceName": "loop", "type": "DO_WHILE",
                      "loopCondition": "$.loop['iteration'] < 2",
                      "loopOver": [
                        {"name": "count", "taskReferenceName": "tick", "type": "SIMPLE",
                         "inputParameters": {"text": "t", "n": "${loop.output.iteration}"}}]}],
                    [{"name": "kid", "taskReferenceName": "kid", "type": "SUB_WORKFLOW",
                      "inputParameters": {"first": "${workflow.input.first}", "n": 2},
                      "subWorkflowParam": {"name": "greet"}}]]},
                {"name": "j", "taskReferenceName": "j", "type": "JOIN", "joinOn": ["loop", "kid"]}]},
             "defaultCase": []}],
         "outputParameters": {"ticks": "${loop.output.iteration}", "last": "${tick.output.result}",
                              "kid": "${kid.output.result}"}}))
        .await
        .unwrap();
    let id = client
        .start("nested", json!({"mode": "deep", "first": "Ada"}))
        .await
        .unwrap();
    let wf = crate::ended(&suite, &id, "COMPLETED").await;
    assert_eq!(
        wf["output"],
        json!({"ticks": 2, "last": "t x2", "kid": "ADA WEFT x2"})
    );
}

async fn a_failing_fork_branch_cancels_its_running_sibling_and_stops_its_worker(suite: Suite) {
    use crate::operations::{Steps, STEP};
    let client = suite.client();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let steps = Steps::default();
    steps.start(&suite, &shutdown);
    client
        .register(&json!({"name": "fork_fails", "version": 1, "tasks": [
            {"name": "f", "taskReferenceName": "f", "type": "FORK_JOIN", "forkTasks": [
                [{"name": STEP, "taskReferenceName": "quick", "type": "SIMPLE"},
                 {"name": STEP, "taskReferenceName": "doomed", "type": "SIMPLE"}],
                [{"name": STEP, "taskReferenceName": "long", "type": "SIMPLE"}]]},
            {"name": "j", "taskReferenceName": "j", "type": "JOIN",
             "joinOn": ["doomed", "long"]},
            {"name": STEP, "taskReferenceName": "after", "type": "SIMPLE"}]}))
        .await
        .unwrap();

    // `long` runs (held by its handler) while the other branch fails terminally.
    steps.hold("long");
    steps.hold("doomed");
    steps.fail_once("doomed");
    let id = client.start("fork_fails", json!({})).await.unwrap();
    steps.started("long", 1).await;
    steps.started("doomed", 1).await;
    steps.release("doomed");

    let wf = crate::ended(&suite, &id, "FAILED").await;
    let reason = steps.stopped("long", 1).await;
    assert!(reason.contains("workflow failed"), "{reason}");
    assert_eq!(wf["failedReferenceTaskNames"], json!(["doomed"]));
    let tasks = statuses(&wf);
    let status_of = |r: &str| {
        tasks
            .iter()
            .find(|(t, _)| t == r)
            .map(|(_, s)| s.clone())
            .unwrap_or_else(|| panic!("no {r} in {tasks:?}"))
    };
    assert_eq!(status_of("doomed"), "FAILED_WITH_TERMINAL_ERROR");
    assert_eq!(status_of("long"), "CANCELED");
    assert_eq!(status_of("quick"), "COMPLETED");
    assert!(tasks.iter().all(|(r, _)| r != "after"), "{tasks:?}");
    assert_eq!(steps.count("after"), 0);
    shutdown.cancel();
}
