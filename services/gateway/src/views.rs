//! The JSON shapes the gateway answers, in Conductor's camelCase (API.md).
//!
//! Times are epoch milliseconds, as Conductor's `long` fields, with 0 for "not yet".
//! Absent maps are `{}`, as Conductor's clients expect a map, never `null`.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Map, Value};
use uuid::Uuid;
use weft::store::reads::{EventView, RunView, TaskView};
use weft::store::starts::StartRow;

/// Conductor's `Workflow`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Workflow {
    workflow_id: String,
    workflow_name: String,
    workflow_version: i32,
    status: String,
    sub_status: String,
    input: Value,
    output: Value,
    variables: Value,
    tasks: Vec<Task>,
    create_time: i64,
    start_time: i64,
    end_time: i64,
    update_time: i64,
    reason_for_incompletion: Option<String>,
    failed_reference_task_names: Vec<String>,
    /// The task (definition) names of `failed_reference_task_names`, read from the tasks
    /// (empty when the tasks are not asked for).
    failed_task_names: Vec<String>,
    correlation_id: Option<String>,
    parent_workflow_id: Option<String>,
    run_id: Option<Uuid>,
    /// Signals the run keeps for a WAIT, HUMAN or asynchronous EVENT task it has not
    /// reached yet (`[{name, payload}]`); once it ended, those no task consumed
    /// (docs/task-updates.md). Absent when there are none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pending_signals: Option<Value>,
}

/// Conductor's `Task`, as found in `Workflow.tasks`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Task {
    task_id: Uuid,
    task_type: String,
    task_def_name: String,
    reference_task_name: String,
    status: String,
    input_data: Value,
    output_data: Value,
    retry_count: i32,
    seq: i32,
    iteration: i32,
    scheduled_time: i64,
    start_time: i64,
    end_time: i64,
    update_time: i64,
    /// How long a SCHEDULED task stays out of its queue (a retry's back-off, a
    /// worker's postponement).
    callback_after_seconds: i64,
    /// Conductor's task domain: only workers polling it take the task (docs/domains.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    domain: Option<String>,
    worker_id: Option<String>,
    reason_for_incompletion: Option<String>,
    workflow_instance_id: String,
    workflow_type: String,
    sub_workflow_id: Option<String>,
    /// A later attempt of this task was scheduled.
    retried: bool,
    /// The attempt this one retries.
    #[serde(skip_serializing_if = "Option::is_none")]
    retried_task_id: Option<Uuid>,
    /// Conductor's `workflowTask`: the task's node in the run's definition, as the run
    /// started with it (absent for a task the definition does not hold: a dynamic
    /// fork's branch, a task type resolved at run time).
    #[serde(skip_serializing_if = "Option::is_none")]
    workflow_task: Option<Value>,
}

/// Conductor's `WorkflowStatus`, plus Weft's `subStatus`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowStatus {
    workflow_id: String,
    correlation_id: Option<String>,
    status: String,
    sub_status: String,
    output: Value,
    variables: Value,
}

/// One page of a run's history.
#[derive(Debug, Serialize)]
pub struct HistoryPage {
    events: Vec<HistoryEvent>,
    /// The `after` of the next page; `null` on the last page.
    next: Option<i64>,
}

/// One history event.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HistoryEvent {
    event_id: i64,
    #[serde(rename = "type")]
    kind: String,
    time: i64,
    attributes: Value,
}

/// Conductor's `BulkResponse` for `PUT /api/metadata/workflow`.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BulkResponse {
    /// Names of the definitions written.
    pub bulk_successful_results: Vec<String>,
    /// Name (or list position when the name is missing) → why it was refused.
    pub bulk_error_results: Map<String, Value>,
}

/// Epoch milliseconds, 0 when unset.
pub(crate) fn ms(t: Option<DateTime<Utc>>) -> i64 {
    t.map_or(0, |t| t.timestamp_millis())
}

/// A JSON object, `{}` for absent or null.
pub(crate) fn map_or_empty(v: Option<Value>) -> Value {
    match v {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(v) => v,
    }
}

