//! Conductor's pending-tasks query (`AdminResource`, `GET /api/admin/task/{tasktype}`):
//! the HUMAN and WAIT tasks waiting for a person or a signal, the oldest first. Activity
//! types wait in their queues instead (`GET /api/tasks/queue/sizes` counts them).

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;
use weft::store::executions::PENDING_LISTED;

use crate::error::ApiError;
use crate::extract::{Path, Query};
use crate::state::AppState;
use crate::views::Task;

/// Most tasks one page holds.
const MAX_COUNT: i64 = 1_000;

/// The admin routes.
pub fn routes() -> Router<AppState> {
    Router::new().route("/api/admin/task/{task_type}", get(pending))
}

#[derive(Debug, Deserialize)]
struct PendingQuery {
    start: Option<i64>,
    count: Option<i64>,
}

/// `GET /api/admin/task/{tasktype}?start=0&count=100`: pending (SCHEDULED or IN_PROGRESS)
/// HUMAN or WAIT tasks as Conductor's `Task`s; 501 for other types.
async fn pending(
    State(state): State<AppState>,
    Path(task_type): Path<String>,
    Query(q): Query<PendingQuery>,
) -> Result<Json<Vec<Task>>, ApiError> {
    if !PENDING_LISTED.contains(&task_type.as_str()) {
        return Err(ApiError::NotOffered(format!(
            "GET /api/admin/task/{task_type} is not offered by Weft: pending tasks are listed \
             for {} tasks; activities wait in their queues (GET /api/tasks/queue/sizes \
             counts them)",
            PENDING_LISTED.join(" and ")
        )));
    }
    let start = q.start.unwrap_or(0).max(0);
    let count = q.count.unwrap_or(100).clamp(0, MAX_COUNT);
    let tasks = state.store.pending_tasks(&task_type, start, count).await?;
    // `workflowType` needs the run's name: one read per distinct run of the page.
    let mut names = std::collections::HashMap::new();
    let mut out = Vec::with_capacity(tasks.len());
    for task in tasks {
        if !names.contains_key(&task.workflow_id) {
            let name = state
                .store
                .current_run(&task.workflow_id)
                .await?
                .map(|r| r.workflow_name)
                .unwrap_or_default();
            names.insert(task.workflow_id.clone(), name);
        }
        let name = names[&task.workflow_id].clone();
        out.push(Task::from_row(task, &name));
    }
    Ok(Json(out))
}
