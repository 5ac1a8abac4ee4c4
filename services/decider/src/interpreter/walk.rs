//! Walking the definition tree against the run's tasks.

use serde_json::{json, Map, Value};
use uuid::Uuid;
use weft::dsl::{expr, TaskType, WorkflowTask};

use super::policy::{Policy, TimeoutPolicy};
use super::waiting::Due;
use super::{branch, workflow_output, Decision};
use crate::state::{RunState, TaskState, TaskStatus};

/// Where a list (or a task) stands.
#[derive(Debug)]
pub(super) enum Flow {
    /// Finished: the walk goes on with what follows.
    Done,
    /// Not finished; these decisions move it forward (none while it waits for workers).
    Waiting(Vec<Decision>),
    /// The run ends with these decisions (a failure, or a TERMINATE task).
    Stop(Vec<Decision>),
}

/// Walks one run's definition.
pub(super) struct Walker<'a> {
    pub(super) state: &'a RunState,
    /// The loop iteration being walked (0 outside DO_WHILE bodies).
    pub(super) iteration: i32,
    /// Inside a DO_WHILE body: the loop task, whose output expressions of the body see
    /// as the progress of this walk's iteration (`iteration`, `loopIndex`, `loopItem`).
    pub(super) looping: Option<&'a TaskState>,
}

impl<'a> Walker<'a> {
    pub(super) fn new(state: &'a RunState) -> Self {
        Self {
            state,
            iteration: 0,
            looping: None,
        }
    }

    /// A walker for iteration `iteration` of the body of the loop task `looping`.
    pub(super) fn at_iteration(&self, looping: &'a TaskState, iteration: i32) -> Self {
        Self {
            state: self.state,
            iteration,
            looping: Some(looping),
        }
    }

    /// A list of tasks, in order.
    pub(super) fn list(&self, tasks: &[WorkflowTask]) -> Flow {
        let mut previous: Option<&WorkflowTask> = None;
        for (i, task) in tasks.iter().enumerate() {
            let next = tasks.get(i + 1);
            let flow = match (task.task_type(), previous) {
                // A JOIN after a dynamic fork joins every forked task (it has no joinOn);
                // with `successPercent` it judges a group of children.
                (Some(TaskType::Join), Some(fork))
                    if fork.task_type() == Some(TaskType::ForkJoinDynamic) =>
                {
                    let refs = self.forked_refs(fork);
                    match super::dynamic::success_percent(task) {
                        Some(percent) => self.group_join(task, &refs, percent),
                        None => {
                            let latest = self
                                .state
                                .latest_at(&task.task_reference_name, self.iteration);
                            self.system(task, TaskType::Join, latest, |w| {
                                (w.outputs_of(&refs), None)
                            })
                        }
                    }
                }
                (Some(TaskType::ForkJoinDynamic), _) => {
                    let group = next.and_then(super::dynamic::success_percent).is_some();
                    let latest = self
                        .state
                        .latest_at(&task.task_reference_name, self.iteration);
                    self.dynamic_fork(task, latest, group)
                }
                _ => self.task(task),
            };
            match flow {
                Flow::Done => previous = Some(task),
                other => return other,
            }
        }
        Flow::Done
    }

    pub(super) fn task(&self, task: &WorkflowTask) -> Flow {
        let Some(kind) = task.task_type().filter(|k| k.is_executable()) else {
            return fail(
                task,
                format!(
                    "task {:?}: task type {} is not supported yet",
                    task.task_reference_name, task.kind
                ),
            );
        };
        let latest = self
            .state
            .latest_at(&task.task_reference_name, self.iteration);
        match kind {
            TaskType::Simple | TaskType::Http | TaskType::SubWorkflow => {
                self.activity(task, kind, latest)
            }
            TaskType::Decision | TaskType::Switch => self.switch(task, kind, latest),
            TaskType::ForkJoin => self.fork(task, latest),
            TaskType::Join => self.system(task, kind, latest, |w| (w.join_output(task), None)),
            TaskType::SetVariable => self.system(task, kind, latest, |w| {
                let input = w.input(task, 1);
                let vars = input.as_object().cloned().unwrap_or_default();
                (json!({}), Some(vars))
            }),
            TaskType::Terminate => self.terminate(task, latest),
            TaskType::DoWhile => self.do_while(task, latest),
            TaskType::Inline => self.inline(task, latest),
            TaskType::ForkJoinDynamic => self.dynamic_fork(task, latest, false),
            TaskType::Wait => self.wait(task, latest),
        }
    }

