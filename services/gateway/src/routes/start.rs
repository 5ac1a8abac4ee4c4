//! Starting a workflow: resolve and check the definition, then commit the start and its
//! `StartWorkflow` command together (outbox) before answering, so an answered start is
//! never lost (DESIGN.md §3.1).

use std::time::Duration;

use serde_json::{Map, Value};
use weft::dsl::failure_workflow::{failure_workflow_name, input_key};
use weft::dsl::{
    self, validate::check_executable, DslError, WorkflowDef, FAILURE_WORKFLOW_DEFINITION,
};
use weft::messages::{Command, StartWorkflow, TaskDomains};
use weft::store::outbox::{publish_together, OutboxMessage};
use weft::store::starts::{NewStart, StartOutcome};
use weft::Envelope;

use super::metadata::not_found;
use crate::error::ApiError;
use crate::state::AppState;

/// How long a start waits for the broker's confirm after the commit. Past it the answer
/// goes out anyway: the outbox row stays and the history service's sweeper publishes it.
const PUBLISH_TIMEOUT: Duration = Duration::from_secs(5);

/// Conductor's `StartWorkflowRequest`, with the fields Weft uses.
#[derive(Debug, Clone, Default)]
pub struct StartRequest {
    /// Definition name (taken from `workflow_def` when that is given).
    pub name: Option<String>,
    /// Definition version; the latest when absent.
    pub version: Option<i32>,
    /// The workflow input.
    pub input: Map<String, Value>,
    /// The caller's correlation id.
    pub correlation_id: Option<String>,
    /// An inline, unregistered definition to run.
    pub workflow_def: Option<Value>,
    /// A repeated key answers the first start's id instead of starting again.
    pub idempotency_key: Option<String>,
    /// Conductor's priority, 0–99: the run's activity tasks are handed out before those
    /// of lower priorities (docs/priority.md).
    pub priority: Option<i32>,
    /// Conductor's `taskToDomain`: task name (or `*`) → the domain whose workers alone
    /// take its tasks (docs/domains.md).
    pub task_to_domain: TaskDomains,
}

fn invalid(path: &str, message: &str) -> ApiError {
    ApiError::invalid("invalid_request", path, message)
}

/// An optional string field; `null` counts as absent.
fn opt_string(map: &mut Map<String, Value>, key: &str) -> Result<Option<String>, ApiError> {
    match map.remove(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(invalid(key, "must be a string")),
    }
}

/// An optional 32-bit integer field; `null` counts as absent.
fn opt_i32(map: &mut Map<String, Value>, key: &str) -> Result<Option<i32>, ApiError> {
    match map.remove(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_i64()
            .and_then(|n| i32::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| invalid(key, "must be an integer")),
    }
}

impl StartRequest {
    /// Reads a StartWorkflowRequest, naming the field at fault. Fields Weft has no use for
    /// (`createdBy`, …) are accepted and ignored, as Conductor clients send them.
    pub fn from_json(json: Value) -> Result<Self, ApiError> {
        let Value::Object(mut map) = json else {
            return Err(ApiError::bad_request(
                "invalid_request",
                "a start request must be a JSON object",
            ));
        };
        let input = match map.remove("input") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(input)) => input,
            Some(_) => return Err(invalid("input", "must be a JSON object")),
        };
        // Conductor reads such an input from its external payload storage; Weft has
        // none (payloads are stored inline), and starting without the input would run
        // the workflow on nothing.
        if let Some(Value::String(path)) = map.get("externalInputPayloadStoragePath") {
            if !path.is_empty() {
                return Err(invalid(
                    "externalInputPayloadStoragePath",
                    "Weft has no external payload storage: send the workflow input inline, \
                     as `input`",
                ));
            }
        }
        let workflow_def = match map.remove("workflowDef") {
            None | Some(Value::Null) => None,
            Some(def @ Value::Object(_)) => Some(def),
            Some(_) => return Err(invalid("workflowDef", "must be a JSON object")),
        };
        let request = Self {
            name: opt_string(&mut map, "name")?.filter(|n| !n.is_empty()),
            version: opt_i32(&mut map, "version")?,
            input,
            correlation_id: opt_string(&mut map, "correlationId")?,
            workflow_def,
            idempotency_key: opt_string(&mut map, "idempotencyKey")?,
            priority: opt_i32(&mut map, "priority")?,
            task_to_domain: task_domains(map.remove("taskToDomain"))?,
        };
        request.check_priority()?;
        Ok(request)
    }

    /// Conductor refuses priorities outside 0–99.
    pub fn check_priority(&self) -> Result<(), ApiError> {
        match self.priority {
            Some(p) if !(0..=99).contains(&p) => {
                Err(invalid("priority", "must be between 0 and 99"))
            }
            _ => Ok(()),
        }
    }
}

