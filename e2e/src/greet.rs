//! The `greet` workflow the example worker serves, and what a correct run of it
//! looks like (output, history, tasks).

use serde_json::{json, Value};

use crate::client::HistoryEvent;

/// The activities of `greet`, as served by `weft-worker-example`.
pub const TASKS: [&str; 3] = ["make_name", "shout", "count"];
/// The task references of `greet`, in execution order.
pub const REFS: [&str; 3] = ["n", "s", "c"];

/// The `greet` definition (version 1).
pub fn definition() -> Value {
    json!({
        "name": "greet",
        "version": 1,
        "tasks": [
            {"name": "make_name", "taskReferenceName": "n", "type": "SIMPLE",
             "inputParameters": {"first": "${workflow.input.first}"}},
            {"name": "shout", "taskReferenceName": "s", "type": "SIMPLE",
             "inputParameters": {"text": "${n.output.name}"}},
            {"name": "count", "taskReferenceName": "c", "type": "SIMPLE",
             "inputParameters": {"text": "${s.output.text}", "n": "${workflow.input.n}"}}
        ],
        "outputParameters": {"result": "${c.output.result}", "name": "${n.output.name}"}
    })
}

/// The input `{first, n}`.
pub fn input(first: &str, n: u32) -> Value {
    json!({ "first": first, "n": n })
}

/// The output a run with [`input`]`(first, n)` must end with.
pub fn expected_output(first: &str, n: u32) -> Value {
    let name = format!("{first} Weft");
    json!({ "result": format!("{} x{n}", name.to_uppercase()), "name": name })
}

/// The event types whose order a correct run fixes.
const ORDERED: [&str; 6] = [
    "WorkflowStarted",
    "TaskScheduled",
    "TaskCompleted",
    "TaskFailed",
    "WorkflowCompleted",
    "WorkflowFailed",
];

/// Checks a completed run's history: event ids contiguous from 1; in order
/// `WorkflowStarted`, then for `n`, `s`, `c`: `TaskScheduled` then `TaskCompleted`,
/// then `WorkflowCompleted`; so each activity result is recorded exactly once. Events
/// of other types (e.g. a future `TaskStarted`) may appear in between.
pub fn check_history(events: &[HistoryEvent]) -> Result<(), String> {
    let render = || {
        events
            .iter()
            .map(|e| format!("{}:{}({})", e.event_id, e.kind, e.attributes["taskRef"]))
            .collect::<Vec<_>>()
            .join(", ")
    };
    for (i, e) in events.iter().enumerate() {
        if e.event_id != i as i64 + 1 {
            return Err(format!(
                "event ids not contiguous from 1 at position {i}: [{}]",
                render()
            ));
        }
    }
    let mut expected = vec![("WorkflowStarted".to_owned(), None)];
    for r in REFS {
        expected.push(("TaskScheduled".to_owned(), Some(r.to_owned())));
        expected.push(("TaskCompleted".to_owned(), Some(r.to_owned())));
    }
    expected.push(("WorkflowCompleted".to_owned(), None));
    let actual: Vec<(String, Option<String>)> = events
        .iter()
        .filter(|e| ORDERED.contains(&e.kind.as_str()))
        .map(|e| {
            let task_ref = e.kind.starts_with("Task").then(|| {
                e.attributes["taskRef"]
                    .as_str()
                    .unwrap_or("<no taskRef>")
                    .to_owned()
            });
            (e.kind.clone(), task_ref)
        })
        .collect();
    if actual != expected {
        return Err(format!(
            "history out of order; expected WorkflowStarted, (TaskScheduled, TaskCompleted) \
             for n, s, c, WorkflowCompleted; got [{}]",
            render()
        ));
    }
    Ok(())
}

/// Checks a completed run's Workflow JSON: status COMPLETED, the expected output and
/// exactly three tasks, `n`, `s`, `c`, each COMPLETED once.
pub fn check_run(wf: &Value, first: &str, n: u32) -> Result<(), String> {
    check_tasks(wf, first, n, false)
}

/// [`check_run`], where an attempt may also have timed out before the one that
/// completed: what a worker frozen past a task's response timeout causes (the chaos
/// soak pauses one). Activities run at least once; each task still completes once.
pub fn check_run_after_timeouts(wf: &Value, first: &str, n: u32) -> Result<(), String> {
    check_tasks(wf, first, n, true)
}

