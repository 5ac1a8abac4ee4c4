//! Tasks the decider runs itself that take input-driven work: WAIT (signals and durable
//! timers), INLINE and LAMBDA (a script, evaluated once), JSON_JQ_TRANSFORM (a jq program,
//! evaluated once) and EVENT (a message to a queue or an exchange).

use serde_json::{json, Value};
use uuid::Uuid;
use weft::dsl::{expr, jq, script, TaskType, WorkflowTask};
use weft::event_location::EventLocation;

use super::waiting::{self, Due};
use super::walk::{fail, task_failure_reason, Flow, Walker};
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
            if let Some(failed) = failed_for_good(task, t) {
                return failed;
            }
            if t.status != TaskStatus::Scheduled {
                return Flow::Done;
            }
        }
        let input = self.input(task, self.attempt_of(task));
        let due = match wait_due(&input) {
            Ok(due) => due,
            Err(why) => return fail(task, format!("task {:?}: {why}", task.task_reference_name)),
        };
        if let Some(due) = due {
            return match latest {
                None => {
                    let task_id = self.task_id(task, self.attempt_of(task));
                    Flow::Waiting(vec![
                        self.start(task, TaskType::Wait, input),
                        Decision::StartTimer {
                            timer_id: wait_timer_id(task_id),
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
                        errors: None,
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
                errors: None,
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

    /// LAMBDA (Conductor's older script task): evaluates `scriptExpression` as the body of
    /// a function over its input (bound to `$`) once; output `{result}`, or the run fails
    /// with the script's error.
    pub(super) fn lambda(&self, task: &WorkflowTask, latest: Option<&TaskState>) -> Flow {
        if let Some(t) = latest {
            return over(task, t);
        }
        let input = self.input(task, self.attempt_of(task));
        // As Conductor's Lambda: the expression is a function body (`return` allowed).
        let body = input["scriptExpression"].as_str().unwrap_or_default();
        let script_text = format!("function scriptFun(){{{body}\n}} scriptFun();");
        match script::evaluate(&script_text, &input, script::Limits::default()) {
            Ok(value) => Flow::Waiting(vec![self.complete(
                task,
                TaskType::Lambda,
                input,
                json!({ "result": value }),
                None,
            )]),
            Err(why) => self.fail_at_start(task, TaskType::Lambda, input, why.to_string()),
        }
    }

    /// START_WORKFLOW: starts `inputParameters.startWorkflow` (`input`, `correlationId`;
    /// the definition named by `name`/`version`, frozen at this run's start as
    /// `startWorkflowDefinition`) as a new run, and completes with `{workflowId}` without
    /// waiting for it, as Conductor does.
    pub(super) fn start_workflow(&self, task: &WorkflowTask, latest: Option<&TaskState>) -> Flow {
        match latest {
            Some(t)
                if matches!(
                    t.status,
                    TaskStatus::Failed | TaskStatus::FailedWithTerminalError
                ) && !task.optional =>
            {
                let reason = t.reason.clone().unwrap_or_else(|| "not started".into());
                return fail(
                    task,
                    format!("task {:?}: {reason}", task.task_reference_name),
                );
            }
            Some(_) => return Flow::Done,
            None => {}
        }
        let input = self.input(task, self.attempt_of(task));
        let params = input["startWorkflow"].clone();
        let inline = params
            .get("workflowDef")
            .filter(|d| d.is_object())
            .map(|d| serde_json::from_value::<weft::dsl::WorkflowDef>(d.clone()));
        let name = params
            .get("name")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or_else(|| {
                params
                    .pointer("/workflowDef/name")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            })
            .unwrap_or_default();
        let version = params
            .get("version")
            .and_then(Value::as_i64)
            .and_then(|v| i32::try_from(v).ok());
        let frozen = task
            .extra
            .get("startWorkflowDefinition")
            .map(|d| serde_json::from_value::<weft::dsl::WorkflowDef>(d.clone()));
        let definition = match (inline, frozen) {
            (Some(Ok(def)), _) => Some(def),
            (Some(Err(e)), _) | (None, Some(Err(e))) => {
                let why = format!("startWorkflow: the workflow to start does not read: {e}");
                return self.fail_at_start(task, TaskType::StartWorkflow, input, why);
            }
            // Frozen at this run's start, for the name written in the definition.
            (None, Some(Ok(def))) if def.name == name => Some(def),
            _ => None,
        };
        if definition.is_none() && name.is_empty() {
            let why = "startWorkflow names no workflow to start".to_owned();
            return self.fail_at_start(task, TaskType::StartWorkflow, input, why);
        }
        let run_input = params
            .get("input")
            .filter(|v| v.is_object())
            .cloned()
            .unwrap_or_else(|| json!({}));
        // Without one of its own, the new run shares the starter's (Conductor's
        // StartWorkflow).
        let correlation_id = params
            .get("correlationId")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or_else(|| self.state.correlation_id.clone());
        let attempt = self.attempt_of(task);
        let task_id = self.task_id(task, attempt);
        Flow::Waiting(vec![Decision::StartRun {
            task_id,
            task_ref: task.task_reference_name.clone(),
            task_name: task.name.clone(),
            input: input.clone(),
            attempt,
            iteration: self.iteration,
            workflow_id: Uuid::new_v5(&task_id, b"start-workflow").to_string(),
            definition: definition.map(Box::new),
            name,
            version,
            run_input,
            correlation_id,
        }])
    }

    /// HUMAN: recorded as started (IN_PROGRESS) and completed, like a WAIT without a
    /// timer, by the next signal named after its ref (the task API's update by reference
    /// or by task id, an event handler's `complete_task`), its payload as the output.
    pub(super) fn human(&self, task: &WorkflowTask, latest: Option<&TaskState>) -> Flow {
        let latest = latest.filter(|t| t.status != TaskStatus::Canceled);
        match latest {
            Some(t) if t.status == TaskStatus::Scheduled => self.event_signalled(task, t),
            Some(t) => failed_for_good(task, t).unwrap_or(Flow::Done),
            None => {
                let input = self.input(task, self.attempt_of(task));
                Flow::Waiting(vec![self.start(task, TaskType::Human, input)])
            }
        }
    }

    /// EVENT: publishes its input, with `workflowInstanceId`, `workflowType`,
    /// `workflowVersion`, `correlationId`, `sink` and `event_produced` added (Conductor's
    /// message, which is also the task's output), to its `sink`. It is IN_PROGRESS until
    /// the broker has confirmed the message, then completes; with `asyncComplete` it
    /// stays IN_PROGRESS until completed by reference (as a WAIT:
    /// `POST /api/tasks/{workflowId}/{ref}/COMPLETED`, an event handler's `complete_task`).
    pub(super) fn event(&self, task: &WorkflowTask, latest: Option<&TaskState>) -> Flow {
        let latest = latest.filter(|t| t.status != TaskStatus::Canceled);
        let async_complete = task
            .extra
            .get("asyncComplete")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        match latest {
            Some(t) if t.status == TaskStatus::Scheduled && async_complete => {
                return self.event_signalled(task, t)
            }
            Some(t) if t.status == TaskStatus::Scheduled => return self.event_confirmed(t),
            Some(t)
                if matches!(
                    t.status,
                    TaskStatus::Failed | TaskStatus::FailedWithTerminalError
                ) && !task.optional =>
            {
                let reason = t
                    .reason
                    .clone()
                    .unwrap_or_else(|| "the event was not sent".into());
                return fail(
                    task,
                    format!("task {:?}: {reason}", task.task_reference_name),
                );
            }
            Some(_) => return Flow::Done,
            None => {}
        }
        let input = self.input(task, self.attempt_of(task));
        let sink_template = task.extra.get("sink").and_then(Value::as_str).unwrap_or("");
        let sink =
            match expr::resolve_str(sink_template, &self.context(task, self.attempt_of(task))) {
                Value::String(s) => s,
                other => other.to_string(),
            };
        let location = match EventLocation::parse(&sink) {
            Ok(location) => location,
            Err(why) => {
                return self.fail_at_start(task, TaskType::Event, input, format!("sink: {why}"))
            }
        };
        // Conductor's own queue, completed as Conductor does: `conductor` is
        // `conductor:<workflow>:<ref>`, `conductor:<name>` is `conductor:<workflow>:<name>`.
        let (location, produced) = match location {
            EventLocation::Conductor(rest) => {
                let workflow = &self.state.definition.name;
                let rest = match rest.as_str() {
                    "" => format!("{workflow}:{}", task.task_reference_name),
                    name if !name.contains(':') => format!("{workflow}:{name}"),
                    full => full.to_owned(),
                };
                let produced = format!("conductor:{rest}");
                (EventLocation::Conductor(rest), produced)
            }
            other => (other, sink.clone()),
        };
        let mut output = input.as_object().cloned().unwrap_or_default();
        let definition = &self.state.definition;
        output.insert("workflowInstanceId".into(), json!(self.state.workflow_id));
        output.insert("workflowType".into(), json!(definition.name));
        output.insert("workflowVersion".into(), json!(definition.version));
        output.insert("correlationId".into(), json!(self.state.correlation_id));
        output.insert("sink".into(), json!(sink));
        output.insert("event_produced".into(), json!(produced));
        let attempt = self.attempt_of(task);
        Flow::Waiting(vec![Decision::PublishEvent {
            task_id: self.task_id(task, attempt),
            task_ref: task.task_reference_name.clone(),
            task_name: task.name.clone(),
            input,
            attempt,
            output: Value::Object(output),
            location: Box::new(location),
            async_complete,
            iteration: self.iteration,
        }])
    }

    /// A synchronous EVENT task completes with the signal its confirmed message sent
    /// ([`super::event_published`]), the message as its output.
    fn event_confirmed(&self, t: &TaskState) -> Flow {
        let name = super::event_published(t.task_id);
        match self.state.signals.iter().find(|(n, _)| *n == name) {
            Some((_, message)) => Flow::Waiting(vec![Decision::CompleteStartedTask {
                task_id: t.task_id,
                task_ref: t.task_ref.clone(),
                output: message.clone(),
                errors: None,
            }]),
            None => Flow::Waiting(Vec::new()),
        }
    }

    /// An asynchronous EVENT task (or a HUMAN task) completes with the first signal named
    /// after its ref that no earlier execution of the ref consumed.
    fn event_signalled(&self, task: &WorkflowTask, t: &TaskState) -> Flow {
        let consumed = self
            .state
            .tasks
            .iter()
            .filter(|x| x.task_ref == t.task_ref && x.status == TaskStatus::Completed)
            .count();
        let signal = self
            .state
            .signals
            .iter()
            .filter(|(name, _)| name == &task.task_reference_name)
            .nth(consumed);
        match signal {
            Some((_, payload)) => Flow::Waiting(vec![Decision::CompleteStartedTask {
                task_id: t.task_id,
                task_ref: t.task_ref.clone(),
                output: match payload {
                    Value::Object(_) => payload.clone(),
                    Value::Null => json!({}),
                    other => json!({ "payload": other }),
                },
                errors: None,
            }]),
            None => Flow::Waiting(Vec::new()),
        }
    }

    /// Records `task` as started and failed with `why`, and fails the run unless the task
    /// is optional or permissive (a task that could not begin: an INLINE script that
    /// threw, an EVENT sink that names nothing).
    fn fail_at_start(
        &self,
        task: &WorkflowTask,
        kind: TaskType,
        input: Value,
        why: String,
    ) -> Flow {
        let attempt = self.attempt_of(task);
        let task_id = self.task_id(task, attempt);
        let task_ref = task.task_reference_name.clone();
        let terminal = kind == TaskType::Inline;
        let mut decisions = vec![
            Decision::StartSystemTask {
                task_id,
                task_ref: task_ref.clone(),
                task_type: kind.as_str().to_owned(),
                task_name: task.name.clone(),
                input,
                attempt,
                iteration: self.iteration,
            },
            Decision::FailStartedTask {
                task_id,
                task_ref: task_ref.clone(),
                reason: why.clone(),
                // As Conductor's: an INLINE script that fails would fail again
                // (FAILED_WITH_TERMINAL_ERROR); LAMBDA, START_WORKFLOW and EVENT end FAILED.
                terminal,
            },
        ];
        // An optional task reads COMPLETED_WITH_ERRORS and the run goes on; a permissive
        // one's branch goes on, and its JOIN (or the run's end) fails; one its policy
        // retries runs again in the next round.
        let retried = !terminal && self.retry_follows(task, kind, attempt);
        if task.optional || super::walk::permissive(task) || retried {
            return Flow::Waiting(decisions);
        }
        decisions.push(Decision::FailWorkflow {
            reason: format!("task {task_ref:?}: {why}"),
            failed_task_refs: vec![task_ref],
            output: None,
        });
        Flow::Stop(decisions)
    }

    /// JSON_JQ_TRANSFORM: applies the jq program `queryExpression` to the task's whole
    /// input once (in the sandbox of `weft::dsl::jq`) and completes with `result` (the first
    /// value, null for none) and `resultList` (every value), as Conductor's
    /// `JsonJqTransform`. A program that does not compile or fails fails the task (FAILED,
    /// its message as the reason and as output `error`) and the run, unless the task is
    /// optional or its task definition retries it (`system_policy`).
    pub(super) fn jq_transform(&self, task: &WorkflowTask, latest: Option<&TaskState>) -> Flow {
        match latest {
            Some(t)
                if matches!(
                    t.status,
                    TaskStatus::Failed | TaskStatus::FailedWithTerminalError
                ) && !task.optional =>
            {
                let reason = t.reason.clone().unwrap_or_default();
                return fail(
                    task,
                    format!("task {:?}: {reason}", task.task_reference_name),
                );
            }
            Some(_) => return Flow::Done,
            None => {}
        }
        let kind = TaskType::JsonJqTransform;
        let input = self.input(task, self.attempt_of(task));
        let (output, why) = match input.get("queryExpression") {
            Some(Value::String(query)) => {
                match jq::evaluate(query, &input, jq::Limits::default()) {
                    Ok(values) => {
                        let first = values.first().cloned().unwrap_or(Value::Null);
                        let output = json!({ "result": first, "resultList": values });
                        return Flow::Waiting(vec![self.complete(task, kind, input, output, None)]);
                    }
                    Err(e) => {
                        let why = e.to_string();
                        (json!({ "error": why }), why)
                    }
                }
            }
            // Conductor's words, and no `error` output, for a program that resolved to nothing.
            None | Some(Value::Null) => (
                json!({}),
                "Missing 'queryExpression' in input parameters".to_owned(),
            ),
            Some(other) => (
                json!({}),
                format!("queryExpression must be a jq program (a string), not {other}"),
            ),
        };
        let failed = self.fail_now(task, kind, input, output, &why);
        if task.optional || self.retry_follows(task, kind, self.attempt_of(task)) {
            return Flow::Waiting(vec![failed]);
        }
        let task_ref = task.task_reference_name.clone();
        Flow::Stop(vec![
            failed,
            Decision::FailWorkflow {
                reason: format!("task {task_ref:?}: {why}"),
                failed_task_refs: vec![task_ref],
                output: None,
            },
        ])
    }

    /// Records `task` as scheduled and FAILED at once with `output` and the reason `why`;
    /// the caller decides whether the run fails with it.
    pub(super) fn fail_now(
        &self,
        task: &WorkflowTask,
        kind: TaskType,
        input: Value,
        output: Value,
        why: &str,
    ) -> Decision {
        let attempt = self.attempt_of(task);
        Decision::FailSystemTask {
            task_id: self.task_id(task, attempt),
            task_ref: task.task_reference_name.clone(),
            task_type: kind.as_str().to_owned(),
            task_name: task.name.clone(),
            input,
            attempt,
            output,
            reason: why.to_owned(),
            terminal: false,
            iteration: self.iteration,
        }
    }

    /// SET_VARIABLE: the run's variables take the task's input. Past the run's size limit
    /// (`WEFT_MAX_VARIABLES_KB`, Conductor's `maxWorkflowVariablesPayloadSizeThreshold`)
    /// the task fails for good with Conductor's reason, the variables stay as they were,
    /// and the run fails (unless the task is optional).
    pub(super) fn set_variable(&self, task: &WorkflowTask, latest: Option<&TaskState>) -> Flow {
        let kind = TaskType::SetVariable;
        match latest {
            Some(t) if t.status == TaskStatus::FailedWithTerminalError && !task.optional => {
                return self.failed_for_good(task, t.task_id, t.reason.as_deref());
            }
            Some(_) => return Flow::Done,
            None => {}
        }
        let input = self.input(task, self.attempt_of(task));
        let set = input.as_object().cloned().unwrap_or_default();
        let mut variables = self.state.variables.clone();
        variables.extend(set.clone());
        let size = serde_json::to_vec(&variables).map_or(usize::MAX, |bytes| bytes.len());
        if size <= self.state.max_variables_bytes {
            return Flow::Waiting(vec![self.complete(task, kind, input, json!({}), Some(set))]);
        }
        let why = format!(
            "The variables payload size: {size} of workflow: {} is greater than the \
             permissible limit: {} kilobytes",
            self.state.workflow_id,
            self.state.max_variables_bytes / 1024
        );
        let mut failed = self.fail_now(task, kind, input, json!({}), &why);
        if let Decision::FailSystemTask { terminal, .. } = &mut failed {
            *terminal = true;
        }
        if task.optional {
            return Flow::Waiting(vec![failed]);
        }
        let mut flow = self.failed_for_good(task, self.task_id(task, 1), Some(&why));
        if let Flow::Stop(decisions) = &mut flow {
            decisions.insert(0, failed);
        }
        flow
    }

    /// The run fails with Conductor's reason for `task` (its attempt `task_id`), failed
    /// for good.
    fn failed_for_good(&self, task: &WorkflowTask, task_id: Uuid, why: Option<&str>) -> Flow {
        fail(task, task_failure_reason(task_id, "FAILED", why))
    }

    /// Records `task` as started (in progress in the decider).
    pub(super) fn start(&self, task: &WorkflowTask, kind: TaskType, input: Value) -> Decision {
        let attempt = self.attempt_of(task);
        Decision::StartSystemTask {
            task_id: self.task_id(task, attempt),
            task_ref: task.task_reference_name.clone(),
            task_type: kind.as_str().to_owned(),
            task_name: task.name.clone(),
            input,
            attempt,
            iteration: self.iteration,
        }
    }

    /// INLINE: evaluates `expression` over its input (bound to `$`); output `{result}`.
    /// The script runs once; its result (or failure) is recorded.
    pub(super) fn inline(&self, task: &WorkflowTask, latest: Option<&TaskState>) -> Flow {
        if latest.is_some() {
            return Flow::Done;
        }
        let input = self.input(task, self.attempt_of(task));
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
            Err(why) => self.fail_at_start(task, TaskType::Inline, input, why),
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

/// A task that waits for a result (WAIT, HUMAN) failed through the task API: the run
/// fails, as Conductor's, unless the task is permissive (its branch goes on; an optional
/// one reads COMPLETED_WITH_ERRORS and never gets here).
fn failed_for_good(task: &WorkflowTask, t: &TaskState) -> Option<Flow> {
    let failed = matches!(
        t.status,
        TaskStatus::Failed | TaskStatus::FailedWithTerminalError
    );
    (failed && !super::walk::permissive(task)).then(|| {
        fail(
            task,
            task_failure_reason(t.task_id, "FAILED", t.reason.as_deref()),
        )
    })
}

/// A task the decider ran whose latest attempt is over and not retried: done, or, failed
/// for good, the run fails with its reason (unless it is optional or permissive).
fn over(task: &WorkflowTask, t: &TaskState) -> Flow {
    let failed = matches!(
        t.status,
        TaskStatus::Failed | TaskStatus::FailedWithTerminalError | TaskStatus::TimedOut
    );
    if !failed || task.optional || super::walk::permissive(task) {
        return Flow::Done;
    }
    let reason = t.reason.as_deref().unwrap_or("failed");
    fail(
        task,
        format!("task {:?}: {reason}", task.task_reference_name),
    )
}

/// The durable timer of the WAIT task `task_id` (`duration` or `until`).
pub fn wait_timer_id(task_id: Uuid) -> Uuid {
    Uuid::new_v5(&task_id, b"timer")
}
