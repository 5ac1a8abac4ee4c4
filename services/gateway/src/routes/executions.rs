//! Conductor's execution lookups and removal (`WorkflowResource`): runs by correlation id
//! (one, many, and the batch form Conductor's SDKs call), the running workflow ids of a
//! definition, a run's tasks page by page, and the removal of an ended workflow.

use std::collections::HashMap;

use axum::extract::State;
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use chrono::DateTime;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use weft::store::executions::{Removal, RunningFilter, MAX_LOOKUP};
use weft::store::reads::RunView;

use crate::error::ApiError;
use crate::extract::{query_pairs, JsonBody, Path, Query};
use crate::state::AppState;
use crate::views::{Task, Workflow};

/// The execution routes.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/workflow/{id}/correlated", post(correlated_many))
        .route(
            "/api/workflow/{id}/correlated/{correlation_id}",
            get(correlated_one),
        )
        .route("/api/workflow/correlated/batch", post(correlated_batch))
        .route("/api/workflow/running/{name}", get(running))
        .route("/api/workflow/{id}/remove", delete(remove))
        .route(
            "/api/workflow/{id}/terminate-remove",
            delete(terminate_remove),
        )
        .route("/api/workflow/{id}/tasks", get(tasks_page))
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CorrelatedQuery {
    #[serde(default, deserialize_with = "crate::extract::lenient_bool")]
    include_closed: bool,
    #[serde(default, deserialize_with = "crate::extract::lenient_bool")]
    include_tasks: bool,
}

/// `GET /api/workflow/{name}/correlated/{correlationId}?includeClosed=&includeTasks=`:
/// the runs of definition `name` with that correlation id (RUNNING ones unless
/// `includeClosed`), the newest first.
async fn correlated_one(
    State(state): State<AppState>,
    Path((name, correlation_id)): Path<(String, String)>,
    Query(q): Query<CorrelatedQuery>,
) -> Result<Json<Vec<Workflow>>, ApiError> {
    let mut by_id = lookup(&state, &[name], vec![correlation_id.clone()], &q).await?;
    Ok(Json(by_id.remove(&correlation_id).unwrap_or_default()))
}

/// `POST /api/workflow/{name}/correlated?includeClosed=&includeTasks=` with a JSON array
/// of correlation ids: `{correlationId: [Workflow]}`, one key for every id asked for.
async fn correlated_many(
    State(state): State<AppState>,
    Path(name): Path<String>,
    Query(q): Query<CorrelatedQuery>,
    JsonBody(ids): JsonBody<Value>,
) -> Result<Json<HashMap<String, Vec<Workflow>>>, ApiError> {
    let ids = string_list(ids, "correlationIds")?;
    lookup(&state, &[name], ids, &q).await.map(Json)
}

/// Conductor's `CorrelationIdsSearchRequest`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct BatchRequest {
    #[serde(default)]
    correlation_ids: Value,
    #[serde(default)]
    workflow_names: Value,
}

/// `POST /api/workflow/correlated/batch` with `{correlationIds, workflowNames}`: the runs
/// of any of those definitions with any of those correlation ids, by correlation id.
async fn correlated_batch(
    State(state): State<AppState>,
    Query(q): Query<CorrelatedQuery>,
    JsonBody(request): JsonBody<BatchRequest>,
) -> Result<Json<HashMap<String, Vec<Workflow>>>, ApiError> {
    let ids = string_list(request.correlation_ids, "correlationIds")?;
    let names = string_list(request.workflow_names, "workflowNames")?;
    lookup(&state, &names, ids, &q).await.map(Json)
}

