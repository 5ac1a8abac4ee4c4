//! Conductor's task definition (`TaskDef`): the retry and timeout policies of a task,
//! registered by name under `/api/metadata/taskdefs`.
//!
//! Fields Weft interprets are typed, with Conductor's defaults (`retryCount` 3, `FIXED`
//! retries every 60 s, `responseTimeoutSeconds` 3600, `TIME_OUT_WF`); every other field
//! is kept in `extra`, so a registered TaskDef reads back with what was sent.
//!
//! # Why policies are frozen into a run
//!
//! A start copies the registered TaskDef of each task (of any type) into the run's definition as
//! the task's `taskDefinition` (unless the workflow task carries one inline, as Conductor
//! allows), and the decider reads policies only from there. A run therefore keeps the
//! policies it started with: updating or deleting a TaskDef affects later starts only, and
//! replaying a run's history always meets the same retry and timeout decisions.

use std::collections::{BTreeSet, HashMap};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::validate::DslError;
use super::{TaskType, WorkflowTask};

/// The key of a workflow task's `extra` that holds its (frozen or inline) TaskDef.
pub const TASK_DEFINITION_KEY: &str = "taskDefinition";

/// What happens when a task times out (Conductor's `TaskDef.TimeoutPolicy`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TimeoutPolicy {
    /// Retry the task (counts against `retryCount`).
    Retry,
    /// Time the whole workflow out (Conductor's default).
    #[default]
    TimeOutWf,
    /// Record the timeout and keep waiting.
    AlertOnly,
}

/// How the delay between attempts grows (Conductor's `TaskDef.RetryLogic`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum RetryLogic {
    /// `retryDelaySeconds` every time (Conductor's default).
    #[default]
    Fixed,
    /// `retryDelaySeconds × 2^(attempt-1)`.
    ExponentialBackoff,
    /// `retryDelaySeconds × backoffScaleFactor × attempt`.
    LinearBackoff,
}

/// A task definition, as Conductor's REST API reads and writes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskDef {
    /// The task name; SIMPLE workflow tasks of this `name` use this definition. Required
    /// by [`validate_task_def`]; defaulted here so an inline `taskDefinition` without a
    /// name (Conductor allows it) deserializes too.
    #[serde(default)]
    pub name: String,
    /// Free text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Retries after the first attempt (default 3).
    #[serde(default = "default_retry_count")]
    pub retry_count: i32,
    /// Start-to-close timeout of one attempt, seconds (0 = none).
    #[serde(default)]
    pub timeout_seconds: i64,
    /// Documented input keys.
    #[serde(default)]
    pub input_keys: Vec<String>,
    /// Documented output keys.
    #[serde(default)]
    pub output_keys: Vec<String>,
    /// What a timeout does (default `TIME_OUT_WF`).
    #[serde(default)]
    pub timeout_policy: TimeoutPolicy,
    /// How the retry delay grows (default `FIXED`).
    #[serde(default)]
    pub retry_logic: RetryLogic,
    /// Base delay before a retry, seconds (default 60).
    #[serde(default = "default_retry_delay")]
    pub retry_delay_seconds: i32,
    /// Heartbeat timeout: the longest a worker may stay silent, seconds (default 3600).
    #[serde(default = "default_response_timeout")]
    pub response_timeout_seconds: i64,
    /// At most this many attempts in progress at once (0 or absent = no limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrent_exec_limit: Option<i32>,
    /// Default input merged under the task's own input.
    #[serde(default)]
    pub input_template: Map<String, Value>,
    /// Rate limit: attempts per `rateLimitFrequencyInSeconds` (0 or absent = none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit_per_frequency: Option<i32>,
    /// Rate-limit window, seconds (Conductor treats absent as 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit_frequency_in_seconds: Option<i32>,
    /// Conductor's isolation group (kept, not used).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolation_group_id: Option<String>,
    /// Conductor's execution namespace (kept, not used).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_name_space: Option<String>,
    /// The owner's e-mail address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_email: Option<String>,
    /// Schedule-to-start timeout, seconds (absent or 0 = none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub poll_timeout_seconds: Option<i32>,
    /// Multiplier of `LINEAR_BACKOFF` (default 1).
    #[serde(default = "default_backoff_scale")]
    pub backoff_scale_factor: i32,
    /// Bound on all attempts of the task together, seconds (0 = none; newer Conductor).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub total_timeout_seconds: i64,
    /// Every other Conductor field, kept verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