/// Conductor's `taskToDomain`: an object of task names (or `*`) to domains; `null` or
/// `{}` for none. A domain is letters, digits, `_` and `-` (it names a queue), or
/// `NO_DOMAIN`. Conductor's lists of domains tried in turn by which has workers polling
/// (`"blue,green"`) are refused: Weft routes a task to one domain (docs/domains.md).
pub(crate) fn task_domains(value: Option<Value>) -> Result<TaskDomains, ApiError> {
    let map = match value {
        None | Some(Value::Null) => return Ok(TaskDomains::new()),
        Some(Value::Object(map)) => map,
        Some(_) => {
            return Err(invalid(
                "taskToDomain",
                "must be an object of task names to domains",
            ))
        }
    };
    let mut domains = TaskDomains::new();
    for (task, domain) in map {
        let path = format!("taskToDomain.{task}");
        let Value::String(domain) = domain else {
            return Err(invalid(&path, "must be a domain name (a string)"));
        };
        if domain.contains(',') {
            return Err(invalid(
                &path,
                "a list of domains is not supported: name one domain (or NO_DOMAIN)",
            ));
        }
        if !weft::topology::is_valid_domain(&domain) {
            return Err(invalid(
                &path,
                "a domain is 1 to 64 letters, digits, '_' or '-'",
            ));
        }
        domains.insert(task, domain);
    }
    Ok(domains)
}

/// The definition the start runs: the inline one, or the registered one (the latest
/// version unless one is named). Either must validate and be executable today.
async fn resolve(state: &AppState, request: &StartRequest) -> Result<WorkflowDef, ApiError> {
    if let Some(inline) = &request.workflow_def {
        let def = dsl::parse_definition(inline)
            .map_err(|e| ApiError::definition(e, Some("workflowDef")))?;
        check_executable(&def).map_err(|e| ApiError::definition(e, Some("workflowDef")))?;
        return Ok(def);
    }
    let Some(name) = request.name.as_deref() else {
        return Err(invalid(
            "name",
            "a workflow name (or an inline workflowDef) is required",
        ));
    };
    let stored = state
        .store
        .get_definition(name, request.version)
        .await?
        .ok_or_else(|| not_found(name, request.version))?;
    let def =
        dsl::parse_definition(&stored.definition).map_err(|e| ApiError::definition(e, None))?;
    check_executable(&def).map_err(|e| ApiError::definition(e, None))?;
    Ok(def)
}

/// Freezes the policies of the run (see `Store::freeze_task_defs`), refusing a start
/// whose registered task definitions set a policy that cannot apply to the type of the
/// task they were frozen into (`taskdef::check_policies_apply`).
async fn freeze_task_defs(state: &AppState, def: &mut WorkflowDef) -> Result<(), ApiError> {
    state.store.freeze_task_defs(def).await?;
    weft::dsl::taskdef::check_all_policies_apply(&def.tasks, "tasks").map_err(|e| {
        let message = format!("workflow {:?}: {}", def.name, e.message);
        ApiError::definition(DslError::new(e.path, message), None)
    })
}

/// How deep registered sub-workflows may nest (a definition that names itself would
/// otherwise expand forever).
const MAX_SUB_WORKFLOW_DEPTH: usize = 8;

