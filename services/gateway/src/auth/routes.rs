//! Tokens (`/api/admin/tokens`), Conductor's key exchange (`POST /api/token`) and the
//! audit trail (`/api/audit`, `/api/workflow/{id}/audit`).

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Extension, Json, Router};
use chrono::{DateTime, TimeZone, Utc};
use rand::distr::{Alphanumeric, SampleString};
use serde::Deserialize;
use serde_json::{json, Value};
use weft::store::auth::{hash_secret, ApiToken, AuditEntry, AuditFilter};

use super::guard::request_audit;
use super::principal::Principal;
use super::scopes::Scope;
use super::verify::AuthError;
use crate::error::ApiError;
use crate::extract::{JsonBody, Path, Query};
use crate::state::AppState;

/// The routes of this module.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/admin/tokens", get(list).post(create))
        .route("/api/admin/tokens/{name}", delete(revoke))
        .route("/api/token", post(exchange))
        .route("/api/audit", get(audit))
        .route("/api/workflow/{id}/audit", get(run_audit))
}

/// Most audit rows one read answers.
const MAX_AUDIT_ROWS: i64 = 1_000;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct NewToken {
    name: String,
    scopes: Vec<String>,
    #[serde(default)]
    task_types: Option<Vec<String>>,
    /// Epoch milliseconds.
    #[serde(default)]
    expires_at: Option<i64>,
}

/// A token as listed (never its secret).
fn token_view(t: &ApiToken) -> Value {
    json!({
        "name": t.name,
        "scopes": t.scopes,
        "taskTypes": t.task_types,
        "createdAt": t.created_at.timestamp_millis(),
        "expiresAt": t.expires_at.map(|at| at.timestamp_millis()),
    })
}

/// `POST /api/admin/tokens`: a new token; its secret is in this answer only.
async fn create(
    State(state): State<AppState>,
    principal: Option<Extension<Principal>>,
    JsonBody(body): JsonBody<NewToken>,
) -> Result<Response, ApiError> {
    let name = body.name.trim().to_owned();
    if name.is_empty()
        || name.len() > 64
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '@'))
    {
        return Err(ApiError::invalid(
            "invalid_field",
            "name",
            "a token's name is 1-64 characters of letters, digits, `-`, `_`, `.` and `@`",
        ));
    }
    if name == "admin" {
        return Err(ApiError::invalid(
            "invalid_field",
            "name",
            "`admin` is the configured admin token's name (WEFT_ADMIN_TOKEN)",
        ));
    }
    if body.scopes.is_empty() {
        return Err(ApiError::invalid(
            "invalid_field",
            "scopes",
            "a token needs at least one scope",
        ));
    }
    let mut scopes = Vec::with_capacity(body.scopes.len());
    for (i, s) in body.scopes.iter().enumerate() {
        let scope: Scope = s
            .parse()
            .map_err(|e: String| ApiError::invalid("invalid_field", format!("scopes[{i}]"), e))?;
        if !scopes.contains(&scope) {
            scopes.push(scope);
        }
    }
    scopes.sort();
    if let Some(types) = &body.task_types {
        if !scopes.contains(&Scope::Work) {
            return Err(ApiError::invalid(
                "invalid_field",
                "taskTypes",
                "taskTypes limits the `work` scope, which the token does not have",
            ));
        }
        if types.is_empty() || types.iter().any(|t| t.trim().is_empty()) {
            return Err(ApiError::invalid(
                "invalid_field",
                "taskTypes",
                "taskTypes lists task type names (omit it for every task type)",
            ));
        }
    }
    let now = Utc::now();
    let expires_at = match body.expires_at {
        None => None,
        Some(ms) => match Utc.timestamp_millis_opt(ms).single() {
            Some(at) if at > now => Some(at),
            _ => {
                return Err(ApiError::invalid(
                    "invalid_field",
                    "expiresAt",
                    "expiresAt is a time in the future, in epoch milliseconds",
                ))
            }
        },
    };
    let secret = format!("weft_{}", Alphanumeric.sample_string(&mut rand::rng(), 40));
    let token = ApiToken {
        name: name.clone(),
        token_hash: hash_secret(&secret),
        scopes: scopes.iter().map(|s| s.as_str().to_owned()).collect(),
        task_types: body.task_types,
        created_at: now,
        expires_at,
    };
    let audit = audit_row(
        principal.as_deref(),
        "token.create",
        &name,
        "POST",
        "/api/admin/tokens",
    );
    if !state.store.create_token(&token, &audit).await? {
        return Err(ApiError::Conflict(format!("a token named `{name}` exists")));
    }
    tracing::info!(token = %name, scopes = ?token.scopes, "token created");
    let mut view = token_view(&token);
    view["token"] = Value::String(secret);
    Ok((StatusCode::CREATED, Json(view)).into_response())
}

