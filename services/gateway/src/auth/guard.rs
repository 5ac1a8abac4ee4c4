//! The middleware every request passes: who is calling ([`super::verify`]), may they
//! ([`super::scopes`]), and the audit row of a change.

use axum::body::Body;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderMap, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use weft::store::auth::AuditEntry;

use super::principal::Principal;
use super::scopes::{is_known_route, need_of, Audit, Need, Scope};
use super::verify::{token_of, AuthError};
use crate::error::ApiError;
use crate::state::AppState;

tokio::task_local! {
    /// The audit row's who, method and path, while a handler that audits in its own
    /// transaction (a start) runs for an authenticated caller.
    static REQUEST_AUDIT: AuditEntry;
}

/// The audit row of the request being handled, when its handler audits in its own
/// transaction and the caller is known; its action, target and workflow are the
/// handler's to fill in.
pub fn request_audit() -> Option<AuditEntry> {
    REQUEST_AUDIT.try_with(Clone::clone).ok()
}

/// Authenticates, authorizes and audits one request.
pub async fn guard(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    let template = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned());
    let method = req.method().clone();
    let Some((need, audit)) = need_of(method.as_str(), template.as_deref()) else {
        // A known route with another method: 405, as the router answers it, and also
        // what a handler added under a new method without a rule gets (never served).
        if template.as_deref().is_some_and(is_known_route) {
            return ApiError::MethodNotAllowed(format!(
                "{method} is not allowed on {}",
                req.uri().path()
            ))
            .into_response();
        }
        return ApiError::Forbidden(format!(
            "{method} {} has no scope rule, so it is refused to everyone",
            template.as_deref().unwrap_or("?")
        ))
        .into_response();
    };
    let principal = if state.auth.enabled() && need != Need::Open {
        let secret = token_of(req.headers()).map(str::to_owned);
        let what = format!("{method} {}", req.uri().path());
        match authorize(&state, secret, need, what).await {
            Ok(p) => Some(p),
            Err(e) => return e.into_response(),
        }
    } else {
        None
    };
    if let Some(p) = &principal {
        // An unmatched path is answered 404, whoever asks.
        if template.is_some() {
            if let Err(e) = confine_worker(&state, p, need, &mut req).await {
                return e.into_response();
            }
        }
        req.extensions_mut().insert(p.clone());
    }
    if audit == Audit::No || (audit == Audit::InTransaction && principal.is_none()) {
        return next.run(req).await;
    }
    let entry = AuditEntry {
        at: Utc::now(),
        actor: principal.as_ref().map(|p| p.name.clone()),
        action: String::new(),
        target: None,
        workflow_id: None,
        reason: None,
        status: None,
        method: method.to_string(),
        path: req.uri().path().to_owned(),
    };
    let Audit::After(action) = audit else {
        return REQUEST_AUDIT.scope(entry, next.run(req)).await;
    };
    let params = path_params(&mut req).await;
    let reason = reason_of(req.uri());
    // A definition, task definition or event handler is named in its body, not its path.
    let named_in_body = if params.is_empty() && *req.method() != Method::DELETE {
        match names_in_body(&state, &mut req).await {
            Ok(names) => names,
            Err(e) => return e.into_response(),
        }
    } else {
        None
    };
    let response = next.run(req).await;
    let workflow_id = params
        .iter()
        .find(|(k, _)| matches!(k.as_str(), "id" | "workflow_id"))
        .filter(|_| {
            entry.path.starts_with("/api/workflow/") || entry.path.starts_with("/api/tasks/")
        })
        .map(|(_, v)| v.clone());
    let entry = AuditEntry {
        action: action.to_owned(),
        target: params.first().map(|(_, v)| v.clone()).or(named_in_body),
        workflow_id,
        reason,
        status: Some(i32::from(response.status().as_u16())),
        at: Utc::now(),
        ..entry
    };
    if let Err(e) = state.store.record_audit(&entry).await {
        // The change happened; losing its row is logged loudly, not answered as
        // a failure the caller would retry.
        tracing::error!(error = %e, action, path = %entry.path, "audit row not written");
    }
    response
}

/// `/metrics` needs a `read` token when so configured (`WEFT_METRICS_AUTH=on`);
/// `/healthz` and `/readyz` stay open.
pub async fn metrics_guard(State(state): State<AppState>, req: Request, next: Next) -> Response {
    if req.uri().path() == "/metrics" && state.auth.metrics_need_token() {
        let what = format!("{} /metrics", req.method());
        if let Err(e) = authenticate(&state, req.headers(), what, Need::Any(&[Scope::Read])).await {
            return e.into_response();
        }
    }
    next.run(req).await
}