fn default_retry_count() -> i32 {
    3
}

fn default_retry_delay() -> i32 {
    60
}

fn default_response_timeout() -> i64 {
    3600
}

fn default_backoff_scale() -> i32 {
    1
}

fn is_zero(v: &i64) -> bool {
    *v == 0
}

/// Integer fields: JSON name, smallest allowed value, whether it must fit `i32`.
const INT_FIELDS: [(&str, i64, bool); 10] = [
    ("retryCount", 0, true),
    ("timeoutSeconds", 0, false),
    ("retryDelaySeconds", 0, true),
    // Conductor: `@Min(1)` on responseTimeoutSeconds and backoffScaleFactor.
    ("responseTimeoutSeconds", 1, false),
    ("concurrentExecLimit", 0, true),
    ("rateLimitPerFrequency", 0, true),
    ("rateLimitFrequencyInSeconds", 0, true),
    ("pollTimeoutSeconds", 0, true),
    ("backoffScaleFactor", 1, true),
    ("totalTimeoutSeconds", 0, false),
];

const STRING_FIELDS: [&str; 5] = [
    "name",
    "description",
    "isolationGroupId",
    "executionNameSpace",
    "ownerEmail",
];

const ENUM_FIELDS: [(&str, &[&str]); 2] = [
    (
        "retryLogic",
        &["FIXED", "EXPONENTIAL_BACKOFF", "LINEAR_BACKOFF"],
    ),
    ("timeoutPolicy", &["RETRY", "TIME_OUT_WF", "ALERT_ONLY"]),
];

/// Parses and validates one TaskDef. Errors name the field (`retryLogic`,
/// `inputKeys[1]`). A `null` typed field counts as absent (its default applies).
pub fn validate_task_def(json: &Value) -> Result<TaskDef, DslError> {
    let Some(obj) = json.as_object() else {
        return Err(DslError::new("", "a task definition must be a JSON object"));
    };
    let mut obj = obj.clone();
    let typed = INT_FIELDS
        .iter()
        .map(|f| f.0)
        .chain(STRING_FIELDS)
        .chain(ENUM_FIELDS.iter().map(|f| f.0))
        .chain([
            "inputKeys",
            "outputKeys",
            "inputTemplate",
            "nonRetryableErrors",
        ]);
    for key in typed {
        if obj.get(key).is_some_and(Value::is_null) {
            obj.remove(key);
        }
    }

    match obj.get("name").map(Value::as_str) {
        None => {
            return Err(DslError::new(
                "name",
                "the task definition name is required",
            ))
        }
        Some(Some(n)) if n.trim().is_empty() => {
            return Err(DslError::new(
                "name",
                "the task definition name must not be empty",
            ))
        }
        _ => {}
    }
    for key in STRING_FIELDS {
        if obj.get(key).is_some_and(|v| !v.is_string()) {
            return Err(DslError::new(key, "must be a string"));
        }
    }
    for (key, min, is_i32) in INT_FIELDS {
        let Some(v) = obj.get(key) else { continue };
        let Some(n) = v.as_i64() else {
            return Err(DslError::new(key, "must be an integer"));
        };
        if n < min {
            return Err(DslError::new(key, format!("must be >= {min}, not {n}")));
        }
        if is_i32 && i32::try_from(n).is_err() {
            return Err(DslError::new(key, format!("{n} is too large")));
        }
    }
    for (key, allowed) in ENUM_FIELDS {
        let Some(v) = obj.get(key) else { continue };
        if !v.as_str().is_some_and(|s| allowed.contains(&s)) {
            return Err(DslError::new(
                key,
                format!("{v} is not one of {}", allowed.join(", ")),
            ));
        }
    }
    for key in ["inputKeys", "outputKeys", "nonRetryableErrors"] {
        let Some(v) = obj.get(key) else { continue };
        let Some(items) = v.as_array() else {
            return Err(DslError::new(key, "must be an array of strings"));
        };
        if let Some(i) = items.iter().position(|s| !s.is_string()) {
            return Err(DslError::new(format!("{key}[{i}]"), "must be a string"));
        }
    }
    if obj.get("inputTemplate").is_some_and(|v| !v.is_object()) {
        return Err(DslError::new("inputTemplate", "must be a JSON object"));
    }

    let def: TaskDef = serde_json::from_value(Value::Object(obj))
        .map_err(|e| DslError::new("", format!("not a valid task definition: {e}")))?;
    // Conductor's TaskTimeoutConstraint, defaults included: a TaskDef with only
    // `timeoutSeconds: 30` is refused there too (responseTimeoutSeconds defaults to 3600).
    if def.timeout_seconds > 0 && def.response_timeout_seconds > def.timeout_seconds {
        return Err(DslError::new(
            "responseTimeoutSeconds",
            format!(
                "responseTimeoutSeconds ({}) must be <= timeoutSeconds ({}) when timeoutSeconds > 0",
                def.response_timeout_seconds, def.timeout_seconds
            ),
        ));
    }
    Ok(def)
}

