//! Control-flow constructs over simulated runs.

use serde_json::json;

use crate::sim::Sim;
use crate::state::{RunStatus, TaskStatus};

fn simple(r: &str) -> serde_json::Value {
    json!({"name": r, "taskReferenceName": r, "type": "SIMPLE"})
}

/// The status the newest task of `task_ref` shows in its `tasks` row (a task the decider
/// works on is IN_PROGRESS there).
fn row_status(sim: &Sim, task_ref: &str) -> String {
    sim.state
        .task_record(sim.state.latest(task_ref).unwrap())
        .status
}

#[test]
fn switch_value_param_runs_the_selected_case_then_continues() {
    let def = json!({"name": "w", "tasks": [
        {"name": "sw", "taskReferenceName": "sw", "type": "SWITCH",
         "evaluatorType": "value-param", "expression": "kind",
         "inputParameters": {"kind": "${workflow.input.kind}"},
         "decisionCases": {"a": [simple("a1")], "b": [simple("b1")]},
         "defaultCase": [simple("d1")]},
        simple("after")]});
    let mut sim = Sim::start(def, json!({"kind": "b"}));
    assert_eq!(sim.pending(), vec!["b1"]);
    let sw = sim.state.latest("sw").unwrap();
    assert_eq!(
        sw.output,
        Some(json!({"evaluationResult": ["b"], "selectedCase": "b"}))
    );
    sim.complete("b1", json!({}));
    assert_eq!(sim.pending(), vec!["after"]);
    sim.complete("after", json!({"x": 1}));
    assert_eq!(sim.state.status, RunStatus::Completed);
    assert!(
        sim.state.latest("a1").is_none(),
        "the branch not taken never runs"
    );
}

#[test]
fn switch_without_matching_case_takes_the_default_or_continues() {
    let with_default = json!({"name": "w", "tasks": [
        {"name": "sw", "taskReferenceName": "sw", "type": "SWITCH",
         "evaluatorType": "value-param", "expression": "kind",
         "inputParameters": {"kind": "zzz"},
         "decisionCases": {"a": [simple("a1")]}, "defaultCase": [simple("d1")]}]});
    assert_eq!(Sim::start(with_default, json!({})).pending(), vec!["d1"]);

    let without_default = json!({"name": "w", "tasks": [
        {"name": "sw", "taskReferenceName": "sw", "type": "SWITCH",
         "evaluatorType": "value-param", "expression": "kind",
         "inputParameters": {"kind": "zzz"}, "decisionCases": {"a": [simple("a1")]}},
        simple("after")]});
    assert_eq!(
        Sim::start(without_default, json!({})).pending(),
        vec!["after"]
    );
}

#[test]
fn decision_with_case_value_param_records_case_output() {
    let def = json!({"name": "w", "tasks": [
        {"name": "d", "taskReferenceName": "d", "type": "DECISION", "caseValueParam": "n",
         "inputParameters": {"n": "${workflow.input.n}"},
         "decisionCases": {"2": [simple("two")]}, "defaultCase": [simple("other")]}]});
    let sim = Sim::start(def, json!({"n": 2}));
    assert_eq!(
        sim.pending(),
        vec!["two"],
        "numbers compare as strings, as in Conductor"
    );
    assert_eq!(
        sim.state.latest("d").unwrap().output,
        Some(json!({"caseOutput": ["2"]}))
    );
    assert_eq!(
        sim.state.latest("d").unwrap().input,
        json!({"n": 2, "case": "2", "hasChildren": "true"}),
        "as Conductor's DecisionTaskMapper records it"
    );
}

#[test]
fn fork_runs_branches_side_by_side_and_join_waits_for_all() {
    let def = json!({"name": "w", "tasks": [
        {"name": "f", "taskReferenceName": "f", "type": "FORK_JOIN",
         "forkTasks": [[simple("a"), simple("a2")], [simple("b")]]},
        {"name": "j", "taskReferenceName": "j", "type": "JOIN", "joinOn": ["a2", "b"]},
        simple("after")]});
    let mut sim = Sim::start(def, json!({}));
    assert_eq!(sim.pending(), vec!["a", "b"]);
    // As Conductor lists them: the fork, each branch's first task, the JOIN waiting.
    assert_eq!(
        sim.trail(),
        vec![
            ("f".into(), "FORK_JOIN".into(), "COMPLETED"),
            ("a".into(), "SIMPLE".into(), "SCHEDULED"),
            ("b".into(), "SIMPLE".into(), "SCHEDULED"),
            ("j".into(), "JOIN".into(), "SCHEDULED"),
        ]
    );
    assert_eq!(row_status(&sim, "j"), "IN_PROGRESS");
    assert_eq!(
        sim.state.latest("j").unwrap().input,
        json!({"joinOn": ["a2", "b"]})
    );
    sim.complete("b", json!({"b": 1}));
    assert_eq!(sim.pending(), vec!["a"]);
    sim.complete("a", json!({}));
    assert_eq!(
        sim.pending(),
        vec!["a2"],
        "a branch goes on while the other is done"
    );
    assert_eq!(row_status(&sim, "j"), "IN_PROGRESS", "the join waits");
    sim.complete("a2", json!({"a2": 2}));
    let join = sim.state.latest("j").unwrap();
    assert_eq!(join.status, TaskStatus::Completed);
    assert_eq!(join.output, Some(json!({"a2": {"a2": 2}, "b": {"b": 1}})));
    assert_eq!(sim.pending(), vec!["after"]);
    assert_eq!(
        sim.state.tasks.iter().filter(|t| t.task_ref == "j").count(),
        1,
        "the join started is the join completed"
    );
}

#[test]
fn a_forks_branches_are_listed_in_branch_order_after_the_tasks_the_decider_runs() {
    // SwitchTaskSpec's "switch task that leads to a fork join": the first branch opens
    // with a SWITCH, the second with a worker task.
    let def = json!({"name": "w", "tasks": [
        {"name": "f", "taskReferenceName": "f", "type": "FORK_JOIN", "forkTasks": [
            [{"name": "sw", "taskReferenceName": "sw", "type": "SWITCH",
              "evaluatorType": "value-param", "expression": "k",
              "inputParameters": {"k": "c"},
              "decisionCases": {"c": [simple("t1")]}}],
            [simple("t10")]]},
        {"name": "j", "taskReferenceName": "j", "type": "JOIN", "joinOn": ["sw", "t10"]}]});
    let sim = Sim::start(def, json!({}));
    let refs: Vec<String> = sim.trail().into_iter().map(|(r, _, _)| r).collect();
    assert_eq!(refs, vec!["f", "sw", "t1", "t10", "j"]);
}

#[test]
fn nested_forks_are_listed_depth_first_as_conductor_maps_them() {
    // ForkJoinSpec's "nested fork join workflow success flow" (FanInOutNestedTest).
    let def = json!({"name": "w", "tasks": [
        {"name": "fork1", "taskReferenceName": "fork1", "type": "FORK_JOIN", "forkTasks": [
            [simple("t11")],
            [{"name": "fork2", "taskReferenceName": "fork2", "type": "FORK_JOIN",
              "forkTasks": [[simple("t12")], [simple("t13")]]},
             {"name": "join2", "taskReferenceName": "join2", "type": "JOIN",
              "joinOn": ["t12", "t13"]}]]},
        {"name": "join1", "taskReferenceName": "join1", "type": "JOIN",
         "joinOn": ["t11", "join2"]}]});
    let sim = Sim::start(def, json!({}));
    let refs: Vec<String> = sim.trail().into_iter().map(|(r, _, _)| r).collect();
    assert_eq!(
        refs,
        vec!["fork1", "t11", "fork2", "t12", "t13", "join2", "join1"]
    );
}

#[test]
fn a_task_that_is_not_a_switch_opens_its_branch_alone_and_what_follows_it_comes_after_the_join() {
    // DoWhileSpec's "Do While task as subtask of a forkjoin task", and an INLINE first.
    let def = json!({"name": "w", "tasks": [
        {"name": "f", "taskReferenceName": "f", "type": "FORK_JOIN", "forkTasks": [
            [{"name": "loop", "taskReferenceName": "loop", "type": "DO_WHILE",
              "loopCondition": "false", "loopOver": [simple("t0")]}],
            [{"name": "in", "taskReferenceName": "in", "type": "INLINE",
              "inputParameters": {"evaluatorType": "javascript", "expression": "1"}},
             simple("t1")],
            [simple("t2")]]},
        {"name": "j", "taskReferenceName": "j", "type": "JOIN", "joinOn": ["loop", "t1", "t2"]}]});
    let sim = Sim::start(def, json!({}));
    let refs: Vec<String> = sim.trail().into_iter().map(|(r, _, _)| r).collect();
    assert_eq!(refs, vec!["f", "loop", "in", "t2", "j", "t0", "t1"]);
}

/// An operator's retry.
fn retry_command() -> weft::messages::Reset {
    weft::messages::Reset {
        op: weft::messages::Operation::default(),
        target: weft::messages::ResetTarget::LastFailed {
            resume_subworkflow_tasks: false,
        },
        // Each retry makes a run of its own.
        new_run_id: weft::ids::new_id(),
        reason: None,
        workflow_input: None,
        task_input: None,
        definition: None,
        fallback: None,
    }
}

fn retry(sim: &mut Sim) -> Sim {
    sim.reset(&retry_command())
}

/// `(ref, status)` of every task row, as a client reads them, in schedule order.
fn rows(sim: &Sim) -> Vec<(String, String)> {
    sim.state
        .tasks
        .iter()
        .map(|t| (t.task_ref.clone(), sim.state.task_record(t).status))
        .collect()
}

fn owned(rows: &[(&str, &str)]) -> Vec<(String, String)> {
    rows.iter()
        .map(|(r, s)| (r.to_string(), s.to_string()))
        .collect()
}

