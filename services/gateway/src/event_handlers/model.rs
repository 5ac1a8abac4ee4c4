//! Conductor's `EventHandler`, read and checked: what an event handler listens to, when
//! it acts and what it does. Field names and defaults are Conductor's (`active` is
//! `false` unless given); what Weft refuses, it refuses at registration with a 400 naming
//! the field, rather than failing every event later.

use serde_json::{Map, Value};
use weft::dsl::script;
pub use weft::event_location::EventLocation as Source;

use crate::error::ApiError;

/// What an action does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActionKind {
    /// Starts a run.
    StartWorkflow,
    /// Completes a task (an activity's result, or a WAIT task's signal).
    CompleteTask,
    /// Fails a task.
    FailTask,
    /// Terminates a run.
    TerminateWorkflow,
}

impl ActionKind {
    /// The action's name, which is also the key of its parameters.
    pub fn name(self) -> &'static str {
        match self {
            Self::StartWorkflow => "start_workflow",
            Self::CompleteTask => "complete_task",
            Self::FailTask => "fail_task",
            Self::TerminateWorkflow => "terminate_workflow",
        }
    }
}

/// One action of a handler.
#[derive(Debug, Clone)]
pub struct Action {
    /// What it does.
    pub kind: ActionKind,
    /// Its parameters (`${...}` resolved against the event when it runs).
    pub params: Map<String, Value>,
    /// JSON held in string values of the event is expanded before resolving.
    pub expand_inline_json: bool,
}

/// How a condition is evaluated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Evaluator {
    /// JavaScript with the event bound to `$` (Conductor's default, `javascript`,
    /// `graaljs`).
    JavaScript,
    /// The condition names a field of the event, whose truth decides (`value-param`).
    ValueParam,
}

/// A registered event handler.
#[derive(Debug, Clone)]
pub struct EventHandler {
    /// Its name.
    pub name: String,
    /// The event location it listens to, as written.
    pub event: String,
    /// Where that is.
    pub source: Source,
    /// When to act (empty: always).
    pub condition: Option<String>,
    /// How `condition` is evaluated.
    pub evaluator: Evaluator,
    /// What to do, in order.
    pub actions: Vec<Action>,
    /// Listened to and matched only when active.
    pub active: bool,
}

fn invalid(path: impl Into<String>, message: impl Into<String>) -> ApiError {
    ApiError::invalid("invalid_event_handler", path, message)
}

fn string_field(map: &Map<String, Value>, key: &str) -> Result<Option<String>, ApiError> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(invalid(key, "must be a string")),
    }
}

impl EventHandler {
    /// Reads and checks a handler as registered (Conductor's JSON).
    pub fn from_json(json: &Value) -> Result<Self, ApiError> {
        let Value::Object(map) = json else {
            return Err(ApiError::bad_request(
                "invalid_event_handler",
                "an event handler must be a JSON object",
            ));
        };
        let name = string_field(map, "name")?
            .filter(|n| !n.trim().is_empty())
            .ok_or_else(|| invalid("name", "Missing event handler name"))?;
        if name.contains('/') {
            return Err(invalid("name", "must not contain '/'"));
        }
        let event = string_field(map, "event")?
            .filter(|e| !e.trim().is_empty())
            .ok_or_else(|| invalid("event", "Missing event location"))?;
        let source = Source::parse(&event).map_err(|m| invalid("event", m))?;
        if let Source::Conductor(rest) = &source {
            if !rest.contains(':') {
                return Err(invalid(
                    "event",
                    "a Conductor event is conductor:<workflow>:<name>",
                ));
            }
        }
        let condition = string_field(map, "condition")?.filter(|c| !c.trim().is_empty());
        let evaluator = match string_field(map, "evaluatorType")?.as_deref() {
            None | Some("javascript" | "graaljs") => Evaluator::JavaScript,
            Some("value-param") => Evaluator::ValueParam,
            Some(other) => {
                return Err(invalid(
                    "evaluatorType",
                    format!("{other:?}: Weft evaluates javascript, graaljs and value-param"),
                ))
            }
        };
        if let (Some(condition), Evaluator::JavaScript) = (&condition, evaluator) {
            script::check_syntax(condition).map_err(|e| invalid("condition", e.to_string()))?;
        }
        let active = match map.get("active") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err(invalid("active", "must be true or false")),
        };
        let actions = match map.get("actions") {
            Some(Value::Array(list)) if !list.is_empty() => list
                .iter()
                .enumerate()
                .map(|(i, a)| Action::from_json(a, &format!("actions[{i}]")))
                .collect::<Result<Vec<_>, _>>()?,
            None | Some(Value::Null) | Some(Value::Array(_)) => {
                return Err(invalid(
                    "actions",
                    "No actions specified. Please specify at-least one action",
                ))
            }
            Some(_) => return Err(invalid("actions", "must be a list")),
        };
        Ok(Self {
            name,
            event,
            source,
            condition,
            evaluator,
            actions,
            active,
        })
    }
}