/// The caller, when auth is on and the route is not open; 401 or 403 otherwise.
async fn authenticate(
    state: &AppState,
    headers: &HeaderMap,
    what: String,
    need: Need,
) -> Result<Option<Principal>, ApiError> {
    if !state.auth.enabled() || need == Need::Open {
        return Ok(None);
    }
    let secret = token_of(headers).map(str::to_owned);
    authorize(state, secret, need, what).await.map(Some)
}

/// The principal `secret` stands for, if it meets `need` (to do `what`).
async fn authorize(
    state: &AppState,
    secret: Option<String>,
    need: Need,
    what: String,
) -> Result<Principal, ApiError> {
    let Some(secret) = secret else {
        return Err(AuthError::Missing.into());
    };
    let principal = state.auth.principal(&state.store, &secret).await?;
    if !principal.meets(need) {
        let Need::Any(scopes) = need else {
            unreachable!("open and authenticated needs are met by every principal")
        };
        let names: Vec<&str> = scopes.iter().map(|s| s.as_str()).collect();
        return Err(ApiError::Forbidden(format!(
            "the token `{}` lacks the scope `{}` that {what} needs",
            principal.name,
            names.join("` or `"),
        )));
    }
    Ok(principal)
}

/// A `work` token limited to task types touches only tasks of those types: the task
/// type in the path, or the task the path or the body names.
async fn confine_worker(
    state: &AppState,
    principal: &Principal,
    need: Need,
    req: &mut Request,
) -> Result<(), ApiError> {
    let Need::Any(scopes) = need else {
        return Ok(());
    };
    let only_as_worker = scopes.contains(&Scope::Work)
        && !scopes
            .iter()
            .any(|s| *s != Scope::Work && principal.scopes.contains(s));
    if principal.task_types.is_none() || !only_as_worker {
        return Ok(());
    }
    let params = path_params(req).await;
    let param = |name: &str| {
        params
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.clone())
    };
    let task_type = if let Some(task_type) = param("task_type") {
        task_type
    } else if let Some(task_id) = param("task_id") {
        task_name_of(state, &task_id).await?
    } else if param("task_ref").is_some() {
        return Err(ApiError::Forbidden(format!(
            "the token `{}` is limited to task types, so it updates tasks by id \
             (POST /api/tasks), not by reference name",
            principal.name
        )));
    } else if *req.method() == Method::POST {
        let task_id = task_id_in_body(state, req).await?;
        task_name_of(state, &task_id).await?
    } else {
        return Ok(());
    };
    if principal.may_work_on(&task_type) {
        return Ok(());
    }
    Err(ApiError::Forbidden(format!(
        "the token `{}` may work on tasks of types {} only, not `{task_type}`",
        principal.name,
        principal
            .task_types
            .as_deref()
            .unwrap_or_default()
            .join(", ")
    )))
}

/// The name (poll queue) of the task `task_id`; 404 when there is none.
async fn task_name_of(state: &AppState, task_id: &str) -> Result<String, ApiError> {
    let not_found = || ApiError::NotFound(format!("task {task_id} not found"));
    let id = task_id.parse::<uuid::Uuid>().map_err(|_| not_found())?;
    let task = state.store.task_with_run(id).await?.ok_or_else(not_found)?;
    Ok(task.task.task_name)
}

/// The request's body as JSON (`None` when it is not JSON), read within the body limit
/// and put back for the handler.
async fn json_body(
    state: &AppState,
    req: &mut Request,
) -> Result<Option<serde_json::Value>, ApiError> {
    let body = std::mem::replace(req.body_mut(), Body::empty());
    let bytes = axum::body::to_bytes(body, state.max_body_bytes)
        .await
        .map_err(|_| {
            ApiError::PayloadTooLarge("request body is larger than the configured limit".into())
        })?;
    let json = serde_json::from_slice(&bytes).ok();
    *req.body_mut() = Body::from(bytes);
    Ok(json)
}

/// The `taskId` of the JSON body (a task update or heartbeat).
async fn task_id_in_body(state: &AppState, req: &mut Request) -> Result<String, ApiError> {
    json_body(state, req)
        .await?
        .and_then(|v| v.get("taskId").and_then(|t| t.as_str()).map(str::to_owned))
        .ok_or_else(|| ApiError::invalid("invalid_field", "taskId", "taskId is required"))
}