/// Parses and validates a list of TaskDefs; the error names the item (`[2].retryCount`).
pub fn validate_task_defs(json: &Value) -> Result<Vec<TaskDef>, DslError> {
    let Some(items) = json.as_array() else {
        return Err(DslError::new(
            "",
            "a JSON array of task definitions is expected",
        ));
    };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            validate_task_def(item).map_err(|e| {
                let path = if e.path.is_empty() {
                    format!("[{i}]")
                } else {
                    format!("[{i}].{}", e.path)
                };
                DslError::new(path, e.message)
            })
        })
        .collect()
}

/// Whether `task` takes its policies from a registered TaskDef: any task with a name and
/// without an inline `taskDefinition`, whatever its type, as Conductor populates every
/// workflow task's definition by name (`MetadataMapperService`). The decider applies the
/// policies where a task can fail and be retried or time out: SIMPLE, HTTP,
/// SUB_WORKFLOW (docs/interpreter.md).
fn needs_task_def(task: &WorkflowTask) -> bool {
    !task.name.trim().is_empty()
        && task
            .extra
            .get(TASK_DEFINITION_KEY)
            .is_none_or(Value::is_null)
}

/// The fields of a task definition that change how its tasks run. Each has a table in
/// the decider's `rules_tests` saying what it does on every task type.
pub const POLICY_FIELDS: [&str; 16] = [
    "retryCount",
    "retryLogic",
    "retryDelaySeconds",
    "backoffScaleFactor",
    "maxRetryDelaySeconds",
    "backoffJitterMs",
    "nonRetryableErrors",
    "timeoutSeconds",
    "totalTimeoutSeconds",
    "timeoutPolicy",
    "pollTimeoutSeconds",
    "responseTimeoutSeconds",
    "concurrentExecLimit",
    "rateLimitPerFrequency",
    "rateLimitFrequencyInSeconds",
    "inputTemplate",
];

/// The fields that describe a task definition without changing how its tasks run.
pub const DESCRIPTIVE_FIELDS: [&str; 7] = [
    "name",
    "description",
    "inputKeys",
    "outputKeys",
    "ownerEmail",
    "isolationGroupId",
    "executionNameSpace",
];

/// Task-definition policies that only mean something for a task handed to workers
/// (SIMPLE, HTTP, DYNAMIC): how many attempts workers may hold at once, how fast they may
/// take them, and how long an attempt may wait for a worker.
pub const WORKER_POLICIES: [&str; 3] = [
    "concurrentExecLimit",
    "rateLimitPerFrequency",
    "pollTimeoutSeconds",
];

/// Checks that the policies `task`'s task definition (inline, or the registered one
/// frozen at start) sets apply to the task's type: a worker-only policy
/// ([`WORKER_POLICIES`], not 0) on a type the decider runs itself is refused rather than
/// accepted and ignored. The error names `<path>.taskDefinition.<field>` and the type. A
/// type Weft does not know is left to the rest of validation.
pub fn check_policies_apply(task: &WorkflowTask, path: &str) -> Result<(), DslError> {
    let Some(kind) = task.task_type() else {
        return Ok(());
    };
    if matches!(kind, TaskType::Simple | TaskType::Http | TaskType::Dynamic) {
        return Ok(());
    }
    let Some(def) = task
        .extra
        .get(TASK_DEFINITION_KEY)
        .and_then(Value::as_object)
    else {
        return Ok(());
    };
    for field in WORKER_POLICIES {
        let set = def
            .get(field)
            .and_then(Value::as_i64)
            .is_some_and(|n| n != 0);
        if set {
            let registered = match def.get("name").and_then(Value::as_str) {
                Some(name) if !name.is_empty() => format!(" (task definition {name:?})"),
                _ => String::new(),
            };
            return Err(DslError::new(
                format!("{path}.{TASK_DEFINITION_KEY}.{field}"),
                format!(
                    "{field}{registered} applies to tasks handed to workers (SIMPLE, HTTP, \
                     DYNAMIC), not {}",
                    kind.as_str()
                ),
            ));
        }
    }
    Ok(())
}

