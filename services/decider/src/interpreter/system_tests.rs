//! JSON_JQ_TRANSFORM and EXCLUSIVE_JOIN over canned histories and simulated runs,
//! with Conductor's own sample definitions and the scenarios of its `ExclusiveJoinSpec`.

use serde_json::{json, Value};
use weft::messages::{Command, Operation, SkipTask};

use super::*;
use crate::history_builder::HistoryBuilder;
use crate::sim::Sim;
use crate::state::{RunState, RunStatus, TaskState};

fn task<'s>(sim: &'s Sim, task_ref: &str) -> &'s TaskState {
    sim.state
        .tasks
        .iter()
        .rev()
        .find(|t| t.task_ref == task_ref)
        .unwrap_or_else(|| panic!("no task {task_ref}: {:?}", sim.trail()))
}

fn sample(file: &str) -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/tests/conductor-samples")
        .join(file);
    serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap()
}

// --- JSON_JQ_TRANSFORM ------------------------------------------------------------------

fn jq_after_a_worker(query: &str) -> Value {
    json!({"name": "w", "tasks": [
        {"name": "fetch", "taskReferenceName": "fetch"},
        {"name": "shape", "taskReferenceName": "shape", "type": "JSON_JQ_TRANSFORM",
         "inputParameters": {"people": "${fetch.output.people}", "queryExpression": query}}],
     "outputParameters": {"emails": "${shape.output.result}", "all": "${shape.output.resultList}"}})
}

#[test]
fn a_jq_transform_completes_at_once_with_the_first_value_and_every_value() {
    let def = jq_after_a_worker(".people[] | .email");
    let people = json!([{"email": "a@x", "id": 1}, {"email": "b@x", "id": 2}]);
    let h = HistoryBuilder::started(def.clone(), json!({}))
        .scheduled("fetch", "fetch", json!({}))
        .completed("fetch", json!({"people": people}));
    match &decide(&h.state())[..] {
        [Decision::CompleteSystemTask {
            task_ref,
            task_type,
            input,
            output,
            ..
        }] => {
            assert_eq!(
                (task_ref.as_str(), task_type.as_str()),
                ("shape", "JSON_JQ_TRANSFORM")
            );
            // The program ran over the whole resolved input, itself included.
            assert_eq!(input["people"], people);
            assert_eq!(input["queryExpression"], json!(".people[] | .email"));
            assert_eq!(
                output,
                &json!({"result": "a@x", "resultList": ["a@x", "b@x"]})
            );
        }
        other => panic!("unexpected decisions {other:?}"),
    }
    let mut sim = Sim::start(def, json!({}));
    sim.complete("fetch", json!({"people": people}));
    assert_eq!(sim.state.status, RunStatus::Completed);
    assert_eq!(
        sim.state.output,
        Some(json!({"emails": "a@x", "all": ["a@x", "b@x"]}))
    );
    // A program that yields nothing: result null, resultList empty.
    let mut sim = Sim::start(jq_after_a_worker(".people[] | select(.id > 5)"), json!({}));
    sim.complete("fetch", json!({"people": people}));
    assert_eq!(
        task(&sim, "shape").output,
        Some(json!({"result": null, "resultList": []}))
    );
}

#[test]
fn a_failing_jq_program_fails_the_task_with_its_message_as_reason_and_error() {
    let mut sim = Sim::start(
        jq_after_a_worker(".people | error(\"no people: \\(length)\")"),
        json!({}),
    );
    sim.complete("fetch", json!({"people": []}));
    assert_eq!(sim.state.status, RunStatus::Failed);
    let shape = task(&sim, "shape");
    // FAILED, as Conductor shows it (not FAILED_WITH_TERMINAL_ERROR).
    assert_eq!(shape.status.as_str(), "FAILED");
    assert_eq!(shape.reason.as_deref(), Some("no people: 0"));
    assert_eq!(shape.output, Some(json!({"error": "no people: 0"})));
    assert_eq!(
        sim.state.reason.as_deref(),
        Some("task \"shape\": no people: 0")
    );
    assert_eq!(sim.state.failed_task_refs, vec!["shape".to_owned()]);

    // A type error raised by jaq itself.
    let mut sim = Sim::start(jq_after_a_worker(".people.email"), json!({}));
    sim.complete("fetch", json!({"people": [1]}));
    let shape = task(&sim, "shape");
    assert!(
        shape
            .reason
            .as_deref()
            .unwrap_or_default()
            .contains("cannot index"),
        "{:?}",
        shape.reason
    );
}

