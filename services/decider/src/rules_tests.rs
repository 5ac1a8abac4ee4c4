//! Every rule on every task type (issue 21): `optional` on each type that can fail, as a
//! table. A failing task of each type fails its run; the same task marked optional lets
//! the run go on to the next task. A type without its row fails the test, so a new type
//! cannot come without saying what `optional` does to it.

use serde_json::{json, Value};
use weft::dsl::TaskType;
use weft::messages::{
    ChildWorkflowEnded, Command, Operation, ParentLink, TaskUpdateStatus, UpdateTask,
};

use crate::sim::Sim;

/// How a task of a type fails: its node (without `optional`), and what makes it fail
/// once the run has reached it.
struct Failing {
    kind: TaskType,
    node: Value,
    fail: fn(&mut Sim),
}

/// Types whose tasks never fail by themselves, and why (`optional: true` on them is
/// refused at registration).
const CANNOT_FAIL: [(TaskType, &str); 5] = [
    (
        TaskType::ForkJoin,
        "completes at once; a branch task that fails is that task's row",
    ),
    (TaskType::Noop, "completes at once"),
    (TaskType::Terminate, "ends the run itself"),
    (
        TaskType::Join,
        "fails only with a task it waits for (that task's row)",
    ),
    (
        TaskType::ExclusiveJoin,
        "fails only with a task it waits for (that task's row)",
    ),
];

fn nothing(_: &mut Sim) {}

fn fail_worker(sim: &mut Sim) {
    sim.fail("x", "the worker failed");
}

fn fail_by_update(sim: &mut Sim) {
    sim.command(&Command::UpdateTask(UpdateTask {
        op: Operation::default(),
        task_ref: "x".into(),
        task_id: None,
        run_id: None,
        status: TaskUpdateStatus::Failed,
        output: json!({}),
        reason: Some("refused".into()),
        worker_id: None,
        callback_after_seconds: 0,
        hold: false,
    }));
}

fn fail_child(sim: &mut Sim) {
    let t = sim
        .state
        .latest("x")
        .expect("the SUB_WORKFLOW task")
        .clone();
    let child = t
        .output
        .as_ref()
        .and_then(|o| o["subWorkflowId"].as_str())
        .map(str::to_owned);
    sim.command(&Command::ChildWorkflowEnded(ChildWorkflowEnded {
        parent: ParentLink {
            workflow_id: sim.state.workflow_id.clone(),
            run_id: sim.state.run_id,
            task_id: t.task_id,
        },
        child_workflow_id: child.unwrap_or_else(|| "child".into()),
        status: "FAILED".into(),
        output: json!({}),
        reason: Some("the child failed".into()),
    }));
}

fn complete_body(sim: &mut Sim) {
    sim.complete("body", json!({}));
}