    /// SIMPLE and HTTP: scheduled on a worker queue; timed out per `timeoutSeconds` and
    /// retried per `retryCount` after the back-off of the task's policy (on a durable
    /// timer when the delay is not zero).
    fn activity(&self, task: &WorkflowTask, kind: TaskType, latest: Option<&TaskState>) -> Flow {
        let policy = Policy::of(task);
        let attempt = match latest {
            None => 1,
            Some(t) => match t.status {
                TaskStatus::Scheduled => return self.running(task, t, &policy),
                // Canceled tasks belong to runs that ended; nothing walks them.
                TaskStatus::Completed | TaskStatus::CompletedWithErrors | TaskStatus::Canceled => {
                    return Flow::Done
                }
                TaskStatus::Failed | TaskStatus::TimedOut if t.attempt <= policy.retry_count => {
                    let delay = policy.retry_delay(t.attempt);
                    if delay > chrono::Duration::zero() {
                        let timer_id = Uuid::new_v5(&t.task_id, b"retry");
                        match self.state.timers.iter().find(|x| x.timer_id == timer_id) {
                            None => {
                                return Flow::Waiting(vec![Decision::StartTimer {
                                    timer_id,
                                    task_id: t.task_id,
                                    due: Due::After(delay),
                                }])
                            }
                            Some(x) if !x.fired => return Flow::Waiting(Vec::new()),
                            Some(_) => {}
                        }
                    }
                    t.attempt + 1
                }
                TaskStatus::TimedOut => {
                    return Flow::Stop(vec![Decision::TimeOutWorkflow {
                        reason: format!(
                            "task {:?} timed out: {}",
                            t.task_ref,
                            t.reason.as_deref().unwrap_or("no reason given")
                        ),
                    }])
                }
                TaskStatus::Failed | TaskStatus::FailedWithTerminalError => {
                    return fail(
                        task,
                        format!(
                            "task {:?} failed: {}",
                            t.task_ref,
                            t.reason.as_deref().unwrap_or("no reason given")
                        ),
                    )
                }
            },
        };
        let task_id = self.task_id(task, attempt);
        let input = self.input(task, attempt);
        if kind == TaskType::SubWorkflow {
            return match child_definition(task) {
                Ok(definition) => Flow::Waiting(vec![Decision::StartChild {
                    task_id,
                    task_ref: task.task_reference_name.clone(),
                    task_name: task.name.clone(),
                    input,
                    attempt,
                    iteration: self.iteration,
                    child_workflow_id: Uuid::new_v5(&task_id, b"child").to_string(),
                    definition: Box::new(definition),
                }]),
                Err(why) => fail(task, format!("task {:?}: {why}", task.task_reference_name)),
            };
        }
        Flow::Waiting(vec![Decision::ScheduleTask {
            task_id,
            task_ref: task.task_reference_name.clone(),
            task_type: kind.as_str().to_owned(),
            task_name: task.name.clone(),
            input,
            attempt,
            iteration: self.iteration,
        }])
    }

