//! What a handler does with one event: its condition decides, then each action runs in
//! order, its `${...}` parameters read from the event (Conductor's `SimpleActionProcessor`).
//!
//! Each action goes through the path its REST twin takes (a start as `POST /api/workflow`,
//! a task result as `POST /api/tasks` or `POST /api/tasks/{workflowId}/{ref}/{status}`, a
//! termination as `DELETE /api/workflow/{id}`), so the same rules apply. A refused action
//! (a 4xx) is recorded FAILED; a task that is gone or no longer pending is recorded
//! COMPLETED with the `error`, as Conductor does; a failed dependency (a 5xx) makes the
//! whole event go back to its queue ([`Transient`]), and redelivery repeats nothing that
//! took effect: a start's idempotency key is the handler, the message id and the action's
//! position, and a task result is taken once.

use serde_json::{json, Map, Value};
use weft::dsl::{expr, script};
use weft::store::event_handlers::NewEventExecution;

use super::model::{Action, ActionKind, Evaluator, EventHandler};
use crate::error::ApiError;
use crate::routes::start::{self, StartRequest};
use crate::state::AppState;

/// One event taken from a source.
#[derive(Debug, Clone)]
pub struct Event {
    /// The event location it came from (the handlers' `event`).
    pub event: String,
    /// Its body: JSON, or the text itself when it is not JSON (as in Conductor).
    pub payload: Value,
    /// The AMQP message id, when the publisher set one.
    pub message_id: Option<String>,
}

/// A dependency failed: the event goes back to its queue and is handled again.
#[derive(Debug)]
pub struct Transient(pub String);

/// Runs `handler` on `event`; returns what to record.
pub async fn run(
    state: &AppState,
    handler: &EventHandler,
    event: &Event,
) -> Result<Vec<NewEventExecution>, Transient> {
    let record = |action: Option<&str>, status: &str, output: Value| NewEventExecution {
        handler: handler.name.clone(),
        event: event.event.clone(),
        message_id: event.message_id.clone(),
        action: action.map(str::to_owned),
        status: status.to_owned(),
        output,
    };
    match matches(handler, &event.payload).await {
        Ok(true) => {}
        Ok(false) => {
            let condition = handler.condition.clone().unwrap_or_default();
            let output = json!({ "msg": "the condition did not match", "condition": condition });
            return Ok(vec![record(None, "SKIPPED", output)]);
        }
        Err(reason) => {
            let output = json!({ "exception": reason });
            return Ok(vec![record(None, "FAILED", output)]);
        }
    }
    let mut done = Vec::with_capacity(handler.actions.len());
    for (index, action) in handler.actions.iter().enumerate() {
        let (status, output) = match act(state, handler, event, index, action).await {
            Ok(output) => ("COMPLETED", output),
            Err(e) if is_transient(&e) => return Err(Transient(describe(&e))),
            Err(e @ (ApiError::NotFound(_) | ApiError::Conflict(_))) => {
                ("COMPLETED", json!({ "error": describe(&e) }))
            }
            Err(e) => ("FAILED", json!({ "exception": describe(&e) })),
        };
        done.push(record(Some(action.kind.name()), status, output));
    }
    Ok(done)
}

fn is_transient(e: &ApiError) -> bool {
    e.status().is_server_error()
}

fn describe(e: &ApiError) -> String {
    match e {
        ApiError::Internal(cause) => cause.to_string(),
        other => other.summary(),
    }
}

/// Whether the handler's condition holds for `payload` (no condition: always).
async fn matches(handler: &EventHandler, payload: &Value) -> Result<bool, String> {
    let Some(condition) = handler.condition.clone() else {
        return Ok(true);
    };
    let payload = expand_inline_json(payload.clone());
    match handler.evaluator {
        Evaluator::ValueParam => Ok(script::conductor_bool(
            payload.get(&condition).unwrap_or(&Value::Null),
        )),
        Evaluator::JavaScript => tokio::task::spawn_blocking(move || {
            script::evaluate_condition(&condition, &payload, script::Limits::default())
        })
        .await
        .map_err(|e| format!("the condition could not run: {e}"))?
        .map_err(|e| format!("the condition failed: {e}")),
    }
}