fn check_tasks(wf: &Value, first: &str, n: u32, timeouts: bool) -> Result<(), String> {
    if wf["status"] != "COMPLETED" {
        return Err(format!(
            "status {} (expected COMPLETED): {wf}",
            wf["status"]
        ));
    }
    let want = expected_output(first, n);
    if wf["output"] != want {
        return Err(format!("output {} (expected {want})", wf["output"]));
    }
    let tasks = wf["tasks"].as_array().cloned().unwrap_or_default();
    let summary: Vec<String> = tasks
        .iter()
        .map(|t| format!("{}={}", t["referenceTaskName"], t["status"]))
        .collect();
    let count = |r: &str, status: &str| {
        tasks
            .iter()
            .filter(|t| t["referenceTaskName"] == r && t["status"] == status)
            .count()
    };
    let timed_out: usize = match timeouts {
        true => REFS.iter().map(|r| count(r, "TIMED_OUT")).sum(),
        false => 0,
    };
    let ok = tasks.len() == 3 + timed_out && REFS.iter().all(|r| count(r, "COMPLETED") == 1);
    if !ok {
        let also = if timeouts {
            " (and timed-out attempts)"
        } else {
            ""
        };
        return Err(format!(
            "expected exactly 3 tasks n, s, c each COMPLETED once{also}; got [{}]",
            summary.join(", ")
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(id: i64, kind: &str, task_ref: Option<&str>) -> HistoryEvent {
        HistoryEvent {
            event_id: id,
            kind: kind.into(),
            time: Value::Null,
            attributes: task_ref.map_or(json!({}), |r| json!({ "taskRef": r })),
        }
    }

    fn good() -> Vec<HistoryEvent> {
        let mut v = vec![ev(1, "WorkflowStarted", None)];
        for r in REFS {
            v.push(ev(v.len() as i64 + 1, "TaskScheduled", Some(r)));
            v.push(ev(v.len() as i64 + 1, "TaskCompleted", Some(r)));
        }
        v.push(ev(v.len() as i64 + 1, "WorkflowCompleted", None));
        v
    }

    #[test]
    fn a_correct_history_passes_and_a_duplicate_result_does_not() {
        assert_eq!(check_history(&good()), Ok(()));
        let mut dup = good();
        dup.insert(3, ev(4, "TaskCompleted", Some("n")));
        for (i, e) in dup.iter_mut().enumerate() {
            e.event_id = i as i64 + 1;
        }
        assert!(check_history(&dup).is_err());
        let mut gap = good();
        gap[3].event_id = 9;
        assert!(check_history(&gap).unwrap_err().contains("contiguous"));
    }

    #[test]
    fn expected_output_matches_the_contract() {
        assert_eq!(
            expected_output("Ada", 3),
            json!({"result": "ADA WEFT x3", "name": "Ada Weft"})
        );
    }

    #[test]
    fn a_timed_out_attempt_before_the_completed_one_passes_only_the_soaks_check() {
        let want = expected_output("S1", 3);
        let run = |tasks: Vec<(&str, &str)>| {
            json!({
                "status": "COMPLETED",
                "output": want,
                "tasks": tasks
                    .into_iter()
                    .map(|(r, s)| json!({"referenceTaskName": r, "status": s}))
                    .collect::<Vec<_>>(),
            })
        };
        let retried = run(vec![
            ("n", "COMPLETED"),
            ("s", "COMPLETED"),
            ("c", "TIMED_OUT"),
            ("c", "COMPLETED"),
        ]);
        assert!(check_run(&retried, "S1", 3).is_err());
        assert!(check_run_after_timeouts(&retried, "S1", 3).is_ok());
        let failed = run(vec![
            ("n", "COMPLETED"),
            ("s", "COMPLETED"),
            ("c", "FAILED"),
            ("c", "COMPLETED"),
        ]);
        assert!(check_run_after_timeouts(&failed, "S1", 3).is_err());
        let twice = run(vec![
            ("n", "COMPLETED"),
            ("s", "COMPLETED"),
            ("c", "COMPLETED"),
            ("c", "COMPLETED"),
        ]);
        assert!(check_run_after_timeouts(&twice, "S1", 3).is_err());
    }
}