/// [`check_policies_apply`] over the whole tree of `tasks` (paths as `tasks[1].forkTasks[0][2]`).
pub fn check_all_policies_apply(tasks: &[WorkflowTask], path: &str) -> Result<(), DslError> {
    for (i, task) in tasks.iter().enumerate() {
        let here = format!("{path}[{i}]");
        check_policies_apply(task, &here)?;
        if let Some(cases) = &task.decision_cases {
            for (case, list) in cases {
                check_all_policies_apply(list, &format!("{here}.decisionCases.{case}"))?;
            }
        }
        if let Some(list) = &task.default_case {
            check_all_policies_apply(list, &format!("{here}.defaultCase"))?;
        }
        if let Some(forks) = &task.fork_tasks {
            for (f, list) in forks.iter().enumerate() {
                check_all_policies_apply(list, &format!("{here}.forkTasks[{f}]"))?;
            }
        }
        if let Some(list) = &task.loop_over {
            check_all_policies_apply(list, &format!("{here}.loopOver"))?;
        }
    }
    Ok(())
}

/// The names of the registered TaskDefs `tasks` (the whole tree) would freeze.
pub fn task_def_names(tasks: &[WorkflowTask]) -> BTreeSet<String> {
    fn walk(tasks: &[WorkflowTask], names: &mut BTreeSet<String>) {
        for task in tasks {
            if needs_task_def(task) {
                names.insert(task.name.clone());
            }
            for list in task.children() {
                walk(list, names);
            }
        }
    }
    let mut names = BTreeSet::new();
    walk(tasks, &mut names);
    names
}

