//! Validation of workflow definitions.
//!
//! Every error names the first offending field by its JSON path in Conductor's
//! camelCase (`tasks[2].type`, `tasks[3].decisionCases.yes[0].name`,
//! `tasks[0].inputParameters.text`, `outputParameters.result`), so the gateway can answer
//! a 400 that points at it (API.md, error shape).
//!
//! Checks run in this order: the definition's shape (what serde needs), then the task
//! types over the whole tree (an unknown type is the most useful thing to report: it
//! tells the user which feature is missing), then one depth-first pre-order walk for
//! names, references, per-type structure and `${...}` expressions.

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value};

use super::expr;
use super::model::TaskType;
use super::{WorkflowDef, WorkflowTask};

/// A definition problem, naming the offending field by path (e.g. `tasks[2].type`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct DslError {
    /// JSON path of the offending field, e.g. `tasks[2].taskReferenceName`.
    pub path: String,
    /// What is wrong, as a sentence.
    pub message: String,
}

impl DslError {
    /// An error at `path`.
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        DslError {
            path: path.into(),
            message: message.into(),
        }
    }

    /// The same error, seen from a document that holds this one at `prefix` (used for
    /// inline sub-workflow definitions).
    fn under(self, prefix: &str) -> Self {
        let path = if self.path.is_empty() {
            prefix.to_owned()
        } else {
            join(prefix, &self.path)
        };
        DslError { path, ..self }
    }
}

/// Evaluator types a SWITCH may name, as in Conductor.
const EVALUATOR_TYPES: [&str; 3] = ["value-param", "javascript", "graaljs"];

/// Statuses a TERMINATE task may end the workflow with (Conductor's `Terminate`).
const TERMINATION_STATUSES: [&str; 3] = ["COMPLETED", "FAILED", "TERMINATED"];

/// Parses and validates a definition from JSON.
pub fn parse_definition(json: &Value) -> Result<WorkflowDef, DslError> {
    let Some(obj) = json.as_object() else {
        return Err(DslError::new(
            "",
            format!(
                "a workflow definition must be a JSON object, not {}",
                kind(json)
            ),
        ));
    };
    // The model defaults a missing `name`/`tasks` to empty; absence is told apart here so
    // the message can say "required" rather than "empty".
    if obj.get("name").is_none_or(Value::is_null) {
        return Err(DslError::new("name", "the workflow name is required"));
    }
    if obj.get("tasks").is_none_or(Value::is_null) {
        return Err(DslError::new(
            "tasks",
            "tasks is required: a workflow needs at least one task",
        ));
    }
    let def: WorkflowDef = serde_json::from_value(json.clone()).map_err(|e| {
        locate_shape_error(obj)
            .unwrap_or_else(|| DslError::new("", format!("not a valid workflow definition: {e}")))
    })?;
    super::hooks::validate(&def.extra, "", &super::hooks::HookKind::ALL[1..], true)?;
    validate(&def)?;
    Ok(def)
}

/// Checks a parsed definition.
pub fn validate(def: &WorkflowDef) -> Result<(), DslError> {
    if def.name.trim().is_empty() {
        return Err(DslError::new("name", "the workflow name must not be empty"));
    }
    if def.tasks.is_empty() {
        return Err(DslError::new(
            "tasks",
            "tasks must not be empty: a workflow needs at least one task",
        ));
    }
    check_types(&def.tasks, "tasks")?;
    check_workflow_timeout_policy(def)?;

    let mut all_refs = HashSet::new();
    collect_refs(&def.tasks, &mut all_refs);
    let mut walker = Walker {
        all_refs: &all_refs,
        seen: HashMap::new(),
    };
    walker.walk_list(&def.tasks, "tasks", HashSet::new())?;

    // The workflow's output is computed when it ends: any task of the definition may be
    // referenced (a branch not taken just yields null).
    check_expressions(
        &def.output_parameters,
        "outputParameters",
        |root| all_refs.contains(root),
        unknown_ref_message,
    )
}

/// The run's `timeoutPolicy` (Conductor's): TIME_OUT_WF (the default: a run past its
/// `timeoutSeconds` ends TIMED_OUT) or ALERT_ONLY (it goes on; its timer's firing is
/// recorded in its history).
fn check_workflow_timeout_policy(def: &WorkflowDef) -> Result<(), DslError> {
    match def.extra.get("timeoutPolicy") {
        None | Some(Value::Null) => Ok(()),
        Some(Value::String(p)) if p == "TIME_OUT_WF" || p == "ALERT_ONLY" => Ok(()),
        Some(other) => Err(DslError::new(
            "timeoutPolicy",
            format!("timeoutPolicy {other} is not TIME_OUT_WF or ALERT_ONLY"),
        )),
    }
}

/// Checks that every task of `def` can be executed today.
pub fn check_executable(def: &WorkflowDef) -> Result<(), DslError> {
    for_each_task(
        &def.tasks,
        "tasks",
        &mut |task, path| match task.task_type() {
            Some(TaskType::ForkJoinDynamic)
                if task.extra.contains_key("dynamicForkJoinTasksParam") =>
            {
                Err(DslError::new(
                    join(path, "dynamicForkJoinTasksParam"),
                    "the legacy dynamicForkJoinTasksParam is not supported yet; use \
                     dynamicForkTasksParam with dynamicForkTasksInputParamName",
                ))
            }
            Some(t) if t.is_executable() => Ok(()),
            _ => Err(DslError::new(
                join(path, "type"),
                format!("task type {} is not supported yet", task.kind),
            )),
        },
    )
}

/// Every known type name, for messages.
fn supported_types() -> String {
    TaskType::ALL
        .iter()
        .map(|t| t.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// First pass: every `type` in the tree must be one Weft knows.
fn check_types(tasks: &[WorkflowTask], path: &str) -> Result<(), DslError> {
    for_each_task(tasks, path, &mut |task, path| {
        if task.task_type().is_some() {
            return Ok(());
        }
        Err(DslError::new(
            join(path, "type"),
            format!(
                "unknown task type {}; supported: {}",
                Value::String(task.kind.clone()),
                supported_types()
            ),
        ))
    })
}

/// Calls `f` on every task of the tree, depth-first pre-order, stopping at the first error.
fn for_each_task(
    tasks: &[WorkflowTask],
    path: &str,
    f: &mut dyn FnMut(&WorkflowTask, &str) -> Result<(), DslError>,
) -> Result<(), DslError> {
    for (i, task) in tasks.iter().enumerate() {
        let task_path = format!("{path}[{i}]");
        f(task, &task_path)?;
        for (list_path, list) in child_lists(task, &task_path) {
            for_each_task(list, &list_path, f)?;
        }
    }
    Ok(())
}

fn collect_refs(tasks: &[WorkflowTask], refs: &mut HashSet<String>) {
    for task in tasks {
        if !task.task_reference_name.is_empty() {
            refs.insert(task.task_reference_name.clone());
        }
        for (_, list) in child_lists(task, "") {
            collect_refs(list, refs);
        }
    }
}

/// The nested task lists of a task with their paths, in the order of
/// [`WorkflowTask::children`].
fn child_lists<'a>(task: &'a WorkflowTask, path: &str) -> Vec<(String, &'a [WorkflowTask])> {
    let mut lists = Vec::new();
    if let Some(cases) = &task.decision_cases {
        for (case, list) in cases {
            lists.push((join(&join(path, "decisionCases"), case), list.as_slice()));
        }
    }
    if let Some(list) = &task.default_case {
        lists.push((join(path, "defaultCase"), list.as_slice()));
    }
    if let Some(forks) = &task.fork_tasks {
        for (j, list) in forks.iter().enumerate() {
            lists.push((format!("{}[{j}]", join(path, "forkTasks")), list.as_slice()));
        }
    }
    if let Some(list) = &task.loop_over {
        lists.push((join(path, "loopOver"), list.as_slice()));
    }
    lists
}

/// The main pre-order walk.
struct Walker<'a> {
    /// Every reference of the definition, to tell "unknown" from "not yet".
    all_refs: &'a HashSet<String>,
    /// References met so far, with the path where each was first defined.
    seen: HashMap<String, String>,
}

