//! FORK_JOIN_DYNAMIC: the branches come from the task's input at run time, one task per
//! branch, and are recorded in the fork's output when it is reached, so the walk (and a
//! replay) afterwards uses exactly the recorded list.
//!
//! Two shapes, as Conductor: `dynamicForkTasksParam` names an input holding a list of
//! workflow tasks and `dynamicForkTasksInputParamName` one holding `{ref: input}`; or
//! `inputParameters.forkTaskName` (with an optional `forkTaskType`, SIMPLE by default)
//! and `forkTaskInputs`, a list of inputs, each run by a task `<forkTaskName>_<i>`.

use serde_json::{json, Value};
use weft::dsl::{TaskType, WorkflowTask};

use super::walk::{Flow, Walker};
use crate::state::{find_task, TaskState, TaskStatus};

impl Walker<'_> {
    /// `tolerate_failures`: the JOIN after this fork carries `successPercent` (a group of
    /// children): a branch that ends failed is finished, not fatal; the JOIN judges.
    pub(super) fn dynamic_fork(
        &self,
        task: &WorkflowTask,
        latest: Option<&TaskState>,
        tolerate_failures: bool,
    ) -> Flow {
        if latest.is_none() {
            let input = self.input(task, 1);
            return match self.branches(task, &input) {
                Ok(branches) => {
                    let refs: Vec<&str> = branches
                        .iter()
                        .map(|b| b.task_reference_name.as_str())
                        .collect();
                    let output = json!({ "forkedTasks": refs, "forkedTaskDefs": branches });
                    Flow::Waiting(vec![self.complete(
                        task,
                        TaskType::ForkJoinDynamic,
                        input,
                        output,
                        None,
                    )])
                }
                Err(why) => self.fail_unless_optional(task, TaskType::ForkJoinDynamic, input, &why),
            };
        }
        // An optional dynamic fork whose input named no branches runs none.
        if latest.is_some_and(|t| {
            matches!(
                t.status,
                TaskStatus::CompletedWithErrors
                    | TaskStatus::Failed
                    | TaskStatus::FailedWithTerminalError
            )
        }) {
            return Flow::Done;
        }
        let mut branches = Vec::new();
        for branch in self.recorded_branches(task).iter() {
            // A branch that completed has nothing more to decide: skipped without its
            // walk, which a fork of thousands would pay for each at every command.
            let completed = self
                .state
                .latest_at(&branch.task_reference_name, self.iteration)
                .is_some_and(|t| t.status == TaskStatus::Completed);
            if completed {
                continue;
            }
            match self.task(branch) {
                Flow::Done => {}
                Flow::Waiting(d) => branches.push(d),
                Flow::Stop(_) if tolerate_failures => {}
                stop @ Flow::Stop(_) => return stop,
            }
        }
        if branches.is_empty() {
            Flow::Done
        } else {
            Flow::Waiting(super::walk::settle_first(branches))
        }
    }

    /// The refs a dynamic fork opened (from its recorded output).
    pub(super) fn forked_refs(&self, fork: &WorkflowTask) -> Vec<String> {
        self.recorded_branches(fork)
            .iter()
            .map(|b| b.task_reference_name.clone())
            .collect()
    }

    fn recorded_branches(&self, fork: &WorkflowTask) -> std::sync::Arc<[WorkflowTask]> {
        self.state
            .latest_at(&fork.task_reference_name, self.iteration)
            .map(|t| self.state.forked_branches(t))
            .unwrap_or_default()
    }

    /// The branch tasks, with their inputs in place, checked.
    fn branches(&self, task: &WorkflowTask, input: &Value) -> Result<Vec<WorkflowTask>, String> {
        let param = |key: &str| {
            task.extra
                .get(key)
                .and_then(Value::as_str)
                .unwrap_or_default()
        };
        if !param("dynamicForkJoinTasksParam").is_empty() {
            return Err(
                "the legacy dynamicForkJoinTasksParam is not supported yet; use \
                        dynamicForkTasksParam with dynamicForkTasksInputParamName"
                    .to_owned(),
            );
        }
        let mut branches: Vec<WorkflowTask> = if let Some(child) =
            input["forkTaskWorkflow"].as_str()
        {
            // A group of child runs: the definition frozen at start, or, named only now,
            // the registered one, read when each child is started.
            let mut param = json!({"name": child});
            match task
                .extra
                .get("forkTaskWorkflowDefinition")
                .filter(|d| d.is_object())
            {
                Some(definition) => param["workflowDefinition"] = definition.clone(),
                None => {
                    if let Some(version) = input.get("forkTaskWorkflowVersion") {
                        param["version"] = version.clone();
                    }
                }
            }
            let inputs = input["forkTaskInputs"]
                .as_array()
                .ok_or("inputParameters.forkTaskInputs must be a list of inputs")?;
            inputs
                .iter()
                .enumerate()
                .map(|(i, one)| {
                    serde_json::from_value(json!({
                        "name": child, "taskReferenceName": format!("{child}_{i}"),
                        "type": "SUB_WORKFLOW", "inputParameters": one,
                        "subWorkflowParam": param}))
                    .map_err(|e| format!("forkTaskInputs[{i}]: {e}"))
                })
                .collect::<Result<_, _>>()?
        } else if let Some(name) = input["forkTaskName"].as_str() {
            let kind = input["forkTaskType"].as_str().unwrap_or("SIMPLE");
            let inputs = input["forkTaskInputs"]
                .as_array()
                .ok_or("inputParameters.forkTaskInputs must be a list of inputs")?;
            inputs
                .iter()
                .enumerate()
                .map(|(i, one)| {
                    serde_json::from_value(json!({
                        "name": name, "taskReferenceName": format!("{name}_{i}"),
                        "type": kind, "inputParameters": one}))
                    .map_err(|e| format!("forkTaskInputs[{i}]: {e}"))
                })
                .collect::<Result<_, _>>()?
        } else {
            let tasks_param = param("dynamicForkTasksParam");
            let list = input
                .get(tasks_param)
                .and_then(Value::as_array)
                .ok_or_else(|| {
                    format!("input {tasks_param:?} (dynamicForkTasksParam) must be a list of tasks")
                })?;
            let inputs_param = param("dynamicForkTasksInputParamName");
            let inputs = input.get(inputs_param).filter(|m| !m.is_null());
            if let Some(other) = inputs.filter(|m| !m.is_object()) {
                return Err(format!(
                    "Input to the dynamically forked tasks is not a map -> expecting a map \
                     of K,V but found {other} (input {inputs_param:?})"
                ));
            }
            list.iter()
                .enumerate()
                .map(|(i, raw)| {
                    let mut t: WorkflowTask = serde_json::from_value(raw.clone())
                        .map_err(|e| format!("{tasks_param}[{i}]: {e}"))?;
                    match inputs.and_then(|m| m.get(&t.task_reference_name)) {
                        None | Some(Value::Null) => {}
                        Some(Value::Object(own)) => t.input_parameters = own.clone(),
                        Some(other) => {
                            return Err(format!(
                                "{inputs_param}.{}: the input of a forked task must be a map, \
                                 found {other}",
                                t.task_reference_name
                            ))
                        }
                    }
                    Ok(t)
                })
                .collect::<Result<_, String>>()?
        };
        let cap = self.state.max_fork_branches;
        if branches.len() > cap {
            return Err(format!(
                "{} branches; at most {cap} (WEFT_MAX_FORK_BRANCHES)",
                branches.len()
            ));
        }
        let mut seen = std::collections::HashSet::new();
        for (i, b) in branches.iter_mut().enumerate() {
            if b.task_reference_name.is_empty() {
                return Err(format!("forked task {i} has no taskReferenceName"));
            }
            match b.task_type() {
                None => {
                    return Err(format!(
                        "forked task {:?} is of unknown type {}",
                        b.task_reference_name, b.kind
                    ))
                }
                Some(k) if !forkable(k) => {
                    return Err(format!(
                        "forked task {:?} is of type {}; a dynamic fork's branch is one task of \
                         any type but a container (FORK_JOIN, FORK_JOIN_DYNAMIC, DO_WHILE, SWITCH, \
                         DECISION) or a JOIN",
                        b.task_reference_name, b.kind
                    ))
                }
                Some(_) => {}
            }
            let clash = find_task(&self.state.definition.tasks, &b.task_reference_name).is_some()
                || self
                    .state
                    .latest_at(&b.task_reference_name, self.iteration)
                    .is_some();
            if clash || !seen.insert(b.task_reference_name.clone()) {
                return Err(format!(
                    "forked taskReferenceName {:?} is already used in this run",
                    b.task_reference_name
                ));
            }
        }
        Ok(branches)
    }
}

