//! Conductor's queue reads (`TaskResource`), answered from the broker: how many tasks of
//! a type wait for a worker (ready messages on `<ns>.activity.<taskType>`; a queue that
//! does not exist yet holds none), plus those waiting out a callback delay in a durable
//! timer before they go to it.
//!
//! - `GET /api/tasks/queue/sizes?taskType=a&taskType=b` → `{"a": 3, "b": 0}`
//! - `GET /api/tasks/queue/size?taskType=a` → `3`; `&domain=blue` counts the domain's
//!   queue (`blue:a`, docs/domains.md)
//! - `GET /api/tasks/queue/all` → every registered task definition's queue (and `HTTP`)

use std::collections::BTreeMap;

use axum::extract::{RawQuery, State};
use axum::Json;

use crate::error::ApiError;
use crate::extract::query_pairs;
use crate::state::AppState;

/// Task types named by the repeated `taskType` parameter, in order.
fn task_types(query: Option<&str>) -> Result<Vec<String>, ApiError> {
    let types: Vec<String> = query_pairs(query)?
        .into_iter()
        .filter(|(key, _)| key == "taskType")
        .map(|(_, value)| value)
        .collect();
    if types.iter().any(String::is_empty) {
        return Err(ApiError::invalid(
            "invalid_query",
            "taskType",
            "must not be empty",
        ));
    }
    Ok(types)
}

/// The tasks of each of `task_types` in its queue: the ready ones (0 when the queue does
/// not exist yet) and those waiting out a callback before they go to it, as Conductor
/// counts a postponed message (one read of the waiting ones for all the types).
async fn sizes_of(state: &AppState, task_types: Vec<String>) -> BTreeMap<String, u32> {
    let names = state.bus.names();
    // The activity exchange routes by task name (`HTTP` for HTTP tasks).
    let delayed = state
        .store
        .delayed_messages(&names.activity_exchange())
        .await
        .unwrap_or_default();
    let mut out = BTreeMap::new();
    for task_type in task_types {
        let queue = names.activity_queue(&task_type);
        let ready = state.bus.message_count(&queue).await.unwrap_or(0);
        let waiting = delayed.get(&task_type).copied().unwrap_or(0);
        let size = ready.saturating_add(u32::try_from(waiting).unwrap_or(u32::MAX));
        out.insert(task_type, size);
    }
    out
}

/// `GET /api/tasks/queue/sizes?taskType=…` (repeated).
pub async fn sizes(
    State(state): State<AppState>,
    RawQuery(query): RawQuery,
) -> Result<Json<BTreeMap<String, u32>>, ApiError> {
    Ok(Json(sizes_of(&state, task_types(query.as_deref())?).await))
}

/// The `domain` of a queue read (Conductor's), checked as a poll's; `None` without one.
/// Conductor's `isolationGroupId` and `executionNamespace` select queues Weft does not
/// have: refused rather than answered with another queue's size.
fn domain(query: Option<&str>) -> Result<Option<String>, ApiError> {
    let pairs = query_pairs(query)?;
    for field in ["isolationGroupId", "executionNamespace"] {
        if pairs.iter().any(|(k, v)| k == field && !v.is_empty()) {
            return Err(ApiError::invalid(
                "invalid_query",
                field,
                format!("{field} is not supported: Weft has no such queues"),
            ));
        }
    }
    let raw = pairs
        .into_iter()
        .find(|(k, _)| k == "domain")
        .map(|(_, d)| d);
    Ok(super::poll::domain_of(raw.as_deref())?.map(str::to_owned))
}

/// `GET /api/tasks/queue/size?taskType=…[&domain=…]`: one queue's size.
pub async fn one(
    State(state): State<AppState>,
    RawQuery(query): RawQuery,
) -> Result<Json<u32>, ApiError> {
    let domain = domain(query.as_deref())?;
    match task_types(query.as_deref())?.as_slice() {
        [task_type] => {
            let key = weft::topology::activity_key(task_type, domain.as_deref()).into_owned();
            let sizes = sizes_of(&state, vec![key]).await;
            Ok(Json(sizes.values().copied().next().unwrap_or(0)))
        }
        _ => Err(ApiError::invalid(
            "invalid_query",
            "taskType",
            "name one task type",
        )),
    }
}

/// `GET /api/tasks/queue/all`: the size of every registered task definition's queue, and
/// of `HTTP` (the built-in HTTP worker's).
pub async fn all(State(state): State<AppState>) -> Result<Json<BTreeMap<String, u32>>, ApiError> {
    let mut names: Vec<String> = state
        .store
        .list_task_defs()
        .await?
        .into_iter()
        .map(|d| d.name)
        .collect();
    names.push("HTTP".to_owned());
    Ok(Json(sizes_of(&state, names).await))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_task_types_are_read_and_decoded() {
        assert_eq!(
            task_types(Some("taskType=a&x=1&taskType=b%20c&taskType=d+e")).unwrap(),
            ["a", "b c", "d e"]
        );
        assert!(task_types(Some("taskType=%zz")).is_err());
        assert!(task_types(Some("taskType=")).is_err());
        assert!(task_types(None).unwrap().is_empty());
    }

    #[test]
    fn a_domain_is_read_as_a_poll_reads_it_and_other_queue_selectors_are_refused() {
        assert_eq!(
            domain(Some("taskType=a&domain=blue")).unwrap().as_deref(),
            Some("blue")
        );
        assert_eq!(domain(Some("taskType=a&domain=NO_DOMAIN")).unwrap(), None);
        assert_eq!(domain(Some("taskType=a")).unwrap(), None);
        assert!(domain(Some("domain=a%20b")).is_err());
        assert!(domain(Some("isolationGroupId=g")).is_err());
        assert!(domain(Some("executionNamespace=n")).is_err());
    }
}

/// Conductor's `PollData`.
#[derive(Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PollDataView {
    queue_name: String,
    domain: Option<String>,
    worker_id: String,
    last_poll_time: i64,
}

impl From<weft::store::poll_data::PollData> for PollDataView {
    fn from(p: weft::store::poll_data::PollData) -> Self {
        Self {
            queue_name: p.task_name,
            domain: (!p.domain.is_empty()).then_some(p.domain),
            worker_id: p.worker_id,
            last_poll_time: p.last_poll_time.timestamp_millis(),
        }
    }
}

/// `GET /api/tasks/queue/polldata?taskType=`: the last worker that took work of that type
/// (an HTTP poll, or a bus worker's claim) and when, to the second.
pub async fn poll_data(
    State(state): State<AppState>,
    RawQuery(query): RawQuery,
) -> Result<Json<Vec<PollDataView>>, ApiError> {
    let Some(task_type) = task_types(query.as_deref())?.into_iter().next() else {
        return Err(ApiError::invalid(
            "invalid_query",
            "taskType",
            "taskType is required",
        ));
    };
    let polls = state.store.poll_data(Some(&task_type)).await?;
    Ok(Json(polls.into_iter().map(PollDataView::from).collect()))
}

/// `GET /api/tasks/queue/polldata/all`: the poll data of every task type.
pub async fn all_poll_data(
    State(state): State<AppState>,
) -> Result<Json<Vec<PollDataView>>, ApiError> {
    let polls = state.store.poll_data(None).await?;
    Ok(Json(polls.into_iter().map(PollDataView::from).collect()))
}