#[test]
fn a_jq_program_resolved_at_run_time_is_compiled_then() {
    let def = json!({"name": "w", "tasks": [
        {"name": "t", "taskReferenceName": "t", "type": "JSON_JQ_TRANSFORM",
         "inputParameters": {"n": 20, "queryExpression": "${workflow.input.q}"}}]});
    let sim = Sim::start(def.clone(), json!({"q": ".n + 1"}));
    assert_eq!(sim.state.status, RunStatus::Completed);
    assert_eq!(
        task(&sim, "t").output.as_ref().unwrap()["result"],
        json!(21)
    );

    let sim = Sim::start(def.clone(), json!({"q": ".n +"}));
    assert_eq!(sim.state.status, RunStatus::Failed);
    let t = task(&sim, "t");
    assert!(
        t.reason
            .as_deref()
            .unwrap_or_default()
            .starts_with("the jq program does not compile"),
        "{:?}",
        t.reason
    );
    assert_eq!(t.output.as_ref().unwrap()["error"], json!(t.reason));

    // Resolved to nothing: Conductor's message, no `error` output.
    let sim = Sim::start(def, json!({}));
    let t = task(&sim, "t");
    assert_eq!(
        t.reason.as_deref(),
        Some("Missing 'queryExpression' in input parameters")
    );
    assert_eq!(t.output, Some(json!({})));
    assert_eq!(sim.state.status, RunStatus::Failed);
}

#[test]
fn an_optional_jq_transform_that_fails_lets_the_run_go_on() {
    let def = json!({"name": "w", "tasks": [
        {"name": "t", "taskReferenceName": "t", "type": "JSON_JQ_TRANSFORM", "optional": true,
         "inputParameters": {"queryExpression": "error(\"soft\")"}},
        {"name": "next", "taskReferenceName": "next"}]});
    let mut sim = Sim::start(def, json!({}));
    let t = task(&sim, "t");
    assert_eq!(t.status.as_str(), "COMPLETED_WITH_ERRORS");
    assert_eq!(t.output, Some(json!({"error": "soft"})));
    sim.complete("next", json!({}));
    assert_eq!(sim.state.status, RunStatus::Completed);
}

#[test]
fn optional_inline_and_lambda_tasks_that_throw_let_the_run_go_on() {
    let def = json!({"name": "w", "tasks": [
        {"name": "i", "taskReferenceName": "i", "type": "INLINE", "optional": true,
         "inputParameters": {"evaluatorType": "javascript", "expression": "throw 'soft'"}},
        {"name": "l", "taskReferenceName": "l", "type": "LAMBDA", "optional": true,
         "inputParameters": {"scriptExpression": "throw 'softer'"}},
        {"name": "next", "taskReferenceName": "next"}]});
    let mut sim = Sim::start(def, json!({}));
    assert_eq!(task(&sim, "i").status.as_str(), "COMPLETED_WITH_ERRORS");
    assert_eq!(task(&sim, "l").status.as_str(), "COMPLETED_WITH_ERRORS");
    assert_eq!(sim.pending(), vec!["next".to_owned()]);
    sim.complete("next", json!({}));
    assert_eq!(sim.state.status, RunStatus::Completed);

    // Not optional: the run fails at the script, and nothing after it runs.
    let strict = Sim::start(
        json!({"name": "w", "tasks": [
            {"name": "i", "taskReferenceName": "i", "type": "INLINE",
             "inputParameters": {"evaluatorType": "javascript", "expression": "throw 'hard'"}},
            {"name": "next", "taskReferenceName": "next"}]}),
        json!({}),
    );
    assert_eq!(strict.state.status, RunStatus::Failed);
    assert!(strict.state.latest("next").is_none());
}

