//! Hooks in the decider: which rollback hooks a reset fires and in what order, the new
//! run waiting for them, the reset failing when an awaited one fails, and lifecycle
//! hooks built from the committed change.

use serde_json::{json, Value};
use uuid::Uuid;
use weft::messages::{Command, Operation, Reset, ResetTarget, RollbackHookRef, RollbackHooksDone};

use crate::apply::Applied;
use crate::sim::Sim;

/// Five steps; `b` and `d` declare `onRollback` (`d` awaited), `c` declares `onComplete`.
fn five_with_hooks() -> Value {
    let step = |r: &str| json!({"name": "t", "taskReferenceName": r});
    let mut b = step("b");
    b["hooks"] = json!({"onRollback": {"url": "http://r/b", "body": {"undo": "${task.output.from}", "why": "${reason}"}}});
    let mut c = step("c");
    c["hooks"] = json!({"onComplete": {"url": "http://r/c"}});
    let mut d = step("d");
    d["hooks"] = json!({"onRollback": {"url": "http://r/d", "await": true}});
    json!({"name": "five", "hooks": {"secret": "k"},
           "tasks": [step("a"), b, c, d, step("e")]})
}

fn reset_to(task_ref: &str) -> Reset {
    Reset {
        op: Operation::default(),
        target: ResetTarget::Ref {
            task_ref: task_ref.into(),
            iteration: None,
        },
        new_run_id: Uuid::from_u128(7),
        reason: Some("undo it".into()),
        workflow_input: None,
        task_input: None,
        definition: None,
        fallback: None,
    }
}

/// What the engine does on a reset: the rollback deliveries, and the successor run
/// (settled) whose marker lists them.
fn reset_with_hooks(sim: &Sim, reset: &Reset) -> (Vec<weft::hooks::NewDelivery>, Sim) {
    let Applied::Reset(plan) =
        crate::apply::apply_command(&sim.state, &Command::Reset(reset.clone()))
    else {
        panic!("reset refused");
    };
    let now = sim.now();
    let deliveries = crate::hooks::rollback(&sim.state, &sim.events, &plan, reset, now);
    let refs = deliveries
        .iter()
        .map(|d| RollbackHookRef {
            delivery_id: d.id,
            task_ref: d.task_ref.clone().unwrap(),
            iteration: d.iteration,
            blocking: d.blocking,
        })
        .collect();
    let (state, events) = crate::reset::successor_history(
        &sim.events,
        &plan,
        reset,
        &sim.state.workflow_id,
        now,
        refs,
    )
    .unwrap();
    let mut next = Sim { state, events };
    next.settle();
    (deliveries, next)
}

fn done(next: &Sim, ok: bool) -> Command {
    Command::RollbackHooksDone(RollbackHooksDone {
        run_id: next.state.run_id,
        ok,
        reason: (!ok).then(|| "rollback hook onRollback of task \"d\" failed".to_owned()),
    })
}

#[test]
fn rollback_hooks_fire_most_recent_first_and_the_new_run_waits_for_them() {
    let mut sim = Sim::start(five_with_hooks(), json!({}));
    for r in ["a", "b", "c", "d", "e"] {
        sim.complete(r, json!({ "from": r }));
    }
    let (deliveries, mut next) = reset_with_hooks(&sim, &reset_to("b"));
    let order: Vec<(Option<&str>, Option<i32>, bool)> = deliveries
        .iter()
        .map(|d| (d.task_ref.as_deref(), d.group_seq, d.blocking))
        .collect();
    assert_eq!(
        order,
        vec![(Some("d"), Some(0), true), (Some("b"), Some(1), false)]
    );
    // b's body is its template over the event document; d's is the document itself.
    let b: Value = serde_json::from_str(&deliveries[1].body).unwrap();
    assert_eq!(b, json!({"undo": "b", "why": "undo it"}));
    let d: Value = serde_json::from_str(&deliveries[0].body).unwrap();
    assert_eq!(
        (&d["hook"], &d["event"], &d["resetTo"], &d["task"]["output"]),
        (
            &json!("onRollback"),
            &json!("workflow.reset"),
            &json!("b"),
            &json!({"from": "d"})
        )
    );
    assert_eq!(d["previousRunId"], sim.state.run_id.to_string());
    assert_eq!(d["runId"], next.state.run_id.to_string());
    assert!(weft::hooks::sign::verify(
        "k",
        deliveries[0].body.as_bytes(),
        deliveries[0].signature.as_deref().unwrap()
    ));
    // Nothing is scheduled until the dispatcher reports the hooks settled.
    assert!(next.state.rolling_back);
    assert_eq!(next.state.record().sub_status, "ROLLING_BACK");
    assert!(next.pending().is_empty());
    next.command(&done(&next, true));
    assert!(!next.state.rolling_back);
    assert_eq!(next.pending(), vec!["b"]);
    // A duplicate report changes nothing.
    assert!(matches!(
        next.verdict(&done(&next, true)),
        Applied::Ignored(_)
    ));
}