impl Action {
    fn from_json(json: &Value, path: &str) -> Result<Self, ApiError> {
        let Value::Object(map) = json else {
            return Err(invalid(path, "an action must be a JSON object"));
        };
        let at = |field: &str| format!("{path}.{field}");
        let kind = match map.get("action").and_then(Value::as_str) {
            Some("start_workflow") => ActionKind::StartWorkflow,
            Some("complete_task") => ActionKind::CompleteTask,
            Some("fail_task") => ActionKind::FailTask,
            Some("terminate_workflow") => ActionKind::TerminateWorkflow,
            Some(other @ ("update_workflow_variables" | "start_agent")) => {
                return Err(invalid(
                    at("action"),
                    format!("{other} is not offered by Weft (docs/event-handlers.md)"),
                ))
            }
            Some(other) => {
                return Err(invalid(
                    at("action"),
                    format!(
                        "unknown action {other:?}: expected start_workflow, complete_task, \
                         fail_task or terminate_workflow"
                    ),
                ))
            }
            None => return Err(invalid(at("action"), "an action needs its type")),
        };
        let params = match map.get(kind.name()) {
            Some(Value::Object(params)) => params.clone(),
            None | Some(Value::Null) => Map::new(),
            Some(_) => return Err(invalid(at(kind.name()), "must be a JSON object")),
        };
        let field = |key: &str| format!("{path}.{}.{key}", kind.name());
        let given = |key: &str| params.get(key).is_some_and(|v| !v.is_null());
        match kind {
            ActionKind::StartWorkflow => {
                let named = params
                    .get("name")
                    .and_then(Value::as_str)
                    .is_some_and(|n| !n.is_empty());
                if !named {
                    return Err(invalid(field("name"), "the workflow to start is required"));
                }
                if given("version") && !params.get("version").is_some_and(Value::is_i64) {
                    return Err(invalid(field("version"), "must be an integer"));
                }
                if given("input") && !params.get("input").is_some_and(Value::is_object) {
                    return Err(invalid(field("input"), "must be a JSON object"));
                }
            }
            ActionKind::CompleteTask | ActionKind::FailTask => {
                let by_ref = given("workflowId") && given("taskRefName");
                if !(given("taskId") || by_ref) {
                    return Err(invalid(
                        field("taskId"),
                        "name the task: taskId, or workflowId and taskRefName",
                    ));
                }
                if given("output") && !params.get("output").is_some_and(Value::is_object) {
                    return Err(invalid(field("output"), "must be a JSON object"));
                }
            }
            ActionKind::TerminateWorkflow => {
                if !given("workflowId") {
                    return Err(invalid(
                        field("workflowId"),
                        "the run to terminate is required",
                    ));
                }
            }
        }
        let expand_inline_json = match map.get("expandInlineJSON") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err(invalid(at("expandInlineJSON"), "must be true or false")),
        };
        Ok(Self {
            kind,
            params,
            expand_inline_json,
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn path_of(json: Value) -> String {
        match EventHandler::from_json(&json) {
            Err(ApiError::BadRequest { path, .. }) => path.unwrap_or_default(),
            other => panic!("expected a 400, got {other:?}"),
        }
    }

    #[test]
    fn a_handler_is_read_with_conductors_defaults_and_refused_naming_the_field() {
        let h = EventHandler::from_json(&json!({
            "name": "h", "event": "amqp:q",
            "actions": [{"action": "start_workflow", "start_workflow": {"name": "w"}}]
        }))
        .unwrap();
        assert!(!h.active, "inactive unless given, as in Conductor");
        assert_eq!(h.evaluator, Evaluator::JavaScript);
        assert_eq!(path_of(json!({"event": "amqp:q", "actions": []})), "name");
        assert_eq!(path_of(json!({"name": "h", "actions": []})), "event");
        assert_eq!(path_of(json!({"name": "h", "event": "amqp:q"})), "actions");
        assert_eq!(
            path_of(
                json!({"name": "h", "event": "amqp:q", "condition": "$.a ==",
                "actions": [{"action": "start_workflow", "start_workflow": {"name": "w"}}]})
            ),
            "condition"
        );
        assert_eq!(
            path_of(json!({"name": "h", "event": "amqp:q",
                "actions": [{"action": "start_workflow", "start_workflow": {}}]})),
            "actions[0].start_workflow.name"
        );
        assert_eq!(
            path_of(json!({"name": "h", "event": "amqp:q",
                "actions": [{"action": "complete_task", "complete_task": {"workflowId": "x"}}]})),
            "actions[0].complete_task.taskId"
        );
        assert_eq!(
            path_of(json!({"name": "h", "event": "amqp:q",
                "actions": [{"action": "update_workflow_variables"}]})),
            "actions[0].action"
        );
    }
}
