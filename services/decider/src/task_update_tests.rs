//! Task results and signals through the REST API (`UpdateTask`), judged on the run's
//! state: each is applied to a task that waits for it, kept (a signal for a task not
//! reached yet), or refused with the state found.

use serde_json::{json, Value};
use weft::dsl::TaskType;
use weft::messages::{Command, Operation, TaskUpdateStatus, UpdateTask};

use crate::apply::Applied;
use crate::sim::Sim;

fn by_ref(task_ref: &str, status: TaskUpdateStatus, output: Value) -> Command {
    Command::UpdateTask(UpdateTask {
        op: Operation::default(),
        task_ref: task_ref.into(),
        task_id: None,
        run_id: None,
        status,
        output,
        reason: None,
        worker_id: None,
        callback_after_seconds: 0,
        hold: false,
    })
}

fn signal(name: &str, payload: Value) -> Command {
    let mut command = by_ref(name, TaskUpdateStatus::Completed, payload);
    if let Command::UpdateTask(u) = &mut command {
        u.hold = true;
    }
    command
}

fn refusal(applied: Applied) -> (u16, String) {
    match applied {
        Applied::Rejected { status, message } => (status, message),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

fn run_of(tasks: Value) -> Sim {
    Sim::start(json!({"name": "w", "tasks": tasks}), json!({}))
}

fn status_of(sim: &Sim, task_ref: &str) -> &'static str {
    sim.state.latest(task_ref).unwrap().status.as_str()
}

#[test]
fn a_wait_on_its_timer_completes_by_ref_at_once() {
    let mut sim = run_of(json!([
        {"name": "w", "taskReferenceName": "w", "type": "WAIT", "inputParameters": {"duration": "1 hour"}},
        {"name": "a", "taskReferenceName": "a"}
    ]));
    sim.command(&by_ref("w", TaskUpdateStatus::Completed, json!({"ok": 1})));
    assert_eq!(status_of(&sim, "w"), "COMPLETED");
    assert_eq!(
        sim.state.latest("w").unwrap().output,
        Some(json!({"ok": 1}))
    );
    assert_eq!(sim.pending(), vec!["a".to_owned()], "the run goes on");
    // Its timer firing later changes nothing.
    let later = sim.now() + chrono::Duration::hours(2);
    sim.fire_timers_due_by(later);
    assert_eq!(sim.pending(), vec!["a".to_owned()]);
}

#[test]
fn a_failed_wait_fails_the_run_unless_optional() {
    let mut sim = run_of(json!([
        {"name": "w", "taskReferenceName": "w", "type": "WAIT"},
        {"name": "a", "taskReferenceName": "a"}
    ]));
    sim.command(&by_ref("w", TaskUpdateStatus::Failed, json!({})));
    assert_eq!(status_of(&sim, "w"), "FAILED");
    assert_eq!(sim.state.status.as_str(), "FAILED", "no task after it runs");
    assert!(sim.state.latest("a").is_none());

    let mut optional = run_of(json!([
        {"name": "w", "taskReferenceName": "w", "type": "WAIT", "optional": true},
        {"name": "a", "taskReferenceName": "a"}
    ]));
    optional.command(&by_ref(
        "w",
        TaskUpdateStatus::FailedWithTerminalError,
        json!({}),
    ));
    assert_eq!(status_of(&optional, "w"), "COMPLETED_WITH_ERRORS");
    assert_eq!(optional.pending(), vec!["a".to_owned()]);
}

#[test]
fn a_failed_human_task_fails_the_run() {
    let mut sim = run_of(json!([{"name": "h", "taskReferenceName": "h", "type": "HUMAN"}]));
    sim.command(&by_ref("h", TaskUpdateStatus::Failed, json!({})));
    assert_eq!(sim.state.status.as_str(), "FAILED");
}

#[test]
fn an_update_to_a_task_not_scheduled_yet_is_refused_and_changes_nothing() {
    let sim = run_of(json!([
        {"name": "a", "taskReferenceName": "a"},
        {"name": "b", "taskReferenceName": "b"}
    ]));
    let (status, message) =
        refusal(sim.verdict(&by_ref("b", TaskUpdateStatus::Completed, json!({}))));
    assert_eq!(status, 409);
    assert!(message.contains("not scheduled yet"), "{message}");
    let (status, message) =
        refusal(sim.verdict(&by_ref("nope", TaskUpdateStatus::Completed, json!({}))));
    assert_eq!(status, 404);
    assert!(message.starts_with("taskRef: "), "{message}");
}

#[test]
fn an_update_to_an_ended_task_names_its_status() {
    let mut sim = run_of(json!([
        {"name": "a", "taskReferenceName": "a"},
        {"name": "b", "taskReferenceName": "b"}
    ]));
    sim.complete("a", json!({}));
    let (status, message) =
        refusal(sim.verdict(&by_ref("a", TaskUpdateStatus::Completed, json!({}))));
    assert_eq!(status, 409);
    assert!(message.contains("is COMPLETED"), "{message}");
}

#[test]
fn a_simple_task_completes_by_ref_as_a_workers_result() {
    let mut sim = run_of(json!([
        {"name": "a", "taskReferenceName": "a"},
        {"name": "b", "taskReferenceName": "b"}
    ]));
    sim.command(&by_ref("a", TaskUpdateStatus::Completed, json!({"x": 1})));
    assert_eq!(status_of(&sim, "a"), "COMPLETED");
    assert_eq!(sim.pending(), vec!["b".to_owned()]);
}

#[test]
fn a_signal_for_a_wait_not_reached_yet_is_kept_visibly_then_consumed() {
    let mut sim = run_of(json!([
        {"name": "a", "taskReferenceName": "a"},
        {"name": "w", "taskReferenceName": "w", "type": "WAIT"}
    ]));
    sim.command(&signal("w", json!({"early": true})));
    assert_eq!(
        sim.state.record().pending_signals,
        Some(json!([{"name": "w", "payload": {"early": true}}]))
    );
    sim.complete("a", json!({}));
    assert_eq!(status_of(&sim, "w"), "COMPLETED");
    assert_eq!(
        sim.state.latest("w").unwrap().output,
        Some(json!({"early": true}))
    );
    assert_eq!(sim.state.record().pending_signals, None);
    assert_eq!(sim.state.status.as_str(), "COMPLETED");
}

#[test]
fn signals_no_task_would_consume_are_refused() {
    let mut sim = run_of(json!([
        {"name": "a", "taskReferenceName": "a"},
        {"name": "t", "taskReferenceName": "t", "type": "WAIT", "inputParameters": {"duration": "1s"}},
        {"name": "w", "taskReferenceName": "w", "type": "WAIT"},
        {"name": "b", "taskReferenceName": "b"}
    ]));
    let (status, _) = refusal(sim.verdict(&signal("nobody", json!({}))));
    assert_eq!(status, 404, "a name the definition does not have");
    let (status, message) = refusal(sim.verdict(&signal("b", json!({}))));
    assert_eq!(status, 409, "a worker's task is not reached yet");
    assert!(message.contains("kept for later only"), "{message}");
    let (status, message) = refusal(sim.verdict(&signal("t", json!({}))));
    assert_eq!(status, 409, "a WAIT on a timer: {message}");

    // A WAIT reached once outside a loop is not reached again.
    sim.command(&signal("w", json!({})));
    sim.complete("a", json!({}));
    let later = sim.now() + chrono::Duration::seconds(5);
    sim.fire_timers_due_by(later);
    assert_eq!(status_of(&sim, "w"), "COMPLETED");
    let (status, message) = refusal(sim.verdict(&signal("w", json!({}))));
    assert_eq!(status, 409);
    assert!(message.contains("is COMPLETED"), "{message}");
}

#[test]
fn a_run_ending_with_a_signal_it_kept_records_it() {
    let mut sim = run_of(json!([
        {"name": "a", "taskReferenceName": "a"},
        {"name": "s", "taskReferenceName": "s", "type": "SWITCH", "evaluatorType": "value-param",
         "expression": "x", "inputParameters": {"x": "no"},
         "decisionCases": {"yes": [{"name": "w", "taskReferenceName": "w", "type": "WAIT"}]}}
    ]));
    sim.command(&signal("w", json!({"late": 1})));
    sim.complete("a", json!({}));
    assert_eq!(sim.state.status.as_str(), "COMPLETED");
    let kinds: Vec<&str> = sim.events.iter().map(|e| e.event.kind()).collect();
    let at = kinds
        .iter()
        .position(|k| *k == "SignalsUnconsumed")
        .expect("recorded");
    assert_eq!(kinds[at + 1], "WorkflowCompleted", "just before the end");
    assert_eq!(
        sim.state.record().pending_signals,
        Some(json!([{"name": "w", "payload": {"late": 1}}])),
        "the ended run still shows what it did not use"
    );
}

#[test]
fn updates_apply_while_paused_and_refused_once_ended() {
    let mut sim = run_of(json!([
        {"name": "w", "taskReferenceName": "w", "type": "WAIT"},
        {"name": "a", "taskReferenceName": "a"}
    ]));
    sim.command(&Command::Pause(Operation::default()));
    sim.command(&signal("w", json!({})));
    assert_eq!(status_of(&sim, "w"), "COMPLETED", "recorded while paused");
    assert!(
        sim.state.latest("a").is_none(),
        "nothing scheduled while paused"
    );
    sim.command(&Command::Resume(Operation::default()));
    sim.complete("a", json!({}));
    let (status, message) = refusal(sim.verdict(&signal("w", json!({}))));
    assert_eq!(status, 409);
    assert!(message.contains("COMPLETED"), "{message}");
}

#[test]
fn a_signal_over_the_bus_that_nothing_consumes_is_ignored() {
    let sim = run_of(json!([{"name": "a", "taskReferenceName": "a"}]));
    let bus_signal = Command::Signal(weft::messages::Signal {
        name: "nobody".into(),
        payload: json!({}),
    });
    assert!(matches!(sim.verdict(&bus_signal), Applied::Ignored(_)));
}

/// What COMPLETED by ref does to a task of each type, reached as far as it goes by itself:
/// applied (the task reads COMPLETED), or refused with a 409 naming why. A type without
/// its row fails `every_task_type_has_its_row_for_an_update_by_ref`.
fn by_ref_rows() -> Vec<(TaskType, Value, Option<&'static str>)> {
    let node = |kind: &str, extra: Value| {
        let mut node = json!({"name": "x", "taskReferenceName": "x", "type": kind});
        node.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        node
    };
    let applied = None;
    let ended = Some("is COMPLETED");
    let by_itself = Some("ends by itself");
    vec![
        (TaskType::Simple, node("SIMPLE", json!({})), applied),
        (
            TaskType::Http,
            node(
                "HTTP",
                json!({"inputParameters": {"http_request": {"uri": "http://x"}}}),
            ),
            applied,
        ),
        (
            TaskType::Dynamic,
            node(
                "DYNAMIC",
                json!({"dynamicTaskNameParam": "t", "inputParameters": {"t": "x"}}),
            ),
            applied,
        ),
        (TaskType::Wait, node("WAIT", json!({})), applied),
        (
            TaskType::Wait,
            node("WAIT", json!({"inputParameters": {"duration": "1 hour"}})),
            applied,
        ),
        (
            TaskType::Wait,
            node(
                "WAIT",
                json!({"inputParameters": {"until": "2099-01-01 00:00"}}),
            ),
            applied,
        ),
        (TaskType::Human, node("HUMAN", json!({})), applied),
        (
            TaskType::Event,
            node("EVENT", json!({"sink": "conductor", "asyncComplete": true})),
            applied,
        ),
        (
            TaskType::Event,
            node("EVENT", json!({"sink": "conductor"})),
            by_itself,
        ),
        (
            TaskType::SubWorkflow,
            node(
                "SUB_WORKFLOW",
                json!({"subWorkflowParam": {"name": "c",
            "workflowDefinition": {"name": "c", "tasks": [{"name": "c", "taskReferenceName": "c"}]}}}),
            ),
            Some("ends with its child workflow"),
        ),
        (
            TaskType::DoWhile,
            node(
                "DO_WHILE",
                json!({"loopCondition": "false",
            "loopOver": [{"name": "body", "taskReferenceName": "body"}]}),
            ),
            by_itself,
        ),
        (
            TaskType::ForkJoin,
            node(
                "FORK_JOIN",
                json!({"forkTasks": [[{"name": "body", "taskReferenceName": "body"}]]}),
            ),
            ended,
        ),
        (
            TaskType::ForkJoinDynamic,
            node(
                "FORK_JOIN_DYNAMIC",
                json!({"dynamicForkTasksParam": "tasks",
            "dynamicForkTasksInputParamName": "inputs",
            "inputParameters": {"tasks": [{"name": "body", "taskReferenceName": "body"}], "inputs": {"body": {}}}}),
            ),
            ended,
        ),
        (
            TaskType::Switch,
            node(
                "SWITCH",
                json!({"evaluatorType": "value-param", "expression": "k",
            "inputParameters": {"k": "a"}, "decisionCases": {"a": [{"name": "body", "taskReferenceName": "body"}]}}),
            ),
            ended,
        ),
        (
            TaskType::Decision,
            node(
                "DECISION",
                json!({"caseValueParam": "k", "inputParameters": {"k": "a"},
            "decisionCases": {"a": [{"name": "body", "taskReferenceName": "body"}]}}),
            ),
            ended,
        ),
        (
            TaskType::Inline,
            node(
                "INLINE",
                json!({"inputParameters": {"evaluatorType": "javascript", "expression": "1"}}),
            ),
            ended,
        ),
        (
            TaskType::Lambda,
            node(
                "LAMBDA",
                json!({"inputParameters": {"scriptExpression": "return 1"}}),
            ),
            ended,
        ),
        (
            TaskType::JsonJqTransform,
            node(
                "JSON_JQ_TRANSFORM",
                json!({"inputParameters": {"queryExpression": "."}}),
            ),
            ended,
        ),
        (
            TaskType::SetVariable,
            node("SET_VARIABLE", json!({"inputParameters": {"v": 1}})),
            ended,
        ),
        (TaskType::Noop, node("NOOP", json!({})), ended),
        (
            TaskType::StartWorkflow,
            node(
                "START_WORKFLOW",
                json!({"inputParameters": {"startWorkflow": {"name": "other",
            "workflowDefinition": {"name": "other", "tasks": [{"name": "o", "taskReferenceName": "o"}]}}}}),
            ),
            ended,
        ),
        (
            TaskType::Terminate,
            node(
                "TERMINATE",
                json!({"inputParameters": {"terminationStatus": "COMPLETED"}}),
            ),
            Some("workflow"),
        ),
    ]
}

/// The run for a row: the task, then (for the joins) what they wait for.
fn run_for_row(kind: TaskType, node: &Value) -> Sim {
    let tasks = match kind {
        TaskType::ForkJoin | TaskType::ForkJoinDynamic => {
            json!([node, {"name": "join", "taskReferenceName": "join", "type": "JOIN"},
                   {"name": "after", "taskReferenceName": "after"}])
        }
        _ => json!([node, {"name": "after", "taskReferenceName": "after"}]),
    };
    Sim::start(json!({"name": "w", "tasks": tasks}), json!({}))
}

#[test]
fn every_task_type_has_its_row_for_an_update_by_ref() {
    let rows = by_ref_rows();
    let joins = [TaskType::Join, TaskType::ExclusiveJoin];
    for kind in TaskType::ALL {
        assert!(
            rows.iter().any(|(k, _, _)| *k == kind) || joins.contains(&kind),
            "{}: no row for an update by ref",
            kind.as_str()
        );
    }
}

#[test]
fn an_update_by_ref_applies_to_a_task_that_waits_and_is_refused_by_every_other() {
    let mut wrong = Vec::new();
    for (kind, node, refused) in by_ref_rows() {
        let mut sim = run_for_row(kind, &node);
        let update = by_ref("x", TaskUpdateStatus::Completed, json!({"by": "ref"}));
        match (sim.verdict(&update), refused) {
            (Applied::Events(_), None) => {
                sim.command(&update);
                let status = sim.state.latest("x").map(|t| t.status.as_str());
                if status != Some("COMPLETED") {
                    wrong.push(format!("{node}: applied, yet x is {status:?}"));
                }
            }
            (
                Applied::Rejected {
                    status: 409,
                    message,
                },
                Some(why),
            ) if message.contains(why) => {}
            (got, want) => wrong.push(format!("{node}: {got:?}, want {want:?}")),
        }
    }
    // The joins: waiting for a branch, they end by themselves.
    let join = Sim::start(
        json!({"name": "w", "tasks": [
            {"name": "f", "taskReferenceName": "f", "type": "FORK_JOIN",
             "forkTasks": [[{"name": "a", "taskReferenceName": "a"}]]},
            {"name": "x", "taskReferenceName": "x", "type": "JOIN", "joinOn": ["a"]}]}),
        json!({}),
    );
    match join.verdict(&by_ref("x", TaskUpdateStatus::Completed, json!({}))) {
        Applied::Rejected {
            status: 409,
            message,
        } if message.contains("ends by itself") => {}
        other => wrong.push(format!("JOIN: {other:?}")),
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