/// A JSON array of strings, named `field` in the error.
fn string_list(value: Value, field: &str) -> Result<Vec<String>, ApiError> {
    let invalid = || {
        ApiError::invalid(
            "invalid_field",
            field,
            format!("{field} must be a JSON array of strings"),
        )
    };
    let Value::Array(items) = value else {
        return Err(invalid());
    };
    let list: Vec<String> = items
        .into_iter()
        .map(|v| match v {
            Value::String(s) => Ok(s),
            _ => Err(invalid()),
        })
        .collect::<Result<_, _>>()?;
    if list.len() > MAX_LOOKUP as usize {
        return Err(ApiError::invalid(
            "invalid_field",
            field,
            format!("{field} holds {} items; at most {MAX_LOOKUP}", list.len()),
        ));
    }
    Ok(list)
}

/// The runs of `names` with `ids`, grouped by correlation id (every id a key).
async fn lookup(
    state: &AppState,
    names: &[String],
    ids: Vec<String>,
    q: &CorrelatedQuery,
) -> Result<HashMap<String, Vec<Workflow>>, ApiError> {
    let mut by_id: HashMap<String, Vec<Workflow>> =
        ids.iter().map(|id| (id.clone(), Vec::new())).collect();
    if ids.is_empty() {
        return Ok(by_id);
    }
    for name in names {
        let runs = state
            .store
            .runs_by_correlation(name, &ids, q.include_closed)
            .await?;
        for run in runs {
            let Some(correlation_id) = run.correlation_id.clone() else {
                continue;
            };
            let workflow = with_tasks(state, run, q.include_tasks).await?;
            by_id.entry(correlation_id).or_default().push(workflow);
        }
    }
    Ok(by_id)
}