impl Walker<'_> {
    /// Walks one list of tasks run in sequence. `visible` holds the references a task
    /// of this list may use: earlier tasks and enclosing containers. Returns every
    /// reference defined in the list, nested ones included.
    fn walk_list(
        &mut self,
        tasks: &[WorkflowTask],
        path: &str,
        mut visible: HashSet<String>,
    ) -> Result<Vec<String>, DslError> {
        let mut defined = Vec::new();
        for (i, task) in tasks.iter().enumerate() {
            let task_path = format!("{path}[{i}]");
            self.check_identity(task, &task_path)?;
            check_structure(task, &task_path, tasks.get(i + 1))?;
            super::hooks::validate(&task.extra, &task_path, &super::hooks::HookKind::ALL, false)?;
            self.check_task_expressions(task, &task_path, &visible)?;
            if task.task_type() == Some(TaskType::Join) {
                let fork = i.checked_sub(1).map(|p| &tasks[p]);
                self.check_join_on(task, &task_path, &visible, fork)?;
            }
            if task.task_type() == Some(TaskType::ExclusiveJoin) {
                self.check_exclusive_join(task, &task_path, &visible)?;
            }

            // Children see their container (a loop body reads `${loop.output.iteration}`)
            // and each branch sees only itself: a sibling branch of a fork or decision
            // may not have run yet. Tasks after the container see every branch.
            visible.insert(task.task_reference_name.clone());
            defined.push(task.task_reference_name.clone());
            let mut inner = Vec::new();
            for (list_path, list) in child_lists(task, &task_path) {
                inner.extend(self.walk_list(list, &list_path, visible.clone())?);
            }
            visible.extend(inner.iter().cloned());
            defined.extend(inner);
        }
        Ok(defined)
    }

    /// `name` and `taskReferenceName` present; the reference unique in the definition.
    fn check_identity(&mut self, task: &WorkflowTask, path: &str) -> Result<(), DslError> {
        if task.name.trim().is_empty() {
            return Err(DslError::new(
                join(path, "name"),
                "the task name must not be empty",
            ));
        }
        let reference = &task.task_reference_name;
        let ref_path = join(path, "taskReferenceName");
        if reference.trim().is_empty() {
            return Err(DslError::new(
                ref_path,
                "the taskReferenceName must not be empty",
            ));
        }
        if let Some(first) = self.seen.get(reference) {
            return Err(DslError::new(
                ref_path.clone(),
                format!(
                    "taskReferenceName {} is used twice, at {first} and at {ref_path}; \
                     references must be unique in a definition",
                    Value::String(reference.clone())
                ),
            ));
        }
        self.seen.insert(reference.clone(), ref_path);
        Ok(())
    }

    /// Every `${ref...}` in `inputParameters` must name a reference visible here.
    fn check_task_expressions(
        &self,
        task: &WorkflowTask,
        path: &str,
        visible: &HashSet<String>,
    ) -> Result<(), DslError> {
        let own = task.task_reference_name.as_str();
        check_expressions(
            &task.input_parameters,
            &join(path, "inputParameters"),
            |root| visible.contains(root),
            |r| {
                if r.root == own {
                    format!(
                        "{} refers to this task itself; a task's input can only use \
                         workflow data and tasks that run before it",
                        r.expression
                    )
                } else if self.all_refs.contains(&r.root) {
                    format!(
                        "{} refers to task {}, which does not run before this task \
                         (only earlier tasks, enclosing tasks, and branches that have \
                         joined can be referenced)",
                        r.expression,
                        Value::String(r.root.clone())
                    )
                } else {
                    unknown_ref_message(r)
                }
            },
        )
    }

    /// A JOIN waits for tasks of the branches of the FORK_JOIN just before it.
    fn check_join_on(
        &self,
        task: &WorkflowTask,
        path: &str,
        visible: &HashSet<String>,
        fork: Option<&WorkflowTask>,
    ) -> Result<(), DslError> {
        let closes_a_fork = fork.is_some_and(|f| {
            matches!(
                f.task_type(),
                Some(TaskType::ForkJoin | TaskType::ForkJoinDynamic)
            )
        });
        if !closes_a_fork {
            return Err(DslError::new(
                path,
                "a JOIN must come right after the FORK_JOIN or FORK_JOIN_DYNAMIC it closes",
            ));
        }
        // Refs inside the preceding static fork's branches (a dynamic fork's are known
        // only at run time).
        let forked: Option<HashSet<String>> = fork
            .filter(|f| f.task_type() == Some(TaskType::ForkJoin))
            .map(|f| {
                let mut refs = HashSet::new();
                for branch in f.fork_tasks.iter().flatten() {
                    collect_refs(branch, &mut refs);
                }
                refs
            });
        let join_path = join(path, "joinOn");
        let refs = match task.extra.get("joinOn") {
            None | Some(Value::Null) => return Ok(()),
            Some(Value::Array(refs)) => refs,
            Some(other) => {
                return Err(DslError::new(
                    join_path,
                    format!(
                        "expected an array of taskReferenceNames, found {}",
                        kind(other)
                    ),
                ))
            }
        };
        for (k, r) in refs.iter().enumerate() {
            let item_path = format!("{join_path}[{k}]");
            let Some(r) = r.as_str() else {
                return Err(DslError::new(
                    item_path,
                    format!("expected a taskReferenceName, found {}", kind(r)),
                ));
            };
            let in_fork = forked.as_ref().is_none_or(|f| f.contains(r));
            if visible.contains(r) && in_fork {
                continue;
            }
            let why = if visible.contains(r) {
                "is not a task of the FORK_JOIN this JOIN closes"
            } else if self.all_refs.contains(r) {
                "does not come before this JOIN"
            } else {
                "is not a taskReferenceName of this definition"
            };
            return Err(DslError::new(
                item_path,
                format!("JOIN waits on {}, which {why}", Value::String(r.to_owned())),
            ));
        }
        Ok(())
    }
}

impl Walker<'_> {
    /// An EXCLUSIVE_JOIN takes the output of a task that runs before it: `joinOn` and
    /// `defaultExclusiveJoinTask` name such tasks, and one of them names at least one
    /// (with neither, Conductor's join would wait for ever).
    fn check_exclusive_join(
        &self,
        task: &WorkflowTask,
        path: &str,
        visible: &HashSet<String>,
    ) -> Result<(), DslError> {
        let mut named = 0;
        for field in ["joinOn", "defaultExclusiveJoinTask"] {
            let field_path = join(path, field);
            let refs = match task.extra.get(field) {
                None | Some(Value::Null) => continue,
                Some(Value::Array(refs)) => refs,
                Some(other) => {
                    return Err(DslError::new(
                        field_path,
                        format!(
                            "expected an array of taskReferenceNames, found {}",
                            kind(other)
                        ),
                    ))
                }
            };
            for (k, r) in refs.iter().enumerate() {
                let item_path = format!("{field_path}[{k}]");
                let Some(r) = r.as_str() else {
                    return Err(DslError::new(
                        item_path,
                        format!("expected a taskReferenceName, found {}", kind(r)),
                    ));
                };
                if visible.contains(r) {
                    named += 1;
                    continue;
                }
                let why = if self.all_refs.contains(r) {
                    "does not come before this EXCLUSIVE_JOIN"
                } else {
                    "is not a taskReferenceName of this definition"
                };
                return Err(DslError::new(
                    item_path,
                    format!(
                        "EXCLUSIVE_JOIN takes the output of {}, which {why}",
                        Value::String(r.to_owned())
                    ),
                ));
            }
        }
        if named == 0 {
            return Err(DslError::new(
                join(path, "joinOn"),
                "an EXCLUSIVE_JOIN needs joinOn: the tasks whose output it takes (the \
                 last task of each case of the switch before it), or \
                 defaultExclusiveJoinTask",
            ));
        }
        Ok(())
    }
}

fn unknown_ref_message(r: &expr::Reference) -> String {
    format!(
        "{} refers to {}, which is neither \"{}\" nor a taskReferenceName of this definition",
        r.expression,
        Value::String(r.root.clone()),
        expr::WORKFLOW_ROOT
    )
}

/// Walks a template; every expression root must be `workflow`, `CPEWF_TASK_ID`, or
/// accepted by `allowed`. The error is at the path of the string holding it.
fn check_expressions(
    template: &Map<String, Value>,
    path: &str,
    allowed: impl Fn(&str) -> bool,
    message: impl Fn(&expr::Reference) -> String,
) -> Result<(), DslError> {
    fn walk(
        v: &Value,
        path: &str,
        check: &dyn Fn(&str, &str) -> Result<(), DslError>,
    ) -> Result<(), DslError> {
        match v {
            Value::String(s) => check(s, path),
            Value::Array(items) => items
                .iter()
                .enumerate()
                .try_for_each(|(i, item)| walk(item, &format!("{path}[{i}]"), check)),
            Value::Object(map) => map
                .iter()
                .try_for_each(|(k, item)| walk(item, &join(path, k), check)),
            _ => Ok(()),
        }
    }
    let check = |s: &str, path: &str| -> Result<(), DslError> {
        for r in expr::references_in_str(s) {
            let builtin = r.root == expr::WORKFLOW_ROOT || r.root == expr::TASK_ID_VARIABLE;
            if !builtin && !allowed(&r.root) {
                return Err(DslError::new(path, message(&r)));
            }
        }
        Ok(())
    };
    template
        .iter()
        .try_for_each(|(k, v)| walk(v, &join(path, k), &check))
}