/// `GET /api/admin/tokens`.
async fn list(State(state): State<AppState>) -> Result<Json<Vec<Value>>, ApiError> {
    Ok(Json(
        state.store.tokens().await?.iter().map(token_view).collect(),
    ))
}

/// `DELETE /api/admin/tokens/{name}`: the token stops working at once on this gateway,
/// within seconds on the others.
async fn revoke(
    State(state): State<AppState>,
    principal: Option<Extension<Principal>>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let path = format!("/api/admin/tokens/{name}");
    let audit = audit_row(principal.as_deref(), "token.revoke", &name, "DELETE", &path);
    if !state.store.revoke_token(&name, &audit).await? {
        return Err(ApiError::NotFound(format!("no token named `{name}`")));
    }
    state.auth.forget_all();
    tracing::info!(token = %name, "token revoked");
    Ok(Json(json!({ "name": name, "revoked": true })))
}

/// The audit row of a token change, by `principal` (none when auth is off).
fn audit_row(
    principal: Option<&Principal>,
    action: &str,
    target: &str,
    method: &str,
    path: &str,
) -> AuditEntry {
    let base = request_audit().unwrap_or_else(|| AuditEntry {
        at: Utc::now(),
        actor: principal.map(|p| p.name.clone()),
        action: String::new(),
        target: None,
        workflow_id: None,
        reason: None,
        status: None,
        method: method.to_owned(),
        path: path.to_owned(),
    });
    AuditEntry {
        at: Utc::now(),
        action: action.to_owned(),
        target: Some(target.to_owned()),
        ..base
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct KeyPair {
    key_id: String,
    key_secret: String,
}

/// `POST /api/token` with `{"keyId", "keySecret"}`: Conductor's SDKs trade an
/// application key for the token they then send as `X-Authorization`. In Weft the key id
/// is the token's name and the secret is the token itself, which is answered back.
async fn exchange(
    State(state): State<AppState>,
    JsonBody(pair): JsonBody<KeyPair>,
) -> Result<Json<Value>, ApiError> {
    if !state.auth.enabled() {
        // No auth: any key works, and the token sent back is never checked.
        return Ok(Json(json!({ "token": pair.key_secret })));
    }
    // A refused key carries no `error` code: Conductor's SDKs would answer one by
    // trading the same key again.
    let principal = match state.auth.principal(&state.store, &pair.key_secret).await {
        Ok(p) => p,
        Err(AuthError::Store(e)) => return Err(ApiError::Internal(e)),
        Err(e) => {
            return Err(ApiError::Unauthenticated {
                message: e.to_string(),
                conductor_code: None,
            })
        }
    };
    if principal.name != pair.key_id {
        return Err(ApiError::Unauthenticated {
            message: "the key id is not the name of the token given as the key secret".into(),
            conductor_code: None,
        });
    }
    Ok(Json(json!({ "token": pair.key_secret })))
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct AuditQuery {
    /// Epoch milliseconds, inclusive.
    from: Option<i64>,
    /// Epoch milliseconds, exclusive.
    to: Option<i64>,
    token: Option<String>,
    workflow_id: Option<String>,
    limit: Option<i64>,
}

fn time_param(name: &str, ms: Option<i64>) -> Result<Option<DateTime<Utc>>, ApiError> {
    ms.map(|ms| {
        Utc.timestamp_millis_opt(ms)
            .single()
            .ok_or_else(|| ApiError::invalid("invalid_query", name, "a time in epoch milliseconds"))
    })
    .transpose()
}

/// `GET /api/audit?from=&to=&token=&workflowId=&limit=`: audit rows, newest first.
async fn audit(
    State(state): State<AppState>,
    Query(q): Query<AuditQuery>,
) -> Result<Json<Vec<AuditEntry>>, ApiError> {
    let limit = q.limit.unwrap_or(100);
    if !(1..=MAX_AUDIT_ROWS).contains(&limit) {
        return Err(ApiError::invalid(
            "invalid_query",
            "limit",
            format!("limit is between 1 and {MAX_AUDIT_ROWS}"),
        ));
    }
    let filter = AuditFilter {
        from: time_param("from", q.from)?,
        to: time_param("to", q.to)?,
        actor: q.token,
        workflow_id: q.workflow_id,
        limit,
    };
    Ok(Json(state.store.audit_entries(&filter).await?))
}

/// `GET /api/workflow/{id}/audit`: who did what to the run, newest first.
async fn run_audit(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Vec<AuditEntry>>, ApiError> {
    let filter = AuditFilter {
        workflow_id: Some(id),
        limit: MAX_AUDIT_ROWS,
        ..AuditFilter::default()
    };
    Ok(Json(state.store.audit_entries(&filter).await?))
}