/// Conductor's `taskType` and `taskDefName` of a stored task's type and name. A worker
/// task's type is its name (SimpleTaskMapper), as the poll answer says; a fork, static
/// or dynamic, is a `FORK` task; forks, joins and branching tasks are named after their
/// type (the task mappers of FORK_JOIN, FORK_JOIN_DYNAMIC, JOIN, EXCLUSIVE_JOIN,
/// DECISION and SWITCH).
pub(crate) fn conductor_type(task_type: String, task_name: String) -> (String, String) {
    match task_type.as_str() {
        "SIMPLE" => (task_name.clone(), task_name),
        "FORK_JOIN" | "FORK_JOIN_DYNAMIC" => ("FORK".to_owned(), "FORK".to_owned()),
        "JOIN" | "EXCLUSIVE_JOIN" | "DECISION" | "SWITCH" => (task_type.clone(), task_type),
        _ => (task_type, task_name),
    }
}

/// Conductor's `iteration` of a task: a DO_WHILE's own is the iteration its body is in
/// (its output's `iteration`, written by the decider as the loop goes and when it ends);
/// any other task's is the loop iteration it ran in (0 outside loops).
pub(crate) fn conductor_iteration(task_type: &str, iteration: i32, output: Option<&Value>) -> i32 {
    let looped = output
        .and_then(|o| o.get("iteration"))
        .and_then(Value::as_i64)
        .and_then(|n| i32::try_from(n).ok());
    match looped {
        Some(n) if task_type == "DO_WHILE" => n,
        _ => iteration,
    }
}

/// Conductor's `referenceTaskName` of a task at loop iteration `iteration` (0 outside
/// loops): a task of a DO_WHILE body carries its iteration as a suffix, `<ref>__<n>`
/// (TaskUtils.appendIteration), from the first iteration on.
pub(crate) fn conductor_ref(task_ref: String, iteration: i32) -> String {
    if iteration > 0 {
        format!("{task_ref}__{iteration}")
    } else {
        task_ref
    }
}

/// Whether `given`, a reference a client sent, names the task `task_ref` at loop
/// iteration `iteration`: the plain reference, or Conductor's with the iteration suffix.
pub(crate) fn names_task(given: &str, task_ref: &str, iteration: i32) -> bool {
    given == task_ref || given == conductor_ref(task_ref.to_owned(), iteration)
}

/// The plain reference of `given` when it carries a loop iteration suffix (`<ref>__<n>`).
pub(crate) fn without_iteration(given: &str) -> Option<&str> {
    let (plain, n) = given.rsplit_once("__")?;
    (!plain.is_empty() && n.parse::<u32>().is_ok_and(|n| n > 0)).then_some(plain)
}

impl Task {
    /// A task row of a run of `workflow_name`.
    pub fn from_row(row: TaskView, workflow_name: &str) -> Self {
        // A SUB_WORKFLOW task names its child in its output, as Conductor does.
        let sub_workflow_id = row
            .output
            .as_ref()
            .and_then(|o| o.get("subWorkflowId"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let (task_type, task_def_name) = conductor_type(row.task_type, row.task_name);
        let iteration = conductor_iteration(&task_type, row.iteration, row.output.as_ref());
        Self {
            task_id: row.task_id,
            task_type,
            task_def_name,
            reference_task_name: conductor_ref(row.task_ref, row.iteration),
            status: row.status,
            input_data: map_or_empty(Some(row.input)),
            output_data: map_or_empty(row.output),
            retry_count: (row.attempt - 1).max(0),
            // Conductor numbers a run's tasks from 1; the store from 0.
            seq: row.seq + 1,
            iteration,
            scheduled_time: ms(Some(row.scheduled_time)),
            start_time: ms(row.start_time),
            end_time: ms(row.end_time),
            update_time: ms(Some(row.update_time)),
            callback_after_seconds: row.callback_after_seconds,
            domain: row.domain,
            worker_id: row.worker_id,
            reason_for_incompletion: row.reason,
            workflow_instance_id: row.workflow_id,
            workflow_type: workflow_name.to_owned(),
            sub_workflow_id,
            retried: false,
            retried_task_id: None,
            workflow_task: None,
        }
    }
}

/// The node of `definition` (a workflow definition's JSON) whose `taskReferenceName` is
/// `task_ref`, searched through every branch, case and loop body.
fn definition_node<'a>(definition: &'a Value, task_ref: &str) -> Option<&'a Value> {
    fn search<'a>(tasks: &'a Value, task_ref: &str) -> Option<&'a Value> {
        tasks.as_array()?.iter().find_map(|task| {
            if task["taskReferenceName"] == task_ref {
                return Some(task);
            }
            let nested = task["decisionCases"]
                .as_object()
                .into_iter()
                .flat_map(|cases| cases.values())
                .chain([&task["defaultCase"], &task["loopOver"]])
                .chain(task["forkTasks"].as_array().into_iter().flatten());
            nested
                .into_iter()
                .find_map(|branch| search(branch, task_ref))
        })
    }
    search(&definition["tasks"], task_ref)
}