#[test]
fn an_endless_jq_program_is_stopped_and_fails_the_run() {
    let def = json!({"name": "w", "tasks": [
        {"name": "t", "taskReferenceName": "t", "type": "JSON_JQ_TRANSFORM",
         "inputParameters": {"queryExpression": "def f: f; f"}}]});
    let sim = Sim::start(def, json!({}));
    assert_eq!(sim.state.status, RunStatus::Failed);
    let reason = task(&sim, "t").reason.clone().unwrap_or_default();
    assert!(reason.contains("was stopped"), "{reason}");
}

#[test]
fn conductors_sequential_jq_sample_feeds_one_program_into_the_next() {
    // The first task computes, with defaults, the program the second one runs.
    let input = json!({"body": {"name": "Ada", "title": "countess"}});
    let sim = Sim::start(
        sample("sequential_json_jq_transform_integration_test.json"),
        input,
    );
    assert_eq!(
        sim.state.status,
        RunStatus::Completed,
        "{:?}",
        sim.state.reason
    );
    assert_eq!(
        task(&sim, "default_variables").output.as_ref().unwrap()["result"]["requestTransform"],
        json!(".body")
    );
    assert_eq!(
        task(&sim, "request_transform").output,
        Some(json!({"result": {"name": "Ada", "title": "countess"},
                    "resultList": [{"name": "Ada", "title": "countess"}]}))
    );

    // The other sample chooses a DECISION case from a program's result.
    let sim = Sim::start(
        sample("json_jq_transform_result_integration_test.json"),
        json!({"requestedAction": "redeliver"}),
    );
    assert_eq!(sim.state.status, RunStatus::Completed, "{:?}", sim.trail());
    assert_eq!(
        task(&sim, "json_jq_2").output.as_ref().unwrap()["result"],
        json!(["redeliver", "redeliver_from_validation_error", "redelivery"])
    );
}

// --- EXCLUSIVE_JOIN ---------------------------------------------------------------------

/// Conductor's `exclusive_join_integration_test.json`, run through the five scenarios of
/// its `ExclusiveJoinSpec`: the join takes the output of the last task of whichever
/// branch ran (`joinOn`), else of the first default that ran.
#[test]
fn exclusive_join_takes_the_output_of_the_branch_that_ran_as_conductors_spec_says() {
    let cases = [
        (json!({"decision_1": "null"}), vec!["task1"], "task1"),
        (
            json!({"decision_1": "true", "decision_2": "null"}),
            vec!["task1", "task2"],
            "task2",
        ),
        (
            json!({"decision_1": "true", "decision_2": "true"}),
            vec!["task1", "task2", "task3"],
            "task3",
        ),
        (
            json!({"decision_1": "false", "decision_3": "null"}),
            vec!["task1", "task4"],
            "task4",
        ),
        (
            json!({"decision_1": "false", "decision_3": "true"}),
            vec!["task1", "task4", "task5"],
            "task5",
        ),
    ];
    for (input, workers, joined) in cases {
        let mut sim = Sim::start(
            sample("exclusive_join_integration_test.json"),
            input.clone(),
        );
        for w in &workers {
            sim.complete(w, json!({"taskReferenceName": w}));
        }
        assert_eq!(
            sim.state.status,
            RunStatus::Completed,
            "{input}: {:?}",
            sim.trail()
        );
        let join = task(&sim, "exclusiveJoin");
        assert_eq!(join.task_type, "EXCLUSIVE_JOIN");
        assert_eq!(join.status.as_str(), "COMPLETED");
        assert_eq!(
            join.output,
            Some(json!({"taskReferenceName": joined})),
            "{input}"
        );
        // The run's output is the last task's: the join's.
        assert_eq!(sim.state.output, Some(json!({"taskReferenceName": joined})));
    }
}

