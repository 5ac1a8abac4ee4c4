//! Skip (DESIGN.md §7): a task that is scheduled or running ends SKIPPED at once (its
//! worker is told to stop, its late result is ignored); a task not reached yet is
//! skipped when reached. Either way the run goes on as if it had completed with the
//! operator's output, and the skip is in history like any other task, so a later reset
//! can target it.

use serde_json::{Map, Value};
use weft::dsl::{TaskType, WorkflowTask};
use weft::messages::{Event, SkipRequested, SkipTask, TaskSkipped};

use crate::apply::{conflict, require_running, Applied};
use crate::state::{find_task, RunState};

/// The events of `skip` on `state`, or why it does not apply.
pub fn skip(state: &RunState, skip: &SkipTask) -> Applied {
    if let Some(refused) = require_running(state, "skip") {
        return refused;
    }
    let task_ref = &skip.task_ref;
    let node = find_task(&state.definition.tasks, task_ref);
    // Tasks of a dynamic fork are not in the definition, only in the run. The ref is a
    // path segment, the resource the request names: unknown, it is a 404 (as the task
    // API's update by ref).
    if node.is_none() && state.latest(task_ref).is_none() {
        return Applied::Rejected {
            status: 404,
            message: format!(
                "task {task_ref:?} is not in workflow {} (version {})",
                state.definition.name, state.definition.version
            ),
        };
    }
    let output = match &skip.output {
        Value::Null => Value::Object(Map::new()),
        other => other.clone(),
    };
    match state.latest(task_ref) {
        Some(t) if t.status.is_pending() => {
            if !node.is_none_or(runs_alone) {
                return conflict(format!(
                    "task {task_ref:?} is a {} in progress: skip the tasks inside it instead",
                    t.task_type
                ));
            }
            Applied::Events(vec![Event::TaskSkipped(TaskSkipped {
                task_id: t.task_id,
                task_ref: task_ref.clone(),
                output,
            })])
        }
        Some(t) if !inside_loop(&state.definition.tasks, task_ref, false) => conflict(format!(
            "task {task_ref:?} is already {}",
            t.status.as_str()
        )),
        _ if state.pending_skips.iter().any(|p| &p.task_ref == task_ref) => {
            conflict(format!("a skip of task {task_ref:?} is already pending"))
        }
        // Not reached yet (or, in a loop body, not reached in the next iteration yet).
        _ => Applied::Events(vec![Event::SkipRequested(SkipRequested {
            task_ref: task_ref.clone(),
            input: skip.input.clone(),
            output,
        })]),
    }
}

/// Tasks that can be skipped while in progress: those that wait for one thing (a
/// worker, a child run, a signal, a person, a timer, a broker's confirmation, the tasks
/// an EXCLUSIVE_JOIN takes its output from), not those whose progress is their
/// subtree's (a JOIN, a DO_WHILE, a dynamic fork).
fn runs_alone(task: &WorkflowTask) -> bool {
    matches!(
        task.task_type(),
        Some(
            TaskType::Simple
                | TaskType::Http
                | TaskType::Dynamic
                | TaskType::SubWorkflow
                | TaskType::Wait
                | TaskType::Human
                | TaskType::Event
                | TaskType::ExclusiveJoin
        )
    )
}

/// Whether `task_ref` sits inside a DO_WHILE body of `tasks`.
fn inside_loop(tasks: &[WorkflowTask], task_ref: &str, in_loop: bool) -> bool {
    tasks.iter().any(|t| {
        if t.task_reference_name == task_ref {
            return in_loop;
        }
        let looping = in_loop || t.task_type() == Some(TaskType::DoWhile);
        t.children()
            .into_iter()
            .any(|list| inside_loop(list, task_ref, looping))
    })
}
