//! The interpreter over canned histories (no database, no broker).
use serde_json::json;

use serde_json::Value;

use super::walk::task_id_for;
use super::*;
use crate::history_builder::HistoryBuilder;
use crate::state::RunStatus;

fn greet() -> Value {
    json!({"name": "greet", "version": 1,
     "tasks": [
      {"name": "make_name", "taskReferenceName": "n", "type": "SIMPLE", "inputParameters": {"first": "${workflow.input.first}"}},
      {"name": "shout", "taskReferenceName": "s", "type": "SIMPLE", "inputParameters": {"text": "${n.output.name}"}},
      {"name": "count", "taskReferenceName": "c", "type": "SIMPLE", "inputParameters": {"text": "${s.output.text}", "n": "${workflow.input.n}"}}],
     "outputParameters": {"result": "${c.output.result}", "name": "${n.output.name}"}})
}

fn input() -> Value {
    json!({"first": "Ada", "n": 3})
}

#[test]
fn fresh_run_schedules_the_first_task_with_resolved_input() {
    let h = HistoryBuilder::started(greet(), input());
    assert_eq!(
        decide(&h.state()),
        vec![Decision::ScheduleTask {
            task_id: task_id_for(&h.state(), "n", 1),
            task_ref: "n".into(),
            task_type: "SIMPLE".into(),
            task_name: "make_name".into(),
            input: json!({"first": "Ada"}),
            attempt: 1,
            iteration: 0,
            backoff: Default::default(),
        }]
    );
}

#[test]
fn task_id_is_visible_to_inputs_as_cpewf_task_id() {
    let def = json!({"name": "w", "tasks": [{"name": "a", "taskReferenceName": "a",
        "inputParameters": {"me": "${CPEWF_TASK_ID}"}}]});
    let h = HistoryBuilder::started(def, json!({}));
    match &decide(&h.state())[..] {
        [Decision::ScheduleTask { task_id, input, .. }] => {
            assert_eq!(input["me"], json!(task_id.to_string()));
        }
        other => panic!("unexpected decisions {other:?}"),
    }
}

#[test]
fn pending_task_means_no_decision() {
    let h = HistoryBuilder::started(greet(), input()).scheduled("n", "make_name", json!({}));
    assert!(decide(&h.state()).is_empty());
}

#[test]
fn completed_task_feeds_the_next_one_keeping_json_types() {
    let h = HistoryBuilder::started(greet(), input())
        .scheduled("n", "make_name", json!({"first": "Ada"}))
        .completed("n", json!({"name": "Ada Weft"}))
        .scheduled("s", "shout", json!({"text": "Ada Weft"}))
        .completed("s", json!({"text": "ADA WEFT"}));
    match &decide(&h.state())[..] {
        [Decision::ScheduleTask {
            task_ref, input, ..
        }] => {
            assert_eq!(task_ref, "c");
            assert_eq!(input, &json!({"text": "ADA WEFT", "n": 3}));
        }
        other => panic!("unexpected decisions {other:?}"),
    }
}

#[test]
fn last_completion_completes_the_run_with_shaped_output() {
    let h = HistoryBuilder::started(greet(), input())
        .scheduled("n", "make_name", json!({}))
        .completed("n", json!({"name": "Ada Weft"}))
        .scheduled("s", "shout", json!({}))
        .completed("s", json!({"text": "ADA WEFT"}))
        .scheduled("c", "count", json!({}))
        .completed("c", json!({"result": "ADA WEFT x3"}));
    assert_eq!(
        decide(&h.state()),
        vec![Decision::CompleteWorkflow {
            output: json!({"result": "ADA WEFT x3", "name": "Ada Weft"}),
            reason: None,
        }]
    );
}

#[test]
fn without_output_parameters_the_last_task_output_is_the_run_output() {
    let def = json!({"name": "one", "tasks": [{"name": "a", "taskReferenceName": "a"}]});
    let h = HistoryBuilder::started(def, json!({}))
        .scheduled("a", "a", json!({}))
        .completed("a", json!({"x": 1}));
    assert_eq!(
        decide(&h.state()),
        vec![Decision::CompleteWorkflow {
            output: json!({"x": 1}),
            reason: None,
        }]
    );
}

#[test]
fn failed_task_fails_the_run_naming_it() {
    let h = HistoryBuilder::started(greet(), input())
        .scheduled("n", "make_name", json!({}))
        .failed("n", "boom");
    match &decide(&h.state())[..] {
        [Decision::FailWorkflow {
            reason,
            failed_task_refs,
            ..
        }] => {
            assert!(reason.contains("boom"), "{reason}");
            assert_eq!(failed_task_refs, &vec!["n".to_string()]);
        }
        other => panic!("unexpected decisions {other:?}"),
    }
}