/// What the JSON body names (see [`named`]).
async fn names_in_body(state: &AppState, req: &mut Request) -> Result<Option<String>, ApiError> {
    Ok(json_body(state, req).await?.and_then(|v| named(&v)))
}

/// Longest audit target kept from a body (a bulk operation may name thousands of runs).
const MAX_TARGET: usize = 500;

/// What a JSON body names: a definition's `name` (with ` v<version>` when given), or
/// the names of an array of them, or the workflow ids of a bulk operation's array,
/// comma-separated and cut at [`MAX_TARGET`] characters.
fn named(value: &serde_json::Value) -> Option<String> {
    let one = |v: &serde_json::Value| {
        if let Some(id) = v.as_str() {
            return Some(id.to_owned());
        }
        let name = v.get("name")?.as_str()?;
        Some(match v.get("version").and_then(serde_json::Value::as_i64) {
            Some(version) => format!("{name} v{version}"),
            None => name.to_owned(),
        })
    };
    match value {
        serde_json::Value::Array(items) => {
            let names: Vec<String> = items.iter().filter_map(one).collect();
            let mut joined = names.join(", ");
            if joined.len() > MAX_TARGET {
                let cut = (0..=MAX_TARGET)
                    .rev()
                    .find(|i| joined.is_char_boundary(*i))
                    .unwrap_or(0);
                joined.truncate(cut);
                joined.push('…');
            }
            (!names.is_empty()).then_some(joined)
        }
        serde_json::Value::String(_) => None,
        other => one(other),
    }
}

/// The path's parameters (percent-decoded by axum), in the route's order.
async fn path_params(req: &mut Request) -> Vec<(String, String)> {
    use axum::RequestExt;
    req.extract_parts::<axum::extract::RawPathParams>()
        .await
        .map(|params| {
            params
                .iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect()
        })
        .unwrap_or_default()
}

/// The `reason` query parameter, when given.
fn reason_of(uri: &axum::http::Uri) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct ReasonQuery {
        reason: Option<String>,
    }
    axum::extract::Query::<ReasonQuery>::try_from_uri(uri)
        .ok()?
        .0
        .reason
        .filter(|r| !r.trim().is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn path_parameters_follow_the_template() {
        use tower::ServiceExt;
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let record = seen.clone();
        let app = axum::Router::new()
            .route(
                "/api/workflow/{id}/skiptask/{task_ref}",
                axum::routing::put(|| async {}),
            )
            .layer(axum::middleware::from_fn(
                move |mut req: Request, next: Next| {
                    let record = record.clone();
                    async move {
                        *record.lock().unwrap() = path_params(&mut req).await;
                        next.run(req).await
                    }
                },
            ));
        let req = Request::builder()
            .method("PUT")
            .uri("/api/workflow/w%201/skiptask/a")
            .body(Body::empty())
            .unwrap();
        app.oneshot(req).await.unwrap();
        assert_eq!(
            *seen.lock().unwrap(),
            vec![
                ("id".to_owned(), "w 1".to_owned()),
                ("task_ref".to_owned(), "a".to_owned())
            ]
        );
    }

    #[test]
    fn a_body_names_its_definition_or_definitions() {
        use serde_json::json;
        assert_eq!(
            named(&json!({"name": "orders", "version": 2})).as_deref(),
            Some("orders v2")
        );
        assert_eq!(
            named(&json!([{"name": "a"}, {"name": "b", "version": 1}])).as_deref(),
            Some("a, b v1")
        );
        assert_eq!(named(&json!({"tasks": []})), None);
        assert_eq!(
            named(&json!(["wf-1", "wf-2"])).as_deref(),
            Some("wf-1, wf-2")
        );
        let many: Vec<String> = (0..200).map(|i| format!("workflow-{i}")).collect();
        let cut = named(&json!(many)).unwrap();
        assert!(
            cut.ends_with('…') && cut.len() <= MAX_TARGET + '…'.len_utf8(),
            "{cut}"
        );
    }

    #[test]
    fn the_reason_comes_from_the_query() {
        let uri = |s: &str| s.parse::<axum::http::Uri>().unwrap();
        assert_eq!(
            reason_of(&uri("/x?a=1&reason=wrong+input%21")),
            Some("wrong input!".to_owned())
        );
        assert_eq!(reason_of(&uri("/x?reason=")), None);
        assert_eq!(reason_of(&uri("/x")), None);
    }
}
