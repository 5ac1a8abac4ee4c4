//! The invariants every run is checked against once the soak is over.

use std::collections::{HashMap, HashSet};

use tokio::time::Instant;

use serde_json::Value;
use weft_e2e::{Client, HistoryEvent};

use crate::effects::Effects;
use crate::events::Received;
use crate::workload::Kind;

/// Event types that end a task's attempt.
const ATTEMPT_ENDS: [&str; 3] = ["TaskCompleted", "TaskFailed", "TaskTimedOut"];

/// Every broken invariant of the run of `kind` number `n` with `workflow_id`: its end
/// and output, its history, its effects and its lifecycle events. A hook call not yet
/// received is waited for until `hooks_deadline`.
pub async fn check_run(
    client: &Client,
    effects: &Effects,
    events: &Received,
    run: (Kind, u64, &str),
    hooks_deadline: Instant,
) -> Vec<String> {
    let (kind, n, workflow_id) = run;
    let mut problems = Vec::new();
    let wf = match client.get(workflow_id).await {
        Ok(wf) => wf,
        Err(e) => {
            return vec![format!(
                "{kind:?} run {n} ({workflow_id}): not readable: {e:#}"
            )]
        }
    };
    let status = wf["status"].as_str().unwrap_or_default();
    if status != kind.expected_status() {
        problems.push(format!(
            "{kind:?} run {n} ({workflow_id}): ended {status}, expected {} ({})",
            kind.expected_status(),
            wf["reasonForIncompletion"]
        ));
        return problems;
    }
    if let Err(e) = crate::workload::check_output(kind, n, &wf) {
        problems.push(format!("{workflow_id}: {e}"));
    }
    let history = match client.history(workflow_id).await {
        Ok(history) => history,
        Err(e) => {
            problems.push(format!("{workflow_id}: history not readable: {e:#}"));
            return problems;
        }
    };
    problems.extend(
        check_history(&history)
            .into_iter()
            .chain(events.missing(workflow_id, &history))
            .chain(check_effects(effects, kind, n, &wf))
            .chain(check_hooks(effects, kind, &wf, &history, hooks_deadline).await)
            .map(|p| format!("{kind:?} run {n} ({workflow_id}): {p}")),
    );
    problems
}

/// The hooks the soak declares reached its server: each timed-out attempt of a task of
/// the soak's own definitions fired its `onTimeout` hook, each Http run its
/// `onComplete` (each at least once; a reset's awaited rollback is checked with the
/// effects).
async fn check_hooks(
    effects: &Effects,
    kind: Kind,
    wf: &Value,
    history: &[HistoryEvent],
    deadline: Instant,
) -> Vec<String> {
    let mut problems = Vec::new();
    if kind.declares_timeout_hooks() {
        // Only SIMPLE tasks declare the hook (`workload::definitions`): an Http run's HTTP
        // task that timed out (its worker killed mid-call) has none to fire.
        let simple: std::collections::HashSet<String> = history
            .iter()
            .filter(|e| e.kind == "TaskScheduled" && e.attributes["taskType"] == "SIMPLE")
            .map(|e| task_id(&e.attributes))
            .collect();
        let timed_out = history
            .iter()
            .filter(|e| e.kind == "TaskTimedOut" && simple.contains(&task_id(&e.attributes)));
        for e in timed_out {
            let task = task_id(&e.attributes);
            let key = format!("timeout-hook:{task}");
            effects.hook_checked("onTimeout");
            if effects.executions_by(&key, deadline).await == 0 {
                problems.push(format!(
                    "task {task} timed out (history event {}), but its onTimeout hook \
                     never called the server",
                    e.event_id
                ));
            }
        }
    }
    if kind == Kind::Http {
        let id = wf["workflowId"].as_str().unwrap_or_default();
        let key = format!("complete-hook:{id}");
        effects.hook_checked("onComplete");
        if effects.executions_by(&key, deadline).await == 0 {
            problems.push("COMPLETED, but its onComplete hook never called the server".into());
        }
    }
    problems
}

/// A history's invariants: event ids contiguous from 1; each task's attempt ended at
/// most once (so a result, a timer or a signal was applied exactly once); the run ended
/// once, last.
pub fn check_history(events: &[HistoryEvent]) -> Vec<String> {
    let mut problems = Vec::new();
    for (i, e) in events.iter().enumerate() {
        if e.event_id != i as i64 + 1 {
            problems.push(format!(
                "event ids not contiguous: {} at position {i}",
                e.event_id
            ));
            break;
        }
    }
    let mut ends: HashMap<String, u32> = HashMap::new();
    for e in events
        .iter()
        .filter(|e| ATTEMPT_ENDS.contains(&e.kind.as_str()))
    {
        let id = task_id(&e.attributes);
        *ends.entry(id).or_default() += 1;
    }
    for (task, n) in ends.iter().filter(|(_, n)| **n > 1) {
        problems.push(format!("task {task} ended {n} times in history"));
    }
    let run_ends = events
        .iter()
        .filter(|e| {
            matches!(
                e.kind.as_str(),
                "WorkflowCompleted" | "WorkflowFailed" | "WorkflowTerminated" | "WorkflowTimedOut"
            )
        })
        .count();
    if run_ends != 1 {
        problems.push(format!("the run ended {run_ends} times in history"));
    }
    problems
}