fn switch_then_join(join: Value) -> Value {
    let mut xjoin = json!({"name": "xj", "taskReferenceName": "xj", "type": "EXCLUSIVE_JOIN"});
    xjoin
        .as_object_mut()
        .unwrap()
        .extend(join.as_object().unwrap().clone());
    json!({"name": "w", "tasks": [
        {"name": "first", "taskReferenceName": "first"},
        {"name": "route", "taskReferenceName": "route", "type": "SWITCH",
         "evaluatorType": "value-param", "expression": "to",
         "inputParameters": {"to": "${workflow.input.to}"},
         "decisionCases": {"a": [{"name": "a", "taskReferenceName": "a", "optional": true}],
                           "b": [{"name": "b", "taskReferenceName": "b"}]}},
        xjoin,
        {"name": "after", "taskReferenceName": "after",
         "inputParameters": {"joined": "${xj.output}"}}]})
}

#[test]
fn an_exclusive_join_completes_with_a_completed_with_errors_task_and_feeds_what_follows() {
    let def = switch_then_join(json!({"joinOn": ["a", "b"]}));
    let mut sim = Sim::start(def, json!({"to": "a"}));
    sim.complete("first", json!({}));
    // Optional `a` fails: COMPLETED_WITH_ERRORS is a success for the join, as in Conductor.
    sim.fail("a", "flaky");
    assert_eq!(task(&sim, "a").status.as_str(), "COMPLETED_WITH_ERRORS");
    let join = task(&sim, "xj");
    assert_eq!(join.status.as_str(), "COMPLETED");
    assert_eq!(join.output, Some(json!({})));
    assert_eq!(sim.pending(), vec!["after".to_owned()]);
}

/// A run that took case `b` while `a` and `c`, of the cases not taken, failed: a state the
/// walk itself only meets when such failures do not end the run; what the join makes of
/// it is Conductor's rule.
fn joined_after_failures(join: Value) -> RunState {
    let mut xjoin = json!({"name": "xj", "taskReferenceName": "xj", "type": "EXCLUSIVE_JOIN",
                           "joinOn": ["a", "b", "c"]});
    xjoin
        .as_object_mut()
        .unwrap()
        .extend(join.as_object().unwrap().clone());
    let def = json!({"name": "w", "tasks": [
        {"name": "route", "taskReferenceName": "route", "type": "SWITCH",
         "evaluatorType": "value-param", "expression": "to",
         "inputParameters": {"to": "b"},
         "decisionCases": {"a": [{"name": "a", "taskReferenceName": "a"}],
                           "b": [{"name": "b", "taskReferenceName": "b"}],
                           "c": [{"name": "c", "taskReferenceName": "c"}]}},
        xjoin,
        {"name": "after", "taskReferenceName": "after"}]});
    HistoryBuilder::started(def, json!({}))
        .scheduled("route", "route", json!({}))
        .completed("route", json!({"selectedCase": "b"}))
        .scheduled("a", "a", json!({}))
        .failed("a", "a broke")
        .scheduled("c", "c", json!({}))
        .failed("c", "c broke")
        .scheduled("b", "b", json!({}))
        .completed("b", json!({"from": "b"}))
        .state()
}

#[test]
fn an_exclusive_join_whose_first_joined_task_failed_fails_with_every_failed_reason() {
    // `a` comes first in joinOn and ran: it decides, though `b` completed.
    match &decide(&joined_after_failures(json!({})))[..] {
        [Decision::FailSystemTask {
            task_ref,
            task_type,
            reason,
            ..
        }, Decision::FailWorkflow {
            reason: run_reason,
            failed_task_refs,
            ..
        }] => {
            assert_eq!(
                (task_ref.as_str(), task_type.as_str()),
                ("xj", "EXCLUSIVE_JOIN")
            );
            assert_eq!(reason, "a broke c broke");
            assert_eq!(run_reason, "task \"xj\": a broke c broke");
            assert_eq!(failed_task_refs, &vec!["xj".to_owned()]);
        }
        other => panic!("unexpected decisions {other:?}"),
    }
    // With `b` first, the completed task decides.
    match &decide(&joined_after_failures(json!({"joinOn": ["b", "a"]})))[..] {
        [Decision::CompleteSystemTask { output, .. }] => {
            assert_eq!(output, &json!({"from": "b"}))
        }
        other => panic!("unexpected decisions {other:?}"),
    }
    // A failed default gives its own reason, with Conductor's trailing space.
    match &decide(&joined_after_failures(
        json!({"joinOn": ["zzz"], "defaultExclusiveJoinTask": ["c", "b"]}),
    ))[..]
    {
        [Decision::FailSystemTask { reason, .. }, Decision::FailWorkflow { .. }] => {
            assert_eq!(reason, "c broke ")
        }
        other => panic!("unexpected decisions {other:?}"),
    }
}

