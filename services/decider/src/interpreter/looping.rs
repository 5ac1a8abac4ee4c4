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
                // Every iteration's outputs only for a condition that may read them: a
                // condition on `iteration` alone costs the same at the 100,000th.
                let output = if reads_only_iteration(condition, &looping.task_ref) {
                    json!({ "iteration": iteration })
                } else {
                    self.loop_output(task, &refs, iteration)
                };
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
                output: self.loop_output(task, &refs, iteration),
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
        refs.iter()
            .filter_map(|r| self.state.highest_iteration_of(r))
            .map(|t| t.iteration)
            .fold(1, i32::max)
    }

    /// Conductor's DO_WHILE output: `iteration`, and per iteration (keyed "1", "2", …)
    /// each body task's output (its newest task in that iteration), keeping the last
    /// `keepLastN` iterations when set.
    fn loop_output(&self, task: &WorkflowTask, refs: &[&str], iteration: i32) -> Value {
        let keep = task
            .input_parameters
            .get("keepLastN")
            .and_then(Value::as_i64)
            .map_or(i64::from(self.state.max_loop_iterations), |n| n.max(1));
        let first = (i64::from(iteration) - keep + 1).max(1);
        let mut out = Map::new();
        out.insert("iteration".into(), json!(iteration));
        for i in (first..=i64::from(iteration)).filter_map(|i| i32::try_from(i).ok()) {
            let outputs: Map<String, Value> = refs
                .iter()
                .filter_map(|r| {
                    let t = self.state.latest_at(r, i)?;
                    Some(((*r).to_owned(), t.output.clone().unwrap_or(Value::Null)))
                })
                .collect();
            out.insert(i.to_string(), Value::Object(outputs));
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

/// Whether `condition` reads the loop `loop_ref`'s output only for its `iteration`
/// (`$.loop['iteration']`, `$.loop["iteration"]`, `$.loop.iteration`) and reaches `$`
/// only through named members: then the condition's input needs no iteration's outputs.
/// Conservative: any other use of the loop's ref, or of `$` itself, says no.
fn reads_only_iteration(condition: &str, loop_ref: &str) -> bool {
    let bytes = condition.as_bytes();
    let mut at = 0;
    while let Some(found) = condition[at..].find('$') {
        let i = at + found;
        at = i + 1;
        // A `$` inside a name (`a$b`) is not the input.
        if i > 0 && (bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_') {
            continue;
        }
        let rest = &condition[i + 1..];
        let (name, after) = if let Some(member) = rest.strip_prefix('.') {
            let len = member
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '$'))
                .unwrap_or(member.len());
            (&member[..len], &member[len..])
        } else if let Some(quoted) = rest.strip_prefix("['").or_else(|| rest.strip_prefix("[\"")) {
            let quote = if rest.starts_with("['") { "']" } else { "\"]" };
            match quoted.find(quote) {
                Some(end) => (&quoted[..end], &quoted[end + 2..]),
                None => return false,
            }
        } else {
            return false;
        };
        if name.is_empty() {
            return false;
        }
        if name != loop_ref {
            continue;
        }
        let iteration = ["['iteration']", "[\"iteration\"]", ".iteration"]
            .iter()
            .find_map(|access| after.strip_prefix(access));
        match iteration {
            Some(tail) if !tail.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_') => {}
            _ => return false,
        }
    }
    true
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

#[cfg(test)]
mod tests {
    use super::reads_only_iteration;

    #[test]
    fn a_condition_on_the_iteration_alone_needs_no_outputs() {
        for condition in [
            "$.loop['iteration'] < $.times",
            "$.loop[\"iteration\"] < 10 && $.step['ok']",
            "$.loop.iteration < $.times",
            "if ($.loop['iteration'] < 3) { true; } else { false; }",
            "$.step.output.more == true",
            "$['loop']['iteration'] < 3",
        ] {
            assert!(reads_only_iteration(condition, "loop"), "{condition}");
        }
        for condition in [
            "$.loop['1'].step.ok",
            "$.loop.iterations > 2",
            "Object.keys($.loop).length < 5",
            "JSON.stringify($).length < 100",
            "$[name] < 3",
            "$.loop['iteration'] < 3 && $.loop['2'] == null",
        ] {
            assert!(!reads_only_iteration(condition, "loop"), "{condition}");
        }
    }
}