#[test]
fn failed_optional_task_lets_the_run_go_on() {
    let def = json!({"name": "opt", "tasks": [
        {"name": "a", "taskReferenceName": "a", "optional": true},
        {"name": "b", "taskReferenceName": "b"}]});
    let h = HistoryBuilder::started(def, json!({}))
        .scheduled("a", "a", json!({}))
        .failed("a", "flaky");
    match &decide(&h.state())[..] {
        [Decision::ScheduleTask { task_ref, .. }] => assert_eq!(task_ref, "b"),
        other => panic!("unexpected decisions {other:?}"),
    }
}

#[test]
fn unsupported_task_type_fails_the_run_with_a_clear_reason() {
    let def = json!({"name": "sw", "tasks": [
        {"name": "x", "taskReferenceName": "x", "type": "BUSINESS_RULE"}]});
    let h = HistoryBuilder::started(def, json!({}));
    match &decide(&h.state())[..] {
        [Decision::FailWorkflow { reason, .. }] => {
            assert!(reason.contains("not supported yet"), "{reason}")
        }
        other => panic!("unexpected decisions {other:?}"),
    }
}

#[test]
fn finished_run_decides_nothing() {
    let h = HistoryBuilder::started(greet(), input())
        .scheduled("n", "make_name", json!({}))
        .failed("n", "boom");
    let mut state = h.state();
    state.status = RunStatus::Failed;
    assert!(decide(&state).is_empty());
}

#[test]
fn replaying_a_history_gives_the_same_decisions() {
    let h = HistoryBuilder::started(greet(), input())
        .scheduled("n", "make_name", json!({}))
        .completed("n", json!({"name": "Ada Weft"}));
    assert_eq!(decide(&h.state()), decide(&h.state()));
    assert_eq!(h.events().len(), 3);
}

#[test]
fn an_event_task_publishes_its_input_with_the_runs_identity_to_its_resolved_sink() {
    let def = json!({"name": "notify", "version": 3, "tasks": [{
        "name": "announce", "taskReferenceName": "e", "type": "EVENT",
        "sink": "amqp_exchange:${workflow.input.exchange}:order.created",
        "inputParameters": {"orderId": "${workflow.input.id}"}}]});
    let h = HistoryBuilder::started(def, json!({"exchange": "shop", "id": 7}));
    let state = h.state();
    match &decide(&state)[..] {
        [Decision::PublishEvent {
            task_ref,
            input,
            output,
            location,
            async_complete,
            ..
        }] => {
            assert_eq!(task_ref, "e");
            assert_eq!(input, &json!({"orderId": 7}));
            assert_eq!(
                &**location,
                &weft::event_location::EventLocation::Exchange {
                    exchange: "shop".into(),
                    routing_key: Some("order.created".into()),
                    topic: true,
                    queue: None,
                }
            );
            assert!(!async_complete);
            let sink = "amqp_exchange:shop:order.created";
            assert_eq!(
                output,
                &json!({"orderId": 7, "workflowInstanceId": state.workflow_id,
                    "workflowType": "notify", "workflowVersion": 3, "correlationId": null,
                    "sink": sink, "event_produced": sink})
            );
        }
        other => panic!("unexpected decisions {other:?}"),
    }
}

#[test]
fn an_event_task_whose_sink_resolves_to_nothing_fails_the_run_naming_it() {
    let def = json!({"name": "notify", "tasks": [{
        "name": "announce", "taskReferenceName": "e", "type": "EVENT",
        "sink": "${workflow.input.sink}"}]});
    let h = HistoryBuilder::started(def, json!({"sink": "sqs:orders"}));
    let decisions = decide(&h.state());
    match decisions.last() {
        Some(Decision::FailWorkflow { reason, .. }) => {
            assert!(
                reason.contains("sink") && reason.contains("not offered"),
                "{reason}"
            );
        }
        other => panic!("unexpected decisions {other:?}"),
    }
}

#[test]
fn noop_completes_at_once_and_lambda_returns_its_scripts_result() {
    let def = json!({"name": "w", "tasks": [
        {"name": "n", "taskReferenceName": "n", "type": "NOOP"},
        {"name": "l", "taskReferenceName": "l", "type": "LAMBDA",
         "inputParameters": {"a": "${workflow.input.a}",
                             "scriptExpression": "if ($.a > 1) { return {big: $.a * 2} } return {big: false}"}}]});
    let h = HistoryBuilder::started(def, json!({"a": 3}));
    match &decide(&h.state())[..] {
        [Decision::CompleteSystemTask {
            task_ref,
            task_type,
            output,
            ..
        }] => {
            assert_eq!((task_ref.as_str(), task_type.as_str()), ("n", "NOOP"));
            assert_eq!(output, &json!({}));
        }
        other => panic!("unexpected decisions {other:?}"),
    }
    let sim = crate::sim::Sim::start(def_of_lambda(), json!({"a": 3}));
    assert_eq!(sim.state.status, RunStatus::Completed);
    assert_eq!(sim.state.output, Some(json!({"big": {"big": 6}})));
    let failing = json!({"name": "w", "tasks": [{"name": "l", "taskReferenceName": "l",
        "type": "LAMBDA", "inputParameters": {"scriptExpression": "throw new Error('no')"}}]});
    let sim = crate::sim::Sim::start(failing, json!({}));
    assert_eq!(sim.state.status, RunStatus::Failed);
    assert!(
        sim.state
            .reason
            .as_deref()
            .unwrap_or_default()
            .contains("no"),
        "{:?}",
        sim.state.reason
    );
}