/// Per-type structure, following Conductor's `WorkflowTaskTypeConstraint` where it is
/// cheap and does not need task definitions (e.g. HTTP may take `http_request` from
/// its TaskDef's input template, so it is not checked here).
fn check_structure(
    task: &WorkflowTask,
    path: &str,
    next: Option<&WorkflowTask>,
) -> Result<(), DslError> {
    let Some(t) = task.task_type() else {
        return Ok(());
    };
    check_child_fields(task, t, path)?;
    check_optional(task, t, path)?;
    check_start_delay(task, t, path)?;
    check_async_complete(task, t, path)?;
    super::taskdef::check_policies_apply(task, path)?;
    let field = |name: &str| join(path, name);
    let input = |name: &str| join(&join(path, "inputParameters"), name);
    let ty = t.as_str();
    match t {
        TaskType::Decision | TaskType::Switch => {
            if t == TaskType::Decision
                && non_empty_str(task.extra.get("caseValueParam")).is_none()
                && non_empty_str(task.extra.get("caseExpression")).is_none()
            {
                return Err(DslError::new(
                    field("caseValueParam"),
                    "a DECISION task needs caseValueParam or caseExpression",
                ));
            }
            if t == TaskType::Switch {
                let Some(evaluator) = non_empty_str(task.extra.get("evaluatorType")) else {
                    return Err(DslError::new(
                        field("evaluatorType"),
                        format!(
                            "a SWITCH task needs an evaluatorType ({})",
                            EVALUATOR_TYPES.join(", ")
                        ),
                    ));
                };
                if !EVALUATOR_TYPES.contains(&evaluator) {
                    return Err(DslError::new(
                        field("evaluatorType"),
                        format!(
                            "unknown evaluatorType {}; supported: {}",
                            Value::String(evaluator.to_owned()),
                            EVALUATOR_TYPES.join(", ")
                        ),
                    ));
                }
                if non_empty_str(task.extra.get("expression")).is_none() {
                    return Err(DslError::new(
                        field("expression"),
                        "a SWITCH task needs an expression",
                    ));
                }
            }
            let has_cases = task.decision_cases.as_ref().is_some_and(|c| !c.is_empty());
            let has_default = task.default_case.as_ref().is_some_and(|d| !d.is_empty());
            if !has_cases && !has_default {
                return Err(DslError::new(
                    field("decisionCases"),
                    format!("a {ty} task needs decisionCases or a defaultCase"),
                ));
            }
        }
        TaskType::DoWhile => {
            // With `items` (iterate a list) the condition is optional, as in Conductor.
            if non_empty_str(task.extra.get("loopCondition")).is_none()
                && !task.extra.contains_key("items")
            {
                return Err(DslError::new(
                    field("loopCondition"),
                    "a DO_WHILE task needs a loopCondition (or items to iterate over)",
                ));
            }
            if task.loop_over.as_ref().is_none_or(Vec::is_empty) {
                return Err(DslError::new(
                    field("loopOver"),
                    "a DO_WHILE task needs at least one task in loopOver",
                ));
            }
        }
        TaskType::ForkJoin | TaskType::ForkJoinDynamic => {
            if t == TaskType::ForkJoin && task.fork_tasks.as_ref().is_none_or(Vec::is_empty) {
                return Err(DslError::new(
                    field("forkTasks"),
                    "a FORK_JOIN task needs at least one branch in forkTasks",
                ));
            }
            if t == TaskType::ForkJoinDynamic {
                check_dynamic_fork(task, path)?;
            }
            // Conductor's fork mappers fail the run when the fork is not followed by the
            // JOIN that collects its branches; say so at registration instead.
            if next.and_then(WorkflowTask::task_type) != Some(TaskType::Join) {
                return Err(DslError::new(
                    path,
                    format!("a {ty} task must be followed by a JOIN task"),
                ));
            }
        }
        TaskType::SubWorkflow => check_sub_workflow(task, path)?,
        TaskType::Terminate => {
            let status = task.input_parameters.get("terminationStatus");
            let ok = status
                .and_then(Value::as_str)
                .is_some_and(|s| TERMINATION_STATUSES.contains(&s) || expr::has_expression(s));
            if !ok {
                return Err(DslError::new(
                    input("terminationStatus"),
                    format!(
                        "a TERMINATE task needs inputParameters.terminationStatus set to \
                         one of {}",
                        TERMINATION_STATUSES.join(", ")
                    ),
                ));
            }
        }
        TaskType::Wait => {
            let set = |k: &str| {
                task.input_parameters.get(k).is_some_and(|v| {
                    !v.is_null() && v.as_str().is_none_or(|s| !s.trim().is_empty())
                })
            };
            if set("duration") && set("until") {
                return Err(DslError::new(
                    input("until"),
                    "a WAIT task takes either duration or until, not both",
                ));
            }
        }
        TaskType::Inline => {
            for key in ["evaluatorType", "expression"] {
                if non_empty_str(task.input_parameters.get(key)).is_none() {
                    return Err(DslError::new(
                        input(key),
                        format!("an INLINE task needs inputParameters.{key}"),
                    ));
                }
            }
        }
        TaskType::Event => {
            let sink = match task.extra.get("sink") {
                Some(Value::String(sink)) if !sink.trim().is_empty() => sink,
                _ => {
                    return Err(DslError::new(
                        join(path, "sink"),
                        "an EVENT task needs its sink: amqp:<queue> or \
                         amqp_exchange:<exchange>[:<routing key>]",
                    ))
                }
            };
            // A sink built from expressions is checked when the task runs.
            if !crate::dsl::expr::has_expression(sink) {
                crate::event_location::EventLocation::parse(sink)
                    .map_err(|m| DslError::new(join(path, "sink"), m))?;
            }
            if task
                .extra
                .get("asyncComplete")
                .is_some_and(|v| !v.is_boolean() && !v.is_null())
            {
                return Err(DslError::new(
                    join(path, "asyncComplete"),
                    "must be true or false",
                ));
            }
        }
        TaskType::Lambda => {
            if non_empty_str(task.input_parameters.get("scriptExpression")).is_none() {
                return Err(DslError::new(
                    input("scriptExpression"),
                    "a LAMBDA task needs inputParameters.scriptExpression",
                ));
            }
        }
        TaskType::StartWorkflow => {
            // An object naming the workflow (or giving its workflowDef), or an expression
            // that yields one when the task runs.
            let ok = match task.input_parameters.get("startWorkflow") {
                Some(Value::String(s)) => expr::has_expression(s),
                Some(Value::Object(p)) => {
                    p.get("workflowDef").is_some_and(Value::is_object)
                        || p.get("name")
                            .and_then(Value::as_str)
                            .is_some_and(|n| !n.trim().is_empty())
                }
                _ => false,
            };
            if !ok {
                return Err(DslError::new(
                    input("startWorkflow"),
                    "a START_WORKFLOW task needs inputParameters.startWorkflow: the \
                     workflow to start ({name, version, input, correlationId}, or an \
                     expression that gives it)",
                ));
            }
        }
        TaskType::Dynamic => {
            let param = task
                .extra
                .get("dynamicTaskNameParam")
                .and_then(Value::as_str)
                .filter(|p| !p.trim().is_empty());
            match param {
                None => {
                    return Err(DslError::new(
                        join(path, "dynamicTaskNameParam"),
                        "a DYNAMIC task needs dynamicTaskNameParam: the input parameter \
                         that names the task to run",
                    ))
                }
                Some(p) if !task.input_parameters.contains_key(p) => {
                    return Err(DslError::new(
                        input(p),
                        format!("a DYNAMIC task reads its task's name from inputParameters.{p}"),
                    ))
                }
                Some(_) => {}
            }
        }
        TaskType::JsonJqTransform => {
            let Some(query) = non_empty_str(task.input_parameters.get("queryExpression")) else {
                return Err(DslError::new(
                    input("queryExpression"),
                    "a JSON_JQ_TRANSFORM task needs inputParameters.queryExpression: the jq \
                     program applied to its input",
                ));
            };
            // A program assembled from `${...}` is compiled when the task runs.
            if !expr::has_expression(query) {
                super::jq::check(query)
                    .map_err(|e| DslError::new(input("queryExpression"), e.to_string()))?;
            }
        }
        TaskType::Simple
        | TaskType::Http
        | TaskType::Join
        | TaskType::ExclusiveJoin
        | TaskType::SetVariable
        | TaskType::Noop
        | TaskType::Human => {}
    }
    check_scripts(task, t, path)
}

/// A JavaScript condition or expression that does not parse is refused at registration,
/// not discovered when a run reaches it.
fn check_scripts(task: &WorkflowTask, t: TaskType, path: &str) -> Result<(), DslError> {
    let is_js =
        |v: Option<&Value>| matches!(v.and_then(Value::as_str), Some("javascript" | "graaljs"));
    fn script(v: Option<&Value>) -> Option<&str> {
        non_empty_str(v).filter(|s| !expr::has_expression(s))
    }
    let (field, text) = match t {
        TaskType::Decision => (
            "caseExpression".to_owned(),
            script(task.extra.get("caseExpression")),
        ),
        TaskType::Switch if is_js(task.extra.get("evaluatorType")) => (
            "expression".to_owned(),
            script(task.extra.get("expression")),
        ),
        TaskType::DoWhile => (
            "loopCondition".to_owned(),
            script(task.extra.get("loopCondition")),
        ),
        TaskType::Inline if is_js(task.input_parameters.get("evaluatorType")) => (
            "inputParameters.expression".to_owned(),
            script(task.input_parameters.get("expression")),
        ),
        TaskType::Lambda => (
            "inputParameters.scriptExpression".to_owned(),
            script(task.input_parameters.get("scriptExpression")),
        ),
        _ => return Ok(()),
    };
    let Some(text) = text else { return Ok(()) };
    match super::script::check_syntax(text) {
        Err(super::script::ScriptError::Syntax { message }) => Err(DslError::new(
            join(path, &field),
            format!("JavaScript syntax error: {message}"),
        )),
        _ => Ok(()),
    }
}

/// Nested task lists only where the type uses them: Conductor ignores, say, a
/// `loopOver` on a SIMPLE task, while Weft's model walks every list it is given, so
/// such a definition would mean something else here. Empty lists (which Conductor's
/// own exports contain on every task) are fine.
fn check_child_fields(task: &WorkflowTask, t: TaskType, path: &str) -> Result<(), DslError> {
    let is_switch = matches!(t, TaskType::Decision | TaskType::Switch);
    let misplaced = [
        (
            "decisionCases",
            !is_switch && task.decision_cases.as_ref().is_some_and(|c| !c.is_empty()),
            "DECISION and SWITCH",
        ),
        (
            "defaultCase",
            !is_switch && task.default_case.as_ref().is_some_and(|d| !d.is_empty()),
            "DECISION and SWITCH",
        ),
        (
            "forkTasks",
            t != TaskType::ForkJoin && task.fork_tasks.as_ref().is_some_and(|f| !f.is_empty()),
            "FORK_JOIN",
        ),
        (
            "loopOver",
            t != TaskType::DoWhile && task.loop_over.as_ref().is_some_and(|l| !l.is_empty()),
            "DO_WHILE",
        ),
    ];
    for (name, bad, owner) in misplaced {
        if bad {
            return Err(DslError::new(
                join(path, name),
                format!("{name} is only used by {owner} tasks, not {}", t.as_str()),
            ));
        }
    }
    Ok(())
}

/// Task types that never fail by themselves (a FORK completes at once, a JOIN fails only
/// with a task it waits for, which has its own `optional`): `optional` would mean nothing
/// on them, so `optional: true` is refused instead of accepted and ignored.
pub const NEVER_FAIL: [TaskType; 5] = [
    TaskType::ForkJoin,
    TaskType::Join,
    TaskType::ExclusiveJoin,
    TaskType::Noop,
    TaskType::Terminate,
];