/// Freezes the children of the run: every SUB_WORKFLOW that names a registered definition
/// (`subWorkflowParam.name`, `version` or the latest) gets it embedded as
/// `subWorkflowParam.workflowDefinition`, itself frozen the same way (its own children
/// and task definitions), so a child runs the definition its parent started with.
async fn freeze_sub_workflows(state: &AppState, def: &mut WorkflowDef) -> Result<(), ApiError> {
    // Most definitions start no children: skip the JSON round trip on the start path.
    if !has_children(&def.tasks) {
        return Ok(());
    }
    let mut json = serde_json::to_value(&*def).map_err(weft::Error::from)?;
    if let Some(tasks) = json.get_mut("tasks") {
        embed_children(state, tasks, 1, None).await?;
    }
    *def = serde_json::from_value(json).map_err(weft::Error::from)?;
    Ok(())
}

/// Freezes the children whose name the run's input gives (`${workflow.input.<key>}`),
/// which the definition shared by every start of its name leaves unresolved.
async fn freeze_input_named_children(
    state: &AppState,
    def: &mut WorkflowDef,
    input: &Map<String, Value>,
) -> Result<(), ApiError> {
    if !has_input_named_child(&def.tasks) {
        return Ok(());
    }
    let mut json = serde_json::to_value(&*def).map_err(weft::Error::from)?;
    if let Some(tasks) = json.get_mut("tasks") {
        embed_children(state, tasks, 1, Some(input)).await?;
    }
    *def = serde_json::from_value(json).map_err(weft::Error::from)?;
    Ok(())
}

/// Whether a SUB_WORKFLOW of the tree, or of a child definition embedded in it, takes
/// its name from its run's input.
fn has_input_named_child(tasks: &[weft::dsl::WorkflowTask]) -> bool {
    tasks.iter().any(|t| {
        let param = (t.task_type() == Some(dsl::TaskType::SubWorkflow))
            .then(|| t.extra.get("subWorkflowParam"))
            .flatten();
        let named = param
            .and_then(|p| p.get("name"))
            .and_then(Value::as_str)
            .and_then(input_key)
            .is_some();
        let nested = param
            .and_then(|p| p.get("workflowDefinition"))
            .and_then(|d| d.get("tasks"))
            .is_some_and(names_child_by_input);
        named || nested || t.children().into_iter().any(has_input_named_child)
    })
}

/// [`has_input_named_child`] over an embedded child definition's tasks, read as they are
/// (a walk of the JSON, not a parse: it runs on every start of such a definition).
fn names_child_by_input(json: &Value) -> bool {
    match json {
        Value::Array(items) => items.iter().any(names_child_by_input),
        Value::Object(map) => {
            let named = map.get("type").and_then(Value::as_str) == Some("SUB_WORKFLOW")
                && map
                    .get("subWorkflowParam")
                    .and_then(|p| p.get("name"))
                    .and_then(Value::as_str)
                    .and_then(input_key)
                    .is_some();
            named
                || map
                    .iter()
                    .filter(|(k, _)| k.as_str() != "inputParameters")
                    .any(|(_, v)| names_child_by_input(v))
        }
        _ => false,
    }
}

/// What a child run's input is known to be at its root's start: each of a SUB_WORKFLOW
/// task's `inputParameters` (`params`) that is a literal string, or exactly
/// `${workflow.input.<key>}` of a parent input known so (other values depend on the run).
fn known_child_input(params: Option<&Value>, input: &Map<String, Value>) -> Map<String, Value> {
    let Some(Value::Object(params)) = params else {
        return Map::new();
    };
    params
        .iter()
        .filter_map(|(k, v)| {
            let text = v.as_str()?;
            let value = match input_key(text) {
                Some(key) => input.get(key)?.clone(),
                None if text.contains("${") => return None,
                None => v.clone(),
            };
            Some((k.clone(), value))
        })
        .collect()
}