/// Conductor's `JsonUtils.expand`: string values that hold a JSON object or array become
/// that object or array, at any depth.
fn expand_inline_json(value: Value) -> Value {
    match value {
        Value::String(s) => {
            let trimmed = s.trim_start();
            if trimmed.starts_with('{') || trimmed.starts_with('[') {
                if let Ok(inner) = serde_json::from_str::<Value>(&s) {
                    return expand_inline_json(inner);
                }
            }
            Value::String(s)
        }
        Value::Array(items) => Value::Array(items.into_iter().map(expand_inline_json).collect()),
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| (k, expand_inline_json(v)))
                .collect(),
        ),
        other => other,
    }
}

/// Runs one action; its output on success.
async fn act(
    state: &AppState,
    handler: &EventHandler,
    event: &Event,
    index: usize,
    action: &Action,
) -> Result<Value, ApiError> {
    let payload = match action.expand_inline_json {
        true => expand_inline_json(event.payload.clone()),
        false => event.payload.clone(),
    };
    let resolved = expr::resolve(&Value::Object(action.params.clone()), &payload);
    let params = resolved.as_object().cloned().unwrap_or_default();
    let text = |key: &str| {
        params.get(key).and_then(|v| match v {
            Value::String(s) if !s.is_empty() => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        })
    };
    let mut marks = Map::new();
    if let Some(id) = &event.message_id {
        marks.insert("conductor.event.messageId".into(), json!(id));
    }
    marks.insert("conductor.event.name".into(), json!(event.event));
    match action.kind {
        ActionKind::StartWorkflow => {
            // As in Conductor, the name and version are taken as written.
            let literal = &action.params;
            let mut input = match params.get("input") {
                Some(Value::Object(input)) => input.clone(),
                _ => Map::new(),
            };
            input.extend(marks);
            let request = StartRequest {
                name: literal
                    .get("name")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                version: literal
                    .get("version")
                    .and_then(Value::as_i64)
                    .and_then(|v| i32::try_from(v).ok()),
                input,
                correlation_id: text("correlationId"),
                workflow_def: None,
                idempotency_key: event
                    .message_id
                    .as_ref()
                    .map(|id| format!("event:{}:{id}:{index}", handler.name)),
                priority: None,
                task_to_domain: start::task_domains(literal.get("taskToDomain").cloned())?,
            };
            let started = start::start_run(state, request).await?;
            Ok(json!({ "workflowId": started.workflow_id }))
        }
        ActionKind::CompleteTask | ActionKind::FailTask => {
            let status = match action.kind {
                ActionKind::FailTask => "FAILED",
                _ => "COMPLETED",
            };
            // Conductor's task output: the action's fields with its `output` spread in.
            let mut output = Map::new();
            for key in ["workflowId", "taskRefName", "taskId"] {
                if let Some(v) = text(key) {
                    output.insert(key.to_owned(), json!(v));
                }
            }
            if let Some(Value::Object(given)) = params.get("output") {
                output.extend(given.clone());
            }
            output.extend(marks);
            let reason = text("reasonForIncompletion")
                .or_else(|| Some(format!("failed by event handler {}", handler.name)))
                .filter(|_| action.kind == ActionKind::FailTask);
            let done = match (text("taskId"), text("workflowId"), text("taskRefName")) {
                (Some(task_id), _, _) => crate::routes::tasks::result::apply_status(
                    state,
                    &task_id,
                    status,
                    Value::Object(output),
                    reason,
                )
                .await?
                .to_string(),
                (None, Some(workflow_id), Some(task_ref)) => {
                    crate::routes::signal::complete_task_by_ref(
                        state,
                        &workflow_id,
                        &task_ref,
                        status,
                        None,
                        Value::Object(output),
                        reason,
                    )
                    .await?
                }
                _ => {
                    return Err(ApiError::invalid(
                        "invalid_event",
                        "taskId",
                        "the event gives no taskId, nor workflowId and taskRefName",
                    ))
                }
            };
            Ok(json!({ "updated": done }))
        }
        ActionKind::TerminateWorkflow => {
            let Some(workflow_id) = text("workflowId") else {
                return Err(ApiError::invalid(
                    "invalid_event",
                    "workflowId",
                    "the event gives no workflowId",
                ));
            };
            let reason = text("terminationReason")
                .unwrap_or_else(|| format!("terminated by event handler {}", handler.name));
            crate::routes::operations::terminate_run(state, &workflow_id, reason).await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_json_is_expanded_at_any_depth() {
        let payload = json!({"a": "{\"b\": \"[1, 2]\"}", "c": "not { json", "d": 1});
        assert_eq!(
            expand_inline_json(payload),
            json!({"a": {"b": [1, 2]}, "c": "not { json", "d": 1})
        );
    }
}