    /// An attempt with a worker: sets its timeout timer, and times it out when it fires.
    fn running(&self, task: &WorkflowTask, t: &TaskState, policy: &Policy) -> Flow {
        if policy.timeout_seconds == 0 {
            return Flow::Waiting(Vec::new());
        }
        let timer_id = Uuid::new_v5(&t.task_id, b"timeout");
        match self.state.timers.iter().find(|x| x.timer_id == timer_id) {
            None => Flow::Waiting(vec![Decision::StartTimer {
                timer_id,
                task_id: t.task_id,
                due: Due::After(chrono::Duration::seconds(policy.timeout_seconds)),
            }]),
            Some(x) if !x.fired => Flow::Waiting(Vec::new()),
            Some(_) => {
                let reason = format!(
                    "attempt {} did not finish within timeoutSeconds ({})",
                    t.attempt, policy.timeout_seconds
                );
                let timed_out = Decision::TimeOutTask {
                    task_id: t.task_id,
                    task_ref: task.task_reference_name.clone(),
                    reason: reason.clone(),
                };
                match policy.timeout_policy {
                    TimeoutPolicy::AlertOnly => Flow::Waiting(Vec::new()),
                    TimeoutPolicy::Retry => Flow::Waiting(vec![timed_out]),
                    TimeoutPolicy::TimeOutWorkflow => Flow::Stop(vec![
                        timed_out,
                        Decision::TimeOutWorkflow {
                            reason: format!("task {:?} timed out: {reason}", t.task_ref),
                        },
                    ]),
                }
            }
        }
    }

    /// DECISION and SWITCH: choose the case once (recorded in the output), then run it.
    fn switch(&self, task: &WorkflowTask, kind: TaskType, latest: Option<&TaskState>) -> Flow {
        let Some(done) = latest else {
            let input = self.input(task, 1);
            let case = match branch::select_case(task, kind, &input) {
                Ok(case) => case,
                Err(why) => {
                    return fail(task, format!("task {:?}: {why}", task.task_reference_name))
                }
            };
            let output = match kind {
                TaskType::Decision => json!({ "caseOutput": [case] }),
                _ => json!({ "evaluationResult": [case], "selectedCase": case }),
            };
            return Flow::Waiting(vec![self.complete(task, kind, input, output, None)]);
        };
        let output = done.output.clone().unwrap_or(Value::Null);
        let case = output
            .get("selectedCase")
            .or_else(|| output.get("caseOutput").and_then(|c| c.get(0)))
            .and_then(Value::as_str)
            .unwrap_or_default();
        self.list(branch::case_tasks(task, case))
    }

    /// FORK_JOIN: completes at once, then its branches run side by side.
    fn fork(&self, task: &WorkflowTask, latest: Option<&TaskState>) -> Flow {
        if latest.is_none() {
            let input = self.input(task, 1);
            return Flow::Waiting(vec![self.complete(
                task,
                TaskType::ForkJoin,
                input,
                json!({}),
                None,
            )]);
        }
        let mut decisions = Vec::new();
        let mut all_done = true;
        for branch in task.fork_tasks.iter().flatten() {
            match self.list(branch) {
                Flow::Done => {}
                Flow::Waiting(d) => {
                    all_done = false;
                    decisions.extend(d);
                }
                stop @ Flow::Stop(_) => return stop,
            }
        }
        if all_done {
            Flow::Done
        } else {
            Flow::Waiting(decisions)
        }
    }