fn rows() -> Vec<Failing> {
    let task = |kind: &str, extra: Value| {
        let mut node = json!({"name": "x", "taskReferenceName": "x", "type": kind});
        node.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        node
    };
    vec![
        Failing {
            kind: TaskType::Simple,
            node: task("SIMPLE", json!({})),
            fail: fail_worker,
        },
        Failing {
            kind: TaskType::Http,
            node: task(
                "HTTP",
                json!({"inputParameters": {"http_request": {"uri": "http://x", "method": "GET"}}}),
            ),
            fail: fail_worker,
        },
        Failing {
            kind: TaskType::Dynamic,
            node: task(
                "DYNAMIC",
                json!({"dynamicTaskNameParam": "t", "inputParameters": {"t": "x"}}),
            ),
            fail: fail_worker,
        },
        Failing {
            kind: TaskType::Inline,
            node: task(
                "INLINE",
                json!({"inputParameters": {"evaluatorType": "javascript", "expression": "throw 'no'"}}),
            ),
            fail: nothing,
        },
        Failing {
            kind: TaskType::Lambda,
            node: task(
                "LAMBDA",
                json!({"inputParameters": {"scriptExpression": "throw 'no'"}}),
            ),
            fail: nothing,
        },
        Failing {
            kind: TaskType::JsonJqTransform,
            node: task(
                "JSON_JQ_TRANSFORM",
                json!({"inputParameters": {"queryExpression": "error(\"no\")"}}),
            ),
            fail: nothing,
        },
        Failing {
            kind: TaskType::SetVariable,
            node: task(
                "SET_VARIABLE",
                json!({"inputParameters": {"big": "x".repeat(300 * 1024)}}),
            ),
            fail: nothing,
        },
        Failing {
            kind: TaskType::Event,
            node: task("EVENT", json!({"sink": "nowhere"})),
            fail: nothing,
        },
        Failing {
            kind: TaskType::StartWorkflow,
            node: task(
                "START_WORKFLOW",
                json!({"inputParameters": {"startWorkflow": {}}}),
            ),
            fail: nothing,
        },
        Failing {
            kind: TaskType::Wait,
            node: task("WAIT", json!({})),
            fail: fail_by_update,
        },
        Failing {
            kind: TaskType::Human,
            node: task("HUMAN", json!({})),
            fail: fail_by_update,
        },
        Failing {
            kind: TaskType::SubWorkflow,
            node: task(
                "SUB_WORKFLOW",
                json!({"subWorkflowParam": {"name": "child", "workflowDefinition":
                    {"name": "child", "tasks": [{"name": "c", "taskReferenceName": "c"}]}}}),
            ),
            fail: fail_child,
        },
        Failing {
            kind: TaskType::Switch,
            node: task(
                "SWITCH",
                json!({"evaluatorType": "javascript", "expression": "throw 'no'",
                "decisionCases": {"a": [{"name": "a", "taskReferenceName": "a"}]}}),
            ),
            fail: nothing,
        },
        Failing {
            kind: TaskType::Decision,
            node: task(
                "DECISION",
                json!({"caseExpression": "throw 'no'",
                "decisionCases": {"a": [{"name": "a", "taskReferenceName": "a"}]}}),
            ),
            fail: nothing,
        },
        // A loop fails by its condition (a body task that fails is that task's row).
        Failing {
            kind: TaskType::DoWhile,
            node: task(
                "DO_WHILE",
                json!({"loopCondition": "throw 'no'",
                "loopOver": [{"name": "body", "taskReferenceName": "body"}]}),
            ),
            fail: complete_body,
        },
        Failing {
            kind: TaskType::ForkJoinDynamic,
            node: task(
                "FORK_JOIN_DYNAMIC",
                json!({"dynamicForkTasksParam": "tasks",
                "dynamicForkTasksInputParamName": "inputs",
                "inputParameters": {"tasks": "not a list", "inputs": {}}}),
            ),
            fail: nothing,
        },
    ]
}

/// A run of `node` (optional or not), then `next`.
fn run_of(node: &Value, optional: bool) -> Sim {
    let mut node = node.clone();
    node["optional"] = json!(optional);
    let mut tasks = vec![node.clone()];
    let kind = node["type"].as_str().unwrap_or_default();
    if matches!(kind, "FORK_JOIN" | "FORK_JOIN_DYNAMIC") {
        tasks.push(json!({"name": "join", "taskReferenceName": "join", "type": "JOIN"}));
    }
    tasks.push(json!({"name": "next", "taskReferenceName": "next"}));
    Sim::start(json!({"name": "w", "tasks": tasks}), json!({}))
}

#[test]
fn every_task_type_that_can_fail_has_its_optional_row() {
    // The types registration refuses `optional: true` on are exactly those.
    let mut never: Vec<&str> = CANNOT_FAIL.iter().map(|(k, _)| k.as_str()).collect();
    let mut refused: Vec<&str> = weft::dsl::validate::NEVER_FAIL
        .iter()
        .map(|k| k.as_str())
        .collect();
    never.sort_unstable();
    refused.sort_unstable();
    assert_eq!(never, refused);
    let rows = rows();
    for kind in TaskType::ALL {
        let has_row = rows.iter().any(|r| r.kind == kind);
        let cannot_fail = CANNOT_FAIL.iter().any(|(k, _)| *k == kind);
        assert!(
            has_row != cannot_fail,
            "{}: a row saying how it fails, or a reason it cannot (not both)",
            kind.as_str()
        );
    }
}

