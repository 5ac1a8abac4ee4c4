//! DO_WHILE: the body runs once per iteration; after each, `loopCondition` decides
//! whether to go again. Body tasks carry their iteration (from 1). The condition is
//! evaluated once per iteration, when its body is done, and its answer is recorded by
//! what follows (the next iteration's first tasks, or the loop's completion), so replay
//! never re-evaluates it.

use serde_json::{json, Map, Value};
use weft::dsl::{script, TaskType, WorkflowTask};

use super::walk::{Flow, Walker};
use super::Decision;
use crate::state::{subtree_refs, TaskState, TaskStatus};

impl Walker<'_> {
    pub(super) fn do_while(&self, task: &'_ WorkflowTask, latest: Option<&'_ TaskState>) -> Flow {
        let Some(looping) = latest else {
            // `items` is resolved once, when the loop starts, and kept in its input.
            let mut input = self.input(task, 1);
            if let Some(items) = task.extra.get("items") {
                let resolved = weft::dsl::expr::resolve(items, &self.state.expression_context());
                if !resolved.is_array() {
                    let why = format!("items must resolve to a list, got {resolved}");
                    return self.fail_unless_optional(task, TaskType::DoWhile, input, &why);
                }
                if let Value::Object(map) = &mut input {
                    map.insert("items".into(), resolved);
                }
            }
            return Flow::Waiting(vec![Decision::StartSystemTask {
                task_id: self.task_id(task, 1),
                task_ref: task.task_reference_name.clone(),
                task_type: TaskType::DoWhile.as_str().to_owned(),
                task_name: task.name.clone(),
                input,
                attempt: 1,
                iteration: self.iteration,
            }]);
        };
        match looping.status {
            TaskStatus::Scheduled | TaskStatus::InProgress => {}
            // A loop is never canceled by a reset (its body's tasks are); a canceled loop
            // belongs to a run that ended, and nothing walks it.
            TaskStatus::Completed
            | TaskStatus::CompletedWithErrors
            | TaskStatus::Skipped
            | TaskStatus::Canceled => return Flow::Done,
            TaskStatus::Failed | TaskStatus::FailedWithTerminalError | TaskStatus::TimedOut => {
                return super::walk::fail(
                    task,
                    format!(
                        "task {:?} failed: {}",
                        task.task_reference_name,
                        looping.reason.as_deref().unwrap_or("no reason given")
                    ),
                )
            }
        }
        let items = looping.input.get("items").and_then(Value::as_array);
        if items.is_some_and(|i| i.is_empty()) {
            return Flow::Waiting(vec![Decision::CompleteStartedTask {
                task_id: looping.task_id,
                task_ref: looping.task_ref.clone(),
                output: json!({ "iteration": 0 }),
                errors: None,
            }]);
        }
        let body = task.loop_over.as_deref().unwrap_or_default();
        let refs = subtree_refs(body);
        let iteration = self.current_iteration(&refs);
        match self.at_iteration(looping, iteration).list(body) {
            Flow::Done => {}
            other => return other,
        }
        let output = self.loop_output(task, &refs, iteration);
        let condition = task
            .extra
            .get("loopCondition")
            .and_then(Value::as_str)
            .filter(|c| !c.trim().is_empty());
        let more_items = items.is_none_or(|i| (iteration as usize) < i.len());
        let again = match condition {
            // With `items` and no condition, the list alone decides.
            None => items.is_some() && more_items,
            Some(condition) => {
                let input = self.condition_input(looping, &output, &refs, iteration);
                match script::evaluate_condition(condition, &input, script::Limits::default()) {
                    Ok(again) => again && more_items,
                    Err(e) => return self.fail_loop(task, looping, format!("loopCondition: {e}")),
                }
            }
        };
        if !again {
            return Flow::Waiting(vec![Decision::CompleteStartedTask {
                task_id: looping.task_id,
                task_ref: looping.task_ref.clone(),
                output,
                errors: None,
            }]);
        }
        let cap = self.state.max_loop_iterations;
        if iteration >= cap {
            return self.fail_loop(
                task,
                looping,
                format!(
                    "loop reached its cap of {cap} iterations (WEFT_MAX_LOOP_ITERATIONS); \
                     loopCondition still true"
                ),
            );
        }
        self.at_iteration(looping, iteration + 1).list(body)
    }

    /// The iteration in progress: the highest one any body task was recorded in.
    fn current_iteration(&self, refs: &[&str]) -> i32 {
        self.state
            .tasks
            .iter()
            .filter(|t| refs.contains(&t.task_ref.as_str()))
            .map(|t| t.iteration)
            .max()
            .unwrap_or(1)
            .max(1)
    }

    /// Conductor's DO_WHILE output: `iteration`, and per iteration (keyed "1", "2", …)
    /// each body task's output, keeping the last `keepLastN` iterations when set.
    fn loop_output(&self, task: &WorkflowTask, refs: &[&str], iteration: i32) -> Value {
        let keep = task
            .input_parameters
            .get("keepLastN")
            .and_then(Value::as_i64)
            .map_or(i64::from(self.state.max_loop_iterations), |n| n.max(1));
        let mut out = Map::new();
        out.insert("iteration".into(), json!(iteration));
        for i in 1..=iteration {
            if i64::from(iteration - i) >= keep {
                continue;
            }
            let mut per = Map::new();
            for r in refs {
                if let Some(t) = self.state.latest_at(r, i) {
                    per.insert((*r).to_owned(), t.output.clone().unwrap_or(Value::Null));
                }
            }
            out.insert(i.to_string(), Value::Object(per));
        }
        Value::Object(out)
    }

    /// What `$` holds for `loopCondition`: the loop's input, the loop's output under its
    /// ref (so `$.loop['iteration']` works), and each body task's output of this
    /// iteration under its ref (also as `$.ref.output`).
    fn condition_input(
        &self,
        looping: &TaskState,
        output: &Value,
        refs: &[&str],
        iteration: i32,
    ) -> Value {
        let mut input = looping.input.as_object().cloned().unwrap_or_default();
        input.insert(looping.task_ref.clone(), output.clone());
        for r in refs {
            if let Some(t) = self.state.latest_at(r, iteration) {
                let out = t.output.clone().unwrap_or(Value::Null);
                let mut entry = out.as_object().cloned().unwrap_or_default();
                entry.insert("output".into(), out);
                input.insert((*r).to_owned(), Value::Object(entry));
            }
        }
        Value::Object(input)
    }

    fn fail_loop(&self, task: &WorkflowTask, looping: &TaskState, reason: String) -> Flow {
        let failed = Decision::FailStartedTask {
            task_id: looping.task_id,
            task_ref: looping.task_ref.clone(),
            reason: reason.clone(),
            terminal: true,
        };
        // An optional loop reads COMPLETED_WITH_ERRORS and the run goes on past it.
        if task.optional {
            return Flow::Waiting(vec![failed]);
        }
        Flow::Stop(vec![
            failed,
            Decision::FailWorkflow {
                reason: format!("task {:?}: {reason}", looping.task_ref),
                failed_task_refs: vec![looping.task_ref.clone()],
                output: None,
            },
        ])
    }
}

/// Every reference name in `tasks`, branches and nested bodies included.
/// What a loop's body sees as the loop's output during iteration `iteration`:
/// `iteration`, and with `items`, `loopIndex` (from 0) and `loopItem`.
pub(super) fn progress(looping: &TaskState, iteration: i32) -> Value {
    let mut out = serde_json::Map::new();
    out.insert("iteration".into(), json!(iteration));
    if let Some(items) = looping.input.get("items").and_then(Value::as_array) {
        let index = (iteration - 1).max(0);
        out.insert("loopIndex".into(), json!(index));
        out.insert(
            "loopItem".into(),
            items.get(index as usize).cloned().unwrap_or(Value::Null),
        );
    }
    Value::Object(out)
}