/// Copies `registered[name]` into each task of the tree that has no inline
/// `taskDefinition`, as its `taskDefinition`; returns how many tasks were given one.
pub fn freeze_task_defs(tasks: &mut [WorkflowTask], registered: &HashMap<String, Value>) -> usize {
    let mut frozen = 0;
    for task in tasks {
        if needs_task_def(task) {
            if let Some(def) = registered.get(&task.name) {
                task.extra
                    .insert(TASK_DEFINITION_KEY.to_owned(), def.clone());
                frozen += 1;
            }
        }
        if let Some(cases) = &mut task.decision_cases {
            for list in cases.values_mut() {
                frozen += freeze_task_defs(list, registered);
            }
        }
        if let Some(list) = &mut task.default_case {
            frozen += freeze_task_defs(list, registered);
        }
        if let Some(forks) = &mut task.fork_tasks {
            for list in forks {
                frozen += freeze_task_defs(list, registered);
            }
        }
        if let Some(list) = &mut task.loop_over {
            frozen += freeze_task_defs(list, registered);
        }
    }
    frozen
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::dsl::WorkflowDef;

    /// A new typed field must say whether it is a policy (and get its rule table) or
    /// only describes the definition.
    #[test]
    fn every_typed_field_is_a_policy_or_descriptive() {
        let mut def = validate_task_def(&json!({"name": "t"})).unwrap();
        def.description = Some("d".into());
        def.concurrent_exec_limit = Some(1);
        def.rate_limit_per_frequency = Some(1);
        def.rate_limit_frequency_in_seconds = Some(1);
        def.isolation_group_id = Some("g".into());
        def.execution_name_space = Some("n".into());
        def.owner_email = Some("o".into());
        def.poll_timeout_seconds = Some(1);
        def.total_timeout_seconds = 1;
        let json = serde_json::to_value(&def).unwrap();
        for key in json.as_object().unwrap().keys() {
            assert!(
                POLICY_FIELDS.contains(&key.as_str()) || DESCRIPTIVE_FIELDS.contains(&key.as_str()),
                "{key}: neither a policy nor descriptive"
            );
        }
        for (key, ..) in INT_FIELDS {
            assert!(
                POLICY_FIELDS.contains(&key) || DESCRIPTIVE_FIELDS.contains(&key),
                "{key}"
            );
        }
    }

    fn err(json: Value) -> DslError {
        match validate_task_def(&json) {
            Ok(def) => panic!("accepted: {def:?}"),
            Err(e) => e,
        }
    }

    #[test]
    fn defaults_are_conductors() {
        let def = validate_task_def(&json!({"name": "t"})).unwrap();
        assert_eq!(def.retry_count, 3);
        assert_eq!(def.retry_logic, RetryLogic::Fixed);
        assert_eq!(def.retry_delay_seconds, 60);
        assert_eq!(def.timeout_seconds, 0);
        assert_eq!(def.response_timeout_seconds, 3600);
        assert_eq!(def.timeout_policy, TimeoutPolicy::TimeOutWf);
        assert_eq!(def.backoff_scale_factor, 1);
        assert_eq!(def.poll_timeout_seconds, None);
        let out = serde_json::to_value(&def).unwrap();
        assert_eq!(out["retryLogic"], "FIXED");
        assert_eq!(out["timeoutPolicy"], "TIME_OUT_WF");
    }

    #[test]
    fn unknown_fields_round_trip_and_nulls_mean_default() {
        let json = json!({
            "name": "t", "retryCount": 1, "retryLogic": "EXPONENTIAL_BACKOFF",
            "timeoutSeconds": 30, "responseTimeoutSeconds": 10, "pollTimeoutSeconds": 5,
            "ownerEmail": "a@b.c", "inputKeys": ["x"], "baseType": "SIMPLE",
            "createdBy": "me", "concurrentExecLimit": null, "custom": null
        });
        let def = validate_task_def(&json).unwrap();
        assert_eq!(def.retry_logic, RetryLogic::ExponentialBackoff);
        assert_eq!(def.concurrent_exec_limit, None);
        assert_eq!(def.extra["baseType"], "SIMPLE");
        let out = serde_json::to_value(&def).unwrap();
        for key in ["baseType", "createdBy", "custom", "ownerEmail", "inputKeys"] {
            assert_eq!(out[key], json[key], "{key}");
        }
        assert!(out.get("concurrentExecLimit").is_none());
        assert_eq!(validate_task_def(&out).unwrap(), def);
    }

    #[test]
    fn a_partial_inline_task_definition_deserializes_with_defaults() {
        let def: TaskDef = serde_json::from_value(json!({"timeoutSeconds": 5})).unwrap();
        assert_eq!((def.timeout_seconds, def.retry_count), (5, 3));
    }

    #[test]
    fn name_is_required() {
        assert_eq!(err(json!({"retryCount": 1})).path, "name");
        assert_eq!(err(json!({"name": " "})).path, "name");
        assert_eq!(err(json!({"name": 7})).path, "name");
        assert_eq!(err(json!([])).path, "");
    }

    #[test]
    fn numbers_are_checked_by_field() {
        assert_eq!(
            err(json!({"name": "t", "retryCount": -1})).path,
            "retryCount"
        );
        assert_eq!(
            err(json!({"name": "t", "retryCount": "3"})).path,
            "retryCount"
        );
        assert_eq!(
            err(json!({"name": "t", "retryDelaySeconds": 1.5})).path,
            "retryDelaySeconds"
        );
        assert_eq!(
            err(json!({"name": "t", "responseTimeoutSeconds": 0})).path,
            "responseTimeoutSeconds"
        );
        assert_eq!(
            err(json!({"name": "t", "backoffScaleFactor": 0})).path,
            "backoffScaleFactor"
        );
        assert_eq!(
            err(json!({"name": "t", "pollTimeoutSeconds": 4_000_000_000_i64})).path,
            "pollTimeoutSeconds"
        );
    }

    #[test]
    fn enums_and_lists_are_checked() {
        let e = err(json!({"name": "t", "retryLogic": "RANDOM"}));
        assert_eq!(e.path, "retryLogic");
        assert!(e.message.contains("LINEAR_BACKOFF"), "{e}");
        assert_eq!(
            err(json!({"name": "t", "timeoutPolicy": "NEVER"})).path,
            "timeoutPolicy"
        );
        assert_eq!(
            err(json!({"name": "t", "inputKeys": ["a", 2]})).path,
            "inputKeys[1]"
        );
        assert_eq!(
            err(json!({"name": "t", "inputTemplate": []})).path,
            "inputTemplate"
        );
    }

    #[test]
    fn response_timeout_must_not_exceed_a_set_timeout() {
        let e = err(json!({"name": "t", "timeoutSeconds": 30, "responseTimeoutSeconds": 31}));
        assert_eq!(e.path, "responseTimeoutSeconds");
        // The default (3600) counts, as in Conductor.
        assert_eq!(
            err(json!({"name": "t", "timeoutSeconds": 30})).path,
            "responseTimeoutSeconds"
        );
        assert!(validate_task_def(
            &json!({"name": "t", "timeoutSeconds": 30, "responseTimeoutSeconds": 30})
        )
        .is_ok());
        assert!(validate_task_def(
            &json!({"name": "t", "timeoutSeconds": 0, "responseTimeoutSeconds": 9000})
        )
        .is_ok());
    }

    #[test]
    fn list_errors_name_the_item() {
        let list = json!([{"name": "a"}, {"name": "b", "retryCount": -2}]);
        assert_eq!(
            validate_task_defs(&list).unwrap_err().path,
            "[1].retryCount"
        );
        assert_eq!(
            validate_task_defs(&json!([{"name": "a"}, 3]))
                .unwrap_err()
                .path,
            "[1]"
        );
        assert_eq!(
            validate_task_defs(&json!({"name": "a"})).unwrap_err().path,
            ""
        );
        assert_eq!(
            validate_task_defs(&json!([{"name": "a"}, {"name": "b"}]))
                .unwrap()
                .len(),
            2
        );
    }

    #[test]
    fn freezing_fills_every_named_task_of_the_whole_tree_but_not_inline_ones() {
        let mut def: WorkflowDef = serde_json::from_value(json!({
            "name": "w",
            "tasks": [
                {"name": "a", "taskReferenceName": "a1"},
                {"name": "a", "taskReferenceName": "a2", "type": "SIMPLE",
                 "taskDefinition": {"retryCount": 0}},
                {"name": "sw", "taskReferenceName": "sw", "type": "SWITCH",
                 "decisionCases": {"x": [{"name": "b", "taskReferenceName": "b1"}]},
                 "defaultCase": [{"name": "c", "taskReferenceName": "c1"}]},
                {"name": "f", "taskReferenceName": "f", "type": "FORK_JOIN",
                 "forkTasks": [[{"name": "d", "taskReferenceName": "d1"}]]},
                {"name": "l", "taskReferenceName": "l", "type": "DO_WHILE",
                 "loopOver": [{"name": "e", "taskReferenceName": "e1"},
                              {"name": "h", "taskReferenceName": "h1", "type": "HTTP"}]}
            ]
        }))
        .unwrap();
        let names: Vec<_> = task_def_names(&def.tasks).into_iter().collect();
        assert_eq!(names, ["a", "b", "c", "d", "e", "f", "h", "l", "sw"]);

        let registered: HashMap<String, Value> = ["a", "b", "d", "e", "h"]
            .iter()
            .map(|n| (n.to_string(), json!({"name": n, "retryCount": 7})))
            .collect();
        assert_eq!(freeze_task_defs(&mut def.tasks, &registered), 5);
        let t = &def.tasks;
        assert_eq!(t[0].extra[TASK_DEFINITION_KEY]["retryCount"], 7);
        assert_eq!(t[1].extra[TASK_DEFINITION_KEY], json!({"retryCount": 0}));
        let cases = t[2].decision_cases.as_ref().unwrap();
        assert_eq!(cases["x"][0].extra[TASK_DEFINITION_KEY]["name"], "b");
        assert!(
            t[2].default_case.as_ref().unwrap()[0].extra.is_empty(),
            "c is not registered"
        );
        assert_eq!(
            t[3].fork_tasks.as_ref().unwrap()[0][0].extra[TASK_DEFINITION_KEY]["name"],
            "d"
        );
        let body = t[4].loop_over.as_ref().unwrap();
        assert_eq!(body[0].extra[TASK_DEFINITION_KEY]["name"], "e");
        assert_eq!(
            body[1].extra[TASK_DEFINITION_KEY]["retryCount"], 7,
            "an HTTP task takes the TaskDef of its name too"
        );
    }
}