impl Workflow {
    /// Each task with its node of `definition`, the run's (Conductor's `workflowTask`).
    pub fn with_workflow_tasks(mut self, definition: &Value) -> Self {
        for task in &mut self.tasks {
            let plain = crate::views::without_iteration(&task.reference_task_name)
                .unwrap_or(&task.reference_task_name);
            task.workflow_task = definition_node(definition, plain).cloned();
        }
        self
    }

    /// A run and (when asked for) its tasks in schedule order.
    pub fn from_run(run: RunView, tasks: Vec<TaskView>) -> Self {
        // Each attempt of a task (same ref, same loop iteration) names the one it
        // retries, which shows it was retried (Conductor's `retriedTaskId`, `retried`).
        let attempts: HashMap<(&str, i32, i32), Uuid> = tasks
            .iter()
            .map(|t| ((t.task_ref.as_str(), t.iteration, t.attempt), t.task_id))
            .collect();
        let links: Vec<(bool, Option<Uuid>)> = tasks
            .iter()
            .map(|t| {
                let at = |attempt| attempts.get(&(t.task_ref.as_str(), t.iteration, attempt));
                (at(t.attempt + 1).is_some(), at(t.attempt - 1).copied())
            })
            .collect();
        let mut failed_task_names: Vec<String> = Vec::new();
        for t in &tasks {
            if run.failed_task_refs.contains(&t.task_ref)
                && !failed_task_names.contains(&t.task_name)
            {
                failed_task_names.push(t.task_name.clone());
            }
        }
        let tasks = tasks
            .into_iter()
            .zip(links)
            .map(|(t, (retried, retried_task_id))| Task {
                retried,
                retried_task_id,
                ..Task::from_row(t, &run.workflow_name)
            })
            .collect();
        Self {
            workflow_id: run.workflow_id,
            workflow_name: run.workflow_name,
            workflow_version: run.workflow_version,
            status: run.status,
            sub_status: run.sub_status,
            input: map_or_empty(Some(run.input)),
            output: map_or_empty(run.output),
            variables: map_or_empty(Some(run.variables)),
            tasks,
            create_time: ms(Some(run.start_time)),
            start_time: ms(Some(run.start_time)),
            end_time: ms(run.end_time),
            update_time: ms(Some(run.update_time)),
            reason_for_incompletion: run.reason,
            failed_reference_task_names: run.failed_task_refs,
            failed_task_names,
            correlation_id: run.correlation_id,
            parent_workflow_id: run.parent_workflow_id,
            run_id: Some(run.run_id),
            pending_signals: run.pending_signals,
        }
    }

    /// A start the decider has not applied yet: RUNNING, waiting in its queue.
    pub fn from_start(start: StartRow) -> Self {
        let accepted = ms(Some(start.created_at));
        Self {
            workflow_id: start.workflow_id,
            workflow_name: start.workflow_name,
            workflow_version: start.workflow_version,
            status: "RUNNING".into(),
            sub_status: "QUEUING".into(),
            input: map_or_empty(Some(start.input)),
            output: Value::Object(Map::new()),
            variables: Value::Object(Map::new()),
            tasks: Vec::new(),
            create_time: accepted,
            start_time: accepted,
            end_time: 0,
            update_time: accepted,
            reason_for_incompletion: None,
            failed_reference_task_names: Vec::new(),
            failed_task_names: Vec::new(),
            correlation_id: start.correlation_id,
            parent_workflow_id: None,
            run_id: None,
            pending_signals: None,
        }
    }
}

