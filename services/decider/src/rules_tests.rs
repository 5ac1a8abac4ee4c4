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
        let def = definition_of(kind, node);
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

/// A definition of `node` (of `kind`), after what it needs before it: a join after what
/// it joins (a fork's branch, a switch's case).
fn definition_of(kind: TaskType, node: Value) -> Value {
    let mut tasks = vec![node];
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
    json!({"name": "w", "tasks": tasks})
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

/// Whether a type's failed task is retried per its task definition (`retryCount`), and
/// if not, why: Conductor retries a failed task of any type but its built-in flow tasks,
/// and a terminal failure (FAILED_WITH_TERMINAL_ERROR) never.
fn retried_or_why(kind: TaskType) -> Result<(), &'static str> {
    match kind {
        TaskType::Simple
        | TaskType::Http
        | TaskType::Dynamic
        | TaskType::SubWorkflow
        | TaskType::StartWorkflow
        | TaskType::Lambda
        | TaskType::JsonJqTransform
        | TaskType::Event
        | TaskType::Wait
        | TaskType::Human => Ok(()),
        TaskType::Inline => Err("a script that throws fails terminally, as Conductor's"),
        TaskType::SetVariable => Err("too large fails terminally, as Conductor's"),
        TaskType::Switch | TaskType::Decision | TaskType::DoWhile | TaskType::ForkJoinDynamic => {
            Err("a built-in flow task: Conductor never retries it")
        }
        TaskType::ForkJoin
        | TaskType::Join
        | TaskType::ExclusiveJoin
        | TaskType::Noop
        | TaskType::Terminate => Err("never fails by itself"),
    }
}