fn check_optional(task: &WorkflowTask, t: TaskType, path: &str) -> Result<(), DslError> {
    if task.optional && NEVER_FAIL.contains(&t) {
        return Err(DslError::new(
            join(path, "optional"),
            format!(
                "a {} task cannot be optional: it never fails by itself, so optional \
                 would mean nothing on it; mark the tasks it runs or waits for optional \
                 instead",
                t.as_str()
            ),
        ));
    }
    Ok(())
}

/// The longest `startDelay` Weft takes: a day, in seconds.
pub const MAX_START_DELAY_SECONDS: i64 = 86_400;

/// Conductor's `startDelay` (seconds a task waits in its queue before a worker may take
/// it): a whole number from 0 to a day, and not 0 only on a task handed to workers
/// (SIMPLE, HTTP, DYNAMIC), where Weft applies it; elsewhere it is refused rather than
/// accepted and ignored.
fn check_start_delay(task: &WorkflowTask, t: TaskType, path: &str) -> Result<(), DslError> {
    let Some(value) = task.extra.get("startDelay") else {
        return Ok(());
    };
    let path = join(path, "startDelay");
    let seconds = match value {
        Value::Null => return Ok(()),
        v => v
            .as_i64()
            .filter(|s| (0..=MAX_START_DELAY_SECONDS).contains(s)),
    };
    let Some(seconds) = seconds else {
        return Err(DslError::new(
            path,
            format!(
                "startDelay must be a whole number of seconds from 0 to {MAX_START_DELAY_SECONDS}"
            ),
        ));
    };
    let applies = matches!(t, TaskType::Simple | TaskType::Http | TaskType::Dynamic);
    if seconds > 0 && !applies {
        return Err(DslError::new(
            path,
            format!(
                "startDelay applies to tasks handed to workers (SIMPLE, HTTP, DYNAMIC), not {}",
                t.as_str()
            ),
        ));
    }
    Ok(())
}

/// Conductor's `asyncComplete: true` keeps a system task IN_PROGRESS after its work until
/// it is completed through the task API. Weft does so for EVENT tasks; on any other type
/// it is refused rather than accepted and ignored (a worker's task always waits for its
/// result anyway).
fn check_async_complete(task: &WorkflowTask, t: TaskType, path: &str) -> Result<(), DslError> {
    let on = task.extra.get("asyncComplete") == Some(&Value::Bool(true));
    if on && t != TaskType::Event {
        return Err(DslError::new(
            join(path, "asyncComplete"),
            format!("asyncComplete applies to EVENT tasks, not {}", t.as_str()),
        ));
    }
    Ok(())
}

/// FORK_JOIN_DYNAMIC: `dynamicForkTasksParam` with `dynamicForkTasksInputParamName`, or
/// the older `dynamicForkJoinTasksParam`, not both (Conductor's rule).
fn check_dynamic_fork(task: &WorkflowTask, path: &str) -> Result<(), DslError> {
    let has = |k: &str| non_empty_str(task.extra.get(k)).is_some();
    let legacy = has("dynamicForkJoinTasksParam");
    let modern = has("dynamicForkTasksParam") || has("dynamicForkTasksInputParamName");
    if legacy && modern {
        return Err(DslError::new(
            join(path, "dynamicForkJoinTasksParam"),
            "use either dynamicForkJoinTasksParam or dynamicForkTasksParam with \
             dynamicForkTasksInputParamName, not both",
        ));
    }
    if legacy {
        return Ok(());
    }
    // The newer shape: every branch runs `forkTaskName` over one of `forkTaskInputs`.
    let same_task = task.input_parameters.contains_key("forkTaskName")
        || task.input_parameters.contains_key("forkTaskWorkflow");
    if same_task && !modern {
        if !task.input_parameters.contains_key("forkTaskInputs") {
            return Err(DslError::new(
                join(&join(path, "inputParameters"), "forkTaskInputs"),
                "a FORK_JOIN_DYNAMIC task with forkTaskName or forkTaskWorkflow needs forkTaskInputs",
            ));
        }
        return Ok(());
    }
    for key in ["dynamicForkTasksParam", "dynamicForkTasksInputParamName"] {
        if !has(key) {
            return Err(DslError::new(
                join(path, key),
                format!("a FORK_JOIN_DYNAMIC task needs {key}"),
            ));
        }
    }
    Ok(())
}

/// SUB_WORKFLOW: `subWorkflowParam` with a `name`, or an inline `workflowDefinition`,
/// which is then validated as a definition of its own.
fn check_sub_workflow(task: &WorkflowTask, path: &str) -> Result<(), DslError> {
    let param_path = join(path, "subWorkflowParam");
    let param = match task.extra.get("subWorkflowParam") {
        Some(Value::Object(p)) => p,
        None | Some(Value::Null) => {
            return Err(DslError::new(
                param_path,
                "a SUB_WORKFLOW task needs subWorkflowParam with the child workflow's name",
            ))
        }
        Some(other) => {
            return Err(DslError::new(
                param_path,
                format!("expected an object, found {}", kind(other)),
            ))
        }
    };
    match param.get("workflowDefinition") {
        // A string is an expression computing the definition at run time.
        None | Some(Value::Null) | Some(Value::String(_)) => {}
        Some(inline) => {
            let inline_path = join(&param_path, "workflowDefinition");
            parse_definition(inline).map_err(|e| e.under(&inline_path))?;
            return Ok(());
        }
    }
    if non_empty_str(param.get("name")).is_none() {
        return Err(DslError::new(
            join(&param_path, "name"),
            "a SUB_WORKFLOW task needs subWorkflowParam.name (or an inline \
             subWorkflowParam.workflowDefinition)",
        ));
    }
    Ok(())
}

/// The trimmed string when `v` is a non-blank JSON string.
fn non_empty_str(v: Option<&Value>) -> Option<&str> {
    v.and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
}

/// `base.key`, or `key` at the root.
fn join(base: &str, key: &str) -> String {
    if base.is_empty() {
        key.to_owned()
    } else {
        format!("{base}.{key}")
    }
}

/// A JSON type's name with its article, for messages.
fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The JSON types serde needs for the typed fields of the model.
#[derive(Clone, Copy)]
enum Shape {
    /// A string.
    Str,
    /// A string or null.
    OptStr,
    /// An integer that fits `i32`.
    I32,
    /// An integer that fits `i64`.
    I64,
    /// A boolean.
    Bool,
    /// An object.
    Obj,
    /// An array of strings.
    StrArray,
    /// An array of tasks.
    Tasks,
    /// An array of tasks, or null.
    OptTasks,
    /// An object of arrays of tasks, or null.
    OptCases,
    /// An array of arrays of tasks, or null.
    OptForks,
}

const DEF_FIELDS: [(&str, Shape); 9] = [
    ("name", Shape::Str),
    ("version", Shape::I32),
    ("description", Shape::OptStr),
    ("tasks", Shape::Tasks),
    ("inputParameters", Shape::StrArray),
    ("outputParameters", Shape::Obj),
    ("timeoutSeconds", Shape::I64),
    ("failureWorkflow", Shape::OptStr),
    ("variables", Shape::Obj),
];

const TASK_FIELDS: [(&str, Shape); 9] = [
    ("name", Shape::Str),
    ("taskReferenceName", Shape::Str),
    ("type", Shape::Str),
    ("inputParameters", Shape::Obj),
    ("optional", Shape::Bool),
    ("decisionCases", Shape::OptCases),
    ("defaultCase", Shape::OptTasks),
    ("forkTasks", Shape::OptForks),
    ("loopOver", Shape::OptTasks),
];

/// Finds the field serde refused, for a precise path (serde's own error has none).
fn locate_shape_error(def: &Map<String, Value>) -> Option<DslError> {
    check_fields(def, "", &DEF_FIELDS).err()
}

fn check_fields(
    obj: &Map<String, Value>,
    path: &str,
    fields: &[(&str, Shape)],
) -> Result<(), DslError> {
    for (name, shape) in fields {
        if let Some(v) = obj.get(*name) {
            check_shape(v, &join(path, name), *shape)?;
        }
    }
    Ok(())
}

