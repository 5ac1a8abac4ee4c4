//! Synchronous execution (Conductor's `POST /api/workflow/execute/{name}/{version}`):
//! starts a run as `POST /api/workflow` does, then waits — without polling — until the
//! run ends, blocks on a WAIT task without a timer, or ends a task named in
//! `waitUntilTaskRef`, and answers the run as it then stands (a `WorkflowRun`); at the
//! deadline (`waitForSeconds`) it answers the run as it stands with `signalTimeout`.
//!
//! The wait is a transient request on the run's command shard (`WatchRun`): the decider
//! that applies the run's commands replies right after the commit that reaches the
//! point (docs/execute.md).

use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};
use chrono::Utc;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use weft::messages::{Command, RunReached, WatchReply, WatchRun};
use weft::Envelope;

use super::start::{self, StartRequest};
use crate::error::ApiError;
use crate::extract::{Path, Query};
use crate::state::AppState;

/// Conductor's default wait.
const DEFAULT_WAIT_SECONDS: u64 = 10;
/// The longest wait one request may ask for: a request holds a connection meanwhile.
pub const MAX_WAIT_SECONDS: u64 = 600;

/// The synchronous execution route.
pub fn routes() -> Router<AppState> {
    Router::new().route("/api/workflow/execute/{name}/{version}", post(execute))
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ExecuteQuery {
    request_id: Option<String>,
    wait_until_task_ref: Option<String>,
    wait_for_seconds: Option<i64>,
    /// Conductor's `DURABLE`/`SYNCHRONOUS`: every start is durable here.
    #[allow(dead_code)]
    consistency: Option<String>,
    return_strategy: Option<String>,
}

/// What the answer shows (Conductor's `WorkflowSignalReturnStrategy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReturnStrategy {
    /// The started run.
    TargetWorkflow,
    /// The run holding the blocking task: the started run (sub-workflows are not
    /// searched, docs/conductor.md).
    BlockingWorkflow,
    /// The task that answered the wait (`TaskRun`).
    BlockingTask,
    /// The same (Conductor renders both alike).
    BlockingTaskInput,
}

impl ReturnStrategy {
    /// Conductor's name (`TARGET_WORKFLOW` when absent); 400 naming `returnStrategy`.
    pub(crate) fn parse(text: Option<&str>) -> Result<Self, ApiError> {
        Ok(match text.unwrap_or("TARGET_WORKFLOW") {
            "TARGET_WORKFLOW" => Self::TargetWorkflow,
            "BLOCKING_WORKFLOW" => Self::BlockingWorkflow,
            "BLOCKING_TASK" => Self::BlockingTask,
            "BLOCKING_TASK_INPUT" => Self::BlockingTaskInput,
            other => {
                return Err(ApiError::invalid(
                    "invalid_query",
                    "returnStrategy",
                    format!(
                        "returnStrategy {other:?} is not one of TARGET_WORKFLOW, \
                         BLOCKING_WORKFLOW, BLOCKING_TASK, BLOCKING_TASK_INPUT"
                    ),
                ))
            }
        })
    }

    fn as_str(self) -> &'static str {
        match self {
            Self::TargetWorkflow => "TARGET_WORKFLOW",
            Self::BlockingWorkflow => "BLOCKING_WORKFLOW",
            Self::BlockingTask => "BLOCKING_TASK",
            Self::BlockingTaskInput => "BLOCKING_TASK_INPUT",
        }
    }
}

/// How the wait ended.
pub(crate) enum Waited {
    /// The decider says the run reached the point.
    Reached(RunReached),
    /// The deadline came first.
    TimedOut,
    /// The request could not be sent or answered; the run is read as it stands.
    Lost,
}

/// `POST /api/workflow/execute/{name}/{version}?requestId=&waitUntilTaskRef=a,b&waitForSeconds=&returnStrategy=`
/// with a StartWorkflowRequest (its name and version come from the path; version 0 is
/// the latest).
async fn execute(
    State(state): State<AppState>,
    Path((name, version)): Path<(String, i32)>,
    Query(q): Query<ExecuteQuery>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let strategy = ReturnStrategy::parse(q.return_strategy.as_deref())?;
    let wait = match q.wait_for_seconds {
        None | Some(0) => DEFAULT_WAIT_SECONDS,
        Some(s) if s < 0 => {
            return Err(ApiError::invalid(
                "invalid_query",
                "waitForSeconds",
                "waitForSeconds must not be negative",
            ))
        }
        Some(s) => (s as u64).min(MAX_WAIT_SECONDS),
    };
    let until: Vec<String> = q
        .wait_until_task_ref
        .as_deref()
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .map(str::to_owned)
        .collect();
    let request_id = q
        .request_id
        .filter(|r| !r.trim().is_empty())
        .unwrap_or_else(|| weft::ids::new_id().to_string());
    let body = body?;
    let json = if body.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else {
        crate::extract::parse_json::<Value>(&body)?
    };
    let mut request = StartRequest::from_json(json)?;
    request.name = Some(name);
    request.version = (version != 0).then_some(version);
    let priority = request.priority.unwrap_or(0);
    let workflow_id = start::start(&state, request).await?;

    let waited = wait_for(&state, &workflow_id, until, Duration::from_secs(wait)).await;
    respond(
        &state,
        &workflow_id,
        &waited,
        strategy,
        &request_id,
        priority,
    )
    .await
    .map(Json)
}