#[test]
fn an_optional_exclusive_join_that_fails_lets_the_run_go_on() {
    match &decide(&joined_after_failures(json!({"optional": true})))[..] {
        [Decision::FailSystemTask { reason, .. }] => assert_eq!(reason, "a broke c broke"),
        other => panic!("unexpected decisions {other:?}"),
    }
}

#[test]
fn an_exclusive_join_falls_back_to_the_first_default_that_ran() {
    let def =
        switch_then_join(json!({"joinOn": ["a"], "defaultExclusiveJoinTask": ["zzz", "first"]}));
    let mut sim = Sim::start(def, json!({"to": "b"}));
    sim.complete("first", json!({"from": "first"}));
    sim.complete("b", json!({"from": "b"}));
    assert_eq!(task(&sim, "xj").output, Some(json!({"from": "first"})));
    assert_eq!(
        task(&sim, "after").input["joined"],
        json!({"from": "first"})
    );
}

#[test]
fn an_exclusive_join_that_nothing_decides_waits_in_progress_until_skipped() {
    // Neither `a` nor a default ran (case "c" has no tasks): Conductor's join waits.
    let def = switch_then_join(json!({"joinOn": ["a"]}));
    let mut sim = Sim::start(def, json!({"to": "c"}));
    sim.complete("first", json!({}));
    assert_eq!(sim.state.status, RunStatus::Running);
    let join = task(&sim, "xj");
    assert_eq!(join.status.as_str(), "SCHEDULED");
    assert_eq!(join.task_type, "EXCLUSIVE_JOIN");
    // An operator's skip lets the run go on.
    sim.command(&Command::SkipTask(SkipTask {
        op: Operation::default(),
        task_ref: "xj".into(),
        output: json!({"skipped": true}),
        input: Value::Null,
    }));
    assert_eq!(sim.pending(), vec!["after".to_owned()]);
}

#[test]
fn a_set_variable_past_the_size_limit_fails_for_good_and_leaves_the_variables() {
    let set = |name: &str| {
        json!({"name": name, "taskReferenceName": name, "type": "SET_VARIABLE",
               "inputParameters": {"big": "${workflow.input.big}"}})
    };
    let def = json!({"name": "w", "variables": {"kept": 1}, "tasks": [set("sv")]});
    // The default limit, 256 kilobytes: `{"big":"…","kept":1}` is 19 bytes more.
    let big = "x".repeat(256 * 1024 - 19);
    let sim = Sim::start(def.clone(), json!({ "big": big }));
    assert_eq!(sim.state.status, RunStatus::Completed);
    let sim = Sim::start(def, json!({ "big": format!("{big}y") }));
    assert_eq!(sim.state.status, RunStatus::Failed);
    let sv = task(&sim, "sv");
    assert_eq!(sv.status, crate::state::TaskStatus::FailedWithTerminalError);
    let why = format!(
        "The variables payload size: {} of workflow: {} is greater than the permissible \
         limit: 256 kilobytes",
        256 * 1024 + 1,
        sim.state.workflow_id
    );
    assert_eq!(sv.reason.as_deref(), Some(why.as_str()));
    assert_eq!(
        sim.state.variables,
        json!({"kept": 1}).as_object().cloned().unwrap()
    );
    assert_eq!(
        sim.state.reason.as_deref(),
        Some(
            format!(
                "Task {} failed with status: FAILED and reason: '{why}'",
                sv.task_id
            )
            .as_str()
        )
    );
}