/// Whether any task of the tree may start child runs.
fn has_children(tasks: &[weft::dsl::WorkflowTask]) -> bool {
    tasks.iter().any(|t| {
        matches!(
            t.task_type(),
            Some(
                dsl::TaskType::SubWorkflow
                    | dsl::TaskType::ForkJoinDynamic
                    | dsl::TaskType::StartWorkflow
            )
        ) || t.children().into_iter().any(has_children)
    })
}

/// Walks a task list (as JSON) and embeds the definition of every named sub-workflow.
fn embed_children<'a>(
    state: &'a AppState,
    tasks: &'a mut Value,
    depth: usize,
    input: Option<&'a Map<String, Value>>,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), ApiError>> + Send + 'a>> {
    Box::pin(async move {
        let Some(list) = tasks.as_array_mut() else {
            return Ok(());
        };
        for task in list {
            for key in ["decisionCases"] {
                if let Some(Value::Object(cases)) = task.get_mut(key) {
                    for branch in cases.values_mut() {
                        embed_children(state, branch, depth, input).await?;
                    }
                }
            }
            for key in ["defaultCase", "loopOver"] {
                if let Some(branch) = task.get_mut(key) {
                    embed_children(state, branch, depth, input).await?;
                }
            }
            if let Some(Value::Array(forks)) = task.get_mut("forkTasks") {
                for branch in forks {
                    embed_children(state, branch, depth, input).await?;
                }
            }
            if task.get("type").and_then(Value::as_str) == Some("FORK_JOIN_DYNAMIC") {
                if input.is_none() {
                    embed_group_child(state, task, depth).await?;
                }
                continue;
            }
            if task.get("type").and_then(Value::as_str) == Some("START_WORKFLOW") {
                if input.is_none() {
                    embed_started(state, task, depth).await?;
                }
                continue;
            }
            if task.get("type").and_then(Value::as_str) != Some("SUB_WORKFLOW") {
                continue;
            }
            let input_params = task.get("inputParameters").cloned();
            let Some(param) = task
                .get_mut("subWorkflowParam")
                .and_then(Value::as_object_mut)
            else {
                continue;
            };
            if param
                .get("workflowDefinition")
                .is_some_and(Value::is_object)
            {
                // Embedded already: its own children may be named by its input.
                if let Some(input) = input {
                    let child_input = known_child_input(input_params.as_ref(), input);
                    if let Some(tasks) =
                        task.pointer_mut("/subWorkflowParam/workflowDefinition/tasks")
                    {
                        embed_children(state, tasks, depth + 1, Some(&child_input)).await?;
                    }
                }
                continue;
            }
            let mut name = param
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            // Conductor resolves a name such as `${workflow.input.subwf}` when it schedules
            // the task; Weft freezes children at start, so one the run's input names is
            // resolved then, per start (`freeze_input_named_children`), at any depth where
            // the child's input is known then (`known_child_input`); one named by anything
            // else (an earlier task's output) is left to the decider, which reads the
            // registered definition when it schedules the task, as is a definition given
            // by an expression (`workflowDefinition: "${...}"`).
            let defined_at_run_time = param
                .get("workflowDefinition")
                .and_then(Value::as_str)
                .is_some_and(|d| d.contains("${"));
            if defined_at_run_time || (name.contains("${") && input_key(&name).is_none()) {
                continue;
            }
            if let Some(key) = input_key(&name) {
                let Some(named) = input
                    .and_then(|i| i.get(key))
                    .and_then(Value::as_str)
                    .filter(|n| !n.is_empty())
                else {
                    continue;
                };
                name = named.to_owned();
                param.insert("name".to_owned(), Value::String(name.clone()));
            } else if input.is_some() {
                // The per-start pass touches only the names the input gives.
                continue;
            }
            if depth > MAX_SUB_WORKFLOW_DEPTH {
                return Err(invalid(
                    "subWorkflowParam.name",
                    &format!(
                        "sub-workflows nest deeper than {MAX_SUB_WORKFLOW_DEPTH} levels at {name:?}; \
                         does a definition start itself?"
                    ),
                ));
            }
            let version = param
                .get("version")
                .and_then(Value::as_i64)
                .and_then(|v| i32::try_from(v).ok());
            let stored = state
                .store
                .get_definition(&name, version)
                .await?
                .ok_or_else(|| not_found(&name, version))?;
            let mut child = dsl::parse_definition(&stored.definition)
                .map_err(|e| ApiError::definition(e, None))?;
            check_executable(&child).map_err(|e| ApiError::definition(e, None))?;
            freeze_task_defs(state, &mut child).await?;
            let mut child_json = serde_json::to_value(&child).map_err(weft::Error::from)?;
            if let Some(tasks) = child_json.get_mut("tasks") {
                embed_children(state, tasks, depth + 1, None).await?;
                if let Some(input) = input {
                    let child_input = known_child_input(input_params.as_ref(), input);
                    embed_children(state, tasks, depth + 1, Some(&child_input)).await?;
                }
            }
            param.insert("workflowDefinition".to_owned(), child_json);
        }
        Ok(())
    })
}