async fn with_tasks(state: &AppState, run: RunView, include: bool) -> Result<Workflow, ApiError> {
    let tasks = match include {
        true => state.store.tasks_of_run(run.run_id).await?,
        false => Vec::new(),
    };
    Ok(Workflow::from_run(run, tasks))
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RunningQuery {
    version: Option<i32>,
    start_time: Option<i64>,
    end_time: Option<i64>,
}

/// `GET /api/workflow/running/{name}?version=&startTime=&endTime=`: the ids of the
/// RUNNING runs of `name` at `version` (1 unless given, as Conductor's REST layer
/// defaults it), or — when both times (epoch ms) are given and not 0 — of its runs
/// started in that window, whatever their status.
async fn running(
    State(state): State<AppState>,
    Path(name): Path<String>,
    Query(q): Query<RunningQuery>,
) -> Result<Json<Vec<String>>, ApiError> {
    let filter = match (q.start_time, q.end_time) {
        (Some(from), Some(to)) if from != 0 && to != 0 => RunningFilter::StartedBetween {
            from: epoch_ms(from, "startTime")?,
            to: epoch_ms(to, "endTime")?,
        },
        _ => RunningFilter::Running,
    };
    let version = q.version.unwrap_or(1);
    Ok(Json(
        state
            .store
            .running_workflow_ids(&name, version, &filter)
            .await?,
    ))
}

fn epoch_ms(ms: i64, field: &str) -> Result<DateTime<chrono::Utc>, ApiError> {
    DateTime::from_timestamp_millis(ms).ok_or_else(|| {
        ApiError::invalid(
            "invalid_query",
            field,
            format!("{field} {ms} is not a time in epoch milliseconds"),
        )
    })
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RemoveQuery {
    /// Conductor keeps an archived copy in its index; Weft has no index apart from the
    /// runs, so the workflow is removed either way (docs/conductor.md).
    #[serde(default, deserialize_with = "crate::extract::lenient_opt_bool")]
    #[allow(dead_code)]
    archive_workflow: Option<bool>,
    reason: Option<String>,
}

/// `DELETE /api/workflow/{id}/remove?archiveWorkflow=`: removes a workflow whose run has
/// ended, with its history, tasks and every earlier run of its reset chain: 200; 409
/// while it runs; 404 for an unknown id.
async fn remove(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(_q): Query<RemoveQuery>,
) -> Result<(), ApiError> {
    remove_one(&state, &id).await
}

/// Removes workflow `id` when its run has ended (see [`remove`]).
pub(crate) async fn remove_one(state: &AppState, id: &str) -> Result<(), ApiError> {
    match state.store.remove_workflow(id).await? {
        Removal::Removed => {
            tracing::info!(workflow_id = %id, "workflow removed");
            Ok(())
        }
        Removal::NotFound => Err(ApiError::NotFound(format!("workflow {id} not found"))),
        Removal::NotEnded { status } => Err(ApiError::Conflict(format!(
            "workflow {id} is {status}; only a workflow that has ended can be removed \
             (terminate it first, or use DELETE /api/workflow/{id}/terminate-remove)"
        ))),
    }
}

/// `DELETE /api/workflow/{id}/terminate-remove?reason=&archiveWorkflow=`: terminates the
/// run when it has not ended, then removes the workflow.
async fn terminate_remove(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(q): Query<RemoveQuery>,
) -> Result<(), ApiError> {
    terminate_and_remove(&state, &id, q.reason).await
}

/// Terminates workflow `id` when it has not ended (with `reason`), then removes it.
pub(crate) async fn terminate_and_remove(
    state: &AppState,
    id: &str,
    reason: Option<String>,
) -> Result<(), ApiError> {
    match state.store.remove_workflow(id).await? {
        // Ended already: removed by the call that found it so (it used to be looked for
        // again, and answered 404).
        Removal::Removed => {
            tracing::info!(workflow_id = %id, "workflow removed");
            Ok(())
        }
        Removal::NotFound => Err(ApiError::NotFound(format!("workflow {id} not found"))),
        Removal::NotEnded { .. } => {
            let reason = reason
                .filter(|r| !r.trim().is_empty())
                .unwrap_or_else(|| "terminated by an operator before its removal".to_owned());
            let answer = super::operations::terminate_run(state, id, reason).await?;
            if answer.get("requestId").is_some() {
                return Err(ApiError::Unavailable(format!(
                    "workflow {id}: the terminate is queued but no decider applied it in \
                     time; it was not removed"
                )));
            }
            remove_one(state, id).await
        }
    }
}

/// `GET /api/workflow/{id}/tasks?start=0&count=15&status=`: a page of the current run's
/// tasks (optionally of some statuses) as `{totalHits, results}`.
async fn tasks_page(
    State(state): State<AppState>,
    Path(id): Path<String>,
    axum::extract::RawQuery(raw): axum::extract::RawQuery,
) -> Result<Json<Value>, ApiError> {
    let pairs = query_pairs(raw.as_deref())?;
    let (mut start, mut count) = (None, None);
    let mut statuses: Vec<String> = Vec::new();
    for (key, value) in pairs {
        let number = |v: &str| {
            v.parse::<i64>().map_err(|_| {
                ApiError::invalid(
                    "invalid_query",
                    key.clone(),
                    format!("{key} must be an integer"),
                )
            })
        };
        match key.as_str() {
            "start" => start = Some(number(&value)?),
            "count" => count = Some(number(&value)?),
            "status" => statuses.extend(
                value
                    .split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned),
            ),
            _ => {}
        }
    }
    // Repeated (`status=A&status=B`) or comma-separated statuses.
    let start = start.unwrap_or(0).max(0) as usize;
    let count = count.unwrap_or(15).clamp(0, MAX_LOOKUP) as usize;
    let page = state
        .store
        .current_run_tasks_page(&id, &statuses, start as i64, count as i64)
        .await?;
    let Some((run, total, tasks)) = page else {
        if state.store.get_start(&id).await?.is_some() {
            return Ok(Json(json!({"totalHits": 0, "results": []})));
        }
        return Err(ApiError::NotFound(format!("workflow {id} not found")));
    };
    let results: Vec<Task> = tasks
        .into_iter()
        .map(|t| Task::from_row(t, &run.workflow_name))
        .collect();
    let mut page = Map::new();
    page.insert("totalHits".into(), json!(total));
    page.insert(
        "results".into(),
        serde_json::to_value(results).map_err(weft::Error::from)?,
    );
    Ok(Json(Value::Object(page)))
}