/// The answer once the wait is over: the run (or the task that answered) as it now
/// stands, in Conductor's `SignalResponse` shape.
pub(crate) async fn respond(
    state: &AppState,
    workflow_id: &str,
    waited: &Waited,
    strategy: ReturnStrategy,
    request_id: &str,
    priority: i32,
) -> Result<Value, ApiError> {
    let workflow = super::workflow::load(state, workflow_id, true).await?;
    let mut run = serde_json::to_value(workflow).map_err(weft::Error::from)?;
    let (task_ref, timed_out) = match waited {
        Waited::Reached(r) => (r.task_ref.clone(), false),
        Waited::TimedOut => (None, true),
        Waited::Lost => (None, false),
    };
    let mut answer = Map::new();
    answer.insert("responseType".into(), json!(strategy.as_str()));
    answer.insert("targetWorkflowId".into(), run["workflowId"].clone());
    answer.insert("targetWorkflowStatus".into(), run["status"].clone());
    answer.insert("requestId".into(), json!(request_id));
    answer.insert("priority".into(), json!(priority));
    if timed_out {
        answer.insert("signalTimeout".into(), json!(true));
    }
    let blocking_task = task_ref.as_deref().and_then(|r| latest_task(&run, r));
    match (strategy, blocking_task) {
        (ReturnStrategy::BlockingTask | ReturnStrategy::BlockingTaskInput, Some(task)) => {
            task_run(&mut answer, &run, task);
        }
        _ => workflow_run(&mut answer, &mut run),
    }
    Ok(Value::Object(answer))
}

/// Sends the run's watch and waits for the decider's reply, at most `wait`.
pub(crate) async fn wait_for(
    state: &AppState,
    workflow_id: &str,
    until_task_refs: Vec<String>,
    wait: Duration,
) -> Waited {
    let deadline = Utc::now() + chrono::Duration::from_std(wait).unwrap_or_default();
    let watch = Command::WatchRun(WatchRun {
        until_task_refs,
        deadline,
    });
    let envelope = match Envelope::new(workflow_id, None, &watch) {
        Ok(e) => e,
        Err(e) => {
            tracing::warn!(%workflow_id, error = %e, "watch not built");
            return Waited::Lost;
        }
    };
    let names = state.bus.names();
    let reply = state
        .bus
        .call(
            &names.commands_exchange(),
            &names.command_key_for(workflow_id),
            &envelope,
            wait,
        )
        .await;
    match reply {
        Ok(reply) => match reply.decode::<WatchReply>() {
            Ok(WatchReply::RunReached(reached)) => Waited::Reached(reached),
            Ok(other) => {
                tracing::warn!(%workflow_id, reply = ?other, "a watch answered with another reply");
                Waited::Lost
            }
            Err(e) => {
                tracing::warn!(%workflow_id, error = %e, "watch reply not understood");
                Waited::Lost
            }
        },
        Err(weft::Error::NoReply { .. }) => Waited::TimedOut,
        Err(e) => {
            tracing::warn!(%workflow_id, error = %e, "watch failed; answering the run as it stands");
            Waited::Lost
        }
    }
}

/// The newest task of `run` (a Workflow as JSON) with reference `task_ref` (the plain
/// reference: the JSON's carries a loop task's iteration).
fn latest_task<'a>(run: &'a Value, task_ref: &str) -> Option<&'a Value> {
    run["tasks"].as_array()?.iter().rev().find(|t| {
        let shown = t["referenceTaskName"].as_str().unwrap_or_default();
        shown == task_ref || crate::views::without_iteration(shown) == Some(task_ref)
    })
}

/// Conductor's `WorkflowRun` fields, from the Workflow.
fn workflow_run(answer: &mut Map<String, Value>, run: &mut Value) {
    for field in [
        "workflowId",
        "input",
        "output",
        "variables",
        "status",
        "createTime",
        "updateTime",
    ] {
        answer.insert(field.into(), run[field].take());
    }
    if let Some(c) = run["correlationId"].as_str() {
        answer.insert("correlationId".into(), json!(c));
    }
    answer.insert("tasks".into(), run["tasks"].take());
}

/// Conductor's `TaskRun` fields, from the task that answered the wait.
fn task_run(answer: &mut Map<String, Value>, run: &Value, task: &Value) {
    let fields = [
        ("workflowId", "workflowInstanceId"),
        ("input", "inputData"),
        ("output", "outputData"),
        ("taskType", "taskType"),
        ("taskId", "taskId"),
        ("referenceTaskName", "referenceTaskName"),
        ("retryCount", "retryCount"),
        ("taskDefName", "taskDefName"),
        ("workflowType", "workflowType"),
        ("status", "status"),
        ("createTime", "startTime"),
        ("updateTime", "updateTime"),
    ];
    for (to, from) in fields {
        answer.insert(to.into(), task[from].clone());
    }
    for (to, from) in [
        ("reasonForIncompletion", "reasonForIncompletion"),
        ("createdBy", "workerId"),
    ] {
        if !task[from].is_null() {
            answer.insert(to.into(), task[from].clone());
        }
    }
    if let Some(c) = run["correlationId"].as_str() {
        answer.insert("correlationId".into(), json!(c));
    }
}