#[test]
fn a_retried_fork_keeps_the_failed_attempt_and_retries_it_and_the_canceled_work_in_place() {
    // ForkJoinSpec's "retrying a failed fork join workflow".
    let def = json!({"name": "w", "tasks": [
        {"name": "f", "taskReferenceName": "f", "type": "FORK_JOIN",
         "forkTasks": [[simple("a"), simple("c")], [simple("b")]]},
        {"name": "j", "taskReferenceName": "j", "type": "JOIN", "joinOn": ["c", "b"]},
        simple("d")]});
    let mut sim = Sim::start(def, json!({}));
    sim.complete("a", json!({}));
    sim.fail("b", "boom");
    assert_eq!(sim.state.status, RunStatus::Failed);
    assert_eq!(
        rows(&sim),
        owned(&[
            ("f", "COMPLETED"),
            ("a", "COMPLETED"),
            ("b", "FAILED"),
            ("j", "CANCELED"),
            ("c", "CANCELED"),
        ])
    );
    let mut retried = retry(&mut sim);
    assert_eq!(retried.state.status, RunStatus::Running);
    assert_eq!(
        rows(&retried),
        owned(&[
            ("f", "COMPLETED"),
            ("a", "COMPLETED"),
            ("b", "FAILED"),
            ("j", "IN_PROGRESS"),
            ("c", "CANCELED"),
            ("b", "SCHEDULED"),
            ("c", "SCHEDULED"),
        ])
    );
    assert_eq!(retried.state.latest("b").unwrap().attempt, 2);
    assert!(
        retried.state.retry_grants.is_empty(),
        "each grant is used once"
    );
    retried
        .complete("c", json!({}))
        .complete("b", json!({"b": 2}));
    retried.complete("d", json!({}));
    assert_eq!(retried.state.status, RunStatus::Completed);
    let join = retried.state.latest("j").unwrap();
    // As Conductor's JOIN: `c`, with no output, adds nothing.
    assert_eq!(join.output, Some(json!({"b": {"b": 2}})));
    assert_eq!(retried.state.tasks.len(), 8);
}

#[test]
fn a_retried_attempt_that_fails_again_fails_the_run_again() {
    let def = json!({"name": "w", "tasks": [simple("a")]});
    let mut sim = Sim::start(def, json!({}));
    sim.fail("a", "boom");
    let mut retried = retry(&mut sim);
    retried.fail("a", "boom again");
    assert_eq!(retried.state.status, RunStatus::Failed);
    let mut again = retry(&mut retried);
    assert_eq!(again.pending(), vec!["a"]);
    assert_eq!(again.state.latest("a").unwrap().attempt, 3);
    again.complete("a", json!({}));
    assert_eq!(again.state.status, RunStatus::Completed);
}

#[test]
fn a_retried_permissive_fork_waits_at_its_failed_join_again() {
    let permissive = json!({"name": "b", "taskReferenceName": "b", "type": "SIMPLE",
                            "permissive": true});
    let def = json!({"name": "w", "tasks": [
        {"name": "f", "taskReferenceName": "f", "type": "FORK_JOIN",
         "forkTasks": [[simple("a")], [permissive]]},
        {"name": "j", "taskReferenceName": "j", "type": "JOIN", "joinOn": ["a", "b"]}]});
    let mut sim = Sim::start(def, json!({}));
    sim.fail("b", "boom");
    sim.complete("a", json!({}));
    assert_eq!(sim.state.status, RunStatus::Failed);
    assert_eq!(row_status(&sim, "j"), "FAILED");
    let mut retried = retry(&mut sim);
    assert_eq!(row_status(&retried, "j"), "IN_PROGRESS");
    assert_eq!(retried.pending(), vec!["b"]);
    retried.complete("b", json!({}));
    assert_eq!(retried.state.status, RunStatus::Completed);
    assert_eq!(row_status(&retried, "j"), "COMPLETED");
}

#[test]
fn a_retried_loop_goes_on_in_the_iteration_that_failed() {
    let def = json!({"name": "w", "tasks": [
        {"name": "loop", "taskReferenceName": "loop", "type": "DO_WHILE",
         "loopCondition": "$.loop['iteration'] < 2",
         "loopOver": [simple("x")]}]});
    let mut sim = Sim::start(def, json!({}));
    sim.complete("x", json!({}));
    sim.fail("x", "boom");
    assert_eq!(sim.state.status, RunStatus::Failed);
    let mut retried = retry(&mut sim);
    assert_eq!(row_status(&retried, "loop"), "IN_PROGRESS");
    let x = retried.state.latest("x").unwrap();
    assert_eq!((x.iteration, x.attempt), (2, 2));
    retried.complete("x", json!({}));
    assert_eq!(retried.state.status, RunStatus::Completed);
}

#[test]
fn a_run_ended_with_nothing_to_retry_is_refused_as_conductor_does() {
    let def = json!({"name": "w", "tasks": [
        {"name": "t", "taskReferenceName": "t", "type": "TERMINATE",
         "inputParameters": {"terminationStatus": "TERMINATED"}}]});
    let sim = Sim::start(def, json!({}));
    assert_eq!(sim.state.status, RunStatus::Terminated);
    let verdict = sim.verdict(&weft::messages::Command::Reset(retry_command()));
    let crate::apply::Applied::Rejected { status, message } = verdict else {
        panic!("{verdict:?}");
    };
    assert_eq!(status, 409);
    assert!(
        message.starts_with("There are no retryable tasks!"),
        "{message}"
    );
}

#[test]
fn nested_forks_work() {
    let def = json!({"name": "w", "tasks": [
        {"name": "f", "taskReferenceName": "f", "type": "FORK_JOIN", "forkTasks": [
            [{"name": "g", "taskReferenceName": "g", "type": "FORK_JOIN",
              "forkTasks": [[simple("x")], [simple("y")]]},
             {"name": "gj", "taskReferenceName": "gj", "type": "JOIN", "joinOn": ["x", "y"]}],
            [simple("z")]]},
        {"name": "j", "taskReferenceName": "j", "type": "JOIN", "joinOn": ["gj", "z"]}]});
    let mut sim = Sim::start(def, json!({}));
    let mut pending = sim.pending();
    pending.sort();
    assert_eq!(pending, vec!["x", "y", "z"]);
    sim.complete("x", json!({})).complete("z", json!({}));
    assert_eq!(row_status(&sim, "gj"), "IN_PROGRESS");
    assert_eq!(row_status(&sim, "j"), "IN_PROGRESS");
    sim.complete("y", json!({}));
    assert_eq!(sim.state.status, RunStatus::Completed);
}

#[test]
fn failing_branch_fails_the_run() {
    let def = json!({"name": "w", "tasks": [
        {"name": "f", "taskReferenceName": "f", "type": "FORK_JOIN",
         "forkTasks": [[simple("a")], [simple("b")]]},
        {"name": "j", "taskReferenceName": "j", "type": "JOIN", "joinOn": ["a", "b"]}]});
    let mut sim = Sim::start(def, json!({}));
    sim.fail("a", "boom");
    assert_eq!(sim.state.status, RunStatus::Failed);
    assert_eq!(sim.state.failed_task_refs, vec!["a".to_string()]);
}

#[test]
fn set_variable_is_visible_to_later_tasks_and_the_run() {
    let def = json!({"name": "w", "tasks": [
        {"name": "sv", "taskReferenceName": "sv", "type": "SET_VARIABLE",
         "inputParameters": {"greeting": "hi ${workflow.input.who}"}},
        {"name": "a", "taskReferenceName": "a", "type": "SIMPLE",
         "inputParameters": {"g": "${workflow.variables.greeting}"}}]});
    let sim = Sim::start(def, json!({"who": "Ada"}));
    assert_eq!(sim.state.variables["greeting"], json!("hi Ada"));
    assert_eq!(sim.state.latest("a").unwrap().input, json!({"g": "hi Ada"}));
}

#[test]
fn terminate_ends_the_run_with_its_status_and_output() {
    let def = |status: &str| {
        json!({"name": "w", "tasks": [
            {"name": "t", "taskReferenceName": "t", "type": "TERMINATE",
             "inputParameters": {"terminationStatus": status, "terminationReason": "enough",
                                 "workflowOutput": {"done": true}}},
            simple("never")]})
    };
    let completed = Sim::start(def("COMPLETED"), json!({}));
    assert_eq!(completed.state.status, RunStatus::Completed);
    assert_eq!(completed.state.output, Some(json!({"done": true})));
    let failed = Sim::start(def("FAILED"), json!({}));
    assert_eq!(failed.state.status, RunStatus::Failed);
    assert_eq!(failed.state.reason.as_deref(), Some("enough"));
    let terminated = Sim::start(def("TERMINATED"), json!({}));
    assert_eq!(terminated.state.status, RunStatus::Terminated);
    assert!(terminated.state.latest("never").is_none());
}

#[test]
fn failed_activity_is_retried_up_to_retry_count() {
    let def = json!({"name": "w", "tasks": [
        {"name": "a", "taskReferenceName": "a", "type": "SIMPLE", "retryCount": 2}]});
    let mut sim = Sim::start(def, json!({}));
    sim.fail("a", "flaky").fail("a", "flaky");
    assert_eq!(sim.pending(), vec!["a"]);
    assert_eq!(sim.state.latest("a").unwrap().attempt, 3);
    sim.fail("a", "still flaky");
    assert_eq!(sim.state.status, RunStatus::Failed);
    let attempts: Vec<i32> = sim.state.tasks.iter().map(|t| t.attempt).collect();
    assert_eq!(attempts, vec![1, 2, 3]);
}

