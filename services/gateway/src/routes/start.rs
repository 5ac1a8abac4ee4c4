//! Starting a workflow: resolve and check the definition, then commit the start and its
//! `StartWorkflow` command together (outbox) before answering, so an answered start is
//! never lost (DESIGN.md §3.1).

use std::time::Duration;

use serde_json::{Map, Value};
use weft::dsl::{self, validate::check_executable, WorkflowDef};
use weft::messages::{Command, StartWorkflow};
use weft::store::outbox::OutboxMessage;
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
    /// Conductor's priority, 0–99 (accepted and checked; not used for ordering yet).
    pub priority: Option<i32>,
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
    /// Reads a StartWorkflowRequest, naming the field at fault. Fields Weft does not use
    /// (`taskToDomain`, `createdBy`, …) are accepted and ignored, as Conductor clients
    /// send them.
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

/// Starts a run of the resolved definition and returns its workflow id (the first start's
/// id when the idempotency key was seen before).
pub async fn start(state: &AppState, request: StartRequest) -> Result<String, ApiError> {
    let definition = resolve(state, &request).await?;
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
    });
    let envelope = Envelope::new(&workflow_id, None, &command)?;
    let names = state.bus.names();
    let mut messages = vec![OutboxMessage::new(
        names.commands_exchange(),
        names.command_key_for(&workflow_id),
        &envelope,
        traceparent,
    )?];

    match state.store.accept_start(&start, &mut messages).await? {
        StartOutcome::Existing(existing) => {
            tracing::info!(workflow_id = %existing, "start repeated with the same idempotency key");
            return Ok(existing);
        }
        StartOutcome::Accepted => {}
    }
    tracing::info!(%workflow_id, name = %start.workflow_name, version = start.workflow_version, "workflow start accepted");

    // The start is committed: from here on a failure only delays it (the sweeper
    // re-publishes the outbox row), so it is logged and the id is answered.
    match tokio::time::timeout(
        PUBLISH_TIMEOUT,
        state.store.publish_outbox(&state.bus, &messages),
    )
    .await
    {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            tracing::warn!(%workflow_id, error = %e, "start command not published; the outbox sweeper will")
        }
        Err(_) => {
            tracing::warn!(%workflow_id, "start command publish timed out; the outbox sweeper will retry")
        }
    }
    Ok(workflow_id)
}