/// `retryCount` on every type: the task definition of a task of each type that can fail
/// says one retry, at once. A type that retries shows a second attempt after the first
/// failure (pending, or failed again at once where the decider evaluates the same input
/// again); one that does not fails its run with at most one. A type whose row is missing
/// fails the test.
#[test]
fn a_failed_task_is_retried_per_its_task_definition_on_every_type_that_retries() {
    let mut wrong = Vec::new();
    let rows = rows();
    for kind in TaskType::ALL {
        let expected = retried_or_why(kind);
        let Some(row) = rows.iter().find(|r| r.kind == kind) else {
            if expected != Err("never fails by itself") {
                wrong.push(format!("{}: no row saying how it fails", kind.as_str()));
            }
            continue;
        };
        let mut node = row.node.clone();
        node["taskDefinition"] = json!({"name": "x", "retryCount": 1, "retryDelaySeconds": 0});
        let mut sim = run_of(&node, false);
        (row.fail)(&mut sim);
        let attempts: Vec<(i32, &'static str)> = sim
            .state
            .tasks
            .iter()
            .filter(|t| t.task_ref == "x")
            .map(|t| (t.attempt, t.status.as_str()))
            .collect();
        let ok = match expected {
            Ok(()) => attempts.len() == 2 && attempts[1].0 == 2,
            // A flow task that cannot begin fails the run without a task of its own.
            Err(_) => attempts.len() <= 1 && sim.state.status.as_str() == "FAILED",
        };
        if !ok {
            wrong.push(format!(
                "{} ({expected:?}): attempts {attempts:?}, the run {}",
                kind.as_str(),
                sim.state.status.as_str()
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// A retried task the decider evaluates again fails its run only when its last attempt
/// fails, with that attempt's reason; one that succeeds on a retry lets the run go on.
#[test]
fn a_system_task_retried_to_exhaustion_fails_its_run_and_a_wait_retried_waits_again() {
    let lambda = json!({"name": "x", "taskReferenceName": "x", "type": "LAMBDA",
        "inputParameters": {"scriptExpression": "throw 'no'"},
        "taskDefinition": {"name": "x", "retryCount": 2, "retryDelaySeconds": 0}});
    let sim = run_of(&lambda, false);
    let attempts: Vec<i32> = sim.state.tasks.iter().map(|t| t.attempt).collect();
    assert_eq!(attempts, vec![1, 2, 3], "{:?}", sim.trail());
    assert_eq!(sim.state.status.as_str(), "FAILED");

    // An optional one reads FAILED while retried, COMPLETED_WITH_ERRORS at its last.
    let optional = run_of(&lambda, true);
    let statuses: Vec<&str> = optional
        .state
        .tasks
        .iter()
        .filter(|t| t.task_ref == "x")
        .map(|t| t.status.as_str())
        .collect();
    assert_eq!(statuses, vec!["FAILED", "FAILED", "COMPLETED_WITH_ERRORS"]);
    assert_eq!(optional.state.status.as_str(), "RUNNING");

    // A WAIT failed through the task API waits again as its next attempt, which a
    // completion by reference then completes.
    let wait = json!({"name": "x", "taskReferenceName": "x", "type": "WAIT",
        "taskDefinition": {"name": "x", "retryCount": 1, "retryDelaySeconds": 0}});
    let mut sim = run_of(&wait, false);
    fail_by_update(&mut sim);
    let x = sim.state.latest("x").unwrap();
    assert_eq!((x.attempt, x.status.is_pending()), (2, true));
    sim.signal("x", json!({"ok": true}));
    assert_eq!(sim.state.latest("x").unwrap().status.as_str(), "COMPLETED");
    assert!(sim
        .state
        .latest("next")
        .is_some_and(|t| t.status.is_pending()));
    // Its second failure is its last: the run fails.
    let mut sim = run_of(&wait, false);
    fail_by_update(&mut sim);
    fail_by_update(&mut sim);
    assert_eq!(sim.state.status.as_str(), "FAILED");
}

/// START_WORKFLOW is asynchronous in Conductor, its retry queued with its back-off: here
/// it waits the back-off on a durable timer before its next attempt.
#[test]
fn a_start_workflow_retry_waits_out_its_back_off() {
    let node = json!({"name": "x", "taskReferenceName": "x", "type": "START_WORKFLOW",
        "inputParameters": {"startWorkflow": {}},
        "taskDefinition": {"name": "x", "retryCount": 1, "retryDelaySeconds": 30}});
    let mut sim = run_of(&node, false);
    assert_eq!(sim.state.tasks.len(), 1, "{:?}", sim.trail());
    assert_eq!(sim.state.status.as_str(), "RUNNING");
    let due = sim.now() + chrono::Duration::seconds(30);
    sim.fire_timers_due_by(due);
    let attempts: Vec<i32> = sim.state.tasks.iter().map(|t| t.attempt).collect();
    assert_eq!(attempts, vec![1, 2]);
    assert_eq!(sim.state.status.as_str(), "FAILED");
}

/// Whether a type's task times out per its task definition's `timeoutSeconds`, and if
/// not, why.
fn times_out_or_why(kind: TaskType) -> Result<(), &'static str> {
    match kind {
        TaskType::Simple
        | TaskType::Http
        | TaskType::Dynamic
        | TaskType::SubWorkflow
        | TaskType::Wait
        | TaskType::Human
        | TaskType::Event => Ok(()),
        TaskType::Inline
        | TaskType::Lambda
        | TaskType::JsonJqTransform
        | TaskType::SetVariable
        | TaskType::StartWorkflow
        | TaskType::Noop
        | TaskType::Terminate
        | TaskType::Switch
        | TaskType::Decision
        | TaskType::ForkJoin
        | TaskType::ForkJoinDynamic => Err("done within the decision that reaches it"),
        TaskType::Join | TaskType::ExclusiveJoin | TaskType::DoWhile => {
            Err("a container: the tasks it waits for keep their own timeouts")
        }
    }
}

/// `timeoutSeconds` and `totalTimeoutSeconds` on every type: a task whose definition says
/// 10 s (TIME_OUT_WF) and that is still waiting for its result 10 s after it began times
/// its run out; on a type that never waits for a result of its own, the same definition
/// changes nothing.
#[test]
fn a_task_past_its_timeout_times_its_run_out_on_every_type_that_waits() {
    let mut wrong = Vec::new();
    for (field, kind) in ["timeoutSeconds", "totalTimeoutSeconds"]
        .into_iter()
        .flat_map(|f| TaskType::ALL.map(|k| (f, k)))
    {
        let mut node = minimal_node(kind);
        node["taskDefinition"] = json!({"name": "x", "retryCount": 0, field: 10,
            "responseTimeoutSeconds": 10, "timeoutPolicy": "TIME_OUT_WF"});
        let mut sim = Sim::start(definition_of(kind, node), json!({}));
        // A worker's task counts from its worker's start.
        if matches!(kind, TaskType::Simple | TaskType::Http | TaskType::Dynamic) {
            sim.take("x");
        }
        let before = sim.state.status.as_str();
        let later = sim.now() + chrono::Duration::seconds(11);
        sim.fire_timers_due_by(later);
        let after = sim.state.status.as_str();
        let ok = match times_out_or_why(kind) {
            Ok(()) => before == "RUNNING" && after == "TIMED_OUT",
            Err(_) => after == before,
        };
        if !ok {
            wrong.push(format!(
                "{field} on {} ({:?}): {before} then {after}: {:?}",
                kind.as_str(),
                times_out_or_why(kind),
                sim.trail()
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// A WAIT past its `timeoutSeconds` under RETRY waits again as its next attempt; past its
/// last, the run times out. ALERT_ONLY only records the deadline's passing.
#[test]
fn a_wait_timed_out_is_retried_under_retry_and_waits_on_under_alert_only() {
    let wait = |policy: &str| {
        json!({"name": "w", "tasks": [{"name": "x", "taskReferenceName": "x", "type": "WAIT",
            "taskDefinition": {"name": "x", "retryCount": 1, "retryDelaySeconds": 0,
                "timeoutSeconds": 10, "responseTimeoutSeconds": 10, "timeoutPolicy": policy}},
            {"name": "next", "taskReferenceName": "next"}]})
    };
    let mut sim = Sim::start(wait("RETRY"), json!({}));
    let t0 = sim.now();
    sim.fire_timers_due_by(t0 + chrono::Duration::seconds(11));
    let attempts: Vec<(i32, &str)> = sim
        .state
        .tasks
        .iter()
        .map(|t| (t.attempt, t.status.as_str()))
        .collect();
    assert_eq!(attempts, vec![(1, "TIMED_OUT"), (2, "SCHEDULED")]);
    sim.fire_timers_due_by(t0 + chrono::Duration::seconds(60));
    assert_eq!(sim.state.status.as_str(), "TIMED_OUT", "{:?}", sim.trail());

    // Under RETRY with retries to spare, `totalTimeoutSeconds` ends the retrying.
    let total = json!({"name": "w", "tasks": [{"name": "x", "taskReferenceName": "x",
        "type": "HUMAN", "taskDefinition": {"name": "x", "retryCount": 9, "retryDelaySeconds": 0,
            "timeoutSeconds": 10, "totalTimeoutSeconds": 25, "responseTimeoutSeconds": 10,
            "timeoutPolicy": "RETRY"}}]});
    let mut sim = Sim::start(total, json!({}));
    let t0 = sim.now();
    for at in [11, 21] {
        sim.fire_timers_due_by(t0 + chrono::Duration::seconds(at));
        assert_eq!(sim.state.status.as_str(), "RUNNING");
    }
    sim.fire_timers_due_by(t0 + chrono::Duration::seconds(26));
    let attempts: Vec<i32> = sim.state.tasks.iter().map(|t| t.attempt).collect();
    assert_eq!(attempts, vec![1, 2, 3]);
    assert_eq!(sim.state.status.as_str(), "TIMED_OUT", "{:?}", sim.trail());

    let mut sim = Sim::start(wait("ALERT_ONLY"), json!({}));
    let later = sim.now() + chrono::Duration::seconds(11);
    sim.fire_timers_due_by(later);
    assert_eq!(sim.state.status.as_str(), "RUNNING");
    assert!(sim.state.latest("x").unwrap().status.is_pending());
    sim.signal("x", json!({}));
    assert!(sim
        .state
        .latest("next")
        .is_some_and(|t| t.status.is_pending()));
}

/// The worker-only policies of a task definition (`concurrentExecLimit`,
/// `rateLimitPerFrequency`, `pollTimeoutSeconds`) on every type: taken into the policy of
/// a task handed to workers, refused at registration (naming the field and the type) on
/// any type the decider runs itself. The gateway refuses a start whose registered task
/// definitions do the same (e2e).
#[test]
fn worker_policies_apply_to_workers_tasks_and_are_refused_on_every_other_type() {
    let mut wrong = Vec::new();
    for field in weft::dsl::taskdef::WORKER_POLICIES {
        for kind in TaskType::ALL {
            let mut node = minimal_node(kind);
            node["taskDefinition"] = json!({"name": "x", field: 2});
            let def = definition_of(kind, node.clone());
            let applies = matches!(kind, TaskType::Simple | TaskType::Http | TaskType::Dynamic);
            match (weft::dsl::parse_definition(&def), applies) {
                (Ok(_), true) => {
                    let task: weft::dsl::WorkflowTask = serde_json::from_value(node).unwrap();
                    let p = crate::interpreter::policy::Policy::of(&task);
                    let taken = match field {
                        "concurrentExecLimit" => p.limits.concurrency == Some(2),
                        "rateLimitPerFrequency" => p.limits.rate.is_some(),
                        _ => p.poll_timeout_seconds == 2,
                    };
                    if !taken {
                        wrong.push(format!("{field} on {}: not in {p:?}", kind.as_str()));
                    }
                }
                (Err(e), false)
                    if e.path.ends_with(&format!("taskDefinition.{field}"))
                        && e.message.contains(kind.as_str()) => {}
                (got, _) => wrong.push(format!("{field} on {}: {got:?}", kind.as_str())),
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// `inputTemplate` on every type: the template's keys the task's own input lacks are in
/// its input, a key of its own that resolves to null takes the template's value, and one
/// that resolves to a value keeps it (Conductor's `getTaskInputV2`). A JOIN's and an
/// EXCLUSIVE_JOIN's input is what they join.
#[test]
fn the_input_template_fills_the_input_of_a_task_of_every_type_that_takes_input() {
    let mut wrong = Vec::new();
    for kind in TaskType::ALL {
        // Their input is what they join (Conductor's mappers give them no other).
        if matches!(kind, TaskType::Join | TaskType::ExclusiveJoin) {
            continue;
        }
        let mut node = minimal_node(kind);
        node["taskDefinition"] = json!({"name": "x", "inputTemplate":
            {"fromTemplate": "t", "unset": "default", "set": "not this"}});
        let params = node["inputParameters"].as_object_mut();
        let extra = json!({"unset": "${workflow.input.missing}", "set": "${workflow.input.s}"});
        match params {
            Some(map) => map.extend(extra.as_object().unwrap().clone()),
            None => node["inputParameters"] = extra,
        }
        let sim = Sim::start(definition_of(kind, node), json!({"s": "own"}));
        let Some(x) = sim.state.latest("x") else {
            wrong.push(format!("{}: no task x: {:?}", kind.as_str(), sim.trail()));
            continue;
        };
        let input = &x.input;
        let takes =
            input["fromTemplate"] == "t" && input["unset"] == "default" && input["set"] == "own";
        if !takes {
            wrong.push(format!("{}: input {input}", kind.as_str()));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The back-off of a retry (`retryDelaySeconds`, and `retryLogic`, `backoffScaleFactor`,
/// `maxRetryDelaySeconds`, `backoffJitterMs` that shape it) on every type that retries:
/// a worker's task is retried at once, SCHEDULED with `callbackAfterSeconds` (handed out
/// after it); every other type waits it on a timer of the run before its next attempt
/// (Conductor runs its synchronous system tasks' retries at once, ignoring the delay).
#[test]
fn a_retry_waits_its_back_off_on_every_type_that_retries() {
    let mut wrong = Vec::new();
    for row in rows() {
        let kind = row.kind;
        if retried_or_why(kind).is_err() {
            continue;
        }
        let mut node = row.node.clone();
        node["taskDefinition"] = json!({"name": "x", "retryCount": 1, "retryDelaySeconds": 30,
            "retryLogic": "LINEAR_BACKOFF", "backoffScaleFactor": 2, "maxRetryDelaySeconds": 50});
        let mut sim = run_of(&node, false);
        (row.fail)(&mut sim);
        let attempts: Vec<(i32, i64)> = sim
            .state
            .tasks
            .iter()
            .filter(|t| t.task_ref == "x")
            .map(|t| (t.attempt, t.callback_after_seconds))
            .collect();
        // LINEAR: 30 × 2 × 1 = 60, capped at 50.
        let worker = matches!(kind, TaskType::Simple | TaskType::Http | TaskType::Dynamic);
        let expected: &[(i32, i64)] = match worker {
            true => &[(1, 0), (2, 50)],
            false => &[(1, 0)],
        };
        if attempts != expected {
            wrong.push(format!("{}: attempts {attempts:?}", kind.as_str()));
            continue;
        }
        if !worker {
            // The timer was set an event (a simulated second) or two ago.
            let early = sim.now() + chrono::Duration::seconds(45);
            sim.fire_timers_due_by(early);
            let before = sim.state.tasks.iter().filter(|t| t.task_ref == "x").count();
            let due = sim.now() + chrono::Duration::seconds(51);
            sim.fire_timers_due_by(due);
            let after = sim.state.tasks.iter().filter(|t| t.task_ref == "x").count();
            if (before, after) != (1, 2) {
                wrong.push(format!(
                    "{}: attempts {before} before its back-off, {after} after",
                    kind.as_str()
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// `responseTimeoutSeconds` is the heartbeat timeout of a task a worker holds (the
/// heartbeat service's, docs/heartbeats.md). A task nothing heartbeats — a WAIT, HUMAN,
/// EVENT, SUB_WORKFLOW waiting — is not timed out by it (Conductor times a WAIT out after
/// it: docs/conductor.md).
#[test]
fn a_task_nothing_heartbeats_is_not_timed_out_by_its_response_timeout() {
    for kind in [
        TaskType::Wait,
        TaskType::Human,
        TaskType::Event,
        TaskType::SubWorkflow,
    ] {
        let mut node = minimal_node(kind);
        node["taskDefinition"] = json!({"name": "x", "responseTimeoutSeconds": 1});
        let mut sim = Sim::start(definition_of(kind, node), json!({}));
        let later = sim.now() + chrono::Duration::days(2);
        sim.fire_timers_due_by(later);
        assert_eq!(sim.state.status.as_str(), "RUNNING", "{}", kind.as_str());
        assert!(
            sim.state.latest("x").unwrap().status.is_pending(),
            "{}",
            kind.as_str()
        );
    }
}

/// Every policy field of a task definition has its table above: a new field without one
/// fails here (and `weft::dsl::taskdef`'s own test makes every new field a policy or
/// descriptive).
#[test]
fn every_policy_of_a_task_definition_has_its_rule_table() {
    let tables: [(&str, fn()); 16] = [
        (
            "retryCount",
            a_failed_task_is_retried_per_its_task_definition_on_every_type_that_retries,
        ),
        (
            "nonRetryableErrors",
            a_failed_task_is_retried_per_its_task_definition_on_every_type_that_retries,
        ),
        (
            "retryLogic",
            a_retry_waits_its_back_off_on_every_type_that_retries,
        ),
        (
            "retryDelaySeconds",
            a_retry_waits_its_back_off_on_every_type_that_retries,
        ),
        (
            "backoffScaleFactor",
            a_retry_waits_its_back_off_on_every_type_that_retries,
        ),
        (
            "maxRetryDelaySeconds",
            a_retry_waits_its_back_off_on_every_type_that_retries,
        ),
        (
            "backoffJitterMs",
            a_retry_waits_its_back_off_on_every_type_that_retries,
        ),
        (
            "timeoutSeconds",
            a_task_past_its_timeout_times_its_run_out_on_every_type_that_waits,
        ),
        (
            "totalTimeoutSeconds",
            a_task_past_its_timeout_times_its_run_out_on_every_type_that_waits,
        ),
        (
            "timeoutPolicy",
            a_wait_timed_out_is_retried_under_retry_and_waits_on_under_alert_only,
        ),
        (
            "pollTimeoutSeconds",
            worker_policies_apply_to_workers_tasks_and_are_refused_on_every_other_type,
        ),
        (
            "responseTimeoutSeconds",
            a_task_nothing_heartbeats_is_not_timed_out_by_its_response_timeout,
        ),
        (
            "concurrentExecLimit",
            worker_policies_apply_to_workers_tasks_and_are_refused_on_every_other_type,
        ),
        (
            "rateLimitPerFrequency",
            worker_policies_apply_to_workers_tasks_and_are_refused_on_every_other_type,
        ),
        (
            "rateLimitFrequencyInSeconds",
            worker_policies_apply_to_workers_tasks_and_are_refused_on_every_other_type,
        ),
        (
            "inputTemplate",
            the_input_template_fills_the_input_of_a_task_of_every_type_that_takes_input,
        ),
    ];
    let mut covered: Vec<&str> = tables.iter().map(|(field, _)| *field).collect();
    let mut fields = weft::dsl::taskdef::POLICY_FIELDS.to_vec();
    covered.sort_unstable();
    fields.sort_unstable();
    assert_eq!(
        covered, fields,
        "a policy field without its table, or a table of no field"
    );
}

/// A task that fails the same way on every attempt, with retries and no back-off, cannot
/// keep one command settling for ever: every 100th retry goes through a timer due at
/// once, a command of its own, and the run fails after its last attempt.
#[test]
fn a_thousand_immediate_retries_are_settled_in_slices() {
    let node = json!({"name": "x", "taskReferenceName": "x", "type": "LAMBDA",
        "inputParameters": {"scriptExpression": "throw 'no'"},
        "taskDefinition": {"name": "x", "retryCount": 1000, "retryDelaySeconds": 0}});
    let mut sim = run_of(&node, false);
    assert_eq!(
        sim.state.tasks.len(),
        100,
        "one command settles 100 attempts"
    );
    for slice in 2..=10 {
        let now = sim.now();
        sim.fire_timers_due_by(now);
        assert_eq!(sim.state.tasks.len(), slice * 100, "each timer, 100 more");
    }
    let now = sim.now();
    sim.fire_timers_due_by(now);
    assert_eq!(sim.state.tasks.len(), 1001);
    assert_eq!(sim.state.status.as_str(), "FAILED");
}