#[test]
fn http_tasks_are_activities() {
    let def = json!({"name": "w", "tasks": [
        {"name": "call", "taskReferenceName": "call", "type": "HTTP",
         "inputParameters": {"http_request": {"uri": "http://x/${workflow.input.p}", "method": "GET"}}}]});
    let sim = Sim::start(def, json!({"p": "q"}));
    assert_eq!(sim.pending(), vec!["call"]);
    let t = sim.state.latest("call").unwrap();
    assert_eq!(t.task_type, "HTTP");
    assert_eq!(t.input["http_request"]["uri"], json!("http://x/q"));
}

#[test]
fn system_tasks_are_recorded_in_history_order() {
    let def = json!({"name": "w", "tasks": [
        {"name": "f", "taskReferenceName": "f", "type": "FORK_JOIN",
         "forkTasks": [[simple("a")], [simple("b")]]},
        {"name": "j", "taskReferenceName": "j", "type": "JOIN", "joinOn": ["a", "b"]}]});
    let mut sim = Sim::start(def, json!({}));
    sim.complete("a", json!({})).complete("b", json!({}));
    let trail: Vec<(String, &str)> = sim.trail().into_iter().map(|(r, _, s)| (r, s)).collect();
    assert_eq!(
        trail,
        vec![
            ("f".to_string(), "COMPLETED"),
            ("a".to_string(), "COMPLETED"),
            ("b".to_string(), "COMPLETED"),
            ("j".to_string(), "COMPLETED"),
        ]
    );
}

fn counting_loop(condition: &str) -> serde_json::Value {
    json!({"name": "w", "tasks": [
        {"name": "loop", "taskReferenceName": "loop", "type": "DO_WHILE",
         "loopCondition": condition,
         "inputParameters": {"limit": "${workflow.input.limit}"},
         "loopOver": [
            {"name": "step", "taskReferenceName": "step", "type": "SIMPLE",
             "inputParameters": {"prev": "${step.output.n}"}}]},
        simple("after")]})
}

#[test]
fn do_while_runs_the_body_until_the_condition_is_false() {
    let mut sim = Sim::start(
        counting_loop("$.loop['iteration'] < $.limit"),
        json!({"limit": 3}),
    );
    for i in 1..=3 {
        assert_eq!(sim.pending(), vec!["step"], "iteration {i}");
        let step = sim.state.latest("step").unwrap();
        assert_eq!(step.iteration, i);
        sim.complete("step", json!({"n": i}));
    }
    assert_eq!(sim.pending(), vec!["after"]);
    let out = sim.state.latest("loop").unwrap().output.clone().unwrap();
    assert_eq!(out["iteration"], json!(3));
    assert_eq!(out["2"], json!({"step": {"n": 2}}));
    let iterations: Vec<i32> = sim
        .state
        .tasks
        .iter()
        .filter(|t| t.task_ref == "step")
        .map(|t| t.iteration)
        .collect();
    assert_eq!(iterations, vec![1, 2, 3]);
    assert_eq!(
        sim.state
            .tasks
            .iter()
            .filter(|t| t.task_ref == "step")
            .nth(1)
            .unwrap()
            .input,
        json!({"prev": 1}),
        "the body sees the previous iteration's output"
    );
}

#[test]
fn do_while_condition_sees_body_outputs() {
    let mut sim = Sim::start(counting_loop("$.step.output.more == true"), json!({}));
    sim.complete("step", json!({"more": true}));
    sim.complete("step", json!({"more": false}));
    assert_eq!(sim.pending(), vec!["after"]);
    assert_eq!(
        sim.state.latest("loop").unwrap().output.clone().unwrap()["iteration"],
        json!(2)
    );
}

#[test]
fn do_while_keep_last_n_bounds_the_output() {
    let def = json!({"name": "w", "tasks": [
        {"name": "loop", "taskReferenceName": "loop", "type": "DO_WHILE",
         "loopCondition": "$.loop['iteration'] < 4", "inputParameters": {"keepLastN": 2},
         "loopOver": [simple("step")]}]});
    let mut sim = Sim::start(def, json!({}));
    for _ in 0..4 {
        sim.complete("step", json!({}));
    }
    let out = sim.state.latest("loop").unwrap().output.clone().unwrap();
    assert!(out.get("1").is_none() && out.get("2").is_none(), "{out}");
    assert!(out.get("3").is_some() && out.get("4").is_some(), "{out}");
    assert_eq!(sim.state.status, RunStatus::Completed);
}

#[test]
fn do_while_with_a_broken_condition_fails_with_the_reason() {
    let mut sim = Sim::start(counting_loop("$.nope.deeper > 1"), json!({}));
    sim.complete("step", json!({}));
    assert_eq!(sim.state.status, RunStatus::Failed);
    let reason = sim.state.reason.clone().unwrap_or_default();
    assert!(reason.contains("loopCondition"), "{reason}");
    assert_eq!(
        sim.state.latest("loop").unwrap().status.as_str(),
        "FAILED_WITH_TERMINAL_ERROR"
    );
}

#[test]
fn switch_with_a_javascript_expression_picks_its_case() {
    let def = json!({"name": "w", "tasks": [
        {"name": "sw", "taskReferenceName": "sw", "type": "SWITCH",
         "evaluatorType": "javascript", "expression": "$.n > 10 ? 'big' : 'small'",
         "inputParameters": {"n": "${workflow.input.n}"},
         "decisionCases": {"big": [simple("b")], "small": [simple("s")]}}]});
    assert_eq!(
        Sim::start(def.clone(), json!({"n": 42})).pending(),
        vec!["b"]
    );
    assert_eq!(Sim::start(def, json!({"n": 1})).pending(), vec!["s"]);
}

#[test]
fn inline_task_evaluates_its_script_once_and_records_the_result() {
    let def = json!({"name": "w", "tasks": [
        {"name": "calc", "taskReferenceName": "calc", "type": "INLINE",
         "inputParameters": {"evaluatorType": "javascript", "a": "${workflow.input.a}",
                             "expression": "(function(){ return {double: $.a * 2}; })()"}},
        {"name": "use", "taskReferenceName": "use", "type": "SIMPLE",
         "inputParameters": {"x": "${calc.output.result.double}"}}]});
    let sim = Sim::start(def, json!({"a": 21}));
    assert_eq!(
        sim.state.latest("calc").unwrap().output,
        Some(json!({"result": {"double": 42}}))
    );
    assert_eq!(sim.state.latest("use").unwrap().input, json!({"x": 42}));
}

#[test]
fn inline_task_that_throws_fails_the_run_with_the_message() {
    let def = json!({"name": "w", "tasks": [
        {"name": "calc", "taskReferenceName": "calc", "type": "INLINE",
         "inputParameters": {"evaluatorType": "javascript",
                             "expression": "throw new Error('no such order')"}}]});
    let sim = Sim::start(def, json!({}));
    assert_eq!(sim.state.status, RunStatus::Failed);
    assert!(sim
        .state
        .reason
        .clone()
        .unwrap_or_default()
        .contains("no such order"));
    assert_eq!(
        sim.state.latest("calc").unwrap().status.as_str(),
        "FAILED_WITH_TERMINAL_ERROR"
    );
}

#[test]
fn wait_completes_with_the_signal_payload() {
    let def = json!({"name": "w", "tasks": [
        {"name": "approval", "taskReferenceName": "approval", "type": "WAIT"},
        {"name": "a", "taskReferenceName": "a", "type": "SIMPLE",
         "inputParameters": {"by": "${approval.output.by}"}}]});
    let mut sim = Sim::start(def, json!({}));
    assert!(
        sim.pending().is_empty(),
        "nothing for workers while waiting"
    );
    assert_eq!(
        sim.state.latest("approval").unwrap().status.as_str(),
        "SCHEDULED"
    );
    sim.signal("other", json!({"by": "nobody"}));
    assert!(
        sim.pending().is_empty(),
        "a signal with another name does not count"
    );
    sim.signal("approval", json!({"by": "ada"}));
    assert_eq!(
        sim.state.latest("approval").unwrap().output,
        Some(json!({"by": "ada"}))
    );
    assert_eq!(sim.state.latest("a").unwrap().input, json!({"by": "ada"}));
}

#[test]
fn a_signal_that_arrives_early_is_kept_until_its_wait_is_reached() {
    let def = json!({"name": "w", "tasks": [
        simple("first"),
        {"name": "approval", "taskReferenceName": "approval", "type": "WAIT"},
        simple("after")]});
    let mut sim = Sim::start(def, json!({}));
    sim.signal("approval", json!({"ok": true}));
    assert_eq!(sim.pending(), vec!["first"]);
    sim.complete("first", json!({}));
    assert_eq!(
        sim.state.latest("approval").unwrap().output,
        Some(json!({"ok": true}))
    );
    assert_eq!(sim.pending(), vec!["after"]);
}

#[test]
fn each_loop_iteration_consumes_its_own_signal() {
    let def = json!({"name": "w", "tasks": [
        {"name": "loop", "taskReferenceName": "loop", "type": "DO_WHILE",
         "loopCondition": "$.loop['iteration'] < 2",
         "loopOver": [{"name": "tick", "taskReferenceName": "tick", "type": "WAIT"}]}]});
    let mut sim = Sim::start(def, json!({}));
    sim.signal("tick", json!({"n": 1}));
    assert_eq!(
        sim.state.status,
        RunStatus::Running,
        "one signal, one iteration"
    );
    sim.signal("tick", json!({"n": 2}));
    assert_eq!(sim.state.status, RunStatus::Completed);
    let out = sim.state.latest("loop").unwrap().output.clone().unwrap();
    assert_eq!(out["2"]["tick"], json!({"n": 2}));
}

