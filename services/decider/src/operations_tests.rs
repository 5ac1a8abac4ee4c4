//! Operator operations against the interpreter: terminate, pause/resume, skip (scheduled,
//! in progress, not reached, in a loop) and reset (middle task, loop iteration, decision
//! branch, fork branch, retry, restart), with the refusals operators get.

use serde_json::{json, Value};
use uuid::Uuid;
use weft::messages::{
    Command, Operation, Reset, ResetTarget, SkipTask, Terminate, UpdateVariables,
};

use crate::apply::Applied;
use crate::sim::Sim;

fn five() -> Value {
    json!({"name": "five", "tasks": [
        {"name": "t", "taskReferenceName": "a"},
        {"name": "t", "taskReferenceName": "b"},
        {"name": "t", "taskReferenceName": "c"},
        {"name": "t", "taskReferenceName": "d"},
        {"name": "t", "taskReferenceName": "e"}
    ]})
}

fn skip(task_ref: &str, output: Value) -> Command {
    Command::SkipTask(SkipTask {
        op: Operation::default(),
        task_ref: task_ref.into(),
        output,
        input: Value::Null,
    })
}

fn reset(target: ResetTarget) -> Reset {
    Reset {
        op: Operation::default(),
        target,
        new_run_id: Uuid::from_u128(7),
        reason: None,
        workflow_input: None,
        task_input: None,
        definition: None,
        fallback: None,
    }
}

fn to_ref(task_ref: &str) -> Reset {
    reset(ResetTarget::Ref {
        task_ref: task_ref.into(),
        iteration: None,
    })
}

