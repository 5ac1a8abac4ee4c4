//! `GET /api/metadata/workflow/{name}/stats?since=&version=&limit=`: what a definition's
//! recent runs look like: count by status, and p50/p95/p99 of duration and of input and
//! output sizes. A Weft extension (docs/graph.md, "Statistics").

use std::collections::BTreeMap;

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use chrono::{DateTime, Duration, TimeZone, Utc};
use serde::{Deserialize, Serialize};
use weft::store::stats::Percentiles;

use crate::error::ApiError;
use crate::extract::{Path, Query};
use crate::state::AppState;

/// The window when the caller gives no `since`.
const DEFAULT_WINDOW: Duration = Duration::hours(24);
/// Runs summarised when the caller gives no `limit`.
const DEFAULT_LIMIT: i64 = 10_000;
/// Most runs summarised in one request.
const MAX_LIMIT: i64 = 100_000;

/// The statistics route.
pub fn routes() -> Router<AppState> {
    Router::new().route("/api/metadata/workflow/{name}/stats", get(get_stats))
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct StatsQuery {
    since: Option<i64>,
    version: Option<i32>,
    limit: Option<i64>,
}

/// The answer.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatsView {
    name: String,
    version: Option<i32>,
    /// Epoch ms: runs started at or after it count.
    since: i64,
    /// The newest `limit` runs of the window at most are summarised.
    limit: i64,
    count: i64,
    by_status: BTreeMap<String, i64>,
    /// Of the runs that ended; `null` when none did.
    duration_ms: Option<Percentiles>,
    input_bytes: Option<Percentiles>,
    /// Of the runs that have an output.
    output_bytes: Option<Percentiles>,
}

async fn get_stats(
    State(state): State<AppState>,
    Path(name): Path<String>,
    Query(q): Query<StatsQuery>,
) -> Result<Json<StatsView>, ApiError> {
    let since: DateTime<Utc> = match q.since {
        None => Utc::now() - DEFAULT_WINDOW,
        Some(ms) => Utc.timestamp_millis_opt(ms).single().ok_or_else(|| {
            ApiError::invalid("invalid_query", "since", "since must be epoch milliseconds")
        })?,
    };
    let limit = q.limit.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(ApiError::invalid(
            "invalid_query",
            "limit",
            format!("limit must be between 1 and {MAX_LIMIT}"),
        ));
    }
    let stats = state
        .store
        .run_stats(&name, q.version, since, limit)
        .await?;
    Ok(Json(StatsView {
        name,
        version: q.version,
        since: since.timestamp_millis(),
        limit,
        count: stats.count,
        by_status: stats.by_status,
        duration_ms: stats.duration_ms,
        input_bytes: stats.input_bytes,
        output_bytes: stats.output_bytes,
    }))
}