#[test]
fn wait_with_a_duration_completes_when_its_timer_fires() {
    let def = json!({"name": "w", "tasks": [
        {"name": "pause", "taskReferenceName": "pause", "type": "WAIT",
         "inputParameters": {"duration": "${workflow.input.pause}"}},
        simple("after")]});
    let mut sim = Sim::start(def, json!({"pause": "2 minutes"}));
    let timer = sim.state.timers[0].clone();
    let started = sim.state.latest("pause").unwrap().update_time;
    // The simulated clock ticks one second per event: the timer is set two minutes after
    // the decision, one event after the WAIT was recorded.
    let delay = timer.fire_at - started;
    assert!(
        (120..=121).contains(&delay.num_seconds()),
        "absolute fire time, {delay:?} after the WAIT started"
    );
    sim.fire_timers_due_by(timer.fire_at - chrono::Duration::seconds(1));
    assert!(sim.pending().is_empty(), "not before its time");
    sim.fire_timers_due_by(timer.fire_at);
    assert_eq!(sim.pending(), vec!["after"]);
    assert_eq!(
        sim.state.latest("pause").unwrap().status.as_str(),
        "COMPLETED"
    );
}

#[test]
fn wait_until_a_time_and_bad_formats() {
    let def = |until: &str| {
        json!({"name": "w", "tasks": [
            {"name": "p", "taskReferenceName": "p", "type": "WAIT",
             "inputParameters": {"until": until}}]})
    };
    let sim = Sim::start(def("2030-01-01 09:30"), json!({}));
    assert_eq!(
        sim.state.timers[0].fire_at.to_rfc3339(),
        "2030-01-01T09:30:00+00:00"
    );
    let bad = Sim::start(def("next tuesday"), json!({}));
    assert_eq!(bad.state.status, RunStatus::Failed);
    assert!(bad
        .state
        .reason
        .clone()
        .unwrap_or_default()
        .contains("until"));
}

fn fire_at(sim: &Sim, n: usize) -> chrono::DateTime<chrono::Utc> {
    sim.state.timers[n].fire_at
}

#[test]
fn a_failed_attempt_s_retry_is_scheduled_at_once_and_handed_out_after_its_back_off() {
    let def = json!({"name": "w", "tasks": [
        {"name": "a", "taskReferenceName": "a", "type": "SIMPLE",
         "taskDefinition": {"retryCount": 2, "retryDelaySeconds": 10,
                            "retryLogic": "EXPONENTIAL_BACKOFF"}}]});
    let mut sim = Sim::start(def, json!({}));
    sim.fail("a", "flaky");
    // SCHEDULED at once, as Conductor's, its message held back by a dispatch timer (not
    // a timer of the run: nothing wakes the decider when the back-off ends).
    assert_eq!(sim.pending(), vec!["a"]);
    let retry = sim.state.latest("a").unwrap().clone();
    assert_eq!(retry.attempt, 2);
    assert_eq!(retry.status.as_str(), "SCHEDULED");
    assert_eq!(
        (retry.callback_after_seconds, retry.dispatch_delay_ms),
        (10, 10_000)
    );
    assert!(retry.dispatch_timer.is_some());
    assert!(sim.state.timers.is_empty(), "{:?}", sim.state.timers);
    sim.fail("a", "flaky");
    let second = sim.state.latest("a").unwrap().clone();
    assert_eq!(
        (second.attempt, second.callback_after_seconds),
        (3, 20),
        "exponential: 2 × 10 s"
    );
    assert_ne!(second.dispatch_timer, retry.dispatch_timer);
    sim.fail("a", "flaky");
    assert_eq!(sim.state.status, RunStatus::Failed, "retries exhausted");
}

#[test]
fn a_retry_without_back_off_goes_to_its_queue_at_once() {
    let def = json!({"name": "w", "tasks": [
        {"name": "a", "taskReferenceName": "a", "type": "SIMPLE",
         "taskDefinition": {"retryCount": 1, "retryDelaySeconds": 0}}]});
    let mut sim = Sim::start(def, json!({}));
    sim.fail("a", "flaky");
    let retry = sim.state.latest("a").unwrap();
    assert_eq!((retry.attempt, retry.callback_after_seconds), (2, 0));
    assert_eq!(retry.dispatch_timer, None);
}

#[test]
fn a_sub_workflow_retry_still_waits_out_its_back_off_on_a_timer() {
    let child = json!({"name": "c", "tasks": [
        {"name": "x", "taskReferenceName": "x", "type": "SIMPLE"}]});
    let def = json!({"name": "w", "tasks": [
        {"name": "s", "taskReferenceName": "s", "type": "SUB_WORKFLOW",
         "subWorkflowParam": {"name": "c", "workflowDefinition": child},
         "taskDefinition": {"retryCount": 1, "retryDelaySeconds": 10}}]});
    let mut sim = Sim::start(def, json!({}));
    let ended = child_ended(&sim, "s", "FAILED", json!({}));
    sim.command(&ended);
    assert_eq!(sim.state.latest("s").unwrap().attempt, 1, "backing off");
    let due = fire_at(&sim, 0);
    sim.fire_timers_due_by(due);
    let retry = sim.state.latest("s").unwrap();
    assert_eq!((retry.attempt, retry.status.as_str()), (2, "SCHEDULED"));
    assert_eq!(retry.callback_after_seconds, 0, "its child starts now");
}

#[test]
fn timed_out_attempt_is_retried_and_its_late_result_ignored() {
    use crate::apply::{apply_command, Applied};
    use weft::messages::{ActivityCompleted, Command};
    let def = json!({"name": "w", "tasks": [
        {"name": "a", "taskReferenceName": "a", "type": "SIMPLE",
         "taskDefinition": {"retryCount": 1, "retryDelaySeconds": 0,
                            "timeoutSeconds": 30, "timeoutPolicy": "RETRY"}}]});
    let mut sim = Sim::start(def, json!({}));
    let first = sim.state.latest("a").unwrap().clone();
    assert!(
        sim.state.timers.is_empty(),
        "timeoutSeconds counts from the worker's start"
    );
    sim.take("a");
    sim.fire_timers_due_by(fire_at(&sim, 0));
    assert_eq!(
        sim.state.tasks[0].status.as_str(),
        "TIMED_OUT",
        "the first attempt timed out"
    );
    assert_eq!(sim.state.latest("a").unwrap().attempt, 2);
    let late = Command::ActivityCompleted(ActivityCompleted {
        task_id: first.task_id,
        run_id: sim.state.run_id,
        attempt: 1,
        output: json!({}),
        worker_id: None,
        started_at: None,
        eager: None,
    });
    assert!(matches!(
        apply_command(&sim.state, &late),
        Applied::Ignored(_)
    ));
    sim.take("a");
    sim.fire_timers_due_by(fire_at(&sim, 1));
    assert_eq!(sim.state.status, RunStatus::TimedOut);
    assert_eq!(sim.state.sub_status(), "TIMED_OUT");
}

#[test]
fn timeout_policy_time_out_wf_ends_the_run_at_once() {
    let def = json!({"name": "w", "tasks": [
        {"name": "a", "taskReferenceName": "a", "type": "SIMPLE",
         "taskDefinition": {"timeoutSeconds": 5}}]});
    let mut sim = Sim::start(def, json!({}));
    sim.take("a");
    sim.fire_timers_due_by(fire_at(&sim, 0));
    assert_eq!(sim.state.status, RunStatus::TimedOut);
    assert!(sim
        .state
        .reason
        .clone()
        .unwrap_or_default()
        .contains("timeoutSeconds"));
}

#[test]
fn poll_timeout_counts_until_a_worker_takes_the_task() {
    let def = json!({"name": "w", "tasks": [
        {"name": "a", "taskReferenceName": "a", "type": "SIMPLE",
         "taskDefinition": {"retryCount": 1, "retryDelaySeconds": 0, "pollTimeoutSeconds": 10,
                            "timeoutSeconds": 100, "timeoutPolicy": "RETRY"}}]});
    let mut sim = Sim::start(def.clone(), json!({}));
    let scheduled = sim.state.tasks[0].scheduled_time;
    assert_eq!(fire_at(&sim, 0) - scheduled, chrono::Duration::seconds(10));
    sim.fire_timers_due_by(fire_at(&sim, 0));
    assert_eq!(sim.state.tasks[0].status.as_str(), "TIMED_OUT");
    assert!(sim.state.tasks[0]
        .reason
        .clone()
        .unwrap()
        .contains("pollTimeoutSeconds"));
    assert_eq!(sim.state.latest("a").unwrap().attempt, 2, "retried");
    assert_eq!(sim.state.sub_status(), "QUEUING");

    // Taken in time: the poll timer no longer matters, timeoutSeconds runs from the start.
    let mut sim = Sim::start(def, json!({}));
    sim.take("a");
    assert_eq!(sim.state.sub_status(), "RUNNING");
    assert_eq!(sim.state.tasks[0].status.as_str(), "IN_PROGRESS");
    sim.fire_timers_due_by(fire_at(&sim, 0));
    assert_eq!(sim.state.tasks[0].status.as_str(), "IN_PROGRESS");
    let started = sim.state.tasks[0].start_time.unwrap();
    let timeout = sim.state.timers.last().unwrap().fire_at;
    assert_eq!(timeout - started, chrono::Duration::seconds(100));
}

#[test]
fn total_timeout_bounds_all_attempts_together() {
    let def = json!({"name": "w", "tasks": [
        {"name": "a", "taskReferenceName": "a", "type": "SIMPLE",
         "taskDefinition": {"retryCount": 5, "retryDelaySeconds": 0, "totalTimeoutSeconds": 50}}]});
    let mut sim = Sim::start(def, json!({}));
    let scheduled = sim.state.tasks[0].scheduled_time;
    assert_eq!(fire_at(&sim, 0) - scheduled, chrono::Duration::seconds(50));
    sim.fail("a", "flaky");
    assert_eq!(sim.state.latest("a").unwrap().attempt, 2);
    sim.fire_timers_due_by(fire_at(&sim, 0));
    assert_eq!(sim.state.status, RunStatus::TimedOut);
    assert!(sim
        .state
        .reason
        .clone()
        .unwrap()
        .contains("totalTimeoutSeconds"));
}

