//! A worker giving its task back (`ActivityPostponed`, Conductor's IN_PROGRESS with
//! `callbackAfterSeconds`) and an operator's `resetcallbacks`, on the run's state.

use serde_json::json;
use weft::messages::{ActivityPostponed, Command, Event, Operation};

use crate::apply::{apply_command, Applied};
use crate::sim::Sim;

fn one_task(def_extra: serde_json::Value) -> Sim {
    let mut task = json!({"name": "a", "taskReferenceName": "a", "type": "SIMPLE"});
    task.as_object_mut()
        .unwrap()
        .extend(def_extra.as_object().unwrap().clone());
    Sim::start(json!({"name": "w", "tasks": [task]}), json!({}))
}

fn postponed(sim: &Sim, seconds: i64) -> Command {
    let t = sim.state.latest("a").unwrap();
    Command::ActivityPostponed(ActivityPostponed {
        task_id: t.task_id,
        run_id: sim.state.run_id,
        attempt: t.attempt,
        output: json!({"progress": 40}),
        worker_id: Some("w1".into()),
        callback_after_seconds: seconds,
    })
}

#[test]
fn a_task_given_back_is_scheduled_again_with_its_output_and_callback() {
    let mut sim = one_task(json!({}));
    sim.take("a");
    let started = sim.state.latest("a").unwrap().start_time;
    sim.command(&postponed(&sim, 30));
    let t = sim.state.latest("a").unwrap().clone();
    assert_eq!(t.status.as_str(), "SCHEDULED");
    assert_eq!(t.attempt, 1, "the same attempt, no retry");
    assert_eq!(t.output, Some(json!({"progress": 40})));
    assert_eq!(t.worker_id.as_deref(), Some("w1"));
    assert_eq!(t.callback_after_seconds, 30);
    assert!(t.dispatch_timer.is_some(), "held back by a timer");
    assert_eq!(sim.state.task_record(&t).callback_after_seconds, 30);

    // Taken again: IN_PROGRESS, `timeoutSeconds` still from the first start.
    sim.take("a");
    let again = sim.state.latest("a").unwrap();
    assert_eq!(again.status.as_str(), "IN_PROGRESS");
    assert_eq!(again.start_time, started);
    sim.complete("a", json!({"done": true}));
    assert_eq!(sim.state.status.as_str(), "COMPLETED");
}

#[test]
fn a_task_given_back_without_delay_goes_to_its_queue_at_once() {
    let mut sim = one_task(json!({}));
    sim.take("a");
    sim.command(&postponed(&sim, 0));
    let t = sim.state.latest("a").unwrap();
    assert_eq!(
        (t.status.as_str(), t.callback_after_seconds),
        ("SCHEDULED", 0)
    );
    assert_eq!(t.dispatch_timer, None);
}

#[test]
fn each_wait_has_its_own_dispatch_timer() {
    let mut sim = one_task(json!({}));
    sim.take("a");
    sim.command(&postponed(&sim, 5));
    let first = sim.state.latest("a").unwrap().dispatch_timer;
    sim.take("a");
    sim.command(&postponed(&sim, 5));
    let second = sim.state.latest("a").unwrap().dispatch_timer;
    assert!(first.is_some() && second.is_some());
    assert_ne!(
        first, second,
        "a fired timer not yet deleted is never reused"
    );
}

#[test]
fn a_result_for_an_ended_attempt_is_not_postponed() {
    let mut sim = one_task(json!({}));
    let late = postponed(&sim, 5);
    sim.complete("a", json!({}));
    assert!(matches!(
        apply_command(&sim.state, &late),
        Applied::Ignored(_)
    ));
}

#[test]
fn reset_callbacks_makes_every_waiting_worker_task_due() {
    let mut sim = one_task(json!({"taskDefinition": {"retryCount": 2, "retryDelaySeconds": 60}}));
    sim.fail("a", "flaky");
    assert_eq!(sim.state.latest("a").unwrap().callback_after_seconds, 60);
    let reset = Command::ResetCallbacks(Operation::default());
    let Applied::Events(events) = apply_command(&sim.state, &reset) else {
        panic!("refused");
    };
    assert!(
        matches!(events.as_slice(), [Event::TaskCallbackReset(r)] if r.task_ref == "a"),
        "{events:?}"
    );
    sim.command(&reset);
    let t = sim.state.latest("a").unwrap();
    assert_eq!(t.callback_after_seconds, 0);
    assert!(
        t.dispatch_timer.is_some(),
        "the same timer, set to fire now"
    );

    // Nothing waits any more: nothing to reset, still answered.
    assert_eq!(
        apply_command(&sim.state, &reset),
        Applied::Events(Vec::new())
    );
}

#[test]
fn reset_callbacks_of_an_ended_run_is_refused() {
    let mut sim = one_task(json!({}));
    sim.complete("a", json!({}));
    let reset = Command::ResetCallbacks(Operation::default());
    assert!(matches!(
        apply_command(&sim.state, &reset),
        Applied::Rejected { status: 409, .. }
    ));
}