/// Whether a dynamic fork may run a task of type `k` as a branch: every type Conductor
/// forks but the containers, whose nested tasks would have no place in the run's
/// definition (their refs are looked up there), and the joins.
fn forkable(k: TaskType) -> bool {
    !matches!(
        k,
        TaskType::ForkJoin
            | TaskType::ForkJoinDynamic
            | TaskType::DoWhile
            | TaskType::Switch
            | TaskType::Decision
            | TaskType::Join
            | TaskType::ExclusiveJoin
    )
}

/// The `successPercent` (0–100) of a JOIN, when it has one.
pub(super) fn success_percent(join: &WorkflowTask) -> Option<f64> {
    join.extra
        .get("successPercent")
        .and_then(Value::as_f64)
        .map(|p| p.clamp(0.0, 100.0))
}

impl Walker<'_> {
    /// The JOIN of a group of children: completes when every forked task has ended and
    /// at least `percent` of them completed; its output lists each child.
    pub(super) fn group_join(&self, join: &WorkflowTask, refs: &[String], percent: f64) -> Flow {
        let latest = self
            .state
            .latest_at(&join.task_reference_name, self.iteration)
            .filter(|t| t.status != crate::state::TaskStatus::Canceled);
        // Judged already. A JOIN a retry reopened waits IN_PROGRESS: it judges again
        // now that the branches are done, finishing that task.
        if latest.is_some_and(|t| !t.status.is_pending()) {
            return Flow::Done;
        }
        let mut children = Vec::new();
        let mut succeeded = 0usize;
        for r in refs {
            let Some(t) = self.state.latest_at(r, self.iteration) else {
                return Flow::Waiting(Vec::new());
            };
            if t.status == crate::state::TaskStatus::Completed {
                succeeded += 1;
            }
            let output = t.output.clone().unwrap_or(Value::Null);
            children.push(json!({
                "ref": r,
                "workflowId": output.get("subWorkflowId").cloned().unwrap_or(Value::Null),
                "status": t.status.as_str(),
                "output": output,
                "reason": t.reason,
            }));
        }
        let total = refs.len();
        let share = if total == 0 {
            100.0
        } else {
            succeeded as f64 * 100.0 / total as f64
        };
        let output = json!({
            "children": children, "succeeded": succeeded, "total": total,
            "successPercent": percent,
        });
        let input = self.input(join, 1);
        if share + f64::EPSILON >= percent {
            return Flow::Waiting(vec![match latest {
                Some(t) => super::Decision::CompleteStartedTask {
                    task_id: t.task_id,
                    task_ref: t.task_ref.clone(),
                    output,
                    errors: None,
                },
                None => self.complete(join, TaskType::Join, input, output, None),
            }]);
        }
        let reason = format!(
            "{succeeded} of {total} children succeeded ({share:.0}%), below successPercent {percent}"
        );
        let (task_id, start) = match latest {
            Some(t) => (t.task_id, None),
            None => {
                let task_id = self.task_id(join, 1);
                let start = super::Decision::StartSystemTask {
                    task_id,
                    task_ref: join.task_reference_name.clone(),
                    task_type: TaskType::Join.as_str().to_owned(),
                    task_name: join.name.clone(),
                    input,
                    attempt: 1,
                    iteration: self.iteration,
                };
                (task_id, Some(start))
            }
        };
        let failed = [
            super::Decision::FailStartedTask {
                task_id,
                task_ref: join.task_reference_name.clone(),
                reason: reason.clone(),
                terminal: true,
            },
            super::Decision::FailWorkflow {
                reason: format!("task {:?}: {reason}", join.task_reference_name),
                failed_task_refs: vec![join.task_reference_name.clone()],
                output: None,
            },
        ];
        Flow::Stop(start.into_iter().chain(failed).collect())
    }
}