#[test]
fn workflow_timeout_ends_a_run_that_takes_too_long() {
    let def = json!({"name": "w", "timeoutSeconds": 60, "tasks": [simple("a"), simple("b")]});
    let mut sim = Sim::start(def, json!({}));
    sim.complete("a", json!({}));
    assert_eq!(sim.state.status, RunStatus::Running);
    sim.fire_timers_due_by(fire_at(&sim, 0));
    assert_eq!(sim.state.status, RunStatus::TimedOut);
    assert!(sim.pending().len() <= 1, "nothing new is scheduled");
}

#[test]
fn an_alert_only_workflow_goes_on_past_its_timeout() {
    let def = json!({"name": "w", "timeoutSeconds": 60, "timeoutPolicy": "ALERT_ONLY",
                     "tasks": [simple("a"), simple("b")]});
    let mut sim = Sim::start(def, json!({}));
    sim.complete("a", json!({}));
    sim.fire_timers_due_by(fire_at(&sim, 0));
    assert_eq!(sim.state.status, RunStatus::Running, "only an alert");
    assert!(
        sim.state.timers.iter().any(|t| t.fired),
        "the firing is recorded"
    );
    sim.complete("b", json!({}));
    assert_eq!(sim.state.status, RunStatus::Completed);
}

#[test]
fn dynamic_fork_runs_the_tasks_its_input_lists_and_the_join_waits_for_all() {
    let def = json!({"name": "w", "tasks": [
        {"name": "dyn", "taskReferenceName": "dyn", "type": "FORK_JOIN_DYNAMIC",
         "dynamicForkTasksParam": "tasks", "dynamicForkTasksInputParamName": "inputs",
         "inputParameters": {"tasks": "${workflow.input.tasks}", "inputs": "${workflow.input.inputs}"}},
        {"name": "join", "taskReferenceName": "join", "type": "JOIN"},
        simple("after")]});
    let input = json!({
        "tasks": [{"name": "x", "taskReferenceName": "x1", "type": "SIMPLE"},
                  {"name": "y", "taskReferenceName": "y1", "type": "SIMPLE"}],
        "inputs": {"x1": {"n": 1}, "y1": {"n": 2}}});
    let mut sim = Sim::start(def, input);
    assert_eq!(sim.pending(), vec!["x1", "y1"]);
    assert_eq!(sim.state.latest("y1").unwrap().input, json!({"n": 2}));
    assert_eq!(row_status(&sim, "join"), "IN_PROGRESS");
    assert_eq!(
        sim.state.latest("join").unwrap().input,
        json!({"joinOn": ["x1", "y1"]})
    );
    sim.complete("y1", json!({"y": true}));
    assert_eq!(row_status(&sim, "join"), "IN_PROGRESS");
    sim.complete("x1", json!({"x": true}));
    assert_eq!(
        sim.state.latest("join").unwrap().output,
        Some(json!({"x1": {"x": true}, "y1": {"y": true}}))
    );
    assert_eq!(sim.pending(), vec!["after"]);
}

#[test]
fn dynamic_fork_of_one_task_over_a_list_of_inputs() {
    let def = json!({"name": "w", "tasks": [
        {"name": "dyn", "taskReferenceName": "dyn", "type": "FORK_JOIN_DYNAMIC",
         "inputParameters": {"forkTaskName": "resize", "forkTaskInputs": "${workflow.input.images}"}},
        {"name": "join", "taskReferenceName": "join", "type": "JOIN"}]});
    let mut sim = Sim::start(
        def,
        json!({"images": [{"id": "a"}, {"id": "b"}, {"id": "c"}]}),
    );
    assert_eq!(sim.pending(), vec!["resize_0", "resize_1", "resize_2"]);
    for r in ["resize_0", "resize_1", "resize_2"] {
        sim.complete(r, json!({}));
    }
    assert_eq!(sim.state.status, RunStatus::Completed);
}

#[test]
fn dynamic_fork_with_a_bad_list_fails_the_run_clearly() {
    let def = |tasks: serde_json::Value| {
        json!({"name": "w", "tasks": [
            {"name": "dyn", "taskReferenceName": "dyn", "type": "FORK_JOIN_DYNAMIC",
             "dynamicForkTasksParam": "tasks", "dynamicForkTasksInputParamName": "inputs",
             "inputParameters": {"tasks": tasks, "inputs": {}}},
            {"name": "join", "taskReferenceName": "join", "type": "JOIN"}]})
    };
    let not_a_list = Sim::start(def(json!("nope")), json!({}));
    assert_eq!(not_a_list.state.status, RunStatus::Failed);
    assert!(not_a_list
        .state
        .reason
        .clone()
        .unwrap()
        .contains("must be a list"));
    let clash = Sim::start(
        def(json!([{"name": "a", "taskReferenceName": "join", "type": "SIMPLE"}])),
        json!({}),
    );
    assert!(clash.state.reason.clone().unwrap().contains("already used"));
}

fn child_ended(
    sim: &Sim,
    task_ref: &str,
    status: &str,
    output: serde_json::Value,
) -> weft::messages::Command {
    let t = sim.state.latest(task_ref).unwrap();
    weft::messages::Command::ChildWorkflowEnded(weft::messages::ChildWorkflowEnded {
        parent: weft::messages::ParentLink {
            workflow_id: sim.state.workflow_id.clone(),
            run_id: sim.state.run_id,
            task_id: t.task_id,
        },
        child_workflow_id: t.output.as_ref().unwrap()["subWorkflowId"]
            .as_str()
            .unwrap()
            .to_owned(),
        status: status.to_owned(),
        output,
        reason: (status != "COMPLETED").then(|| "child broke".to_owned()),
    })
}

fn parent_def() -> serde_json::Value {
    json!({"name": "parent", "tasks": [
        {"name": "child", "taskReferenceName": "child", "type": "SUB_WORKFLOW",
         "inputParameters": {"first": "${workflow.input.first}"},
         "subWorkflowParam": {"name": "kid", "workflowDefinition":
            {"name": "kid", "version": 1, "tasks": [simple("k1")]}}},
        {"name": "after", "taskReferenceName": "after", "type": "SIMPLE",
         "inputParameters": {"got": "${child.output.r}"}}]})
}

#[test]
fn sub_workflow_starts_a_child_and_completes_with_its_output() {
    let mut sim = Sim::start(parent_def(), json!({"first": "Ada"}));
    let child = sim.state.latest("child").unwrap().clone();
    assert_eq!(child.task_type, "SUB_WORKFLOW");
    assert_eq!(child.input, json!({"first": "Ada"}));
    let child_id = child.output.clone().unwrap()["subWorkflowId"].clone();
    assert!(child_id.is_string(), "the task shows its child: {child_id}");
    let ended = child_ended(&sim, "child", "COMPLETED", json!({"r": 7}));
    sim.command(&ended);
    assert_eq!(
        sim.state.latest("child").unwrap().output.clone().unwrap()["r"],
        json!(7)
    );
    assert_eq!(sim.state.latest("after").unwrap().input, json!({"got": 7}));
    let again = sim.state.clone();
    sim.command(&ended);
    assert_eq!(sim.state, again, "a duplicate end changes nothing");
}

#[test]
fn failed_child_fails_its_parent_unless_retried() {
    let mut sim = Sim::start(parent_def(), json!({}));
    let ended = child_ended(&sim, "child", "FAILED", json!(null));
    sim.command(&ended);
    assert_eq!(sim.state.status, RunStatus::Failed);
    assert!(sim.state.reason.clone().unwrap().contains("child broke"));
}

#[test]
fn a_terminated_child_cancels_its_task_and_terminates_its_parent_as_conductors_does() {
    let mut sim = Sim::start(parent_def(), json!({}));
    sim.command(&child_ended(&sim, "child", "TERMINATED", json!(null)));
    assert_eq!(sim.state.status, RunStatus::Terminated);
    let child = sim.state.latest("child").unwrap();
    assert_eq!(child.status, TaskStatus::Canceled);
    assert_eq!(child.reason.as_deref(), Some("child broke"));
    assert!(sim.state.reason.clone().unwrap().contains("child broke"));
    assert!(sim.state.latest("after").is_none(), "nothing runs after it");

    // Optional: the run goes on past it.
    let mut def = parent_def();
    def["tasks"][0]["optional"] = json!(true);
    let mut sim = Sim::start(def, json!({}));
    sim.command(&child_ended(&sim, "child", "TERMINATED", json!(null)));
    assert_eq!(sim.state.status, RunStatus::Running);
    assert_eq!(
        sim.state.latest("child").unwrap().status,
        TaskStatus::CompletedWithErrors
    );
    assert_eq!(sim.pending(), vec!["after"]);
}

#[test]
fn a_sub_workflow_not_frozen_at_start_names_the_latest_registered_definition() {
    use crate::interpreter::{decide, ChildDefinition, Decision};
    let def = json!({"name": "parent", "tasks": [
        {"name": "child", "taskReferenceName": "child", "type": "SUB_WORKFLOW",
         "subWorkflowParam": {"name": "kid"}}]});
    let h = crate::history_builder::HistoryBuilder::started(def, json!({}));
    match decide(&h.state()).as_slice() {
        [Decision::StartChild { definition, .. }] => assert_eq!(
            definition,
            &ChildDefinition::Registered {
                name: "kid".into(),
                version: None
            }
        ),
        other => panic!("{other:?}"),
    }
}