impl From<Workflow> for WorkflowStatus {
    fn from(w: Workflow) -> Self {
        Self {
            workflow_id: w.workflow_id,
            correlation_id: w.correlation_id,
            status: w.status,
            sub_status: w.sub_status,
            output: w.output,
            variables: w.variables,
        }
    }
}

impl HistoryPage {
    /// A page built from up to `limit + 1` fetched rows: the extra row only tells that
    /// another page exists.
    pub fn from_rows(mut rows: Vec<EventView>, limit: usize) -> Self {
        let more = rows.len() > limit;
        rows.truncate(limit);
        let next = if more {
            rows.last().map(|e| e.event_id)
        } else {
            None
        };
        let events = rows
            .into_iter()
            .map(|e| HistoryEvent {
                event_id: e.event_id,
                kind: e.kind,
                time: e.time.timestamp_millis(),
                // A run's WorkflowStarted carries its definition: hook secrets masked.
                attributes: crate::secrets::masked(e.attributes),
            })
            .collect();
        Self { events, next }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(id: i64) -> EventView {
        EventView {
            event_id: id,
            kind: "TaskScheduled".into(),
            time: DateTime::from_timestamp_millis(1_700_000_000_123).unwrap_or_default(),
            attributes: Value::Null,
        }
    }

    #[test]
    fn a_loop_task_is_named_with_its_iteration_and_found_by_either_name() {
        assert_eq!(conductor_ref("t".into(), 0), "t");
        assert_eq!(conductor_ref("t".into(), 2), "t__2");
        assert!(names_task("t", "t", 2));
        assert!(names_task("t__2", "t", 2));
        assert!(!names_task("t__1", "t", 2));
        assert!(!names_task("t__2", "t", 0));
        assert!(!names_task("t__x", "t", 2));
        assert!(!names_task("tt__2", "t", 2));
        assert_eq!(without_iteration("t__2"), Some("t"));
        assert_eq!(without_iteration("a__b__12"), Some("a__b"));
        assert_eq!(without_iteration("t__0"), None);
        assert_eq!(without_iteration("t__x"), None);
        assert_eq!(without_iteration("__2"), None);
        assert_eq!(without_iteration("t"), None);
    }

    #[test]
    fn a_task_s_definition_node_is_found_in_every_branch_case_and_loop() {
        let definition = serde_json::json!({"tasks": [
            {"taskReferenceName": "a"},
            {"taskReferenceName": "f", "forkTasks": [[{"taskReferenceName": "b",
                                                       "permissive": true}]]},
            {"taskReferenceName": "s", "decisionCases": {"x": [{"taskReferenceName": "c"}]},
             "defaultCase": [{"taskReferenceName": "d"}]},
            {"taskReferenceName": "l", "loopOver": [{"taskReferenceName": "e"}]}]});
        for r in ["a", "f", "b", "s", "c", "d", "l", "e"] {
            let node = definition_node(&definition, r).unwrap_or_else(|| panic!("{r}"));
            assert_eq!(node["taskReferenceName"], r);
        }
        assert_eq!(
            definition_node(&definition, "b").unwrap()["permissive"],
            true
        );
        assert!(definition_node(&definition, "z").is_none());
    }

    #[test]
    fn history_page_points_at_the_next_one_only_when_there_is_more() {
        let page = HistoryPage::from_rows((1..=3).map(event).collect(), 2);
        assert_eq!(page.events.len(), 2);
        assert_eq!(page.next, Some(2));
        let last = HistoryPage::from_rows((3..=3).map(event).collect(), 2);
        assert_eq!(last.next, None);
        assert_eq!(last.events[0].time, 1_700_000_000_123);
    }
}