/// A retry run's worker fails the run's first execution, so its output comes from a
/// later one: attempt 2 or more, or attempt 1 executed twice (a task delivered again
/// after a fault, as at-least-once delivery allows: the decider takes whichever result
/// of the attempt comes first and ignores the other).
fn check_retried(effects: &Effects, wf: &Value) -> Option<String> {
    let attempt = wf["output"]["attempt"].as_i64()?;
    if attempt >= 2 {
        return None;
    }
    let tasks = wf["tasks"].as_array().cloned().unwrap_or_default();
    let completed = tasks.iter().find(|t| t["status"] == "COMPLETED")?;
    let id = completed["taskId"].as_str().unwrap_or_default();
    let runs = effects.executions(&format!("task:{id}"));
    (runs < 2).then(|| {
        format!(
            "attempt {attempt} completed, but its task {id} ran {runs} time(s) on the worker, \
             whose first execution of a run fails"
        )
    })
}

/// The tasks the soak's worker ran for a run (`run`) that are none of the run's attempts
/// (`tasks`, every attempt listed, failed and timed out ones too): an activity sent for
/// a decision that was never committed and then made otherwise, which a worker must
/// never be given (docs/eager-dispatch.md, "Dispatch while committing").
fn tasks_of_no_attempt(run: &HashSet<String>, tasks: &[Value]) -> Vec<String> {
    let attempts: HashSet<&str> = tasks.iter().filter_map(|t| t["taskId"].as_str()).collect();
    let mut strays: Vec<&String> = run
        .iter()
        .filter(|id| !attempts.contains(id.as_str()))
        .collect();
    strays.sort();
    strays
        .into_iter()
        .map(|id| {
            format!("the worker ran task {id} of the workflow, which is none of its run's attempts")
        })
        .collect()
}

/// The task id an event's attributes name.
fn task_id(attributes: &Value) -> String {
    attributes["taskId"]
        .as_str()
        .or(attributes["task_id"].as_str())
        .unwrap_or("<none>")
        .to_owned()
}

/// Effects the soak counted itself: each completed activity of its own worker ran at
/// least once (a retry run's output from a second execution); each HTTP run's server
/// was called at least once; each reset run's rollback hook called the server at least
/// once.
fn check_effects(effects: &Effects, kind: Kind, n: u64, wf: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    let tasks = wf["tasks"].as_array().cloned().unwrap_or_default();
    if matches!(kind, Kind::Retry | Kind::Heartbeat) {
        for t in tasks.iter().filter(|t| t["status"] == "COMPLETED") {
            let id = t["taskId"].as_str().unwrap_or_default();
            if effects.executions(&format!("task:{id}")) == 0 {
                problems.push(format!("task {id} COMPLETED but never ran on the worker"));
            }
        }
        let workflow_id = wf["workflowId"].as_str().unwrap_or_default();
        problems.extend(tasks_of_no_attempt(&effects.tasks_run(workflow_id), &tasks));
    }
    match kind {
        Kind::Retry => problems.extend(check_retried(effects, wf)),
        Kind::Http if effects.executions(&format!("http:{n}")) == 0 => {
            problems.push("the HTTP task COMPLETED but the server was never called".into());
        }
        Kind::Reset => {
            let id = wf["workflowId"].as_str().unwrap_or_default();
            effects.hook_checked("onRollback");
            if effects.executions(&format!("hook:{id}")) == 0 {
                problems.push("reset, but its rollback hook never called the server".into());
            }
        }
        _ => {}
    }
    problems
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_retry_runs_first_attempt_passes_only_when_its_task_ran_twice() {
        let effects = Effects::default();
        let wf = json!({"output": {"attempt": 1},
                        "tasks": [{"status": "COMPLETED", "taskId": "t1"}]});
        effects.count("task:t1".into());
        assert!(
            check_retried(&effects, &wf).is_some(),
            "ran once: its one run failed"
        );
        effects.count("task:t1".into());
        assert_eq!(check_retried(&effects, &wf), None, "delivered twice");
        let later = json!({"output": {"attempt": 2},
                           "tasks": [{"status": "COMPLETED", "taskId": "t2"}]});
        assert_eq!(check_retried(&Effects::default(), &later), None);
    }

    #[test]
    fn a_task_the_worker_ran_that_is_none_of_the_runs_attempts_is_a_violation() {
        let tasks = [
            json!({"status": "FAILED", "taskId": "attempt-1"}),
            json!({"status": "COMPLETED", "taskId": "attempt-2"}),
        ];
        let ran: HashSet<String> = ["attempt-1", "attempt-2"].map(String::from).into();
        assert!(
            tasks_of_no_attempt(&ran, &tasks).is_empty(),
            "both are attempts"
        );
        let with_stray: HashSet<String> = ["attempt-1", "of-no-run", "attempt-2"]
            .map(String::from)
            .into();
        let problems = tasks_of_no_attempt(&with_stray, &tasks);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("of-no-run"), "{problems:?}");
    }
}