fn items_loop() -> serde_json::Value {
    json!({"name": "w", "tasks": [
        {"name": "loop", "taskReferenceName": "loop", "type": "DO_WHILE",
         "items": "${workflow.input.list}",
         "loopOver": [
            {"name": "each", "taskReferenceName": "each", "type": "SIMPLE",
             "inputParameters": {"item": "${loop.output.loopItem}",
                                 "index": "${loop.output.loopIndex}",
                                 "n": "${loop.output.iteration}"}}]},
        simple("after")]})
}

#[test]
fn do_while_over_items_runs_once_per_item_with_loop_item_and_index() {
    let mut sim = Sim::start(items_loop(), json!({"list": ["a", "b", "c"]}));
    for (i, item) in ["a", "b", "c"].iter().enumerate() {
        assert_eq!(
            sim.state.latest("each").unwrap().input,
            json!({"item": item, "index": i, "n": i + 1})
        );
        sim.complete("each", json!({"done": item}));
    }
    assert_eq!(sim.pending(), vec!["after"]);
    assert_eq!(
        sim.state.latest("loop").unwrap().output.clone().unwrap()["3"],
        json!({"each": {"done": "c"}})
    );
}

#[test]
fn do_while_over_no_items_runs_nothing_and_bad_items_fail() {
    let sim = Sim::start(items_loop(), json!({"list": []}));
    assert_eq!(sim.pending(), vec!["after"]);
    assert!(sim.state.latest("each").is_none());
    let bad = Sim::start(items_loop(), json!({"list": "abc"}));
    assert_eq!(bad.state.status, RunStatus::Failed);
    assert!(bad
        .state
        .reason
        .clone()
        .unwrap()
        .contains("items must resolve to a list"));
}

#[test]
fn a_failing_branch_fails_the_run_and_cancels_its_waiting_siblings() {
    let def = json!({"name": "w", "tasks": [
        {"name": "f", "taskReferenceName": "f", "type": "FORK_JOIN",
         "forkTasks": [[simple("a")], [simple("slow")]]},
        {"name": "j", "taskReferenceName": "j", "type": "JOIN", "joinOn": ["a", "slow"]}]});
    let mut sim = Sim::start(def, json!({}));
    sim.fail("a", "boom");
    assert_eq!(sim.state.status, RunStatus::Failed);
    assert_eq!(
        sim.state.latest("slow").unwrap().status.as_str(),
        "CANCELED"
    );
    assert!(
        sim.pending().is_empty(),
        "nothing claims to wait for a worker"
    );
}

fn group(percent: u32) -> serde_json::Value {
    json!({"name": "w", "tasks": [
        {"name": "dyn", "taskReferenceName": "dyn", "type": "FORK_JOIN_DYNAMIC",
         "inputParameters": {"forkTaskName": "job", "forkTaskInputs": [{}, {}, {}, {}]}},
        {"name": "all", "taskReferenceName": "all", "type": "JOIN", "successPercent": percent}]})
}

#[test]
fn group_join_completes_when_enough_branches_succeed_and_failures_spare_siblings() {
    let mut sim = Sim::start(group(75), json!({}));
    sim.fail("job_0", "nope");
    assert_eq!(
        sim.state.status,
        RunStatus::Running,
        "a failure does not end the group"
    );
    assert_eq!(sim.pending(), vec!["job_1", "job_2", "job_3"]);
    for r in ["job_1", "job_2", "job_3"] {
        sim.complete(r, json!({"ok": r}));
    }
    assert_eq!(sim.state.status, RunStatus::Completed);
    let out = sim.state.latest("all").unwrap().output.clone().unwrap();
    assert_eq!(out["succeeded"], json!(3));
    assert_eq!(out["children"][0]["status"], json!("FAILED"));
}

/// A group of four (80 % must succeed) whose first branch failed: its run FAILED.
fn failed_group() -> Sim {
    let mut sim = Sim::start(group(80), json!({}));
    sim.fail("job_0", "nope");
    for r in ["job_1", "job_2", "job_3"] {
        sim.complete(r, json!({}));
    }
    sim
}

#[test]
fn group_join_fails_the_run_below_its_success_percent() {
    let sim = failed_group();
    assert_eq!(sim.state.status, RunStatus::Failed);
    assert!(sim.state.reason.clone().unwrap().contains("3 of 4"));
}

#[test]
fn a_loop_that_never_ends_fails_at_its_iteration_cap() {
    let mut sim = Sim::start(counting_loop("true"), json!({}));
    // The cap is recorded in the run's start (so that replay uses the same one).
    sim.state.max_loop_iterations = 3;
    if let weft::messages::Event::WorkflowStarted(started) = &mut sim.events[0].event {
        started.max_loop_iterations = Some(3);
    }
    for _ in 0..3 {
        sim.complete("step", json!({}));
    }
    assert_eq!(sim.state.status, RunStatus::Failed);
    let reason = sim.state.reason.clone().unwrap_or_default();
    assert!(reason.contains("cap of 3 iterations"), "{reason}");
}

#[test]
fn a_dynamic_fork_past_its_branch_cap_fails_naming_it_and_one_within_runs() {
    let def = json!({"name": "w", "tasks": [
        {"name": "fork", "taskReferenceName": "fork", "type": "FORK_JOIN_DYNAMIC",
         "inputParameters": {"forkTaskName": "work",
                             "forkTaskInputs": "${workflow.input.inputs}"}},
        {"name": "join", "taskReferenceName": "join", "type": "JOIN"}]});
    let inputs = |n: usize| json!({ "inputs": vec![json!({}); n] });
    // The cap recorded in the run's start, as the loop's.
    let capped = |n| {
        crate::history_builder::HistoryBuilder::started(def.clone(), inputs(n))
            .with_start(|s| s.max_fork_branches = Some(3))
    };
    let over = Sim::start_from(capped(4));
    assert_eq!(over.state.status, RunStatus::Failed);
    let reason = over.state.reason.clone().unwrap_or_default();
    assert!(
        reason.contains("4 branches; at most 3 (WEFT_MAX_FORK_BRANCHES)"),
        "{reason}"
    );
    let mut within = Sim::start_from(capped(3));
    assert_eq!(within.pending(), vec!["work_0", "work_1", "work_2"]);
    for r in ["work_0", "work_1", "work_2"] {
        within.complete(r, json!({}));
    }
    assert_eq!(within.state.status, RunStatus::Completed);
    // A run started before the cap was recorded keeps the cap it ran under: 1,000.
    let legacy = Sim::start(def.clone(), inputs(1_001));
    let reason = legacy.state.reason.clone().unwrap_or_default();
    assert!(reason.contains("at most 1000"), "{reason}");
}

#[test]
fn join_waits_for_its_join_on_only_and_the_run_for_every_branch() {
    let def = json!({"name": "w", "tasks": [
        {"name": "f", "taskReferenceName": "f", "type": "FORK_JOIN", "forkTasks": [
            [simple("x1"), simple("x2")], [simple("slow")]]},
        {"name": "j", "taskReferenceName": "j", "type": "JOIN", "joinOn": ["x2"]},
        simple("after")]});
    let mut sim = Sim::start(def, json!({}));
    sim.complete("x1", json!({}))
        .complete("x2", json!({"x": 2}));
    let mut pending = sim.pending();
    pending.sort();
    assert_eq!(
        pending,
        vec!["after", "slow"],
        "the JOIN did not wait for `slow`"
    );
    assert_eq!(
        sim.state.latest("j").unwrap().output,
        Some(json!({"x2": {"x": 2}}))
    );
    sim.complete("after", json!({}));
    assert_eq!(sim.state.status, RunStatus::Running, "`slow` still runs");
    sim.complete("slow", json!({}));
    assert_eq!(sim.state.status, RunStatus::Completed);
}

#[test]
fn optional_task_is_retried_before_it_completes_with_errors() {
    let def = json!({"name": "w", "tasks": [
        {"name": "o", "taskReferenceName": "o", "type": "SIMPLE", "optional": true,
         "taskDefinition": {"retryCount": 1, "retryDelaySeconds": 0}},
        simple("after")]});
    let mut sim = Sim::start(def, json!({}));
    sim.fail("o", "once");
    assert_eq!(sim.state.tasks[0].status.as_str(), "FAILED");
    assert_eq!(sim.pending(), vec!["o"], "retried first");
    sim.fail("o", "twice");
    assert_eq!(
        sim.state.latest("o").unwrap().status.as_str(),
        "COMPLETED_WITH_ERRORS"
    );
    assert_eq!(sim.pending(), vec!["after"]);
}

#[test]
fn non_retryable_error_kinds_are_never_retried() {
    let def = json!({"name": "w", "tasks": [
        {"name": "a", "taskReferenceName": "a", "type": "SIMPLE",
         "taskDefinition": {"retryCount": 3, "retryDelaySeconds": 0,
                            "nonRetryableErrors": ["InvalidInput"]}}]});
    let mut sim = Sim::start(def.clone(), json!({}));
    sim.fail_with_kind("a", "Flaky");
    assert_eq!(
        sim.state.latest("a").unwrap().attempt,
        2,
        "other kinds are retried"
    );
    sim.fail_with_kind("a", "InvalidInput");
    assert_eq!(sim.state.status, RunStatus::Failed);
    assert_eq!(
        sim.state.tasks.len(),
        2,
        "no retry after a non-retryable kind"
    );
}

#[test]
fn total_timeout_during_a_retry_back_off_ends_the_retries() {
    let def = json!({"name": "w", "tasks": [
        {"name": "a", "taskReferenceName": "a", "type": "SIMPLE",
         "taskDefinition": {"retryCount": 5, "retryDelaySeconds": 100, "totalTimeoutSeconds": 50}}]});
    let mut sim = Sim::start(def, json!({}));
    sim.fail("a", "flaky");
    // The total deadline (50 s after the first scheduling) comes before the retry (100 s).
    let total = sim.state.timers.iter().map(|t| t.fire_at).min().unwrap();
    sim.fire_timers_due_by(total);
    assert_eq!(sim.state.status, RunStatus::TimedOut);
    // The retry, SCHEDULED waiting out its back-off, timed out there, never handed out.
    let retry = sim.state.latest("a").unwrap();
    assert_eq!((retry.attempt, retry.status.as_str()), (2, "TIMED_OUT"));
    assert_eq!(retry.start_time, None);
    assert!(sim
        .state
        .reason
        .clone()
        .unwrap_or_default()
        .contains("totalTimeoutSeconds"));
}