    /// TERMINATE: ends the run with `terminationStatus`, `terminationReason`, `workflowOutput`.
    fn terminate(&self, task: &WorkflowTask, latest: Option<&TaskState>) -> Flow {
        if latest.is_some() {
            return Flow::Done;
        }
        let input = self.input(task, 1);
        let status = input["terminationStatus"]
            .as_str()
            .unwrap_or("TERMINATED")
            .to_owned();
        let reason = input["terminationReason"]
            .as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| format!("terminated by task {:?}", task.task_reference_name));
        let output = match input.get("workflowOutput") {
            Some(o) if !o.is_null() => o.clone(),
            _ => workflow_output(self.state),
        };
        let record = self.complete(
            task,
            TaskType::Terminate,
            input,
            json!({ "output": output }),
            None,
        );
        let end = match status.as_str() {
            "COMPLETED" => Decision::CompleteWorkflow { output },
            "FAILED" => Decision::FailWorkflow {
                reason,
                failed_task_refs: vec![task.task_reference_name.clone()],
            },
            _ => Decision::TerminateWorkflow { reason, output },
        };
        Flow::Stop(vec![record, end])
    }

    /// A task the decider executes itself: once reached it completes with `run`'s output.
    pub(super) fn system(
        &self,
        task: &WorkflowTask,
        kind: TaskType,
        latest: Option<&TaskState>,
        run: impl FnOnce(&Self) -> (Value, Option<Map<String, Value>>),
    ) -> Flow {
        if latest.is_some() {
            return Flow::Done;
        }
        let (output, variables) = run(self);
        let input = self.input(task, 1);
        Flow::Waiting(vec![self.complete(task, kind, input, output, variables)])
    }

    pub(super) fn complete(
        &self,
        task: &WorkflowTask,
        kind: TaskType,
        input: Value,
        output: Value,
        variables: Option<Map<String, Value>>,
    ) -> Decision {
        Decision::CompleteSystemTask {
            task_id: self.task_id(task, 1),
            task_ref: task.task_reference_name.clone(),
            task_type: kind.as_str().to_owned(),
            task_name: task.name.clone(),
            input,
            output,
            variables,
            iteration: self.iteration,
        }
    }

    /// JOIN's output: each joined task's output under its ref.
    fn join_output(&self, task: &WorkflowTask) -> Value {
        let refs: Vec<String> = task
            .extra
            .get("joinOn")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|r| r.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        self.outputs_of(&refs)
    }

    /// `{ref: output}` of the newest task of each ref.
    pub(super) fn outputs_of(&self, refs: &[String]) -> Value {
        let mut out = Map::new();
        for r in refs {
            let value = self
                .state
                .latest(r)
                .and_then(|t| t.output.clone())
                .unwrap_or(Value::Null);
            out.insert(r.clone(), value);
        }
        Value::Object(out)
    }

    /// The task's input, resolved against the run (with `CPEWF_TASK_ID`).
    pub(super) fn input(&self, task: &WorkflowTask, attempt: i32) -> Value {
        let mut context = self.state.expression_context();
        if let Value::Object(map) = &mut context {
            map.insert(
                expr::TASK_ID_VARIABLE.to_owned(),
                Value::String(self.task_id(task, attempt).to_string()),
            );
            if let Some(looping) = self.looping {
                map.insert(
                    looping.task_ref.clone(),
                    json!({
                        "input": looping.input,
                        "output": super::looping::progress(looping, self.iteration),
                    }),
                );
            }
        }
        expr::resolve(&Value::Object(task.input_parameters.clone()), &context)
    }

    /// A name-based UUID in the run's namespace over (position, ref, attempt).
    pub(super) fn task_id(&self, task: &WorkflowTask, attempt: i32) -> Uuid {
        task_id_for(self.state, &task.task_reference_name, attempt)
    }
}

/// The id of the task scheduled next for `task_ref`.
pub(crate) fn task_id_for(state: &RunState, task_ref: &str, attempt: i32) -> Uuid {
    let name = format!("{}/{task_ref}/{attempt}", state.tasks.len());
    Uuid::new_v5(&state.run_id, name.as_bytes())
}

/// A SUB_WORKFLOW's child definition: `subWorkflowParam.workflowDefinition`, written
/// inline or embedded by the gateway at start from the registered definition.
fn child_definition(task: &WorkflowTask) -> Result<weft::dsl::WorkflowDef, String> {
    let param = task.extra.get("subWorkflowParam");
    let inline = param
        .and_then(|p| p.get("workflowDefinition"))
        .filter(|d| d.is_object());
    match inline {
        Some(def) => weft::dsl::parse_definition(def).map_err(|e| format!("child definition: {e}")),
        None => Err(format!(
            "child definition {:?} was not resolved when the run started",
            param
                .and_then(|p| p.get("name"))
                .and_then(Value::as_str)
                .unwrap_or_default()
        )),
    }
}

/// Ends the run as FAILED, blaming `task`.
pub(super) fn fail(task: &WorkflowTask, reason: String) -> Flow {
    Flow::Stop(vec![Decision::FailWorkflow {
        reason,
        failed_task_refs: vec![task.task_reference_name.clone()],
    }])
}