fn refused_with(applied: Applied) -> (u16, String) {
    match applied {
        Applied::Rejected { status, message } => (status, message),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

fn statuses(sim: &Sim) -> Vec<(String, &'static str)> {
    sim.trail().into_iter().map(|(r, _, s)| (r, s)).collect()
}

#[test]
fn terminate_ends_the_run_and_cancels_what_was_scheduled() {
    let mut sim = Sim::start(five(), json!({}));
    sim.complete("a", json!({}));
    sim.command(&Command::Terminate(Terminate {
        op: Operation::default(),
        reason: "operator".into(),
    }));
    assert_eq!(sim.state.record().status, "TERMINATED");
    assert_eq!(sim.state.record().sub_status, "TERMINATED");
    assert_eq!(
        statuses(&sim),
        vec![("a".into(), "COMPLETED"), ("b".into(), "CANCELED")]
    );
    let (status, message) = refused_with(sim.verdict(&Command::Terminate(Terminate {
        op: Operation::default(),
        reason: "again".into(),
    })));
    assert_eq!(status, 409);
    assert!(message.contains("TERMINATED"), "{message}");
}

#[test]
fn updated_variables_are_merged_in_order_and_read_by_the_next_task() {
    let def = json!({"name": "vars", "variables": {"who": "Ada", "keep": 1}, "tasks": [
        {"name": "t", "taskReferenceName": "a"},
        {"name": "t", "taskReferenceName": "b",
         "inputParameters": {"who": "${workflow.variables.who}"}}]});
    let mut sim = Sim::start(def, json!({}));
    let update = |variables: Value| {
        Command::UpdateVariables(UpdateVariables {
            op: Operation::default(),
            variables: variables.as_object().cloned().unwrap_or_default(),
        })
    };
    sim.command(&update(json!({"who": "Grace", "new": true})));
    assert_eq!(
        Value::Object(sim.state.variables.clone()),
        json!({"who": "Grace", "keep": 1, "new": true})
    );
    sim.complete("a", json!({}));
    assert_eq!(sim.state.tasks[1].input["who"], "Grace");
    sim.complete("b", json!({}));
    let (status, message) = refused_with(sim.verdict(&update(json!({"who": "late"}))));
    assert_eq!(status, 409);
    assert!(message.contains("COMPLETED"), "{message}");
}

#[test]
fn a_paused_run_schedules_nothing_until_resumed() {
    let mut sim = Sim::start(five(), json!({}));
    sim.command(&Command::Pause(Operation::default()));
    assert_eq!(sim.state.record().status, "PAUSED");
    // The running task finishes, but nothing new is scheduled.
    sim.complete("a", json!({}));
    assert!(sim.pending().is_empty());
    let (status, _) = refused_with(sim.verdict(&Command::Pause(Operation::default())));
    assert_eq!(status, 409);
    sim.command(&Command::Resume(Operation::default()));
    assert_eq!(sim.pending(), vec!["b"]);
    let (status, message) = refused_with(sim.verdict(&Command::Resume(Operation::default())));
    assert_eq!(status, 409);
    assert!(message.contains("RUNNING"), "{message}");
}

#[test]
fn skip_of_a_scheduled_task_moves_on_and_ignores_its_late_result() {
    let mut sim = Sim::start(five(), json!({}));
    let a = sim.state.tasks[0].task_id;
    sim.command(&skip("a", json!({"skipped": true})));
    assert_eq!(sim.pending(), vec!["b"]);
    assert_eq!(sim.state.tasks[0].status.as_str(), "SKIPPED");
    assert_eq!(sim.state.tasks[0].output, Some(json!({"skipped": true})));
    let late = Command::ActivityCompleted(weft::messages::ActivityCompleted {
        task_id: a,
        run_id: sim.state.run_id,
        attempt: 1,
        output: json!({}),
        worker_id: None,
        started_at: None,
        eager: None,
    });
    assert!(matches!(sim.verdict(&late), Applied::Ignored(_)));
}

#[test]
fn skip_of_a_task_not_reached_yet_happens_when_reached() {
    let mut sim = Sim::start(five(), json!({}));
    sim.command(&skip("c", json!({"x": 1})));
    sim.complete("a", json!({})).complete("b", json!({}));
    assert_eq!(sim.pending(), vec!["d"]);
    let c = sim.state.latest("c").unwrap();
    assert_eq!(c.status.as_str(), "SKIPPED");
    assert_eq!(c.output, Some(json!({"x": 1})));
    // Done once: skipping it again is refused.
    let (status, message) = refused_with(sim.verdict(&skip("c", Value::Null)));
    assert_eq!(status, 409);
    assert!(message.contains("SKIPPED"), "{message}");
}

#[test]
fn skip_refusals_name_the_problem() {
    let mut sim = Sim::start(five(), json!({}));
    let (status, message) = refused_with(sim.verdict(&skip("zz", Value::Null)));
    assert_eq!(status, 404);
    assert!(message.contains("\"zz\" is not in workflow"), "{message}");
    sim.complete("a", json!({}));
    let (status, message) = refused_with(sim.verdict(&skip("a", Value::Null)));
    assert_eq!((status, message.contains("COMPLETED")), (409, true));
    sim.command(&skip("b", Value::Null));
    sim.complete("c", json!({}))
        .complete("d", json!({}))
        .complete("e", json!({}));
    assert_eq!(sim.state.record().status, "COMPLETED");
    let (status, _) = refused_with(sim.verdict(&skip("e", Value::Null)));
    assert_eq!(status, 409);
}

#[test]
fn reset_to_a_middle_task_keeps_the_prefix_and_runs_the_rest_again() {
    let mut sim = Sim::start(five(), json!({}));
    for r in ["a", "b", "c", "d"] {
        sim.complete(r, json!({ "from": r }));
    }
    let old_ids: Vec<Uuid> = sim.state.tasks.iter().map(|t| t.task_id).collect();
    let mut next = sim.reset(&to_ref("c"));
    assert_eq!(sim.state.record().status, "TERMINATED");
    assert_eq!(next.state.run_id, Uuid::from_u128(7));
    assert_eq!(
        next.state.reset_from,
        Some((sim.state.run_id, "c".to_owned()))
    );
    assert_eq!(next.pending(), vec!["c"]);
    // a and b keep their outputs, under the successor's own task ids.
    assert_eq!(
        next.state.latest("b").unwrap().output,
        Some(json!({"from": "b"}))
    );
    assert!(next
        .state
        .tasks
        .iter()
        .all(|t| !old_ids.contains(&t.task_id)));
    next.complete("c", json!({}))
        .complete("d", json!({}))
        .complete("e", json!({}));
    assert_eq!(next.state.record().status, "COMPLETED");
}

#[test]
fn reset_is_deterministic() {
    let mut sim = Sim::start(five(), json!({}));
    sim.complete("a", json!({})).complete("b", json!({}));
    let a = sim.reset(&to_ref("b"));
    let mut again = Sim::start(five(), json!({}));
    again.complete("a", json!({})).complete("b", json!({}));
    let b = again.reset(&to_ref("b"));
    let ids = |s: &Sim| s.state.tasks.iter().map(|t| t.task_id).collect::<Vec<_>>();
    assert_eq!(ids(&a), ids(&b));
}

#[test]
fn reset_into_a_fork_reruns_the_work_running_at_the_cut() {
    let def = json!({"name": "f", "tasks": [
        {"name": "fork", "taskReferenceName": "fork", "type": "FORK_JOIN",
         "forkTasks": [[{"name": "t", "taskReferenceName": "x1"}, {"name": "t", "taskReferenceName": "x2"}],
                       [{"name": "t", "taskReferenceName": "y1"}]]},
        {"name": "join", "taskReferenceName": "join", "type": "JOIN", "joinOn": ["x2", "y1"]},
        {"name": "t", "taskReferenceName": "after"}
    ]});
    let mut sim = Sim::start(def, json!({}));
    sim.complete("x1", json!({}));
    // y1 was scheduled before x2 and still runs when x2 is scheduled: the cut at x2
    // leaves y1 running, so the successor runs it again.
    sim.complete("x2", json!({}))
        .complete("y1", json!({"y": 1}));
    let mut next = sim.reset(&to_ref("x2"));
    let mut pending = next.pending();
    pending.sort();
    assert_eq!(pending, vec!["x2", "y1"]);
    assert_eq!(
        next.state.latest("x1").unwrap().status.as_str(),
        "COMPLETED"
    );
    next.complete("x2", json!({})).complete("y1", json!({}));
    assert_eq!(next.pending(), vec!["after"]);
}

#[test]
fn reset_into_a_loop_iteration_keeps_earlier_iterations() {
    let def = json!({"name": "l", "tasks": [
        {"name": "loop", "taskReferenceName": "loop", "type": "DO_WHILE",
         "loopCondition": "$.loop['iteration'] < 3",
         "loopOver": [{"name": "t", "taskReferenceName": "body"}]},
        {"name": "t", "taskReferenceName": "after"}
    ]});
    let mut sim = Sim::start(def, json!({}));
    for i in 1..=3 {
        sim.complete("body", json!({ "i": i }));
    }
    assert_eq!(sim.pending(), vec!["after"]);
    let mut next = sim.reset(&reset(ResetTarget::Ref {
        task_ref: "body".into(),
        iteration: Some(2),
    }));
    assert_eq!(next.pending(), vec!["body"]);
    let body_iterations: Vec<(i32, &'static str)> = next
        .state
        .tasks
        .iter()
        .filter(|t| t.task_ref == "body")
        .map(|t| (t.iteration, t.status.as_str()))
        .collect();
    assert_eq!(body_iterations, vec![(1, "COMPLETED"), (2, "SCHEDULED")]);
    next.complete("body", json!({})).complete("body", json!({}));
    assert_eq!(next.pending(), vec!["after"]);
}

#[test]
fn reset_into_a_decision_branch_keeps_the_case_taken() {
    let def = json!({"name": "d", "tasks": [
        {"name": "sw", "taskReferenceName": "sw", "type": "SWITCH", "evaluatorType": "value-param",
         "expression": "k", "inputParameters": {"k": "${workflow.input.k}"},
         "decisionCases": {"left": [{"name": "t", "taskReferenceName": "l1"}, {"name": "t", "taskReferenceName": "l2"}]},
         "defaultCase": [{"name": "t", "taskReferenceName": "r1"}]}
    ]});
    let mut sim = Sim::start(def, json!({"k": "left"}));
    sim.complete("l1", json!({})).complete("l2", json!({}));
    let next = sim.reset(&to_ref("l2"));
    assert_eq!(next.pending(), vec!["l2"]);
}

#[test]
fn retry_goes_back_to_the_failed_task_and_restart_to_the_first() {
    let mut sim = Sim::start(five(), json!({}));
    sim.complete("a", json!({})).complete("b", json!({}));
    sim.fail("c", "boom");
    assert_eq!(sim.state.record().status, "FAILED");
    let next = sim.reset(&reset(ResetTarget::LastFailed {
        resume_subworkflow_tasks: false,
    }));
    assert_eq!(next.pending(), vec!["c"]);
    // In place, as Conductor's: the failed attempt stays, the next one is added.
    assert_eq!(next.state.latest("c").unwrap().attempt, 2);
    let statuses: Vec<_> = next.state.tasks.iter().map(|t| t.status.as_str()).collect();
    assert_eq!(
        statuses,
        vec!["COMPLETED", "COMPLETED", "FAILED", "SCHEDULED"]
    );

    let mut sim = Sim::start(five(), json!({}));
    sim.complete("a", json!({}));
    sim.command(&Command::Terminate(Terminate {
        op: Operation::default(),
        reason: "stop".into(),
    }));
    let restarted = sim.reset(&reset(ResetTarget::First));
    assert_eq!(restarted.pending(), vec!["a"]);
    assert_eq!(restarted.state.tasks.len(), 1);
}

#[test]
fn reset_refusals() {
    let mut sim = Sim::start(five(), json!({}));
    sim.complete("a", json!({}));
    let verdict = |sim: &Sim, r: Reset| refused_with(sim.verdict(&Command::Reset(r)));
    assert_eq!(verdict(&sim, to_ref("nope")).0, 400);
    let (status, message) = verdict(&sim, to_ref("d"));
    assert_eq!(status, 400);
    assert!(message.contains("never reached"), "{message}");
    let (status, message) = verdict(&sim, reset(ResetTarget::First));
    assert_eq!(status, 409);
    assert!(message.contains("RUNNING"), "{message}");
    assert_eq!(
        verdict(
            &sim,
            reset(ResetTarget::LastFailed {
                resume_subworkflow_tasks: false,
            })
        )
        .0,
        409
    );
    let mut stale = to_ref("a");
    stale.op.expected_run_id = Some(Uuid::from_u128(99));
    let (status, message) = verdict(&sim, stale);
    assert_eq!(status, 409);
    assert!(message.contains("no longer the current run"), "{message}");
}

#[test]
fn retry_applies_to_timed_out_and_terminated_runs_and_a_failed_optional_task() {
    // TIMED_OUT: back to the task that ran out of time.
    let def = json!({"name": "slow", "tasks": [
        {"name": "t", "taskReferenceName": "a"},
        {"name": "t", "taskReferenceName": "b", "taskDefinition": {"timeoutSeconds": 5}},
        {"name": "t", "taskReferenceName": "c"}]});
    let mut sim = Sim::start(def, json!({}));
    sim.complete("a", json!({})).take("b");
    let due = sim.state.timers[0].fire_at;
    sim.fire_timers_due_by(due);
    assert_eq!(sim.state.record().status, "TIMED_OUT");
    let next = sim.reset(&reset(ResetTarget::LastFailed {
        resume_subworkflow_tasks: false,
    }));
    assert_eq!(next.pending(), vec!["b"]);
    assert_eq!(next.state.latest("a").unwrap().status.as_str(), "COMPLETED");

    // TERMINATED: back to the task the terminate canceled.
    let mut sim = Sim::start(five(), json!({}));
    sim.complete("a", json!({})).complete("b", json!({}));
    sim.command(&Command::Terminate(Terminate {
        op: Operation::default(),
        reason: "stop".into(),
    }));
    let next = sim.reset(&reset(ResetTarget::LastFailed {
        resume_subworkflow_tasks: false,
    }));
    assert_eq!(next.pending(), vec!["c"]);

    // RUNNING with an optional task that failed for good: back to it.
    let def = json!({"name": "opt", "tasks": [
        {"name": "t", "taskReferenceName": "a"},
        {"name": "t", "taskReferenceName": "b", "optional": true},
        {"name": "t", "taskReferenceName": "c"}]});
    let mut sim = Sim::start(def, json!({}));
    sim.complete("a", json!({})).fail("b", "flaky");
    assert_eq!(sim.state.record().status, "RUNNING");
    assert_eq!(
        sim.state.latest("b").unwrap().status.as_str(),
        "COMPLETED_WITH_ERRORS"
    );
    assert_eq!(sim.pending(), vec!["c"]);
    let next = sim.reset(&reset(ResetTarget::LastFailed {
        resume_subworkflow_tasks: false,
    }));
    assert_eq!(next.pending(), vec!["b"]);
    assert_eq!(next.state.record().status, "RUNNING");
}

#[test]
fn restart_of_a_failed_run_begins_again_with_the_new_input() {
    let mut sim = Sim::start(five(), json!({"n": 1}));
    sim.complete("a", json!({})).fail("b", "boom");
    assert_eq!(sim.state.record().status, "FAILED");
    let mut restart = reset(ResetTarget::First);
    restart.workflow_input = Some(json!({"n": 2}));
    let next = sim.reset(&restart);
    assert_eq!(next.pending(), vec!["a"]);
    assert_eq!(next.state.input, json!({"n": 2}));
    assert_eq!(next.state.tasks.len(), 1, "nothing of the old run is kept");
}

#[test]
fn reset_to_a_sub_workflow_task_starts_a_new_child() {
    let def = json!({"name": "parent", "tasks": [
        {"name": "t", "taskReferenceName": "a"},
        {"name": "child", "taskReferenceName": "child", "type": "SUB_WORKFLOW",
         "subWorkflowParam": {"name": "kid", "workflowDefinition":
            {"name": "kid", "version": 1, "tasks": [{"name": "t", "taskReferenceName": "k1"}]}}},
        {"name": "t", "taskReferenceName": "after"}]});
    let mut sim = Sim::start(def, json!({}));
    sim.complete("a", json!({}));
    let child = |s: &Sim| {
        s.state.latest("child").unwrap().output.clone().unwrap()["subWorkflowId"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let first_child = child(&sim);
    let running = sim.state.latest("child").unwrap().status.as_str();
    let next = sim.reset(&to_ref("child"));
    let second_child = child(&next);
    assert_ne!(first_child, second_child, "a new child run");
    assert_eq!(next.state.latest("child").unwrap().status.as_str(), running);
    assert_eq!(next.state.latest("a").unwrap().status.as_str(), "COMPLETED");
}

/// A parent whose SUB_WORKFLOW task `child` started a child run; returns the run and the
/// child's workflow id.
fn parent_with_a_child() -> (Sim, String) {
    let def = json!({"name": "parent", "tasks": [
        {"name": "child", "taskReferenceName": "child", "type": "SUB_WORKFLOW",
         "subWorkflowParam": {"name": "kid", "workflowDefinition":
            {"name": "kid", "version": 1, "tasks": [{"name": "t", "taskReferenceName": "k1"}]}}},
        {"name": "t", "taskReferenceName": "after"}]});
    let sim = Sim::start(def, json!({}));
    let child = sim.state.latest("child").unwrap();
    let id = child.child_workflow_id().unwrap().to_owned();
    (sim, id)
}

/// The child's end, as the child reports it to the parent link it started with.
fn child_ended(parent: &Sim, child_workflow_id: &str, status: &str) -> Command {
    let task = parent.state.latest("child").unwrap();
    Command::ChildWorkflowEnded(weft::messages::ChildWorkflowEnded {
        parent: weft::messages::ParentLink {
            workflow_id: parent.state.workflow_id.clone(),
            run_id: parent.state.run_id,
            task_id: task.task_id,
        },
        child_workflow_id: child_workflow_id.to_owned(),
        status: status.into(),
        output: json!({"k": 1}),
        reason: None,
    })
}

#[test]
fn a_child_retried_in_place_resumes_its_failed_parent_which_takes_its_end() {
    let (mut sim, child) = parent_with_a_child();
    let started_with = sim.clone();
    sim.command(&child_ended(&sim, &child, "FAILED"));
    assert_eq!(sim.state.record().status, "FAILED");
    // The child's retry tells the parent: its task waits for the same child again.
    let mut resume = reset(ResetTarget::ResumeChild {
        child_workflow_id: child.clone(),
    });
    resume.reason = Some("child retried".into());
    let mut resumed = sim.reset(&resume);
    assert_eq!(resumed.state.record().status, "RUNNING");
    let statuses: Vec<_> = resumed
        .state
        .tasks
        .iter()
        .map(|t| t.status.as_str())
        .collect();
    assert_eq!(
        statuses,
        vec!["IN_PROGRESS"],
        "the same task, no new attempt"
    );
    assert_eq!(
        resumed.state.latest("child").unwrap().child_workflow_id(),
        Some(child.as_str())
    );
    // The child reports to the run and task it started with; the resumed run takes it.
    resumed.command(&child_ended(&started_with, &child, "COMPLETED"));
    assert_eq!(resumed.pending(), vec!["after"]);
    // A child the run does not wait for changes nothing.
    let verdict = resumed.verdict(&Command::Reset(reset(ResetTarget::ResumeChild {
        child_workflow_id: "another".into(),
    })));
    assert!(matches!(verdict, Applied::Ignored(_)), "{verdict:?}");
}

#[test]
fn a_retry_resuming_sub_workflow_tasks_is_passed_down_to_the_failed_child() {
    let (mut sim, child) = parent_with_a_child();
    sim.command(&child_ended(&sim, &child, "FAILED"));
    let verdict = sim.verdict(&Command::Reset(reset(ResetTarget::LastFailed {
        resume_subworkflow_tasks: true,
    })));
    let Applied::PassDown {
        child_workflow_id,
        reset: passed,
    } = verdict
    else {
        panic!("{verdict:?}");
    };
    assert_eq!(child_workflow_id, child);
    assert_eq!(
        passed.target,
        ResetTarget::LastFailed {
            resume_subworkflow_tasks: true
        }
    );
    // Without the flag, the task gets a new attempt: a new child.
    let retried = sim.reset(&reset(ResetTarget::LastFailed {
        resume_subworkflow_tasks: false,
    }));
    let newest = retried.state.latest("child").unwrap();
    assert_eq!(newest.attempt, 2);
    assert_ne!(newest.child_workflow_id(), Some(child.as_str()));
}

/// A retry passed down to a child that has nothing to retry (it ended FAILED through a
/// TERMINATE task: no failed task of its own) falls back to the parent, which is retried
/// in place, as Conductor's; the operator's request id goes along, so the verdict the
/// operator waits for is the run's that took the retry (it used to be a 204 with no
/// effect).
#[test]
fn a_retry_passed_down_to_a_child_with_nothing_to_retry_retries_the_parent_instead() {
    let (mut sim, child) = parent_with_a_child();
    sim.command(&child_ended(&sim, &child, "FAILED"));
    let mut retry = reset(ResetTarget::LastFailed {
        resume_subworkflow_tasks: true,
    });
    retry.op.request_id = Some(Uuid::from_u128(77));
    let Applied::PassDown { reset: passed, .. } = sim.verdict(&Command::Reset(retry.clone()))
    else {
        panic!("passed down");
    };
    assert_eq!(passed.op.request_id, Some(Uuid::from_u128(77)));
    assert_eq!(
        passed.op.expected_run_id, None,
        "the child's run is not the parent's"
    );
    let fallback = passed.fallback.clone().expect("the parent to fall back on");
    assert_eq!(fallback.workflow_id, sim.state.workflow_id);
    assert_eq!(fallback.run_id, sim.state.run_id);
    assert_eq!(fallback.new_run_id, retry.new_run_id);

    let terminated_failed = json!({"name": "kid", "tasks": [
        {"name": "end", "taskReferenceName": "end", "type": "TERMINATE",
         "inputParameters": {"terminationStatus": "FAILED"}}]});
    let kid = Sim::start(terminated_failed, json!({}));
    assert_eq!(kid.state.record().status, "FAILED");
    let Applied::FallBack {
        workflow_id,
        reset: back,
        why,
    } = kid.verdict(&Command::Reset(passed.clone()))
    else {
        panic!("falls back to the parent");
    };
    assert!(why.contains("no retryable tasks"), "{why}");
    assert_eq!(workflow_id, sim.state.workflow_id);
    assert_eq!(
        back.target,
        ResetTarget::LastFailed {
            resume_subworkflow_tasks: false
        }
    );
    assert_eq!(back.op.request_id, Some(Uuid::from_u128(77)));
    assert_eq!(back.op.expected_run_id, Some(sim.state.run_id));
    assert_eq!(back.new_run_id, retry.new_run_id);
    assert_eq!(back.fallback, None);

    // The parent takes it: its SUB_WORKFLOW task gets one more attempt, a new child.
    let retried = sim.reset(&back);
    let newest = retried.state.latest("child").unwrap();
    assert_eq!(newest.attempt, 2);
    assert_ne!(newest.child_workflow_id(), Some(child.as_str()));
    // A parent retried meanwhile by someone else refuses the fallback.
    assert_eq!(refused_with(retried.verdict(&Command::Reset(back))).0, 409);

    // A child running again (retried directly, its parent not resumed yet) refuses it:
    // falling back would start a second child beside it.
    let running = Sim::start(
        json!({"name": "kid", "tasks": [{"name": "t", "taskReferenceName": "k1"}]}),
        json!({}),
    );
    assert_eq!(
        refused_with(running.verdict(&Command::Reset(passed.clone()))).0,
        409
    );

    // A child with a failed task takes the retry itself: no fallback.
    let mut failing = Sim::start(
        json!({"name": "kid", "tasks": [{"name": "t", "taskReferenceName": "k1"}]}),
        json!({}),
    );
    failing.fail("k1", "boom");
    assert!(matches!(
        failing.verdict(&Command::Reset(passed)),
        Applied::Reset(_)
    ));
}

#[test]
fn a_restart_on_the_latest_definition_runs_it_and_a_non_restartable_completed_run_stays() {
    let mut sim = Sim::start(five(), json!({}));
    sim.fail("a", "boom");
    let latest: weft::dsl::WorkflowDef = serde_json::from_value(json!({
        "name": "five", "version": 2, "restartable": false, "tasks": [
        {"name": "t", "taskReferenceName": "a"},
        {"name": "t", "taskReferenceName": "added"}]}))
    .unwrap();
    let mut restart = reset(ResetTarget::First);
    restart.definition = Some(Box::new(latest));
    let mut next = sim.reset(&restart);
    assert_eq!(next.state.definition.version, 2);
    next.complete("a", json!({}));
    assert_eq!(next.pending(), vec!["added"]);
    next.complete("added", json!({}));
    assert_eq!(next.state.record().status, "COMPLETED");
    // Version 2 says restartable: false; a COMPLETED run of it is not restarted.
    let mut again = reset(ResetTarget::First);
    again.new_run_id = Uuid::from_u128(8);
    let (status, message) = refused_with(next.verdict(&Command::Reset(again)));
    assert_eq!(status, 409);
    assert!(message.contains("non-restartable"), "{message}");
    // A definition goes with a restart only.
    let mut odd = to_ref("a");
    odd.new_run_id = Uuid::from_u128(9);
    odd.definition = Some(Box::new(next.state.definition.clone()));
    assert_eq!(refused_with(next.verdict(&Command::Reset(odd))).0, 400);
}

#[test]
fn a_terminated_run_waiting_on_a_human_task_is_retried_and_waits_again() {
    let def = json!({"name": "h", "tasks": [
        {"name": "t", "taskReferenceName": "a"},
        {"name": "approve", "taskReferenceName": "approve", "type": "HUMAN"}]});
    let mut sim = Sim::start(def, json!({}));
    sim.complete("a", json!({}));
    sim.command(&Command::Terminate(Terminate {
        op: Operation::default(),
        reason: "stop".into(),
    }));
    assert_eq!(sim.state.record().status, "TERMINATED");
    let next = sim.reset(&reset(ResetTarget::LastFailed {
        resume_subworkflow_tasks: false,
    }));
    assert_eq!(next.state.record().status, "RUNNING");
    assert!(next.state.latest("approve").unwrap().status.is_pending());
    // The same reset again, once its run exists, changes nothing.
    let mut again = reset(ResetTarget::LastFailed {
        resume_subworkflow_tasks: false,
    });
    again.new_run_id = next.state.run_id;
    assert!(matches!(
        next.verdict(&Command::Reset(again)),
        Applied::Ignored(_)
    ));
}

/// A task waiting for one thing can be skipped whatever that thing is: a person (HUMAN),
/// a broker's confirmation (EVENT), a worker (DYNAMIC), as a WAIT or a worker's task.
#[test]
fn skip_of_a_pending_human_event_or_dynamic_task_moves_on() {
    let nodes = [
        json!({"name": "x", "taskReferenceName": "x", "type": "HUMAN"}),
        json!({"name": "x", "taskReferenceName": "x", "type": "EVENT", "sink": "conductor"}),
        json!({"name": "x", "taskReferenceName": "x", "type": "DYNAMIC",
               "dynamicTaskNameParam": "t", "inputParameters": {"t": "named"}}),
    ];
    for node in nodes {
        let def = json!({"name": "w", "tasks": [node.clone(),
            {"name": "next", "taskReferenceName": "next"}]});
        let mut sim = Sim::start(def, json!({}));
        assert!(sim.state.latest("x").unwrap().status.is_pending(), "{node}");
        sim.command(&skip("x", json!({"by": "operator"})));
        let x = sim.state.latest("x").unwrap();
        assert_eq!(x.status.as_str(), "SKIPPED", "{node}");
        assert_eq!(sim.pending(), vec!["next"], "{node}");
    }
}
