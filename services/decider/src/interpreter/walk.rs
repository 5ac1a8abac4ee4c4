//! Walking the definition tree against the run's tasks.

use serde_json::{json, Map, Value};
use uuid::Uuid;
use weft::dsl::{expr, TaskType, WorkflowTask};

use super::policy::Policy;
use super::{branch, Decision};
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
        // Branches of a fork whose JOIN's `joinOn` is already satisfied go on beside
        // what follows the JOIN; the list is done only when they are too.
        let mut background: Option<Vec<Decision>> = None;
        for (i, task) in tasks.iter().enumerate() {
            let next = tasks.get(i + 1);
            let skipped = self.skip(task);
            let flow = match (task.task_type(), previous) {
                _ if skipped.is_some() => skipped.unwrap_or(Flow::Done),
                // A JOIN after a dynamic fork joins every forked task (it has no joinOn);
                // with `successPercent` it judges a group of children.
                (Some(TaskType::Join), Some(fork))
                    if fork.task_type() == Some(TaskType::ForkJoinDynamic) =>
                {
                    let refs = self.forked_refs(fork);
                    match super::dynamic::success_percent(task) {
                        Some(percent) => self.group_join(task, &refs, percent),
                        None => self.join(task, &refs),
                    }
                }
                (Some(TaskType::ForkJoinDynamic), _) => {
                    let group = next.and_then(super::dynamic::success_percent).is_some();
                    let latest = self
                        .state
                        .latest_at(&task.task_reference_name, self.iteration);
                    match self.dynamic_fork(task, latest, group) {
                        // A group JOIN (`successPercent`) is recorded when it judges.
                        Flow::Waiting(branches) if !group => match next {
                            Some(join) => {
                                let refs = self.forked_refs(task);
                                Flow::Waiting(self.with_join_started(branches, join, &refs))
                            }
                            None => Flow::Waiting(branches),
                        },
                        flow => flow,
                    }
                }
                (Some(TaskType::ForkJoin), _) => {
                    let join = next.filter(|n| n.task_type() == Some(TaskType::Join));
                    let refs = join.map(join_on).unwrap_or_default();
                    match (self.task(task), join) {
                        (Flow::Waiting(rest), Some(_))
                            if !refs.is_empty() && self.all_finished(&refs) =>
                        {
                            background.get_or_insert_with(Vec::new).extend(rest);
                            Flow::Done
                        }
                        (Flow::Waiting(branches), Some(join)) => {
                            Flow::Waiting(self.with_join_started(branches, join, &refs))
                        }
                        (flow, _) => flow,
                    }
                }
                _ => self.task(task),
            };
            match flow {
                Flow::Done => previous = Some(task),
                Flow::Waiting(mut decisions) => {
                    if let Some(more) = background {
                        decisions.extend(more);
                    }
                    return Flow::Waiting(decisions);
                }
                stop @ Flow::Stop(_) => return stop,
            }
        }
        match background {
            Some(decisions) => Flow::Waiting(decisions),
            None => Flow::Done,
        }
    }

    /// Whether the newest execution of each of `refs` (in this iteration) has finished
    /// with a result the run goes on with.
    fn all_finished(&self, refs: &[String]) -> bool {
        refs.iter().all(|r| {
            self.state.latest_at(r, self.iteration).is_some_and(|t| {
                matches!(
                    t.status,
                    TaskStatus::Completed | TaskStatus::CompletedWithErrors | TaskStatus::Skipped
                ) || self.optional_given_up(t)
                    || self.permissive_given_up(t)
            })
        })
    }

    /// Whether `t` is an optional task given up for good: timed out with no retry left,
    /// or failed or timed out past its total time (during a back-off its last failure
    /// is still FAILED). The run goes on without it, so a JOIN does too. (An optional
    /// task whose last retry failed is COMPLETED_WITH_ERRORS already.)
    pub(super) fn optional_given_up(&self, t: &TaskState) -> bool {
        if !matches!(t.status, TaskStatus::TimedOut | TaskStatus::Failed)
            || self.state.retry_granted(t)
        {
            return false;
        }
        let Some(task) = crate::state::find_task(&self.state.definition.tasks, &t.task_ref)
            .filter(|task| task.optional)
        else {
            return false;
        };
        let policy = Policy::of(task);
        (t.status == TaskStatus::TimedOut && t.attempt > policy.retry_count)
            || self.total_deadline_passed(t, &policy)
    }

    /// Whether `t` is a permissive task (Conductor's `permissive`) that failed or timed out
    /// for good: no retry is left, or it is out of total time. Its branch went on; the JOIN
    /// that waits for it, or the run's end, fails.
    pub(super) fn permissive_given_up(&self, t: &TaskState) -> bool {
        let canceled = t.status == TaskStatus::Canceled && t.canceled_for_good;
        if self.state.retry_granted(t) {
            return false;
        }
        if !canceled
            && !matches!(
                t.status,
                TaskStatus::Failed | TaskStatus::FailedWithTerminalError | TaskStatus::TimedOut
            )
        {
            return false;
        }
        let Some(task) = crate::state::find_task(&self.state.definition.tasks, &t.task_ref)
            .filter(|task| permissive(task))
        else {
            return false;
        };
        let policy = Policy::of(task);
        canceled
            || t.status == TaskStatus::FailedWithTerminalError
            || t.attempt > policy.retry_count
            || (t.status == TaskStatus::Failed && !policy.is_retryable(t.error_kind.as_deref()))
            || self.total_deadline_passed(t, &policy)
    }

    /// The failure a run that reached its end has when permissive tasks failed for good
    /// on the way (the newest attempt of each), with Conductor's reason: "Task <id> failed
    /// with status: <STATUS> and reason: '<reason>'", joined by ". ".
    pub(super) fn permissive_failure(&self) -> Option<Decision> {
        let tasks = &self.state.tasks;
        let failed: Vec<&TaskState> = tasks
            .iter()
            .enumerate()
            .filter(|(_, t)| self.permissive_given_up(t))
            .filter(|(i, t)| {
                !tasks[i + 1..]
                    .iter()
                    .any(|later| later.task_ref == t.task_ref && later.iteration == t.iteration)
            })
            .map(|(_, t)| t)
            .collect();
        if failed.is_empty() {
            return None;
        }
        let reason = failed
            .iter()
            .map(|t| task_failure_reason(t.task_id, t.status.as_str(), t.reason.as_deref()))
            .collect::<Vec<_>>()
            .join(". ");
        Some(Decision::FailWorkflow {
            reason,
            failed_task_refs: failed.iter().map(|t| t.task_ref.clone()).collect(),
            output: None,
        })
    }

    /// An operator's skip: a skipped task is done; a task whose skip was requested
    /// before it was reached is recorded as SKIPPED when reached (its subtree, for a
    /// SWITCH, fork or loop, never runs).
    fn skip(&self, task: &WorkflowTask) -> Option<Flow> {
        let task_ref = &task.task_reference_name;
        let latest = self
            .state
            .latest_at(task_ref, self.iteration)
            .filter(|t| t.status != TaskStatus::Canceled);
        match latest {
            Some(t) if t.status == TaskStatus::Skipped => Some(Flow::Done),
            Some(_) => None,
            None => {
                let request = self
                    .state
                    .pending_skips
                    .iter()
                    .find(|r| &r.task_ref == task_ref)?;
                let input = if request.input.is_null() {
                    self.input(task, 1)
                } else {
                    request.input.clone()
                };
                Some(Flow::Waiting(vec![Decision::SkipTask {
                    task_id: self.task_id(task, 1),
                    task_ref: task_ref.clone(),
                    task_type: task.kind.clone(),
                    task_name: task.name.clone(),
                    input,
                    output: request.output.clone(),
                    iteration: self.iteration,
                }]))
            }
        }
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
        // An activity's next attempt is numbered on from its last; a task the decider runs
        // goes on from the attempt `system_policy` says (none: it runs again).
        let latest = match kind {
            TaskType::Simple | TaskType::Http | TaskType::SubWorkflow | TaskType::Dynamic => latest,
            _ => match self.system_latest(task, kind, latest) {
                Ok(latest) => latest,
                Err(flow) => return flow,
            },
        };
        let deadlines = match self.waiting_deadlines(task, kind, latest) {
            Ok(deadlines) => deadlines,
            Err(timed_out) => return timed_out,
        };
        match self.run_type(task, kind, latest) {
            Flow::Waiting(decisions) if !deadlines.is_empty() => {
                Flow::Waiting(deadlines.into_iter().chain(decisions).collect())
            }
            flow => flow,
        }
    }

    /// Runs `task` of `kind` on from its latest attempt.
    fn run_type(&self, task: &WorkflowTask, kind: TaskType, latest: Option<&TaskState>) -> Flow {
        match kind {
            TaskType::Simple | TaskType::Http | TaskType::SubWorkflow => {
                self.activity(task, kind, latest)
            }
            TaskType::Decision | TaskType::Switch => self.switch(task, kind, latest),
            TaskType::ForkJoin => self.fork(task, latest),
            TaskType::Join => self.join(task, &join_on(task)),
            TaskType::SetVariable => self.set_variable(task, latest),
            TaskType::Terminate => self.terminate(task, latest),
            TaskType::DoWhile => self.do_while(task, latest),
            TaskType::Inline => self.inline(task, latest),
            TaskType::Event => self.event(task, latest),
            TaskType::Noop => self.system(task, kind, latest, |_| (json!({}), None)),
            TaskType::Lambda => self.lambda(task, latest),
            TaskType::Human => self.human(task, latest),
            TaskType::StartWorkflow => self.start_workflow(task, latest),
            TaskType::Dynamic => self.dynamic(task, latest),
            TaskType::JsonJqTransform => self.jq_transform(task, latest),
            TaskType::ExclusiveJoin => self.exclusive_join(task, latest),
            TaskType::ForkJoinDynamic => self.dynamic_fork(task, latest, false),
            TaskType::Wait => self.wait(task, latest),
        }
    }

    /// DYNAMIC: a SIMPLE task named by the input parameter `dynamicTaskNameParam` names
    /// (resolved when it is first scheduled; a retry keeps the name of its first attempt).
    fn dynamic(&self, task: &WorkflowTask, latest: Option<&TaskState>) -> Flow {
        let name = match latest {
            Some(t) => t.task_name.clone(),
            None => {
                let param = task
                    .extra
                    .get("dynamicTaskNameParam")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                match self.input(task, 1).get(param).and_then(Value::as_str) {
                    Some(name) if !name.trim().is_empty() => name.to_owned(),
                    _ => {
                        return fail(
                            task,
                            format!(
                                "task {:?}: inputParameters.{param} names no task to run",
                                task.task_reference_name
                            ),
                        )
                    }
                }
            }
        };
        let mut simple = task.clone();
        simple.name = name;
        simple.kind = TaskType::Simple.as_str().to_owned();
        self.activity(&simple, TaskType::Simple, latest)
    }

    /// DECISION and SWITCH: choose the case once (recorded in the output), then run it.
    fn switch(&self, task: &WorkflowTask, kind: TaskType, latest: Option<&TaskState>) -> Flow {
        let Some(done) = latest else {
            let input = self.input(task, 1);
            let case = match branch::select_case(task, kind, &input) {
                Ok(case) => case,
                Err(why) => return self.fail_unless_optional(task, kind, input, &why),
            };
            let mut input = input;
            let output = match kind {
                TaskType::Decision => {
                    // Conductor's DecisionTaskMapper records the case in the task's input,
                    // and whether it leads anywhere.
                    if let Value::Object(map) = &mut input {
                        map.insert("case".into(), json!(case));
                        if !branch::case_tasks(task, &case).is_empty() {
                            map.insert("hasChildren".into(), json!("true"));
                        }
                    }
                    json!({ "caseOutput": [case] })
                }
                _ => json!({ "evaluationResult": [case], "selectedCase": case }),
            };
            return Flow::Waiting(vec![self.complete(task, kind, input, output, None)]);
        };
        // An optional switch whose expression failed takes no branch.
        if matches!(
            done.status,
            TaskStatus::CompletedWithErrors
                | TaskStatus::Failed
                | TaskStatus::FailedWithTerminalError
        ) {
            return Flow::Done;
        }
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
        let mut branches = Vec::new();
        for branch in task.fork_tasks.iter().flatten() {
            match self.list(branch) {
                Flow::Done => {}
                Flow::Waiting(d) => branches.push(d),
                stop @ Flow::Stop(_) => return stop,
            }
        }
        if branches.is_empty() {
            Flow::Done
        } else {
            Flow::Waiting(settle_first(branches))
        }
    }

    /// A JOIN reached once the tasks it waits for are done: completes with their
    /// outputs. It was started IN_PROGRESS when its fork's branches were scheduled (as
    /// Conductor shows it); a fork whose branches finished within one decision has it
    /// recorded complete at once.
    pub(super) fn join(&self, task: &WorkflowTask, refs: &[String]) -> Flow {
        let latest = self
            .state
            .latest_at(&task.task_reference_name, self.iteration)
            .filter(|t| t.status != TaskStatus::Canceled);
        // Done with; a FAILED one still ends the run with its reason below.
        if latest.is_some_and(|t| !t.status.is_pending() && t.status != TaskStatus::Failed) {
            return Flow::Done;
        }
        let failed: Vec<&TaskState> = refs
            .iter()
            .filter_map(|r| self.state.latest_at(r, self.iteration))
            .filter(|t| self.permissive_given_up(t))
            .collect();
        if !failed.is_empty() && failed.iter().all(|t| t.status == TaskStatus::Canceled) {
            // As Conductor's JOIN over canceled tasks only: CANCELED, and the run
            // TERMINATED (which cancels the JOIN with everything still pending).
            return Flow::Stop(vec![Decision::TerminateWorkflow {
                reason: reasons_of(&failed),
                output: super::workflow_output(self.state),
            }]);
        }
        if !failed.is_empty() {
            // Failed with their reasons, as Conductor's, and the run with it.
            let reason = reasons_of(&failed);
            return self
                .finish_join(task, latest, refs, |task_id, task_ref| {
                    Decision::FailStartedTask {
                        task_id,
                        task_ref,
                        reason,
                        terminal: false,
                    }
                })
                .unwrap_or_else(|| {
                    let why = latest.and_then(|t| t.reason.as_deref());
                    fail(
                        task,
                        format!(
                            "task {:?} failed: {}",
                            task.task_reference_name,
                            why.unwrap_or("no reason given")
                        ),
                    )
                });
        }
        self.finish_join(task, latest, refs, |task_id, task_ref| {
            Decision::CompleteStartedTask {
                task_id,
                task_ref,
                output: self.outputs_of(refs),
                errors: self.optional_failures(refs),
            }
        })
        .unwrap_or(Flow::Done)
    }

    /// `finish` (its task id and ref) for a JOIN: the one started IN_PROGRESS, or one
    /// started now (a fork whose branches finished within one decision); `None` once it
    /// has ended.
    fn finish_join(
        &self,
        join: &WorkflowTask,
        latest: Option<&TaskState>,
        refs: &[String],
        finish: impl FnOnce(Uuid, String) -> Decision,
    ) -> Option<Flow> {
        match latest {
            Some(t) if t.status.is_pending() => {
                Some(Flow::Waiting(vec![finish(t.task_id, t.task_ref.clone())]))
            }
            Some(_) => None,
            None => {
                let task_id = self.task_id(join, 1);
                Some(Flow::Waiting(vec![
                    self.start_join(join, task_id, refs),
                    finish(task_id, join.task_reference_name.clone()),
                ]))
            }
        }
    }

    /// Why a JOIN over `refs` completes with errors, as Conductor's: each optional task
    /// among them that ended COMPLETED_WITH_ERRORS, as `<name>/<taskId>`, then "completed
    /// with errors"; `None` when there is none.
    fn optional_failures(&self, refs: &[String]) -> Option<String> {
        let failed: Vec<String> = refs
            .iter()
            .filter_map(|r| self.state.latest_at(r, self.iteration))
            .filter(|t| t.status == TaskStatus::CompletedWithErrors)
            .map(|t| format!("{}/{}", t.task_name, t.task_id))
            .collect();
        (!failed.is_empty()).then(|| format!("{} completed with errors", failed.join(" ")))
    }

    /// `branches`' decisions, followed by the start of the fork's `join` (IN_PROGRESS,
    /// `{joinOn}` as its input) once no branch opens a SWITCH or a fork any more and the
    /// JOIN has not started yet: Conductor lists a fork's tasks as the FORK, each
    /// branch's first task in branch order, then the JOIN.
    fn with_join_started(
        &self,
        mut branches: Vec<Decision>,
        join: &WorkflowTask,
        refs: &[String],
    ) -> Vec<Decision> {
        let started = self
            .state
            .latest_at(&join.task_reference_name, self.iteration)
            .is_some_and(|t| t.status != TaskStatus::Canceled);
        if started || branches.iter().any(opens_branches) {
            return branches;
        }
        branches.push(self.start_join(join, self.task_id(join, 1), refs));
        branches
    }

    /// Records `join` (over `refs`) started, IN_PROGRESS, as `task_id`.
    fn start_join(&self, join: &WorkflowTask, task_id: Uuid, refs: &[String]) -> Decision {
        Decision::StartSystemTask {
            task_id,
            task_ref: join.task_reference_name.clone(),
            task_type: TaskType::Join.as_str().to_owned(),
            task_name: join.name.clone(),
            input: join_input(refs),
            attempt: 1,
            iteration: self.iteration,
        }
    }

    /// TERMINATE: ends the run with `terminationStatus`, `terminationReason` (by default
    /// Conductor's "Workflow is <STATUS> by TERMINATE task: <taskId>") and
    /// `workflowOutput`, which is the task's output and the run's, as Conductor's: a map as
    /// it is, another value as `{"output": value}`, none as `{}`.
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
            .filter(|r| !r.trim().is_empty())
            .map(str::to_owned)
            .unwrap_or_else(|| {
                format!(
                    "Workflow is {status} by TERMINATE task: {}",
                    self.task_id(task, 1)
                )
            });
        let output = match input.get("workflowOutput") {
            None | Some(Value::Null) => json!({}),
            Some(map @ Value::Object(_)) => map.clone(),
            Some(other) => json!({ "output": other }),
        };
        let record = self.complete(task, TaskType::Terminate, input, output.clone(), None);
        let end = match status.as_str() {
            "COMPLETED" => Decision::CompleteWorkflow {
                output,
                reason: Some(reason),
            },
            "FAILED" => Decision::FailWorkflow {
                reason,
                failed_task_refs: vec![task.task_reference_name.clone()],
                output: Some(super::with_failure_workflow(self.state, output)),
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
        let attempt = self.attempt_of(task);
        Decision::CompleteSystemTask {
            task_id: self.task_id(task, attempt),
            task_ref: task.task_reference_name.clone(),
            task_type: kind.as_str().to_owned(),
            task_name: task.name.clone(),
            input,
            attempt,
            output,
            variables,
            iteration: self.iteration,
        }
    }

    /// `{ref: output}` of the newest task of each ref.
    pub(super) fn outputs_of(&self, refs: &[String]) -> Value {
        let mut out = Map::new();
        for r in refs {
            let output = self.state.latest(r).and_then(|t| t.output.clone());
            // As Conductor's JOIN: a task with no output adds nothing.
            let empty = match &output {
                None | Some(Value::Null) => true,
                Some(Value::Object(map)) => map.is_empty(),
                Some(_) => false,
            };
            if let Some(value) = output.filter(|_| !empty) {
                out.insert(r.clone(), value);
            }
        }
        Value::Object(out)
    }

    /// The task's input, resolved against the run (with `CPEWF_TASK_ID`); a rerun's
    /// `taskInput` instead for the task it reruns from, until that task has run again.
    pub(super) fn input(&self, task: &WorkflowTask, attempt: i32) -> Value {
        if let Some((task_ref, iteration, input)) = &self.state.reset_task_input {
            let rerun = *task_ref == task.task_reference_name
                && *iteration == self.iteration
                && self
                    .state
                    .latest_at(task_ref, *iteration)
                    .is_none_or(|t| t.status == TaskStatus::Canceled);
            if rerun {
                return input.clone();
            }
        }
        // Conductor's `inputTemplate` of the task's definition: its keys the task's own
        // input lacks are added before resolving, and a key that resolves to null takes
        // the template's value (`ParametersUtils.getTaskInputV2`).
        let template = task
            .extra
            .get(weft::dsl::taskdef::TASK_DEFINITION_KEY)
            .and_then(|d| d.get("inputTemplate"))
            .and_then(Value::as_object)
            .filter(|t| !t.is_empty());
        let mut params = task.input_parameters.clone();
        if let Some(template) = template {
            for (key, value) in template {
                params.entry(key.clone()).or_insert_with(|| value.clone());
            }
        }
        let roots = expr::known_roots(params.values());
        let context = self.context_of(task, attempt, roots.as_deref());
        let mut input = expr::resolve(&Value::Object(params), &context);
        if let (Some(template), Value::Object(resolved)) = (template, &mut input) {
            for (key, value) in resolved.iter_mut() {
                if value.is_null() {
                    if let Some(default) = template.get(key) {
                        value.clone_from(default);
                    }
                }
            }
        }
        input
    }

    /// What the task's expressions read: the run, `CPEWF_TASK_ID`, and the loop it is in.
    pub(super) fn context(&self, task: &WorkflowTask, attempt: i32) -> Value {
        self.context_of(task, attempt, None)
    }

    /// [`Self::context`] with the run's members limited to `roots` (see
    /// `RunState::expression_context_of`); the task id and the loop are always there.
    fn context_of(&self, task: &WorkflowTask, attempt: i32, roots: Option<&[String]>) -> Value {
        let mut context = self.state.expression_context_of(roots);
        if let Value::Object(map) = &mut context {
            map.insert(
                expr::TASK_ID_VARIABLE.to_owned(),
                Value::String(self.task_id(task, attempt).to_string()),
            );
            if let Some(looping) = self.looping {
                // Conductor's task document has the loop's `iteration` beside its input
                // and output (`${loop['iteration']}`, `${loop.iteration}`).
                map.insert(
                    looping.task_ref.clone(),
                    json!({
                        "input": looping.input,
                        "output": super::looping::progress(looping, self.iteration),
                        "iteration": self.iteration,
                    }),
                );
            }
        }
        context
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

/// Conductor's `permissive` (and not `optional`): when the task fails for good its branch
/// goes on; the JOIN that waits for it fails once it is reached, and a run that gets to its
/// end with such a failure fails.
pub(super) fn permissive(task: &WorkflowTask) -> bool {
    !task.optional
        && task
            .extra
            .get("permissive")
            .and_then(Value::as_bool)
            .unwrap_or(false)
}

/// The reasons of `tasks`, joined by spaces, as Conductor's JOIN words its failure.
fn reasons_of(tasks: &[&TaskState]) -> String {
    tasks
        .iter()
        .filter_map(|t| t.reason.as_deref())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Conductor's reason for a run that ends because of task `task_id`: "Task <id> failed
/// with status: <status> and reason: '<reason>'", `status` being the run's.
pub(super) fn task_failure_reason(task_id: Uuid, status: &str, reason: Option<&str>) -> String {
    format!(
        "Task {task_id} failed with status: {status} and reason: '{}'",
        reason.unwrap_or_default()
    )
}

/// A JOIN's input, as Conductor's: `{"joinOn": [refs]}`.
fn join_input(refs: &[String]) -> Value {
    json!({ "joinOn": refs })
}

/// Whether a decision records a task that Conductor schedules together with what it
/// leads to: a SWITCH or DECISION with the first tasks of the case it chose, a fork with
/// its branches' first tasks and its JOIN (its task mappers recurse into them). Every
/// other task, a DO_WHILE or an INLINE too, is scheduled alone; what follows it comes
/// after the JOIN of the fork it is in.
fn opens_branches(d: &Decision) -> bool {
    matches!(
        d,
        Decision::CompleteSystemTask { task_type, .. }
            if matches!(
                TaskType::parse(task_type),
                Some(TaskType::Switch | TaskType::Decision | TaskType::ForkJoin | TaskType::ForkJoinDynamic)
            )
    )
}

/// The decisions of a fork's branches (one list per branch, in branch order), up to and
/// including the first branch that opens a SWITCH or a nested fork; the branches after it
/// wait for the next round of the same decision. So a run lists a fork's tasks as
/// Conductor maps them, depth first: the fork, each branch's first task in branch order
/// (with what a SWITCH or a fork in it opens), then the JOIN.
pub(super) fn settle_first(branches: Vec<Vec<Decision>>) -> Vec<Decision> {
    let mut decisions = Vec::new();
    for branch in branches {
        let opens = branch.iter().any(opens_branches);
        decisions.extend(branch);
        if opens {
            break;
        }
    }
    decisions
}

/// A JOIN's `joinOn` refs (empty for anything else).
fn join_on(task: &WorkflowTask) -> Vec<String> {
    if task.task_type() != Some(TaskType::Join) {
        return Vec::new();
    }
    task.extra
        .get("joinOn")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|r| r.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

impl Walker<'_> {
    /// A system task that could not do its work (`why`): recorded FAILED and the run
    /// fails, or, for an optional task, recorded COMPLETED_WITH_ERRORS and the run goes
    /// on past it (Conductor's `optional` on a SWITCH, a dynamic fork, …).
    pub(super) fn fail_unless_optional(
        &self,
        task: &WorkflowTask,
        kind: TaskType,
        input: Value,
        why: &str,
    ) -> Flow {
        if task.optional {
            return Flow::Waiting(vec![self.fail_now(task, kind, input, json!({}), why)]);
        }
        fail(task, format!("task {:?}: {why}", task.task_reference_name))
    }
}

/// Ends the run as FAILED, blaming `task`.
pub(super) fn fail(task: &WorkflowTask, reason: String) -> Flow {
    Flow::Stop(vec![Decision::FailWorkflow {
        reason,
        failed_task_refs: vec![task.task_reference_name.clone()],
        output: None,
    }])
}