#[test]
fn an_optional_task_out_of_total_time_lets_the_run_go_on() {
    let def = json!({"name": "w", "tasks": [
        {"name": "a", "taskReferenceName": "a", "type": "SIMPLE", "optional": true,
         "taskDefinition": {"retryCount": 5, "retryDelaySeconds": 0, "totalTimeoutSeconds": 50}},
        simple("b")]});
    let mut sim = Sim::start(def, json!({}));
    sim.take("a");
    sim.fire_timers_due_by(fire_at(&sim, 0));
    assert_eq!(sim.state.latest("a").unwrap().status.as_str(), "TIMED_OUT");
    assert_eq!(sim.state.latest("a").unwrap().attempt, 1, "not retried");
    assert_eq!(sim.pending(), vec!["b"]);
    sim.complete("b", json!({}));
    assert_eq!(sim.state.status, RunStatus::Completed);
}

#[test]
fn timeout_policy_alert_only_lets_the_attempt_run_on() {
    let def = json!({"name": "w", "tasks": [
        {"name": "a", "taskReferenceName": "a", "type": "SIMPLE",
         "taskDefinition": {"timeoutSeconds": 5, "totalTimeoutSeconds": 8,
                            "timeoutPolicy": "ALERT_ONLY"}}]});
    let mut sim = Sim::start(def, json!({}));
    sim.take("a");
    let last = sim.state.timers.iter().map(|t| t.fire_at).max().unwrap();
    sim.fire_timers_due_by(last);
    assert!(
        sim.state.timers.iter().all(|t| t.fired),
        "both deadlines passed"
    );
    assert_eq!(sim.state.status, RunStatus::Running);
    assert_eq!(
        sim.state.latest("a").unwrap().status.as_str(),
        "IN_PROGRESS"
    );
    sim.complete("a", json!({"late": true}));
    assert_eq!(sim.state.status, RunStatus::Completed);
}

#[test]
fn a_join_goes_on_past_an_optional_task_that_timed_out_for_good() {
    let def = json!({"name": "w", "tasks": [
        {"name": "f", "taskReferenceName": "f", "type": "FORK_JOIN", "forkTasks": [
            [{"name": "a", "taskReferenceName": "a", "type": "SIMPLE", "optional": true,
              "taskDefinition": {"retryCount": 0, "timeoutSeconds": 5, "timeoutPolicy": "RETRY"}}],
            [simple("b")]]},
        {"name": "j", "taskReferenceName": "j", "type": "JOIN", "joinOn": ["a", "b"]},
        simple("after")]});
    let mut sim = Sim::start(def, json!({}));
    sim.take("a").complete("b", json!({}));
    assert_eq!(sim.pending(), vec!["a"]);
    sim.fire_timers_due_by(fire_at(&sim, 0));
    assert_eq!(sim.state.latest("a").unwrap().status.as_str(), "TIMED_OUT");
    assert_eq!(sim.pending(), vec!["after"], "the join completed");
    sim.complete("after", json!({}));
    assert_eq!(sim.state.status, RunStatus::Completed);
}

#[test]
fn a_join_goes_on_past_an_optional_task_out_of_total_time_during_its_back_off() {
    let def = json!({"name": "w", "tasks": [
        {"name": "f", "taskReferenceName": "f", "type": "FORK_JOIN", "forkTasks": [
            [{"name": "a", "taskReferenceName": "a", "type": "SIMPLE", "optional": true,
              "taskDefinition": {"retryCount": 3, "retryDelaySeconds": 100,
                                 "totalTimeoutSeconds": 50}}],
            [simple("b")]]},
        {"name": "j", "taskReferenceName": "j", "type": "JOIN", "joinOn": ["a", "b"]},
        simple("after")]});
    let mut sim = Sim::start(def, json!({}));
    sim.complete("b", json!({}));
    sim.fail("a", "flaky");
    assert_eq!(sim.state.latest("a").unwrap().status.as_str(), "SCHEDULED");
    let total = sim.state.timers.iter().map(|t| t.fire_at).min().unwrap();
    sim.fire_timers_due_by(total);
    let retry = sim.state.latest("a").unwrap();
    assert_eq!(
        (retry.attempt, retry.status.as_str()),
        (2, "TIMED_OUT"),
        "the waiting retry timed out, no further one"
    );
    assert_eq!(sim.pending(), vec!["after"], "the join completed");
}

#[test]
fn a_loop_shows_the_iteration_its_body_is_in_and_its_body_reads_it_as_conductor_does() {
    let def = json!({"name": "w", "tasks": [
        {"name": "loop", "taskReferenceName": "loop", "type": "DO_WHILE",
         "loopCondition": "$.loop['iteration'] < 2",
         "loopOver": [{"name": "b", "taskReferenceName": "b", "type": "SIMPLE",
                       "inputParameters": {"i": "${loop['iteration']}", "j": "${loop.iteration}",
                                           "k": "${loop.output.iteration}"}}]}]});
    let mut sim = Sim::start(def, json!({}));
    let record = |sim: &Sim| {
        sim.state
            .task_record(sim.state.latest("loop").unwrap())
            .output
    };
    assert_eq!(record(&sim), Some(json!({"iteration": 1})));
    assert_eq!(
        sim.state.latest("b").unwrap().input,
        json!({"i": 1, "j": 1, "k": 1})
    );
    sim.complete("b", json!({}));
    assert_eq!(record(&sim), Some(json!({"iteration": 2})));
    assert_eq!(
        sim.state.latest("b").unwrap().input,
        json!({"i": 2, "j": 2, "k": 2})
    );
    sim.complete("b", json!({}));
    assert_eq!(sim.state.status, RunStatus::Completed);
    assert_eq!(record(&sim).unwrap()["iteration"], 2);
}

#[test]
fn a_join_over_optional_tasks_that_failed_completes_with_errors_naming_them() {
    let def = json!({"name": "w", "tasks": [
        {"name": "f", "taskReferenceName": "f", "type": "FORK_JOIN", "forkTasks": [
            [{"name": "o", "taskReferenceName": "o", "type": "SIMPLE", "optional": true,
              "taskDefinition": {"retryCount": 0}}],
            [simple("b")]]},
        {"name": "j", "taskReferenceName": "j", "type": "JOIN", "joinOn": ["o", "b"]},
        simple("after")]});
    let mut sim = Sim::start(def, json!({}));
    sim.fail("o", "boom");
    let failed = sim.state.latest("o").unwrap();
    assert_eq!(failed.status, TaskStatus::CompletedWithErrors);
    let why = format!("o/{} completed with errors", failed.task_id);
    sim.complete("b", json!({}));
    let join = sim.state.latest("j").unwrap();
    assert_eq!(join.status, TaskStatus::CompletedWithErrors);
    assert_eq!(join.reason.as_deref(), Some(why.as_str()));
    assert_eq!(sim.pending(), vec!["after"], "the run goes on");
    assert_eq!(
        sim.state.tasks.iter().filter(|t| t.task_ref == "j").count(),
        1
    );
}

#[test]
fn a_permissive_task_that_fails_lets_its_branch_go_on_and_fails_the_join() {
    // ForkJoinSpec's "fork join permissive failure flow" (FanInOutPermissiveTest).
    let permissive = |r: &str| {
        json!({"name": r, "taskReferenceName": r, "type": "SIMPLE", "permissive": true,
               "taskDefinition": {"retryCount": 0}})
    };
    let def = json!({"name": "w", "tasks": [
        {"name": "f", "taskReferenceName": "f", "type": "FORK_JOIN",
         "forkTasks": [[permissive("t1"), simple("t1b")], [permissive("t2")]]},
        {"name": "j", "taskReferenceName": "j", "type": "JOIN", "joinOn": ["t1b", "t2"]},
        simple("t3")]});
    let mut sim = Sim::start(def, json!({}));
    sim.fail("t1", "Failed...");
    assert_eq!(sim.state.status, RunStatus::Running, "the run goes on");
    assert_eq!(
        sim.pending(),
        vec!["t2", "t1b"],
        "so does the failed task's branch"
    );
    sim.complete("t2", json!({})).complete("t1b", json!({}));
    assert_eq!(row_status(&sim, "j"), "COMPLETED", "t1 is not joined on");
    sim.complete("t3", json!({}));
    assert_eq!(
        sim.state.status,
        RunStatus::Failed,
        "the run fails at its end instead"
    );

    // Joined on: the JOIN fails once the branches are done.
    let def = json!({"name": "w", "tasks": [
        {"name": "f", "taskReferenceName": "f", "type": "FORK_JOIN",
         "forkTasks": [[permissive("t1")], [permissive("t2")]]},
        {"name": "j", "taskReferenceName": "j", "type": "JOIN", "joinOn": ["t1", "t2"]},
        simple("t3")]});
    let mut sim = Sim::start(def, json!({}));
    sim.fail("t1", "Failed...");
    assert_eq!(sim.state.status, RunStatus::Running);
    assert_eq!(row_status(&sim, "j"), "IN_PROGRESS");
    sim.complete("t2", json!({}));
    assert_eq!(sim.state.status, RunStatus::Failed);
    let join = sim.state.latest("j").unwrap();
    assert_eq!(join.status, TaskStatus::Failed);
    assert_eq!(join.reason.as_deref(), Some("Failed..."));
    assert!(sim.state.latest("t3").is_none());
}