/// Freezes the run's `failureWorkflow` (the latest registered version, with its own task
/// and child definitions) into the definition, so that the decider can start it when the
/// run fails or times out. A failure workflow that is not registered refuses the start.
async fn freeze_failure_workflow(
    state: &AppState,
    def: &mut WorkflowDef,
    input: &Map<String, Value>,
) -> Result<(), ApiError> {
    // Conductor's `$workflow.input.<key>`: the name comes from the run's input (no
    // failure workflow when the input has none).
    def.failure_workflow = failure_workflow_name(def, Some(input));
    let Some(name) = def.failure_workflow.clone().filter(|n| !n.is_empty()) else {
        return Ok(());
    };
    if def.extra.contains_key(FAILURE_WORKFLOW_DEFINITION) {
        return Ok(());
    }
    let stored = state
        .store
        .get_definition(&name, None)
        .await?
        .ok_or_else(|| not_found(&name, None))?;
    let mut failure = dsl::parse_definition(&stored.definition)
        .map_err(|e| ApiError::definition(e, Some("failureWorkflow")))?;
    check_executable(&failure).map_err(|e| ApiError::definition(e, Some("failureWorkflow")))?;
    freeze_task_defs(state, &mut failure).await?;
    freeze_sub_workflows(state, &mut failure).await?;
    def.extra.insert(
        FAILURE_WORKFLOW_DEFINITION.to_owned(),
        serde_json::to_value(&failure).map_err(weft::Error::from)?,
    );
    Ok(())
}

/// START_WORKFLOW: the definition of `inputParameters.startWorkflow.name` (`version`, or
/// the latest), frozen, travels as `startWorkflowDefinition`.
async fn embed_started(state: &AppState, task: &mut Value, depth: usize) -> Result<(), ApiError> {
    // A name an expression gives is known when the task runs: the decider reads the
    // registered definition then.
    let Some(name) = task
        .pointer("/inputParameters/startWorkflow/name")
        .and_then(Value::as_str)
        .filter(|n| !n.contains("${"))
        .map(str::to_owned)
    else {
        return Ok(());
    };
    if task.get("startWorkflowDefinition").is_some() {
        return Ok(());
    }
    let version = task
        .pointer("/inputParameters/startWorkflow/version")
        .and_then(Value::as_i64)
        .and_then(|v| i32::try_from(v).ok());
    if depth > MAX_SUB_WORKFLOW_DEPTH {
        return Err(invalid(
            "startWorkflow.name",
            &format!(
                "started workflows nest deeper than {MAX_SUB_WORKFLOW_DEPTH} levels at {name:?}"
            ),
        ));
    }
    let stored = state
        .store
        .get_definition(&name, version)
        .await?
        .ok_or_else(|| not_found(&name, version))?;
    let mut started =
        dsl::parse_definition(&stored.definition).map_err(|e| ApiError::definition(e, None))?;
    check_executable(&started).map_err(|e| ApiError::definition(e, None))?;
    freeze_task_defs(state, &mut started).await?;
    let mut json = serde_json::to_value(&started).map_err(weft::Error::from)?;
    if let Some(tasks) = json.get_mut("tasks") {
        embed_children(state, tasks, depth + 1, None).await?;
    }
    if let Some(obj) = task.as_object_mut() {
        obj.insert("startWorkflowDefinition".to_owned(), json);
    }
    Ok(())
}

