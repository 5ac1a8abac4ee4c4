//! Task execution logs (Conductor's `TaskExecLog`): `POST /api/tasks/{taskId}/log` (a
//! text line) and `GET /api/tasks/{taskId}/log` (`[{log, taskId, createdTime}]`), kept in
//! `task_logs`; a `TaskResult` may carry lines too.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::Json;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;
use weft::store::task_api::TaskLog;
use weft::store::Store;

use super::view;
use crate::error::ApiError;
use crate::extract::Path;
use crate::state::AppState;

/// Most lines one request may append.
pub const MAX_LINES: usize = 1_000;

/// One log line as sent and answered.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LogLine {
    /// The text.
    #[serde(default)]
    pub log: Option<String>,
    /// The task (answers only; ignored when sent).
    #[serde(default)]
    pub task_id: Option<String>,
    /// Epoch milliseconds; now when not sent.
    #[serde(default)]
    pub created_time: Option<i64>,
}

/// Appends `lines` to the log of `task_id` (empty lines are skipped).
pub async fn append(store: &Store, task_id: Uuid, lines: &[LogLine]) -> Result<(), ApiError> {
    if lines.len() > MAX_LINES {
        return Err(ApiError::invalid(
            "too_many_lines",
            "logs",
            format!("{} log lines; at most {MAX_LINES} per request", lines.len()),
        ));
    }
    let now = Utc::now();
    let lines: Vec<TaskLog> = lines
        .iter()
        .filter_map(|l| {
            Some(TaskLog {
                log: l.log.clone().filter(|t| !t.is_empty())?,
                created_time: l.created_time.and_then(epoch_time).unwrap_or(now),
            })
        })
        .collect();
    Ok(store.append_task_logs(task_id, &lines).await?)
}

/// A sent `createdTime`: epoch milliseconds as Conductor means it, or seconds as the
/// Python SDK sends them (a value below 10^11 would be a millisecond time in 1973).
fn epoch_time(t: i64) -> Option<DateTime<Utc>> {
    const SECONDS_BELOW: i64 = 100_000_000_000;
    match t {
        t if t <= 0 => None,
        t if t < SECONDS_BELOW => DateTime::from_timestamp(t, 0),
        t => DateTime::from_timestamp_millis(t),
    }
}

/// The task id of a path, 404 when it names no task.
async fn known_task(state: &AppState, raw: &str) -> Result<Uuid, ApiError> {
    let unknown = || ApiError::NotFound(format!("task {raw} not found"));
    let id = Uuid::parse_str(raw).map_err(|_| unknown())?;
    view::load(&state.store, id).await?.ok_or_else(unknown)?;
    Ok(id)
}

/// `POST /api/tasks/{taskId}/log`: the body (text) is one line.
pub async fn add(
    State(state): State<AppState>,
    Path(raw): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<(), ApiError> {
    let body = body?;
    let text = String::from_utf8(body.to_vec())
        .map_err(|_| ApiError::bad_request("invalid_body", "the log line is not UTF-8 text"))?;
    if text.trim().is_empty() {
        return Err(ApiError::bad_request(
            "invalid_body",
            "the log line is empty",
        ));
    }
    let task_id = known_task(&state, &raw).await?;
    let line = LogLine {
        log: Some(text),
        task_id: None,
        created_time: None,
    };
    append(&state.store, task_id, &[line]).await
}

/// `GET /api/tasks/{taskId}/log`: the lines in the order they were appended.
pub async fn list(
    State(state): State<AppState>,
    Path(raw): Path<String>,
) -> Result<Json<Vec<LogLine>>, ApiError> {
    let task_id = known_task(&state, &raw).await?;
    let rows = state.store.task_logs(task_id).await?;
    Ok(Json(
        rows.into_iter()
            .map(|l| LogLine {
                log: Some(l.log),
                task_id: Some(task_id.to_string()),
                created_time: Some(l.created_time.timestamp_millis()),
            })
            .collect(),
    ))
}

#[cfg(test)]
mod tests {
    use super::epoch_time;

    #[test]
    fn created_times_are_read_as_milliseconds_or_as_the_seconds_python_sends() {
        let ms = 1_700_000_000_123;
        assert_eq!(epoch_time(ms).map(|t| t.timestamp_millis()), Some(ms));
        let s = 1_700_000_000;
        assert_eq!(epoch_time(s).map(|t| t.timestamp()), Some(s));
        assert_eq!(epoch_time(0), None);
        assert_eq!(epoch_time(-5), None);
    }
}
