//! Conductor endpoints Weft does not offer, each answered 501 with a JSON body naming
//! the endpoint and saying why (docs/conductor.md has the whole table). Routing them
//! explicitly also keeps them from matching a Weft route by accident: without it,
//! `POST /api/workflow/test` would start a workflow named `test`.

use axum::extract::State;
use axum::http::Method;
use axum::routing::{on, MethodFilter};
use axum::Router;

use crate::error::ApiError;
use crate::state::AppState;

/// Why each family of endpoints is not offered.
const NO_EXTERNAL_STORAGE: &str = "Weft keeps payloads in its own store; there is no \
    external payload storage to locate";
const NO_TEST_RUNS: &str = "mocked test runs are not offered; run the definition with \
    `weft dev` and workers that return the mocked outputs";
const NO_TASK_SEARCH: &str = "task search is not offered; search runs with GET \
    /api/workflow/search and read their tasks";
const NO_TAGS: &str = "tags are an Orkes extension Weft does not offer";
const NO_ORKES: &str = "this is an Orkes Conductor extension that Weft does not offer";
const NO_ADMIN: &str = "Conductor's admin and queue-repair endpoints have no counterpart: \
    Weft's queues are RabbitMQ's, its runs are repaired by the decider's outbox and sweeper";
const NO_ENVIRONMENT: &str = "environment variables and secrets are not exposed over REST";
const NO_SCHEDULER: &str = "schedules are not offered yet";
const NO_QUEUE_DETAIL: &str = "per-shard queue detail has no counterpart: each task type \
    is one RabbitMQ queue (GET /api/tasks/queue/all has their sizes)";

const NO_REQUEUE: &str = "tasks never leave their RabbitMQ queue until a worker has \
    taken them, and an attempt whose worker went silent is timed out and retried by the \
    heartbeat service: there is nothing to requeue";

/// Every not-offered endpoint: methods, path, why.
const NOT_OFFERED: &[(&[&str], &str, &str)] = &[
    (
        &["GET"],
        "/api/workflow/externalstoragelocation",
        NO_EXTERNAL_STORAGE,
    ),
    (
        &["GET"],
        "/api/workflow/external-storage-location",
        NO_EXTERNAL_STORAGE,
    ),
    (
        &["GET"],
        "/api/tasks/externalstoragelocation",
        NO_EXTERNAL_STORAGE,
    ),
    (
        &["GET"],
        "/api/tasks/external-storage-location",
        NO_EXTERNAL_STORAGE,
    ),
    (&["POST"], "/api/workflow/test", NO_TEST_RUNS),
    (&["GET"], "/api/workflow/search-by-tasks", NO_TASK_SEARCH),
    (&["GET"], "/api/workflow/search-by-tasks-v2", NO_TASK_SEARCH),
    (&["GET"], "/api/tasks/search", NO_TASK_SEARCH),
    (&["GET"], "/api/tasks/search-v2", NO_TASK_SEARCH),
    (&["POST"], "/api/workflow/{id}/upgrade", NO_ORKES),
    (&["POST"], "/api/workflow/{id}/state", NO_ORKES),
    (&["POST"], "/api/workflow/{id}/jump/{task_ref}", NO_ORKES),
    (&["POST"], "/api/workflow/{id}/messages", NO_ORKES),
    (&["POST", "GET"], "/api/workflow/execute/{name}", NO_ORKES),
    (&["POST"], "/api/workflow/document-store/upload", NO_ORKES),
    (&["POST"], "/api/workflow/bulk/delete", NO_ORKES),
    (&["POST"], "/api/workflow/start/{name}/{version}", NO_ORKES),
    (
        &["GET", "PUT", "POST", "DELETE"],
        "/api/metadata/tags/workflow/{name}",
        NO_TAGS,
    ),
    (
        &["GET", "PUT", "POST", "DELETE"],
        "/api/metadata/workflow/{name}/tags",
        NO_TAGS,
    ),
    (
        &["GET", "PUT", "POST", "DELETE"],
        "/api/metadata/task/{name}/tags",
        NO_TAGS,
    ),
    (
        &["GET", "PUT", "POST", "DELETE"],
        "/api/event/{name}/tags",
        NO_TAGS,
    ),
    (
        &["GET", "PUT", "DELETE"],
        "/api/event/queue/config/{queue_type}/{queue_name}",
        NO_ORKES,
    ),
    (&["GET"], "/api/admin/config", NO_ADMIN),
    (&["POST"], "/api/admin/sweep/requeue/{id}", NO_ADMIN),
    (
        &["POST"],
        "/api/admin/consistency/verifyAndRepair/{id}",
        NO_ADMIN,
    ),
    (&["GET"], "/api/admin/queues", NO_ADMIN),
    (&["GET"], "/api/queue/size", NO_ADMIN),
    (&["GET"], "/api/queue/", NO_ADMIN),
    (
        &["POST"],
        "/api/queue/update/{id}/{task_ref}/{status}",
        NO_ADMIN,
    ),
    (
        &["POST"],
        "/api/queue/update/{id}/task/{task_id}/{status}",
        NO_ADMIN,
    ),
    (&["GET"], "/api/environment", NO_ENVIRONMENT),
    (&["GET"], "/api/environment/{key}", NO_ENVIRONMENT),
    (&["GET"], "/api/secrets", NO_ENVIRONMENT),
    (
        &["GET", "POST", "PUT", "DELETE"],
        "/api/scheduler/{*rest}",
        NO_SCHEDULER,
    ),
    (&["GET"], "/api/tasks/queue/all/verbose", NO_QUEUE_DETAIL),
    (
        &["POST"],
        "/api/tasks/queue/requeue/{task_type}",
        NO_REQUEUE,
    ),
];

/// The not-offered routes.
pub fn routes() -> Router<AppState> {
    NOT_OFFERED
        .iter()
        .fold(Router::new(), |router, (methods, path, why)| {
            let filter = methods
                .iter()
                .map(|m| method_filter(m))
                .reduce(MethodFilter::or)
                .unwrap_or(MethodFilter::GET);
            router.route(path, on(filter, move |method: Method, uri: axum::http::Uri, State(_): State<AppState>| async move {
                Err::<(), _>(ApiError::NotOffered(format!(
                    "{method} {} is not offered by Weft: {why}",
                    uri.path()
                )))
            }))
        })
}

fn method_filter(method: &str) -> MethodFilter {
    match method {
        "POST" => MethodFilter::POST,
        "PUT" => MethodFilter::PUT,
        "DELETE" => MethodFilter::DELETE,
        _ => MethodFilter::GET,
    }
}

/// Every not-offered endpoint as `(method, path)`, for the table in docs/conductor.md
/// and the test that keeps them answered.
pub fn endpoints() -> impl Iterator<Item = (&'static str, &'static str)> {
    NOT_OFFERED
        .iter()
        .flat_map(|(methods, path, _)| methods.iter().map(move |m| (*m, *path)))
}

/// Whether `method` on the route template `path` is one of the not-offered endpoints.
pub fn is_not_offered(method: &str, path: &str) -> bool {
    endpoints().any(|(m, p)| m == method && p == path)
}
