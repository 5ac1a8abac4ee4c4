//! `GET /api/workflow/search?start=&size=&query=&freeText=`: Conductor's search over the
//! current run of each workflow, newest first, answered `{totalHits, results}` with
//! Conductor's `WorkflowSummary` (times as ISO-8601 UTC strings, input and output as
//! JSON text, as Conductor does). The query subset is `weft::store::search`'s.

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};
use weft::store::search::{self, Search, SearchHit};

use crate::error::ApiError;
use crate::extract::Query;
use crate::state::AppState;

/// Results per page when the caller does not say (Conductor's default).
const DEFAULT_SIZE: i64 = 100;
/// Largest page served.
const MAX_SIZE: i64 = 1_000;
/// Deepest offset served: deeper pages cost a scan; narrow the query instead.
const MAX_START: i64 = 100_000;

/// The search route. A static path: axum prefers it over `/api/workflow/{id}`.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/workflow/search", get(search_workflows))
        .route("/api/workflow/search-v2", get(search_full))
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SearchQuery {
    start: Option<i64>,
    size: Option<i64>,
    query: Option<String>,
    free_text: Option<String>,
}

/// Conductor's `SearchResult<WorkflowSummary>`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SearchResult {
    /// Matches, counted up to `weft::store::search::MAX_COUNTED_HITS`.
    pub total_hits: i64,
    /// This page.
    pub results: Vec<WorkflowSummary>,
}

/// Conductor's `WorkflowSummary` (plus Weft's `runId` and `subStatus`).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowSummary {
    workflow_type: String,
    version: i32,
    workflow_id: String,
    run_id: String,
    correlation_id: Option<String>,
    start_time: String,
    update_time: String,
    end_time: Option<String>,
    status: String,
    sub_status: String,
    input: String,
    output: String,
    reason_for_incompletion: Option<String>,
    execution_time: i64,
    event: String,
    failed_reference_task_names: String,
    failed_task_names: Vec<String>,
    priority: i32,
    created_by: Option<String>,
    task_to_domain: serde_json::Map<String, serde_json::Value>,
    input_size: i64,
    output_size: i64,
    parent_workflow_id: Option<String>,
}

fn iso(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

impl From<SearchHit> for WorkflowSummary {
    fn from(hit: SearchHit) -> Self {
        let run = hit.run;
        let execution_time = run
            .end_time
            .map_or(0, |end| (end - run.start_time).num_milliseconds());
        Self {
            workflow_type: run.workflow_name,
            version: run.workflow_version,
            workflow_id: run.workflow_id,
            run_id: run.run_id.to_string(),
            correlation_id: run.correlation_id,
            start_time: iso(run.start_time),
            update_time: iso(run.update_time),
            end_time: run.end_time.map(iso),
            status: run.status,
            sub_status: run.sub_status,
            input: run.input.to_string(),
            output: run
                .output
                .unwrap_or_else(|| serde_json::json!({}))
                .to_string(),
            reason_for_incompletion: run.reason,
            execution_time,
            event: String::new(),
            failed_reference_task_names: run.failed_task_refs.join(","),
            failed_task_names: run.failed_task_refs,
            priority: 0,
            created_by: None,
            task_to_domain: serde_json::Map::new(),
            input_size: hit.input_bytes.map_or(0, i64::from),
            output_size: hit.output_bytes.map_or(0, i64::from),
            parent_workflow_id: run.parent_workflow_id,
        }
    }
}

async fn search_workflows(
    State(state): State<AppState>,
    Query(q): Query<SearchQuery>,
) -> Result<Json<SearchResult>, ApiError> {
    let (total_hits, hits) = run_search(&state, q).await?;
    Ok(Json(SearchResult {
        total_hits,
        results: hits.into_iter().map(WorkflowSummary::from).collect(),
    }))
}

/// `GET /api/workflow/search-v2`: the same search, each hit the whole `Workflow` (its
/// tasks included, as Conductor's `SearchResult<Workflow>`).
async fn search_full(
    State(state): State<AppState>,
    Query(q): Query<SearchQuery>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let (total_hits, hits) = run_search(&state, q).await?;
    let mut results = Vec::with_capacity(hits.len());
    for hit in hits {
        let tasks = state.store.tasks_of_run(hit.run.run_id).await?;
        results.push(crate::views::Workflow::from_run(hit.run, tasks));
    }
    Ok(Json(serde_json::json!({
        "totalHits": total_hits,
        "results": serde_json::to_value(results).map_err(weft::Error::from)?,
    })))
}

/// The total and one page of the runs `q` selects.
async fn run_search(state: &AppState, q: SearchQuery) -> Result<(i64, Vec<SearchHit>), ApiError> {
    let start = q.start.unwrap_or(0);
    if !(0..=MAX_START).contains(&start) {
        return Err(ApiError::invalid(
            "invalid_query",
            "start",
            format!("start must be between 0 and {MAX_START}"),
        ));
    }
    let size = q.size.unwrap_or(DEFAULT_SIZE);
    if !(0..=MAX_SIZE).contains(&size) {
        return Err(ApiError::invalid(
            "invalid_query",
            "size",
            format!("size must be between 0 and {MAX_SIZE}"),
        ));
    }
    let filters = search::parse_query(q.query.as_deref().unwrap_or_default())
        .map_err(|e| ApiError::invalid("invalid_query", "query", e.to_string()))?;
    let search = Search {
        filters,
        free_text: q.free_text,
        start,
        size,
    };
    Ok(state.store.search_runs(&search).await?)
}