/// A dynamic fork over a group of children (`inputParameters.forkTaskWorkflow`, a
/// definition name): that definition, frozen, travels as `forkTaskWorkflowDefinition`.
async fn embed_group_child(
    state: &AppState,
    task: &mut Value,
    depth: usize,
) -> Result<(), ApiError> {
    let Some(name) = task
        .pointer("/inputParameters/forkTaskWorkflow")
        .and_then(Value::as_str)
        .filter(|n| !n.contains("${"))
        .map(str::to_owned)
    else {
        return Ok(());
    };
    if task.get("forkTaskWorkflowDefinition").is_some() {
        return Ok(());
    }
    let version = task
        .pointer("/inputParameters/forkTaskWorkflowVersion")
        .and_then(Value::as_i64)
        .and_then(|v| i32::try_from(v).ok());
    let stored = state
        .store
        .get_definition(&name, version)
        .await?
        .ok_or_else(|| not_found(&name, version))?;
    let mut child =
        dsl::parse_definition(&stored.definition).map_err(|e| ApiError::definition(e, None))?;
    check_executable(&child).map_err(|e| ApiError::definition(e, None))?;
    freeze_task_defs(state, &mut child).await?;
    let mut child_json = serde_json::to_value(&child).map_err(weft::Error::from)?;
    if let Some(tasks) = child_json.get_mut("tasks") {
        embed_children(state, tasks, depth + 1, None).await?;
    }
    if let Some(obj) = task.as_object_mut() {
        obj.insert("forkTaskWorkflowDefinition".to_owned(), child_json);
    }
    Ok(())
}

/// The definition a start runs, task definitions and children frozen in: a registered
/// one from the gateway's cache while no definition has changed since it was read
/// (docs/definition-cache.md), else read, checked and frozen (and kept).
async fn resolved(state: &AppState, request: &StartRequest) -> Result<WorkflowDef, ApiError> {
    let epoch = state.store.definitions_epoch();
    let name = request
        .name
        .as_deref()
        .filter(|_| request.workflow_def.is_none());
    if let Some(name) = name {
        if let Some(cached) = state.start_definitions.get(epoch, name, request.version) {
            return Ok(cached);
        }
    }
    // Before the reads: a change committed while they run makes the entry stale.
    let read_under = epoch.current();
    let mut definition = resolve(state, request).await?;
    freeze_task_defs(state, &mut definition).await?;
    freeze_sub_workflows(state, &mut definition).await?;
    // A failure workflow named outright is the same for every start; one named by an
    // input is resolved per start, after this.
    let input_named = definition
        .failure_workflow
        .as_deref()
        .and_then(input_key)
        .is_some();
    if !input_named {
        freeze_failure_workflow(state, &mut definition, &Map::new()).await?;
    }
    if let Some(name) = name {
        state
            .start_definitions
            .insert(read_under, name, request.version, &definition);
    }
    Ok(definition)
}

/// The latest registered version of `name`, frozen as a start of it with `input` would
/// run it: what a restart with `useLatestDefinitions` runs.
pub(crate) async fn latest_frozen(
    state: &AppState,
    name: &str,
    input: &Map<String, Value>,
) -> Result<WorkflowDef, ApiError> {
    let request = StartRequest {
        name: Some(name.to_owned()),
        version: None,
        input: Map::new(),
        correlation_id: None,
        workflow_def: None,
        idempotency_key: None,
        priority: None,
        task_to_domain: TaskDomains::new(),
    };
    let mut definition = resolved(state, &request).await?;
    freeze_failure_workflow(state, &mut definition, input).await?;
    freeze_input_named_children(state, &mut definition, input).await?;
    Ok(definition)
}