#[test]
fn an_awaited_rollback_hook_that_fails_fails_the_reset() {
    let mut sim = Sim::start(five_with_hooks(), json!({}));
    for r in ["a", "b", "c", "d"] {
        sim.complete(r, json!({}));
    }
    let (_, mut next) = reset_with_hooks(&sim, &reset_to("a"));
    next.command(&done(&next, false));
    let record = next.state.record();
    assert_eq!(record.status, "FAILED");
    let reason = record.reason.unwrap();
    assert!(
        reason.starts_with("reset failed: rollback hook onRollback of task \"d\""),
        "{reason}"
    );
    assert!(next.pending().is_empty());
}

#[test]
fn tasks_kept_by_the_new_run_or_never_run_are_not_rolled_back() {
    let mut sim = Sim::start(five_with_hooks(), json!({}));
    for r in ["a", "b", "c"] {
        sim.complete(r, json!({}));
    }
    // d was scheduled but no worker took it: nothing to undo. b is kept (before the cut).
    let (deliveries, next) = reset_with_hooks(&sim, &reset_to("c"));
    assert!(deliveries.is_empty());
    assert!(!next.state.rolling_back);
    assert_eq!(next.pending(), vec!["c"]);
    // d in progress at the reset: its worker may have done something, so it is undone.
    let mut sim = Sim::start(five_with_hooks(), json!({}));
    for r in ["a", "b", "c"] {
        sim.complete(r, json!({}));
    }
    sim.take("d");
    let (deliveries, _) = reset_with_hooks(&sim, &reset_to("d"));
    let refs: Vec<_> = deliveries
        .iter()
        .map(|d| d.task_ref.clone().unwrap())
        .collect();
    assert_eq!(refs, vec!["d"]);
}

#[test]
fn a_retry_in_place_rolls_back_only_the_work_running_when_the_run_ended() {
    let retry = Reset {
        target: ResetTarget::LastFailed {
            resume_subworkflow_tasks: false,
        },
        ..reset_to("b")
    };
    // b failed: it is kept (with its failed attempt) and tried once more, not undone.
    let mut sim = Sim::start(five_with_hooks(), json!({}));
    sim.complete("a", json!({}));
    sim.fail("b", "boom");
    let (deliveries, next) = reset_with_hooks(&sim, &retry);
    assert!(deliveries.is_empty(), "{deliveries:?}");
    assert_eq!(next.pending(), vec!["b"]);
    // d was with a worker when the run was terminated: it runs again, so it is undone.
    let mut sim = Sim::start(five_with_hooks(), json!({}));
    for r in ["a", "b", "c"] {
        sim.complete(r, json!({}));
    }
    sim.take("d");
    sim.command(&Command::Terminate(weft::messages::Terminate {
        op: Operation::default(),
        reason: "stop".into(),
    }));
    let (deliveries, next) = reset_with_hooks(&sim, &retry);
    let refs: Vec<_> = deliveries
        .iter()
        .map(|d| d.task_ref.clone().unwrap())
        .collect();
    assert_eq!(refs, vec!["d"]);
    assert!(next.state.rolling_back);
}

#[test]
fn a_retried_task_is_rolled_back_once_with_its_newest_attempt() {
    let def = json!({"name": "r", "tasks": [
        {"name": "flaky", "taskReferenceName": "x",
         "taskDefinition": {"retryCount": 1, "retryDelaySeconds": 0},
         "hooks": {"onRollback": {"url": "http://r/x"}}},
        {"name": "t", "taskReferenceName": "y"}]});
    let mut sim = Sim::start(def, json!({}));
    sim.fail("x", "boom");
    sim.fire_timers_due_by(sim.now());
    sim.complete("x", json!({"second": true}));
    assert_eq!(sim.pending(), vec!["y"]);
    let (deliveries, _) = reset_with_hooks(&sim, &reset_to("x"));
    assert_eq!(deliveries.len(), 1, "{deliveries:?}");
    let body: Value = serde_json::from_str(&deliveries[0].body).unwrap();
    assert_eq!(body["task"]["attempt"], 2);
    assert_eq!(body["task"]["output"], json!({"second": true}));
}

#[test]
fn lifecycle_hooks_fire_from_the_committed_change() {
    let mut sim = Sim::start(five_with_hooks(), json!({"n": 1}));
    sim.complete("a", json!({})).complete("b", json!({}));
    sim.complete("c", json!({"done": true}));
    let c = sim.state.latest("c").unwrap().clone();
    let event = sim
        .events
        .iter()
        .rev()
        .find_map(|e| {
            crate::lifecycle::of(&sim.state, e)
                .filter(|l| l.event == "task.completed" && l.task_id == Some(c.task_id))
        })
        .unwrap();
    let d = crate::hooks::lifecycle(&sim.state, &event).expect("c declares onComplete");
    assert_eq!(
        (d.hook.as_str(), d.event.as_str()),
        ("onComplete", "task.completed")
    );
    let body: Value = serde_json::from_str(&d.body).unwrap();
    assert_eq!(body["task"]["output"], json!({"done": true}));
    assert_eq!(body["workflow"]["input"], json!({"n": 1}));
    assert!(d.signature.is_some());
    // The same change twice is the same delivery; a task without the hook fires nothing.
    assert_eq!(
        crate::hooks::lifecycle(&sim.state, &event).unwrap().id,
        d.id
    );
    let a = sim.state.latest("a").unwrap().task_id;
    let mut other = event.clone();
    other.task_id = Some(a);
    other.task_ref = Some("a".into());
    assert!(crate::hooks::lifecycle(&sim.state, &other).is_none());
}