fn check_shape(v: &Value, path: &str, shape: Shape) -> Result<(), DslError> {
    let wrong = |expected: &str| {
        Err(DslError::new(
            path,
            format!("expected {expected}, found {}", kind(v)),
        ))
    };
    let tasks = |items: &Vec<Value>, path: &str| -> Result<(), DslError> {
        for (i, item) in items.iter().enumerate() {
            let item_path = format!("{path}[{i}]");
            match item {
                Value::Object(task) => check_fields(task, &item_path, &TASK_FIELDS)?,
                other => {
                    return Err(DslError::new(
                        item_path,
                        format!("expected a task object, found {}", kind(other)),
                    ))
                }
            }
        }
        Ok(())
    };
    match (shape, v) {
        (Shape::Str, Value::String(_))
        | (Shape::OptStr, Value::String(_) | Value::Null)
        | (Shape::Bool, Value::Bool(_))
        | (Shape::Obj, Value::Object(_))
        | (Shape::OptTasks | Shape::OptCases | Shape::OptForks, Value::Null) => Ok(()),
        (Shape::Str, _) => wrong("a string"),
        (Shape::OptStr, _) => wrong("a string"),
        (Shape::Bool, _) => wrong("a boolean"),
        (Shape::Obj, _) => wrong("an object"),
        (Shape::I32, _) => match v.as_i64() {
            Some(n) if i32::try_from(n).is_ok() => Ok(()),
            _ => wrong("an integer"),
        },
        (Shape::I64, _) => match v.as_i64() {
            Some(_) => Ok(()),
            None => wrong("an integer"),
        },
        (Shape::StrArray, Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                if !item.is_string() {
                    return Err(DslError::new(
                        format!("{path}[{i}]"),
                        format!("expected a string, found {}", kind(item)),
                    ));
                }
            }
            Ok(())
        }
        (Shape::StrArray, _) => wrong("an array of strings"),
        (Shape::Tasks | Shape::OptTasks, Value::Array(items)) => tasks(items, path),
        (Shape::Tasks | Shape::OptTasks, _) => wrong("an array of tasks"),
        (Shape::OptCases, Value::Object(cases)) => {
            for (case, list) in cases {
                let case_path = join(path, case);
                match list {
                    Value::Array(items) => tasks(items, &case_path)?,
                    other => {
                        return Err(DslError::new(
                            case_path,
                            format!("expected an array of tasks, found {}", kind(other)),
                        ))
                    }
                }
            }
            Ok(())
        }
        (Shape::OptCases, _) => wrong("an object mapping each case to an array of tasks"),
        (Shape::OptForks, Value::Array(branches)) => {
            for (j, branch) in branches.iter().enumerate() {
                let branch_path = format!("{path}[{j}]");
                match branch {
                    Value::Array(items) => tasks(items, &branch_path)?,
                    other => {
                        return Err(DslError::new(
                            branch_path,
                            format!(
                                "expected an array of tasks (one branch), found {}",
                                kind(other)
                            ),
                        ))
                    }
                }
            }
            Ok(())
        }
        (Shape::OptForks, _) => wrong("an array of branches, each an array of tasks"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn simple(reference: &str, input: Value) -> Value {
        json!({"name": "work", "taskReferenceName": reference, "type": "SIMPLE",
               "inputParameters": input})
    }

    fn wf(tasks: Value) -> Value {
        json!({"name": "w", "version": 1, "tasks": tasks})
    }

    /// The error of an invalid definition.
    fn err(def: Value) -> DslError {
        match parse_definition(&def) {
            Ok(_) => panic!("expected an error for {def}"),
            Err(e) => e,
        }
    }

    fn assert_err(def: Value, path: &str, needle: &str) {
        let e = err(def);
        assert_eq!(e.path, path, "{e}");
        assert!(
            e.message.contains(needle),
            "{e:?} should mention {needle:?}"
        );
    }

    #[test]
    fn a_plain_definition_is_valid() {
        let def = parse_definition(&wf(json!([
            simple(
                "a",
                json!({"x": "${workflow.input.x}", "id": "${CPEWF_TASK_ID}"})
            ),
            simple(
                "b",
                json!({"y": "${a.output.y}", "l": ["${a.output.z[0].w}"]})
            )
        ])))
        .unwrap();
        assert_eq!(def.tasks.len(), 2);
        check_executable(&def).unwrap();
    }

    #[test]
    fn not_an_object() {
        assert_err(json!([1]), "", "JSON object");
        assert_err(json!("x"), "", "JSON object");
    }

    #[test]
    fn name_missing_or_empty() {
        assert_err(
            json!({"tasks": [simple("a", json!({}))]}),
            "name",
            "required",
        );
        assert_err(
            json!({"name": null, "tasks": [simple("a", json!({}))]}),
            "name",
            "required",
        );
        assert_err(
            json!({"name": " ", "tasks": [simple("a", json!({}))]}),
            "name",
            "empty",
        );
        assert_err(
            json!({"name": 5, "tasks": [simple("a", json!({}))]}),
            "name",
            "expected a string",
        );
    }

    #[test]
    fn tasks_missing_empty_or_malformed() {
        assert_err(json!({"name": "w"}), "tasks", "required");
        assert_err(
            json!({"name": "w", "tasks": []}),
            "tasks",
            "must not be empty",
        );
        assert_err(
            json!({"name": "w", "tasks": {"a": 1}}),
            "tasks",
            "array of tasks",
        );
        assert_err(
            wf(json!([simple("a", json!({})), 3])),
            "tasks[1]",
            "task object",
        );
        assert_err(
            wf(json!([{"name": "a", "taskReferenceName": "a", "inputParameters": []}])),
            "tasks[0].inputParameters",
            "expected an object",
        );
        assert_err(
            wf(
                json!([{"name": "s", "taskReferenceName": "s", "type": "SWITCH",
                       "decisionCases": {"x": [{"name": 1}]}}]),
            ),
            "tasks[0].decisionCases.x[0].name",
            "expected a string",
        );
        assert_err(
            wf(
                json!([{"name": "f", "taskReferenceName": "f", "type": "FORK_JOIN",
                       "forkTasks": [[], 7]}]),
            ),
            "tasks[0].forkTasks[1]",
            "one branch",
        );
        assert_err(
            json!({"name": "w", "version": "one", "tasks": [simple("a", json!({}))]}),
            "version",
            "integer",
        );
        assert_err(
            json!({"name": "w", "outputParameters": [], "tasks": [simple("a", json!({}))]}),
            "outputParameters",
            "object",
        );
        assert_err(
            json!({"name": "w", "inputParameters": ["a", 2], "tasks": [simple("a", json!({}))]}),
            "inputParameters[1]",
            "string",
        );
    }

    #[test]
    fn start_delay_is_taken_where_it_applies_and_refused_elsewhere() {
        let task = |kind: &str, delay: Value| {
            json!({"name": "w", "tasks": [
                {"name": "x", "taskReferenceName": "x", "type": kind, "startDelay": delay}]})
        };
        for kind in ["SIMPLE", "HTTP"] {
            assert!(parse_definition(&task(kind, json!(30))).is_ok(), "{kind}");
        }
        assert!(
            parse_definition(&task("WAIT", json!(0))).is_ok(),
            "0 is no delay"
        );
        assert_err(task("WAIT", json!(5)), "tasks[0].startDelay", "not WAIT");
        assert_err(
            task("SIMPLE", json!(-1)),
            "tasks[0].startDelay",
            "whole number",
        );
        assert_err(
            task("SIMPLE", json!("5")),
            "tasks[0].startDelay",
            "whole number",
        );
        assert_err(
            task("SIMPLE", json!(86_401)),
            "tasks[0].startDelay",
            "whole number",
        );
    }

    #[test]
    fn async_complete_is_taken_on_event_tasks_only() {
        let task = |kind: &str, extra: Value| {
            let mut node = json!({"name": "x", "taskReferenceName": "x", "type": kind,
                                  "asyncComplete": true});
            node.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            json!({"name": "w", "tasks": [node]})
        };
        assert!(parse_definition(&task("EVENT", json!({"sink": "amqp:q"}))).is_ok());
        assert_err(
            task("SIMPLE", json!({})),
            "tasks[0].asyncComplete",
            "not SIMPLE",
        );
        let off = json!({"name": "w", "tasks": [
            {"name": "x", "taskReferenceName": "x", "type": "SIMPLE", "asyncComplete": false}]});
        assert!(parse_definition(&off).is_ok());
    }

    #[test]
    fn a_workflows_timeout_policy_is_one_conductor_knows() {
        let def = |policy: Value| {
            json!({"name": "w", "timeoutSeconds": 5, "timeoutPolicy": policy,
                   "tasks": [{"name": "x", "taskReferenceName": "x", "type": "SIMPLE"}]})
        };
        for ok in ["TIME_OUT_WF", "ALERT_ONLY"] {
            assert!(parse_definition(&def(json!(ok))).is_ok(), "{ok}");
        }
        assert_err(
            def(json!("RETRY")),
            "timeoutPolicy",
            "not TIME_OUT_WF or ALERT_ONLY",
        );
    }

    #[test]
    fn optional_is_refused_on_a_type_that_never_fails() {
        for kind in NEVER_FAIL {
            let def = json!({"name": "w", "tasks": [
                {"name": "x", "taskReferenceName": "x", "type": kind.as_str(), "optional": true}]});
            assert_err(def, "tasks[0].optional", "never fails by itself");
        }
        let fine = json!({"name": "w", "tasks": [
            {"name": "x", "taskReferenceName": "x", "type": "NOOP", "optional": false}]});
        assert!(parse_definition(&fine).is_ok());
    }

    #[test]
    fn validate_alone_checks_name_and_tasks() {
        let mut def = parse_definition(&wf(json!([simple("a", json!({}))]))).unwrap();
        def.tasks.clear();
        assert_eq!(validate(&def).unwrap_err().path, "tasks");
        def.name.clear();
        assert_eq!(validate(&def).unwrap_err().path, "name");
    }

    #[test]
    fn task_name_and_reference_required() {
        assert_err(
            wf(json!([{"name": "", "taskReferenceName": "a"}])),
            "tasks[0].name",
            "name must not be empty",
        );
        assert_err(
            wf(json!([simple("a", json!({})), {"name": "b"}])),
            "tasks[1].taskReferenceName",
            "must not be empty",
        );
    }

    #[test]
    fn unknown_type_names_the_type_and_the_supported_ones() {
        let e = err(wf(json!([
            simple("a", json!({})),
            {"name": "l", "taskReferenceName": "l", "type": "BUSINESS_RULE"}
        ])));
        assert_eq!(e.path, "tasks[1].type");
        assert!(e
            .message
            .starts_with("unknown task type \"BUSINESS_RULE\"; supported: SIMPLE, HTTP,"));
        for t in ["BUSINESS_RULE", "KAFKA_PUBLISH"] {
            assert_err(
                wf(json!([{"name": "x", "taskReferenceName": "x", "type": t}])),
                "tasks[0].type",
                t,
            );
        }
    }

    #[test]
    fn a_jq_transform_needs_a_query_that_compiles_unless_built_at_run_time() {
        let jq = |params: Value| {
            wf(json!([simple("a", json!({})),
                       {"name": "j", "taskReferenceName": "j", "type": "JSON_JQ_TRANSFORM",
                        "inputParameters": params}]))
        };
        let path = "tasks[1].inputParameters.queryExpression";
        assert_err(jq(json!({})), path, "needs");
        assert_err(jq(json!({"queryExpression": " "})), path, "needs");
        assert_err(jq(json!({"queryExpression": 3})), path, "needs");
        assert_err(
            jq(json!({"queryExpression": "{"})),
            path,
            "does not compile: \"{\" is never closed at line 1, column 1",
        );
        assert_err(
            jq(json!({"queryExpression": ".a | nosuch"})),
            path,
            "undefined filter nosuch/0 at line 1, column 6",
        );
        assert_err(
            jq(
                json!({"queryExpression": format!(".{}", "a".repeat(crate::dsl::jq::MAX_QUERY_BYTES))}),
            ),
            path,
            "at most",
        );
        parse_definition(&jq(json!({"persons": "${a.output.persons}",
                   "queryExpression": ".persons | map({user: {email, id}})"})))
        .unwrap();
        // Built from expressions (Conductor's own documentation does it): compiled when run.
        parse_definition(&jq(json!({"queryExpression": "${a.output.query}"}))).unwrap();
        parse_definition(&jq(json!({"queryExpression":
            "[.list[] | select(.at > \"${workflow.input.cutoff}\")]"})))
        .unwrap();
        // The expressions in it are checked like any other input.
        assert_err(
            jq(json!({"queryExpression": "${nosuch.output.query}"})),
            path,
            "nosuch",
        );
    }

    #[test]
    fn an_exclusive_join_names_tasks_that_run_before_it() {
        let xjoin = |fields: Value| {
            let mut join = json!({"name": "x", "taskReferenceName": "x", "type": "EXCLUSIVE_JOIN"});
            join.as_object_mut()
                .unwrap()
                .extend(fields.as_object().unwrap().clone());
            wf(json!([
                simple("a", json!({})),
                {"name": "d", "taskReferenceName": "d", "type": "DECISION",
                 "caseValueParam": "c", "inputParameters": {"c": "${workflow.input.c}"},
                 "decisionCases": {"yes": [simple("b", json!({}))],
                                   "no": [simple("c", json!({}))]}},
                join,
                simple("later", json!({}))
            ]))
        };
        parse_definition(&xjoin(
            json!({"joinOn": ["b", "c"], "defaultExclusiveJoinTask": ["a"]}),
        ))
        .unwrap();
        parse_definition(&xjoin(
            json!({"defaultExclusiveJoinTask": ["a"], "joinOn": []}),
        ))
        .unwrap();
        assert_err(xjoin(json!({})), "tasks[2].joinOn", "needs joinOn");
        assert_err(
            xjoin(json!({"joinOn": [], "defaultExclusiveJoinTask": []})),
            "tasks[2].joinOn",
            "needs joinOn",
        );
        assert_err(xjoin(json!({"joinOn": "b"})), "tasks[2].joinOn", "array");
        assert_err(
            xjoin(json!({"joinOn": ["b", 7]})),
            "tasks[2].joinOn[1]",
            "a taskReferenceName, found a number",
        );
        assert_err(
            xjoin(json!({"joinOn": ["b", "later"]})),
            "tasks[2].joinOn[1]",
            "does not come before",
        );
        assert_err(
            xjoin(json!({"joinOn": ["b"], "defaultExclusiveJoinTask": ["zz"]})),
            "tasks[2].defaultExclusiveJoinTask[0]",
            "not a taskReferenceName",
        );
        assert_err(
            xjoin(json!({"joinOn": ["b"], "defaultExclusiveJoinTask": {"a": 1}})),
            "tasks[2].defaultExclusiveJoinTask",
            "array",
        );
    }

    #[test]
    fn a_lambda_needs_a_script_that_parses() {
        let lambda = |params: Value| {
            wf(
                json!([{"name": "l", "taskReferenceName": "l", "type": "LAMBDA",
                       "inputParameters": params}]),
            )
        };
        assert_err(
            lambda(json!({})),
            "tasks[0].inputParameters.scriptExpression",
            "needs",
        );
        assert_err(
            lambda(json!({"scriptExpression": "return {a: "})),
            "tasks[0].inputParameters.scriptExpression",
            "syntax",
        );
        parse_definition(&lambda(json!({"scriptExpression": "return {a: 1}"}))).unwrap();
        parse_definition(&wf(json!([
            {"name": "n", "taskReferenceName": "n", "type": "NOOP"},
            {"name": "h", "taskReferenceName": "h", "type": "HUMAN"}
        ])))
        .unwrap();
    }

    #[test]
    fn start_workflow_names_the_workflow_to_start() {
        let start = |params: Value| {
            wf(
                json!([{"name": "s", "taskReferenceName": "s", "type": "START_WORKFLOW",
                       "inputParameters": params}]),
            )
        };
        assert_err(
            start(json!({})),
            "tasks[0].inputParameters.startWorkflow",
            "needs",
        );
        assert_err(
            start(json!({"startWorkflow": {"version": 1}})),
            "tasks[0].inputParameters.startWorkflow",
            "needs",
        );
        for ok in [
            json!({"startWorkflow": {"name": "greet"}}),
            json!({"startWorkflow": "${workflow.input.startWorkflow}"}),
            json!({"startWorkflow": {"workflowDef": {"name": "inline", "tasks": []}}}),
        ] {
            assert!(parse_definition(&start(ok.clone())).is_ok(), "{ok}");
        }
    }

    #[test]
    fn a_dynamic_task_names_the_parameter_that_names_its_task() {
        let dynamic = |extra: Value| {
            let mut task = json!({"name": "d", "taskReferenceName": "d", "type": "DYNAMIC",
                                  "inputParameters": {"taskToRun": "shout"}});
            task.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            wf(json!([task]))
        };
        assert_err(dynamic(json!({})), "tasks[0].dynamicTaskNameParam", "needs");
        assert_err(
            dynamic(json!({"dynamicTaskNameParam": "other"})),
            "tasks[0].inputParameters.other",
            "reads",
        );
        parse_definition(&dynamic(json!({"dynamicTaskNameParam": "taskToRun"}))).unwrap();
    }

    #[test]
    fn an_event_task_needs_a_sink_weft_can_publish_to() {
        let event = |extra: Value| {
            let mut task = json!({"name": "e", "taskReferenceName": "e", "type": "EVENT"});
            task.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            wf(json!([task]))
        };
        assert_err(event(json!({})), "tasks[0].sink", "needs its sink");
        assert_err(
            event(json!({"sink": "sqs:orders"})),
            "tasks[0].sink",
            "not offered",
        );
        assert_err(
            event(json!({"sink": "amqp:q", "asyncComplete": "yes"})),
            "tasks[0].asyncComplete",
            "true or false",
        );
        for ok in [
            "amqp:orders",
            "amqp_exchange:shop:order.created",
            "amqp_exchange:${workflow.input.exchange}",
        ] {
            assert!(
                parse_definition(&event(json!({"sink": ok}))).is_ok(),
                "{ok}"
            );
        }
    }

    #[test]
    fn unknown_type_is_found_inside_containers_before_other_errors() {
        // The empty name at tasks[0] comes first in the document, but the unknown type
        // is what the user needs to hear about.
        assert_err(
            wf(json!([
                {"name": "", "taskReferenceName": "a"},
                {"name": "d", "taskReferenceName": "d", "type": "DECISION",
                 "caseValueParam": "c",
                 "decisionCases": {"yes": [{"name": "j", "taskReferenceName": "j",
                                            "type": "KAFKA_PUBLISH"}]}}
            ])),
            "tasks[1].decisionCases.yes[0].type",
            "KAFKA_PUBLISH",
        );
    }

    #[test]
    fn duplicate_reference_names_both_paths() {
        let e = err(wf(json!([
            simple("a", json!({})),
            {"name": "d", "taskReferenceName": "d", "type": "SWITCH",
             "evaluatorType": "value-param", "expression": "c",
             "decisionCases": {"yes": [simple("a", json!({}))]}}
        ])));
        assert_eq!(e.path, "tasks[1].decisionCases.yes[0].taskReferenceName");
        assert!(e.message.contains("tasks[0].taskReferenceName"), "{e}");
        assert!(
            e.message
                .contains("tasks[1].decisionCases.yes[0].taskReferenceName"),
            "{e}"
        );
    }

    #[test]
    fn references_must_come_earlier() {
        // Unknown ref.
        assert_err(
            wf(json!([simple("a", json!({"text": "${nope.output.x}"}))])),
            "tasks[0].inputParameters.text",
            "neither \"workflow\" nor a taskReferenceName",
        );
        // Later ref.
        assert_err(
            wf(json!([
                simple("a", json!({"text": "hi ${b.output.x}"})),
                simple("b", json!({}))
            ])),
            "tasks[0].inputParameters.text",
            "does not run before this task",
        );
        // Self ref.
        assert_err(
            wf(json!([simple("a", json!({"t": "${a.output}"}))])),
            "tasks[0].inputParameters.t",
            "itself",
        );
        // Deep inside maps, arrays and nested expressions.
        assert_err(
            wf(json!([simple(
                "a",
                json!({"m": {"l": [1, {"x": "${zz.output}"}]}})
            )])),
            "tasks[0].inputParameters.m.l[1].x",
            "\"zz\"",
        );
        assert_err(
            wf(json!([simple(
                "a",
                json!({"n": "${workflow.input.${q.output.k}}"})
            )])),
            "tasks[0].inputParameters.n",
            "\"q\"",
        );
        // Escaped expressions are text.
        parse_definition(&wf(json!([simple("a", json!({"t": "$${nope.x}"}))]))).unwrap();
    }

    #[test]
    fn branch_scoping() {
        let fork = |second_branch_input: Value, after: Value| {
            wf(json!([
                simple("pre", json!({})),
                {"name": "f", "taskReferenceName": "f", "type": "FORK_JOIN",
                 "forkTasks": [[simple("a", json!({"p": "${pre.output}", "f": "${f.input}"}))],
                               [simple("b", second_branch_input)]]},
                {"name": "j", "taskReferenceName": "j", "type": "JOIN", "joinOn": ["a", "b"]},
                after
            ]))
        };
        parse_definition(&fork(
            json!({}),
            simple("z", json!({"x": "${a.output}", "y": "${j.output.b}"})),
        ))
        .unwrap();
        assert_err(
            fork(json!({"x": "${a.output.x}"}), simple("z", json!({}))),
            "tasks[1].forkTasks[1][0].inputParameters.x",
            "does not run before",
        );

        let decision = |yes_input: Value| {
            wf(json!([
                {"name": "d", "taskReferenceName": "d", "type": "DECISION",
                 "caseValueParam": "c", "inputParameters": {"c": "${workflow.input.c}"},
                 "decisionCases": {"no": [simple("n", json!({}))],
                                   "yes": [simple("y", yes_input)]},
                 "defaultCase": [simple("other", json!({}))]},
                simple("after", json!({"n": "${n.output}", "y": "${y.output}",
                                       "o": "${other.output}"}))
            ]))
        };
        parse_definition(&decision(json!({"d": "${d.input.c}"}))).unwrap();
        assert_err(
            decision(json!({"n": "${n.output}"})),
            "tasks[0].decisionCases.yes[0].inputParameters.n",
            "does not run before",
        );
    }

    #[test]
    fn loop_body_sees_the_loop_and_earlier_body_tasks() {
        let def = |second: Value| {
            wf(json!([{
                "name": "l", "taskReferenceName": "loop-1", "type": "DO_WHILE",
                "loopCondition": "$.loop-1['iteration'] < 3",
                "loopOver": [
                    simple("first", json!({"i": "${loop-1.output.iteration}",
                                           "j": "${loop-1['iteration']}"})),
                    simple("second", second)
                ]
            }]))
        };
        parse_definition(&def(json!({"f": "${first.output}"}))).unwrap();
        assert_err(
            def(json!({"s": "${second.output}"})),
            "tasks[0].loopOver[1].inputParameters.s",
            "itself",
        );
        assert_err(
            wf(json!([{
                "name": "l", "taskReferenceName": "l", "type": "DO_WHILE",
                "loopCondition": "true",
                "loopOver": [simple("first", json!({"x": "${second.output}"})),
                             simple("second", json!({}))]
            }])),
            "tasks[0].loopOver[0].inputParameters.x",
            "does not run before",
        );
    }

    #[test]
    fn workflow_output_may_use_any_ref_but_not_unknown_ones() {
        let def = |out: Value| {
            json!({"name": "w", "tasks": [{
                "name": "d", "taskReferenceName": "d", "type": "SWITCH",
                "evaluatorType": "javascript", "expression": "$.x > 1",
                "decisionCases": {"a": [simple("inner", json!({}))]}}],
                "outputParameters": out})
        };
        parse_definition(&def(
            json!({"r": "${inner.output.x}", "w": "${workflow.input}"}),
        ))
        .unwrap();
        assert_err(
            def(json!({"result": "${ghost.output}"})),
            "outputParameters.result",
            "\"ghost\"",
        );
    }

    #[test]
    fn decision_and_switch_structure() {
        let base = |extra: Value| {
            let mut t = json!({"name": "s", "taskReferenceName": "s"});
            if let (Some(t), Some(extra)) = (t.as_object_mut(), extra.as_object()) {
                t.extend(extra.clone());
            }
            wf(json!([t]))
        };
        assert_err(
            base(json!({"type": "SWITCH", "evaluatorType": "value-param", "expression": "c"})),
            "tasks[0].decisionCases",
            "decisionCases or a defaultCase",
        );
        assert_err(
            base(
                json!({"type": "SWITCH", "evaluatorType": "value-param", "expression": "c",
                        "decisionCases": {}, "defaultCase": []}),
            ),
            "tasks[0].decisionCases",
            "decisionCases or a defaultCase",
        );
        parse_definition(&base(
            json!({"type": "SWITCH", "evaluatorType": "value-param",
                                      "expression": "c",
                                      "defaultCase": [simple("x", json!({}))]}),
        ))
        .unwrap();
        assert_err(
            base(json!({"type": "SWITCH", "expression": "c",
                        "defaultCase": [simple("x", json!({}))]})),
            "tasks[0].evaluatorType",
            "evaluatorType",
        );
        assert_err(
            base(
                json!({"type": "SWITCH", "evaluatorType": "python", "expression": "c",
                        "defaultCase": [simple("x", json!({}))]}),
            ),
            "tasks[0].evaluatorType",
            "\"python\"",
        );
        assert_err(
            base(json!({"type": "SWITCH", "evaluatorType": "javascript",
                        "defaultCase": [simple("x", json!({}))]})),
            "tasks[0].expression",
            "expression",
        );
        assert_err(
            base(json!({"type": "DECISION", "decisionCases": {"a": []}})),
            "tasks[0].caseValueParam",
            "caseValueParam or caseExpression",
        );
        parse_definition(&base(json!({"type": "DECISION", "caseExpression": "1",
                                      "decisionCases": {"a": []}})))
        .unwrap();
    }

    #[test]
    fn loop_fork_and_join_structure() {
        assert_err(
            wf(
                json!([{"name": "l", "taskReferenceName": "l", "type": "DO_WHILE",
                       "loopOver": [simple("a", json!({}))]}]),
            ),
            "tasks[0].loopCondition",
            "loopCondition",
        );
        assert_err(
            wf(
                json!([{"name": "l", "taskReferenceName": "l", "type": "DO_WHILE",
                       "loopCondition": "false", "loopOver": []}]),
            ),
            "tasks[0].loopOver",
            "loopOver",
        );
        assert_err(
            wf(
                json!([{"name": "f", "taskReferenceName": "f", "type": "FORK_JOIN"},
                      {"name": "j", "taskReferenceName": "j", "type": "JOIN"}]),
            ),
            "tasks[0].forkTasks",
            "forkTasks",
        );
        assert_err(
            wf(
                json!([{"name": "f", "taskReferenceName": "f", "type": "FORK_JOIN",
                       "forkTasks": [[simple("a", json!({}))]]},
                      simple("b", json!({}))]),
            ),
            "tasks[0]",
            "followed by a JOIN",
        );
        let join_on = |refs: Value| {
            wf(json!([simple("before", json!({})),
                      {"name": "f", "taskReferenceName": "f", "type": "FORK_JOIN",
                       "forkTasks": [[simple("a", json!({}))], [simple("b", json!({}))]]},
                      {"name": "j", "taskReferenceName": "j", "type": "JOIN", "joinOn": refs},
                      simple("later", json!({}))]))
        };
        parse_definition(&join_on(json!(["a", "b"]))).unwrap();
        assert_err(
            join_on(json!(["a", "ghost"])),
            "tasks[2].joinOn[1]",
            "not a taskReferenceName",
        );
        assert_err(
            join_on(json!(["later"])),
            "tasks[2].joinOn[0]",
            "does not come before",
        );
        assert_err(
            join_on(json!(["a", "before"])),
            "tasks[2].joinOn[1]",
            "not a task of the FORK_JOIN",
        );
        assert_err(join_on(json!("a")), "tasks[2].joinOn", "array");
        assert_err(
            wf(json!([simple("a", json!({})),
                      {"name": "j", "taskReferenceName": "j", "type": "JOIN", "joinOn": ["a"]}])),
            "tasks[1]",
            "right after the FORK_JOIN",
        );
        assert_err(
            join_on(json!([1])),
            "tasks[2].joinOn[0]",
            "taskReferenceName",
        );
    }

    #[test]
    fn dynamic_fork_structure() {
        let def = |fields: Value| {
            let mut t = json!({"name": "f", "taskReferenceName": "f",
                               "type": "FORK_JOIN_DYNAMIC"});
            if let (Some(t), Some(fields)) = (t.as_object_mut(), fields.as_object()) {
                t.extend(fields.clone());
            }
            wf(json!([t, {"name": "j", "taskReferenceName": "j", "type": "JOIN"}]))
        };
        parse_definition(&def(json!({"dynamicForkTasksParam": "tasks",
                                     "dynamicForkTasksInputParamName": "inputs"})))
        .unwrap();
        parse_definition(&def(json!({"dynamicForkJoinTasksParam": "tasks"}))).unwrap();
        assert_err(
            def(json!({"dynamicForkTasksParam": "tasks"})),
            "tasks[0].dynamicForkTasksInputParamName",
            "dynamicForkTasksInputParamName",
        );
        assert_err(
            def(json!({"dynamicForkJoinTasksParam": "t", "dynamicForkTasksParam": "x"})),
            "tasks[0].dynamicForkJoinTasksParam",
            "not both",
        );
    }

    #[test]
    fn sub_workflow_structure() {
        let def = |param: Value| {
            wf(
                json!([{"name": "s", "taskReferenceName": "s", "type": "SUB_WORKFLOW",
                       "subWorkflowParam": param}]),
            )
        };
        parse_definition(&def(json!({"name": "child", "version": 1}))).unwrap();
        parse_definition(&def(json!({"name": "${workflow.input.child}"}))).unwrap();
        assert_err(
            def(Value::Null),
            "tasks[0].subWorkflowParam",
            "subWorkflowParam",
        );
        assert_err(
            def(json!({"version": 2})),
            "tasks[0].subWorkflowParam.name",
            "name",
        );
        parse_definition(&def(
            json!({"workflowDefinition": wf(json!([simple("c", json!({}))]))}),
        ))
        .unwrap();
        assert_err(
            def(json!({"workflowDefinition":
                       wf(json!([{"name": "c", "taskReferenceName": "c", "type": "BUSINESS_RULE"}]))})),
            "tasks[0].subWorkflowParam.workflowDefinition.tasks[0].type",
            "BUSINESS_RULE",
        );
    }

    #[test]
    fn terminate_wait_and_inline_structure() {
        let one = |t: Value| wf(json!([t]));
        parse_definition(&one(
            json!({"name": "t", "taskReferenceName": "t", "type": "TERMINATE",
                                     "inputParameters": {"terminationStatus": "COMPLETED"}}),
        ))
        .unwrap();
        assert_err(
            one(
                json!({"name": "t", "taskReferenceName": "t", "type": "TERMINATE",
                       "inputParameters": {"terminationStatus": "DONE"}}),
            ),
            "tasks[0].inputParameters.terminationStatus",
            "COMPLETED, FAILED, TERMINATED",
        );
        assert_err(
            one(
                json!({"name": "t", "taskReferenceName": "t", "type": "TERMINATE",
                       "optional": true,
                       "inputParameters": {"terminationStatus": "FAILED"}}),
            ),
            "tasks[0].optional",
            "cannot be optional",
        );
        assert_err(
            one(
                json!({"name": "w", "taskReferenceName": "w", "type": "WAIT",
                       "inputParameters": {"duration": "1s", "until": "2030-01-01 00:00"}}),
            ),
            "tasks[0].inputParameters.until",
            "not both",
        );
        assert_err(
            one(
                json!({"name": "i", "taskReferenceName": "i", "type": "INLINE",
                       "inputParameters": {"evaluatorType": "javascript"}}),
            ),
            "tasks[0].inputParameters.expression",
            "expression",
        );
    }

    #[test]
    fn child_lists_only_on_their_types() {
        // Empty lists are what Conductor exports on every task.
        parse_definition(&wf(json!([{"name": "a", "taskReferenceName": "a",
                                     "decisionCases": {}, "defaultCase": [],
                                     "forkTasks": [], "loopOver": []}])))
        .unwrap();
        assert_err(
            wf(json!([{"name": "a", "taskReferenceName": "a",
                       "loopOver": [simple("b", json!({}))]}])),
            "tasks[0].loopOver",
            "only used by DO_WHILE",
        );
    }

    #[test]
    fn javascript_that_does_not_parse_is_refused_naming_the_field() {
        assert_err(
            wf(json!([
                {"name": "s", "taskReferenceName": "s", "type": "SWITCH",
                 "evaluatorType": "javascript", "expression": "$.a >",
                 "decisionCases": {"x": [simple("b", json!({}))]}}
            ])),
            "tasks[0].expression",
            "JavaScript syntax error",
        );
        assert_err(
            wf(json!([
                {"name": "l", "taskReferenceName": "l", "type": "DO_WHILE",
                 "loopCondition": "if ($.l['iteration'] < 3 { true }",
                 "loopOver": [simple("b", json!({}))]}
            ])),
            "tasks[0].loopCondition",
            "JavaScript syntax error",
        );
        let fine = parse_definition(&wf(json!([
            {"name": "l", "taskReferenceName": "l", "type": "DO_WHILE",
             "loopCondition": "if ($.l['iteration'] < 3) { true; } else { false; }",
             "loopOver": [simple("b", json!({}))]}
        ])));
        assert!(fine.is_ok(), "{fine:?}");
    }

    #[test]
    fn dynamic_fork_of_one_task_needs_its_inputs() {
        let ok = parse_definition(&wf(json!([
            {"name": "d", "taskReferenceName": "d", "type": "FORK_JOIN_DYNAMIC",
             "inputParameters": {"forkTaskName": "x", "forkTaskInputs": [{}]}},
            {"name": "j", "taskReferenceName": "j", "type": "JOIN"}
        ])));
        assert!(ok.is_ok(), "{ok:?}");
        assert_err(
            wf(json!([
                {"name": "d", "taskReferenceName": "d", "type": "FORK_JOIN_DYNAMIC",
                 "inputParameters": {"forkTaskName": "x"}},
                {"name": "j", "taskReferenceName": "j", "type": "JOIN"}
            ])),
            "tasks[0].inputParameters.forkTaskInputs",
            "needs forkTaskInputs",
        );
    }

    #[test]
    fn check_executable_names_the_type() {
        let def = parse_definition(&wf(json!([
            simple("a", json!({})),
            {"name": "s", "taskReferenceName": "s", "type": "FORK_JOIN_DYNAMIC",
             "dynamicForkJoinTasksParam": "tasks",
             "inputParameters": {"tasks": "${workflow.input.tasks}"}},
            {"name": "j", "taskReferenceName": "j", "type": "JOIN"}
        ])))
        .unwrap();
        let e = check_executable(&def).unwrap_err();
        assert_eq!(e.path, "tasks[1].dynamicForkJoinTasksParam");
        assert!(e.message.contains("not supported yet"), "{}", e.message);
    }

    #[test]
    fn error_display_is_path_then_message() {
        let e = DslError::new("tasks[0].type", "bad");
        assert_eq!(e.to_string(), "tasks[0].type: bad");
    }

    // --- Conductor's own samples -------------------------------------------------------

    /// Files in the samples folder that are not workflow definitions at all.
    const NOT_DEFINITIONS: [&str; 1] = [
        // An event handler (`event`, `condition`, `actions`): Conductor registers it at
        // /api/event, not as a workflow; Weft has no event handlers.
        "sqs-complete-wait-event-handler.json",
    ];

    /// Every `type` in a raw definition's tree, read independently of the model.
    fn raw_types(tasks: &Value, out: &mut Vec<String>) {
        for t in tasks.as_array().into_iter().flatten() {
            out.push(
                t.get("type")
                    .and_then(Value::as_str)
                    .unwrap_or("SIMPLE")
                    .to_owned(),
            );
            for case in t
                .get("decisionCases")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
            {
                raw_types(case.1, out);
            }
            for key in ["defaultCase", "loopOver"] {
                if let Some(list) = t.get(key) {
                    raw_types(list, out);
                }
            }
            for branch in t
                .get("forkTasks")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                raw_types(branch, out);
            }
        }
    }

    /// Follows a path like `tasks[1].loopOver[0].type` in a raw document.
    fn at_path<'a>(doc: &'a Value, path: &str) -> Option<&'a Value> {
        let mut v = doc;
        for part in path.split('.') {
            let (key, indices) = match part.find('[') {
                Some(i) => (&part[..i], &part[i..]),
                None => (part, ""),
            };
            v = v.get(key)?;
            for idx in indices.split('[').skip(1) {
                v = v.get(idx.trim_end_matches(']').parse::<usize>().ok()?)?;
            }
        }
        Some(v)
    }

    fn check_sample(file: &str, def: &Value) -> bool {
        let mut types = Vec::new();
        raw_types(def.get("tasks").unwrap_or(&Value::Null), &mut types);
        let known = types.iter().all(|t| TaskType::parse(t).is_some());
        match parse_definition(def) {
            Ok(parsed) => {
                assert!(known, "{file}: accepted despite unknown types {types:?}");
                assert_eq!(parsed.name, def["name"].as_str().unwrap_or_default());
            }
            Err(e) => {
                assert!(!known, "{file}: only known types, but refused: {e}");
                assert!(e.path.ends_with(".type"), "{file}: {e}");
                let named = at_path(def, &e.path)
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                assert!(
                    TaskType::parse(named).is_none(),
                    "{file}: {e} points at {named}"
                );
                assert!(e.message.contains(&format!("\"{named}\"")), "{file}: {e}");
            }
        }
        known
    }

    #[test]
    fn conductor_samples() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conductor-samples");
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        files.sort();
        let (mut valid, mut refused, mut skipped) = (0, 0, 0);
        for path in files {
            let file = path.file_name().unwrap().to_string_lossy().into_owned();
            let doc: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
            if NOT_DEFINITIONS.contains(&file.as_str()) {
                // Keep the skip honest: it is really not a definition, and the validator
                // still refuses it cleanly rather than panicking.
                assert!(doc.get("tasks").is_none(), "{file} looks like a definition");
                assert_eq!(parse_definition(&doc).unwrap_err().path, "tasks");
                skipped += 1;
                continue;
            }
            // A list of definitions (what PUT /api/metadata/workflow takes): each one.
            let defs = match &doc {
                Value::Array(items) => items.clone(),
                other => vec![other.clone()],
            };
            for def in &defs {
                if check_sample(&file, def) {
                    valid += 1;
                } else {
                    refused += 1;
                }
            }
        }
        assert_eq!(skipped, NOT_DEFINITIONS.len());
        // Guards against the folder silently going missing or changing wholesale.
        assert!(valid >= 39, "only {valid} samples validated");
        assert!(refused >= 2, "only {refused} samples refused");
    }

    #[test]
    fn never_panics_on_odd_input() {
        for doc in [
            Value::Null,
            json!(1),
            json!({}),
            json!({"name": "w", "tasks": [null]}),
            json!({"name": "w", "tasks": [{"type": null}]}),
            json!({"name": "w", "tasks": [{"name": "a", "taskReferenceName": "a",
                                          "inputParameters": {"x": "${${${}}}"}}]}),
            json!({"name": "w", "tasks": [{"name": "a", "taskReferenceName": "a",
                                          "inputParameters": {"x": "${a[}"}}]}),
            json!({"name": "w", "tasks": [{"name": "a", "taskReferenceName": "a",
                                          "type": "SUB_WORKFLOW",
                                          "subWorkflowParam": {"workflowDefinition": 3}}]}),
            json!({"name": "w", "version": 1e20, "tasks": []}),
        ] {
            let _ = parse_definition(&doc);
        }
    }
}