/// Starts a run of the resolved definition and returns its workflow id (the first start's
/// id when the idempotency key was seen before).
///
/// For callers over HTTP: at most `WEFT_MAX_STARTS_IN_FLIGHT` run at once, and one more
/// is refused (429) before anything is read or written, so a burst is turned away
/// instead of queueing without bound in the gateway.
pub async fn start(state: &AppState, request: StartRequest) -> Result<String, ApiError> {
    let _permit = state
        .start_permits
        .clone()
        .try_acquire_owned()
        .map_err(|_| {
            ApiError::Overloaded(
                "this gateway has as many starts in flight as WEFT_MAX_STARTS_IN_FLIGHT allows; \
             nothing was started: retry after a second"
                    .into(),
            )
        })?;
    Ok(start_run(state, request).await?.workflow_id)
}

/// What a start did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Started {
    /// The run's id.
    pub workflow_id: String,
    /// The idempotency key was seen before: `workflow_id` is the first start's run and
    /// nothing new was started.
    pub repeated: bool,
}

/// [`start`], saying whether the start was new or a repeat of an idempotency key.
pub async fn start_run(state: &AppState, request: StartRequest) -> Result<Started, ApiError> {
    let mut definition = resolved(state, &request).await?;
    freeze_failure_workflow(state, &mut definition, &request.input).await?;
    freeze_input_named_children(state, &mut definition, &request.input).await?;
    let workflow_id = weft::ids::new_id().to_string();
    let traceparent = weft::telemetry::current_traceparent();
    let input = Value::Object(request.input);

    let start = NewStart {
        workflow_id: workflow_id.clone(),
        idempotency_key: request.idempotency_key,
        workflow_name: definition.name.clone(),
        workflow_version: definition.version,
        input: input.clone(),
        correlation_id: request.correlation_id.clone(),
    };
    let command = Command::StartWorkflow(StartWorkflow {
        definition,
        input,
        correlation_id: request.correlation_id,
        parent_workflow_id: None,
        parent: None,
        traceparent: traceparent.clone(),
        priority: request.priority,
        task_to_domain: request.task_to_domain,
    });
    let envelope = Envelope::new(&workflow_id, None, &command)?;
    let names = state.bus.names();
    let mut messages = vec![OutboxMessage::new(
        names.commands_exchange(),
        names.command_key_for(&workflow_id),
        &envelope,
        traceparent,
    )?];

    // Audited in the start's own statement when a token is known (auth on).
    let audit = crate::auth::request_audit().map(|base| weft::store::auth::AuditEntry {
        action: "workflow.start".to_owned(),
        target: Some(start.workflow_name.clone()),
        workflow_id: Some(workflow_id.clone()),
        ..base
    });
    match state
        .store
        .accept_start(&start, &mut messages, audit.as_ref())
        .await?
    {
        StartOutcome::Existing(existing) => {
            tracing::info!(workflow_id = %existing, "start repeated with the same idempotency key");
            return Ok(Started {
                workflow_id: existing,
                repeated: true,
            });
        }
        StartOutcome::Accepted => {}
    }
    tracing::debug!(%workflow_id, name = %start.workflow_name, version = start.workflow_version, "workflow start accepted");

    // The start is committed: from here on a failure only delays it (the sweeper
    // re-publishes the outbox row), so it is logged and the id is answered.
    let publish = async {
        match &state.starts_together {
            Some(together) => {
                let (sent, published) = publish_together(together, messages).await;
                state.store.forget_outbox(sent);
                published
            }
            None => state.store.publish_outbox(&state.bus, &messages).await,
        }
    };
    match tokio::time::timeout(PUBLISH_TIMEOUT, publish).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            tracing::warn!(%workflow_id, error = %e, "start command not published; the outbox sweeper will")
        }
        Err(_) => {
            tracing::warn!(%workflow_id, "start command publish timed out; the outbox sweeper will retry")
        }
    }
    Ok(Started {
        workflow_id,
        repeated: false,
    })
}