#[test]
fn a_run_that_gets_to_its_end_past_a_permissive_failure_fails() {
    let def = json!({"name": "w", "tasks": [
        {"name": "p", "taskReferenceName": "p", "type": "SIMPLE", "permissive": true,
         "taskDefinition": {"retryCount": 0}},
        simple("after")]});
    let mut sim = Sim::start(def, json!({}));
    sim.fail("p", "nope");
    assert_eq!(sim.pending(), vec!["after"]);
    sim.complete("after", json!({}));
    assert_eq!(sim.state.status, RunStatus::Failed);
    let failed = sim.state.latest("p").unwrap();
    assert_eq!(
        sim.state.reason.as_deref(),
        Some(
            format!(
                "Task {} failed with status: FAILED and reason: 'nope'",
                failed.task_id
            )
            .as_str()
        )
    );
    assert_eq!(sim.state.failed_task_refs, vec!["p".to_owned()]);
}

#[test]
fn a_terminate_task_ends_the_run_with_conductors_reason_and_its_workflow_output() {
    let terminate = |status: &str, output: serde_json::Value| {
        json!({"name": "w", "tasks": [
            simple("a"),
            {"name": "end", "taskReferenceName": "end", "type": "TERMINATE",
             "inputParameters": {"terminationStatus": status, "workflowOutput": output}},
            simple("never")]})
    };
    let mut sim = Sim::start(terminate("COMPLETED", json!("${a.output.v}")), json!({}));
    sim.complete("a", json!({"v": 7}));
    assert_eq!(sim.state.status, RunStatus::Completed);
    assert_eq!(
        sim.state.output,
        Some(json!({"output": 7})),
        "a value is wrapped"
    );
    let end = sim.state.latest("end").unwrap();
    assert_eq!(end.output, Some(json!({"output": 7})));
    assert_eq!(
        sim.state.reason,
        Some(format!(
            "Workflow is COMPLETED by TERMINATE task: {}",
            end.task_id
        ))
    );

    let mut sim = Sim::start(
        terminate("FAILED", json!({"k": "${a.output.v}"})),
        json!({}),
    );
    sim.complete("a", json!({"v": 1}));
    assert_eq!(sim.state.status, RunStatus::Failed);
    assert_eq!(
        sim.state.output,
        Some(json!({"k": 1})),
        "a map is the output"
    );
    assert!(sim.state.latest("never").is_none());
}

#[test]
fn a_failed_run_ends_with_its_output_parameters_and_its_failure_workflows_id() {
    let def = json!({"name": "w",
        "outputParameters": {"o1": "${t1.output.ErrorMessage}", "o2": "${workflow.input.x}"},
        "failureWorkflowDefinition": {"name": "cleanup", "tasks": [simple("c")]},
        "tasks": [{"name": "t1", "taskReferenceName": "t1", "type": "SIMPLE",
                   "taskDefinition": {"retryCount": 0}}]});
    let mut sim = Sim::start(def, json!({"x": 2}));
    sim.fail("t1", "boom");
    assert_eq!(sim.state.status, RunStatus::Failed);
    let failure_workflow = crate::interpreter::failure_workflow_id(sim.state.run_id);
    assert_eq!(
        sim.state.output,
        Some(json!({"o1": null, "o2": 2, "conductor.failure_workflow": failure_workflow}))
    );
}

#[test]
fn a_rerun_runs_its_task_with_the_task_input_it_was_given_once() {
    let def = json!({"name": "w", "tasks": [
        {"name": "a", "taskReferenceName": "a", "type": "SIMPLE",
         "inputParameters": {"v": "${workflow.input.v}"},
         "taskDefinition": {"retryCount": 1, "retryDelaySeconds": 0}},
        simple("b")]});
    let mut sim = Sim::start(def, json!({"v": 1}));
    sim.complete("a", json!({})).complete("b", json!({}));
    let mut rerun = sim.reset(&weft::messages::Reset {
        op: weft::messages::Operation::default(),
        target: weft::messages::ResetTarget::Ref {
            task_ref: "a".into(),
            iteration: None,
        },
        new_run_id: uuid::Uuid::from_u128(9),
        reason: None,
        workflow_input: None,
        definition: None,
        fallback: None,
        task_input: Some(json!({"v": "given"})),
    });
    assert_eq!(
        rerun.state.latest("a").unwrap().input,
        json!({"v": "given"})
    );
    // Its retry resolves its input again: the rerun's input was for the rerun.
    rerun.fail("a", "once");
    assert_eq!(rerun.state.latest("a").unwrap().input, json!({"v": 1}));
}

#[test]
fn a_retry_does_not_grant_a_loop_iteration_the_walk_has_left() {
    let permissive = json!({"name": "p", "taskReferenceName": "p", "type": "SIMPLE",
                            "permissive": true});
    let def = json!({"name": "w", "tasks": [
        {"name": "loop", "taskReferenceName": "loop", "type": "DO_WHILE",
         "loopCondition": "$.loop['iteration'] < 2",
         "loopOver": [permissive, simple("x")]}]});
    let mut sim = Sim::start(def, json!({}));
    sim.fail("p", "first");
    sim.complete("x", json!({}));
    sim.complete("p", json!({}));
    sim.fail("x", "second");
    assert_eq!(sim.state.status, RunStatus::Failed);
    let mut retried = retry(&mut sim);
    // x, in the loop's iteration 2, gets one more attempt; p's failure in iteration 1,
    // which the walk will not visit again, is not granted one (it would never be used).
    assert_eq!(retried.pending(), vec!["x"]);
    assert_eq!(retried.state.retry_grants.len(), 0);
    retried.complete("x", json!({}));
    // The run ends as a run with a permissive task that failed for good does.
    assert_eq!(retried.state.status, RunStatus::Failed);
    let reason = retried.state.reason.clone().unwrap_or_default();
    assert!(reason.contains("'first'"), "{reason}");
}

#[test]
fn a_sub_workflow_named_at_run_time_names_the_registered_definition_to_start() {
    use crate::interpreter::{decide, ChildDefinition, Decision};
    let def = json!({"name": "w", "tasks": [
        simple("pick"),
        {"name": "child", "taskReferenceName": "child", "type": "SUB_WORKFLOW",
         "subWorkflowParam": {"name": "${pick.output.flow}", "version": "${pick.output.v}"}}]});
    let mut sim = Sim::start(def, json!({}));
    let pick = sim.state.latest("pick").unwrap().task_id;
    sim.append(weft::messages::Event::TaskCompleted(
        weft::messages::TaskCompleted {
            task_id: pick,
            task_ref: "pick".into(),
            output: json!({"flow": "billing", "v": 3}),
            worker_id: None,
            started_at: None,
            errors: None,
        },
    ));
    let decisions = decide(&sim.state);
    match decisions.as_slice() {
        [Decision::StartChild { definition, .. }] => assert_eq!(
            definition,
            &ChildDefinition::Registered {
                name: "billing".into(),
                version: Some(3)
            }
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_sub_workflow_whose_name_resolves_to_nothing_fails_the_run_saying_so() {
    let def = json!({"name": "w", "tasks": [
        {"name": "child", "taskReferenceName": "child", "type": "SUB_WORKFLOW",
         "subWorkflowParam": {"name": "${workflow.input.flow}"}}]});
    let sim = Sim::start(def, json!({}));
    assert_eq!(sim.state.status, RunStatus::Failed);
    let reason = sim.state.reason.clone().unwrap_or_default();
    assert!(
        reason.contains("subWorkflowParam.name names no workflow"),
        "{reason}"
    );
}

#[test]
fn a_sub_workflow_definition_given_by_an_expression_is_the_child_s() {
    use crate::interpreter::{decide, ChildDefinition, Decision};
    let kid = json!({"name": "kid", "version": 1, "tasks": [simple("k1")]});
    let def = json!({"name": "w", "tasks": [
        {"name": "child", "taskReferenceName": "child", "type": "SUB_WORKFLOW",
         "subWorkflowParam": {"name": "kid", "workflowDefinition": "${workflow.input.def}"}}]});
    let h = crate::history_builder::HistoryBuilder::started(def, json!({"def": kid}));
    match decide(&h.state()).as_slice() {
        [Decision::StartChild {
            definition: ChildDefinition::Frozen(child),
            ..
        }] => assert_eq!(child.tasks[0].task_reference_name, "k1"),
        other => panic!("{other:?}"),
    }
}

/// A group JOIN that failed its run is judged again after a retry in place gives the
/// failed branch one more attempt (the run used to complete without it, the JOIN left
/// CANCELED and its output empty).
#[test]
fn a_group_join_reopened_by_a_retry_judges_again() {
    let mut sim = failed_group();
    assert_eq!(sim.state.status, RunStatus::Failed);
    // Failing again, the group is judged again, and fails its run again.
    let mut again = sim.reset(&retry_command());
    again.fail("job_0", "still no");
    assert_eq!(again.state.status, RunStatus::Failed);
    let judged = again.state.latest("all").unwrap().status.as_str();
    assert_eq!(
        judged, "FAILED_WITH_TERMINAL_ERROR",
        "as at its first judgment"
    );
    assert!(again.state.reason.clone().unwrap().contains("3 of 4"));

    let mut retried = sim.reset(&retry_command());
    assert_eq!(retried.state.status, RunStatus::Running);
    assert_eq!(retried.pending(), vec!["job_0"]);
    retried.complete("job_0", json!({"again": true}));
    assert_eq!(retried.state.status, RunStatus::Completed);
    assert_eq!(
        retried.state.latest("all").unwrap().status.as_str(),
        "COMPLETED"
    );
    let out = retried.state.latest("all").unwrap().output.clone().unwrap();
    assert_eq!(out["succeeded"], json!(4), "{out}");
}