fn def_of_lambda() -> Value {
    json!({"name": "w", "tasks": [
        {"name": "n", "taskReferenceName": "n", "type": "NOOP"},
        {"name": "l", "taskReferenceName": "l", "type": "LAMBDA",
         "inputParameters": {"a": "${workflow.input.a}",
                             "scriptExpression": "return {big: $.a * 2}"}}],
     "outputParameters": {"big": "${l.output.result}"}})
}

#[test]
fn a_human_task_waits_in_progress_until_completed_by_its_signal() {
    let def = json!({"name": "w", "tasks": [
        {"name": "review", "taskReferenceName": "review", "type": "HUMAN"}],
     "outputParameters": {"verdict": "${review.output.verdict}"}});
    let mut sim = crate::sim::Sim::start(def, json!({}));
    assert_eq!(sim.state.status, RunStatus::Running);
    let review = sim
        .state
        .tasks
        .iter()
        .find(|t| t.task_ref == "review")
        .unwrap();
    assert_eq!(review.task_type, "HUMAN");
    sim.signal("review", json!({"verdict": "approved"}));
    assert_eq!(sim.state.status, RunStatus::Completed);
    assert_eq!(sim.state.output, Some(json!({"verdict": "approved"})));
}

#[test]
fn start_workflow_starts_its_frozen_definition_and_completes_with_the_new_id() {
    let child = json!({"name": "child", "version": 1, "tasks": [
        {"name": "a", "taskReferenceName": "a", "type": "NOOP"}]});
    let def = json!({"name": "w", "tasks": [{
        "name": "s", "taskReferenceName": "s", "type": "START_WORKFLOW",
        "inputParameters": {"startWorkflow": {"name": "child",
            "input": {"x": "${workflow.input.x}"}, "correlationId": "c-1"}},
        "startWorkflowDefinition": child}]});
    let sim = crate::sim::Sim::start(def.clone(), json!({"x": 7}));
    assert_eq!(sim.state.status, RunStatus::Completed);
    let h = HistoryBuilder::started(def, json!({"x": 7}));
    match &decide(&h.state())[..] {
        [Decision::StartRun {
            workflow_id,
            definition,
            run_input,
            correlation_id,
            ..
        }] => {
            assert_eq!(definition.as_ref().unwrap().name, "child");
            assert_eq!(run_input, &json!({"x": 7}));
            assert_eq!(correlation_id.as_deref(), Some("c-1"));
            let sim = crate::sim::Sim::start(
                json!({"name": "w", "tasks": [{
                    "name": "s", "taskReferenceName": "s", "type": "START_WORKFLOW",
                    "inputParameters": {"startWorkflow": {"name": "child"}},
                    "startWorkflowDefinition": {"name": "child", "tasks": []}}]}),
                json!({}),
            );
            let task = &sim.state.tasks[0];
            assert_eq!(task.task_type, "START_WORKFLOW");
            assert!(!workflow_id.is_empty());
        }
        other => panic!("unexpected decisions {other:?}"),
    }
}

#[test]
fn a_dynamic_task_runs_as_the_simple_task_its_input_names() {
    let def = json!({"name": "w", "tasks": [{
        "name": "pick", "taskReferenceName": "d", "type": "DYNAMIC",
        "dynamicTaskNameParam": "taskToRun",
        "inputParameters": {"taskToRun": "${workflow.input.which}", "text": "hi"}}]});
    let h = HistoryBuilder::started(def.clone(), json!({"which": "shout"}));
    match &decide(&h.state())[..] {
        [Decision::ScheduleTask {
            task_ref,
            task_type,
            task_name,
            input,
            ..
        }] => {
            assert_eq!(
                (task_ref.as_str(), task_type.as_str(), task_name.as_str()),
                ("d", "SIMPLE", "shout")
            );
            assert_eq!(input["text"], json!("hi"));
        }
        other => panic!("unexpected decisions {other:?}"),
    }
    let mut sim = crate::sim::Sim::start(def.clone(), json!({"which": "shout"}));
    sim.complete("d", json!({"text": "HI"}));
    assert_eq!(sim.state.status, RunStatus::Completed);
    let sim = crate::sim::Sim::start(def, json!({}));
    assert_eq!(sim.state.status, RunStatus::Failed);
    assert!(
        sim.state
            .reason
            .as_deref()
            .unwrap_or_default()
            .contains("taskToRun"),
        "{:?}",
        sim.state.reason
    );
}