#[test]
fn a_failing_task_fails_its_run_unless_optional_whatever_its_type() {
    let mut wrong = Vec::new();
    for row in rows() {
        let name = row.kind.as_str();
        let mut strict = run_of(&row.node, false);
        (row.fail)(&mut strict);
        if strict.state.status.as_str() != "FAILED" || strict.state.latest("next").is_some() {
            wrong.push(format!(
                "{name}, not optional: the run is {} with {:?}",
                strict.state.status.as_str(),
                strict.trail()
            ));
        }
        let mut optional = run_of(&row.node, true);
        (row.fail)(&mut optional);
        let next_pending = optional
            .state
            .latest("next")
            .is_some_and(|t| t.status.is_pending());
        if optional.state.status.as_str() != "RUNNING" || !next_pending {
            wrong.push(format!(
                "{name}, optional: the run is {} with {:?}",
                optional.state.status.as_str(),
                optional.trail()
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// `startDelay` on every type: a task handed to workers waits that long in its queue (its
/// first attempt SCHEDULED with `callbackAfterSeconds`, its message held by a timer);
/// on any other type a delay is refused at registration, naming the field.
#[test]
fn start_delay_delays_a_workers_task_and_is_refused_on_every_other_type() {
    let mut wrong = Vec::new();
    for kind in TaskType::ALL {
        let mut node = minimal_node(kind);
        node["startDelay"] = json!(5);
        let mut tasks = vec![node];
        // A join after what it joins: a fork's branch, a switch's case.
        match kind {
            TaskType::Join => tasks.insert(
                0,
                json!({"name": "f", "taskReferenceName": "f", "type": "FORK_JOIN",
                       "forkTasks": [[{"name": "a", "taskReferenceName": "a"}]]}),
            ),
            TaskType::ExclusiveJoin => tasks.insert(
                0,
                json!({"name": "s", "taskReferenceName": "s", "type": "SWITCH",
                       "evaluatorType": "value-param", "expression": "k",
                       "inputParameters": {"k": "a"},
                       "decisionCases": {"a": [{"name": "a", "taskReferenceName": "a"}]}}),
            ),
            _ => {}
        }
        let def = json!({"name": "w", "tasks": tasks});
        let applies = matches!(kind, TaskType::Simple | TaskType::Http | TaskType::Dynamic);
        match (weft::dsl::parse_definition(&def), applies) {
            (Ok(_), true) => {
                let sim = Sim::start(def, json!({}));
                let x = sim.state.latest("x").expect("scheduled");
                if x.callback_after_seconds != 5 || x.dispatch_timer.is_none() {
                    wrong.push(format!("{}: not held back: {x:?}", kind.as_str()));
                }
            }
            (Err(e), false) if e.path.ends_with("startDelay") => {}
            (got, _) => wrong.push(format!("{}: {got:?}", kind.as_str())),
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// A valid node `x` of `kind`, with what its type needs.
fn minimal_node(kind: TaskType) -> Value {
    let extra = match kind {
        TaskType::Http => {
            json!({"inputParameters": {"http_request": {"uri": "http://x", "method": "GET"}}})
        }
        TaskType::Dynamic => json!({"dynamicTaskNameParam": "t", "inputParameters": {"t": "x"}}),
        TaskType::Decision => json!({"caseValueParam": "k", "inputParameters": {"k": "a"},
            "decisionCases": {"a": [{"name": "b", "taskReferenceName": "b"}]}}),
        TaskType::Switch => json!({"evaluatorType": "value-param", "expression": "k",
            "inputParameters": {"k": "a"}, "decisionCases": {"a": [{"name": "b", "taskReferenceName": "b"}]}}),
        TaskType::DoWhile => json!({"loopCondition": "false",
            "loopOver": [{"name": "b", "taskReferenceName": "b"}]}),
        TaskType::ForkJoin => json!({"forkTasks": [[{"name": "b", "taskReferenceName": "b"}]]}),
        TaskType::ForkJoinDynamic => json!({"dynamicForkTasksParam": "tasks",
            "dynamicForkTasksInputParamName": "inputs",
            "inputParameters": {"tasks": [], "inputs": {}}}),
        TaskType::Join | TaskType::ExclusiveJoin => json!({"joinOn": ["a"]}),
        TaskType::SubWorkflow => json!({"subWorkflowParam": {"name": "c", "workflowDefinition":
            {"name": "c", "tasks": [{"name": "c", "taskReferenceName": "c"}]}}}),
        TaskType::Terminate => json!({"inputParameters": {"terminationStatus": "COMPLETED"}}),
        TaskType::Inline => {
            json!({"inputParameters": {"evaluatorType": "javascript", "expression": "1"}})
        }
        TaskType::Lambda => json!({"inputParameters": {"scriptExpression": "return 1"}}),
        TaskType::JsonJqTransform => json!({"inputParameters": {"queryExpression": "."}}),
        TaskType::Event => json!({"sink": "conductor"}),
        TaskType::StartWorkflow => json!({"inputParameters": {"startWorkflow": {"name": "o"}}}),
        _ => json!({}),
    };
    let mut node = json!({"name": "x", "taskReferenceName": "x", "type": kind.as_str()});
    node.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    node
}
