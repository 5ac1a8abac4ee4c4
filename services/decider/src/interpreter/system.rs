//! Tasks the decider runs itself that take input-driven work: WAIT (signals and durable
//! timers) and INLINE (a script, evaluated once).

use serde_json::{json, Value};
use uuid::Uuid;
use weft::dsl::{script, TaskType, WorkflowTask};

use super::waiting::{self, Due};
use super::walk::{fail, Flow, Walker};
use super::Decision;
use crate::state::{TaskState, TaskStatus};

impl Walker<'_> {
    /// WAIT: with `duration` or `until`, completes when its durable timer fires;
    /// without, completes with the payload of the first signal named after its ref that
    /// no earlier execution of this ref consumed (one received before the WAIT was
    /// reached included).
    pub(super) fn wait(&self, task: &WorkflowTask, latest: Option<&TaskState>) -> Flow {
        // A WAIT canceled at a reset's cut waits again (its timer, if any, anew).
        let latest = latest.filter(|t| t.status != TaskStatus::Canceled);
        if let Some(t) = latest {
            if t.status != TaskStatus::Scheduled {
                return Flow::Done;
            }
        }
        let input = self.input(task, 1);
        let due = match wait_due(&input) {
            Ok(due) => due,
            Err(why) => return fail(task, format!("task {:?}: {why}", task.task_reference_name)),
        };
        if let Some(due) = due {
            return match latest {
                None => {
                    let task_id = self.task_id(task, 1);
                    Flow::Waiting(vec![
                        self.start(task, TaskType::Wait, input),
                        Decision::StartTimer {
                            timer_id: Uuid::new_v5(&task_id, b"timer"),
                            task_id,
                            due,
                        },
                    ])
                }
                Some(t)
                    if self
                        .state
                        .timers
                        .iter()
                        .any(|x| x.task_id == t.task_id && x.fired) =>
                {
                    Flow::Waiting(vec![Decision::CompleteStartedTask {
                        task_id: t.task_id,
                        task_ref: t.task_ref.clone(),
                        output: json!({}),
                    }])
                }
                Some(_) => Flow::Waiting(Vec::new()),
            };
        }
        let task_ref = &task.task_reference_name;
        let consumed = self
            .state
            .tasks
            .iter()
            .filter(|t| &t.task_ref == task_ref && t.status == TaskStatus::Completed)
            .count();
        let payload = self
            .state
            .signals
            .iter()
            .filter(|(name, _)| name == task_ref)
            .nth(consumed)
            .map(|(_, payload)| match payload {
                Value::Object(_) => payload.clone(),
                Value::Null => json!({}),
                other => json!({ "payload": other }),
            });
        match (latest, payload) {
            (Some(t), Some(output)) => Flow::Waiting(vec![Decision::CompleteStartedTask {
                task_id: t.task_id,
                task_ref: t.task_ref.clone(),
                output,
            }]),
            (Some(_), None) => Flow::Waiting(Vec::new()),
            (None, Some(output)) => Flow::Waiting(vec![self.complete(
                task,
                TaskType::Wait,
                input,
                output,
                None,
            )]),
            (None, None) => Flow::Waiting(vec![self.start(task, TaskType::Wait, input)]),
        }
    }

    /// Records `task` as started (in progress in the decider).
    fn start(&self, task: &WorkflowTask, kind: TaskType, input: Value) -> Decision {
        Decision::StartSystemTask {
            task_id: self.task_id(task, 1),
            task_ref: task.task_reference_name.clone(),
            task_type: kind.as_str().to_owned(),
            task_name: task.name.clone(),
            input,
            iteration: self.iteration,
        }
    }

    /// INLINE: evaluates `expression` over its input (bound to `$`); output `{result}`.
    /// The script runs once; its result (or failure) is recorded.
    pub(super) fn inline(&self, task: &WorkflowTask, latest: Option<&TaskState>) -> Flow {
        if latest.is_some() {
            return Flow::Done;
        }
        let input = self.input(task, 1);
        let expression = input["expression"].as_str().unwrap_or_default();
        let evaluator = input["evaluatorType"].as_str().unwrap_or("javascript");
        let result = match evaluator {
            "javascript" | "graaljs" => {
                script::evaluate(expression, &input, script::Limits::default())
                    .map_err(|e| e.to_string())
            }
            "value-param" => Ok(input.get(expression).cloned().unwrap_or(Value::Null)),
            other => Err(format!("unknown evaluatorType {other:?}")),
        };
        match result {
            Ok(value) => Flow::Waiting(vec![self.complete(
                task,
                TaskType::Inline,
                input,
                json!({ "result": value }),
                None,
            )]),
            Err(why) => {
                let task_id = self.task_id(task, 1);
                let task_ref = task.task_reference_name.clone();
                Flow::Stop(vec![
                    Decision::StartSystemTask {
                        task_id,
                        task_ref: task_ref.clone(),
                        task_type: TaskType::Inline.as_str().to_owned(),
                        task_name: task.name.clone(),
                        input,
                        iteration: self.iteration,
                    },
                    Decision::FailStartedTask {
                        task_id,
                        task_ref: task_ref.clone(),
                        reason: why.clone(),
                    },
                    Decision::FailWorkflow {
                        reason: format!("task {task_ref:?}: {why}"),
                        failed_task_refs: vec![task_ref],
                    },
                ])
            }
        }
    }
}

/// The timer a WAIT sets: from `duration` or `until` in its (resolved) input.
fn wait_due(input: &Value) -> Result<Option<Due>, String> {
    let text = |key: &str| {
        input
            .get(key)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    };
    match (text("duration"), text("until")) {
        (Some(d), _) => waiting::parse_duration(d).map(|d| Some(Due::After(d))),
        (None, Some(u)) => waiting::parse_until(u).map(|t| Some(Due::At(t))),
        (None, None) => Ok(None),
    }
}
