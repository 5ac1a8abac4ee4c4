//! Workflow definitions: `/api/metadata/workflow` (Conductor's `MetadataResource`).

use std::collections::{BTreeMap, BTreeSet};

use axum::extract::State;
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};
use weft::dsl::{self, WorkflowDef};
use weft::store::definitions::PutOutcome;

use crate::error::ApiError;
use crate::extract::{JsonBody, Path, Query};
use crate::secrets;
use crate::state::AppState;
use crate::views::BulkResponse;

/// The definition routes.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route(
            "/api/metadata/workflow",
            post(register).put(upsert_many).get(list),
        )
        .route("/api/metadata/workflow/validate", post(validate))
        .route("/api/metadata/workflow/names", get(names))
        .route(
            "/api/metadata/workflow/names-and-versions",
            get(names_and_versions),
        )
        .route(
            "/api/metadata/workflow/latest-versions",
            get(latest_versions),
        )
        .route("/api/metadata/workflow/{name}/versions", get(versions))
        .route("/api/metadata/workflow/{name}", get(get_one))
        .route("/api/metadata/workflow/{name}/{version}", delete(remove))
}

#[derive(Debug, Deserialize)]
struct OverwriteQuery {
    #[serde(default, deserialize_with = "crate::extract::lenient_bool")]
    overwrite: bool,
}

#[derive(Debug, Deserialize)]
struct VersionQuery {
    version: Option<i32>,
}

/// Parses and validates a definition; the error names the offending field.
fn parse(json: &Value) -> Result<WorkflowDef, ApiError> {
    if !json.is_object() {
        return Err(ApiError::bad_request(
            "invalid_definition",
            "a workflow definition must be a JSON object",
        ));
    }
    let mut def = dsl::parse_definition(json).map_err(|e| ApiError::definition(e, None))?;
    // Conductor's WorkflowDef default, read back by clients that check it.
    def.extra
        .entry("schemaVersion")
        .or_insert_with(|| Value::from(2));
    Ok(def)
}

/// `POST /api/metadata/workflow?overwrite=`: registers one definition; 409 when the
/// version exists and `overwrite` is not set.
async fn register(
    State(state): State<AppState>,
    Query(q): Query<OverwriteQuery>,
    JsonBody(mut json): JsonBody<Value>,
) -> Result<(), ApiError> {
    keep_secrets(&state, &mut json).await?;
    let def = parse(&json)?;
    match state.store.put_definition(&def, q.overwrite).await? {
        PutOutcome::Exists => Err(ApiError::Conflict(format!(
            "workflow definition {} version {} already exists; pass overwrite=true to replace it",
            def.name, def.version
        ))),
        outcome => {
            tracing::info!(name = %def.name, version = def.version, ?outcome, "definition registered");
            Ok(())
        }
    }
}

/// `PUT /api/metadata/workflow`: creates or replaces each definition of the list. Each is
/// validated on its own: a bad one is reported in `bulkErrorResults` and does not stop
/// the others, as in Conductor.
async fn upsert_many(
    State(state): State<AppState>,
    JsonBody(json): JsonBody<Value>,
) -> Result<Json<BulkResponse>, ApiError> {
    let Value::Array(items) = json else {
        return Err(ApiError::bad_request(
            "invalid_json",
            "request body must be a JSON array of workflow definitions",
        ));
    };
    let mut answer = BulkResponse::default();
    for (i, mut item) in items.into_iter().enumerate() {
        let key = item
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .map_or_else(|| format!("[{i}]"), str::to_owned);
        let parsed = match keep_secrets(&state, &mut item).await {
            Ok(()) => parse(&item),
            Err(e) => Err(e),
        };
        match parsed {
            Ok(def) => {
                state.store.put_definition(&def, true).await?;
                answer.bulk_successful_results.push(def.name);
            }
            Err(ApiError::BadRequest { message, path, .. }) => {
                let text = match path {
                    Some(p) => format!("{p}: {message}"),
                    None => message,
                };
                answer.bulk_error_results.insert(key, Value::String(text));
            }
            Err(other) => return Err(other),
        }
    }
    Ok(Json(answer))
}

/// Puts back the stored secret where `json` (a definition) carries the read mask.
async fn keep_secrets(state: &AppState, json: &mut Value) -> Result<(), ApiError> {
    if !json.to_string().contains(secrets::MASK) {
        return Ok(());
    }
    let name = json.get("name").and_then(Value::as_str).unwrap_or_default();
    let version = json
        .get("version")
        .and_then(Value::as_i64)
        .and_then(|v| i32::try_from(v).ok());
    let stored = match name {
        "" => None,
        name => state.store.get_definition(name, version).await?,
    };
    secrets::restore(json, stored.as_ref().map(|d| &d.definition))
}

/// `POST /api/metadata/workflow/validate`: 200 when valid, 400 naming the field otherwise.
async fn validate(JsonBody(json): JsonBody<Value>) -> Result<(), ApiError> {
    parse(&json).map(|_| ())
}

/// `GET /api/metadata/workflow/{name}?version=`: one version, the latest by default.
async fn get_one(
    State(state): State<AppState>,
    Path(name): Path<String>,
    Query(q): Query<VersionQuery>,
) -> Result<Json<Value>, ApiError> {
    match state.store.get_definition(&name, q.version).await? {
        Some(found) => Ok(Json(secrets::masked(found.definition))),
        None => Err(not_found(&name, q.version)),
    }
}

/// `GET /api/metadata/workflow`: every registered definition, all versions.
async fn list(State(state): State<AppState>) -> Result<Json<Vec<Value>>, ApiError> {
    let all = state.store.list_definitions().await?;
    Ok(Json(
        all.into_iter()
            .map(|d| secrets::masked(d.definition))
            .collect(),
    ))
}

/// Conductor's `WorkflowDefSummary`.
fn summary(d: &weft::store::definitions::StoredDefinition) -> Value {
    json!({
        "name": d.name,
        "version": d.version,
        "createTime": d.created_at.timestamp_millis(),
        "updateTime": d.updated_at.timestamp_millis(),
    })
}

/// `GET /api/metadata/workflow/names`: every definition name, once, sorted.
async fn names(State(state): State<AppState>) -> Result<Json<Vec<String>>, ApiError> {
    let all = state.store.list_definitions().await?;
    let names: BTreeSet<String> = all.into_iter().map(|d| d.name).collect();
    Ok(Json(names.into_iter().collect()))
}

/// `GET /api/metadata/workflow/names-and-versions`: `{name: [WorkflowDefSummary]}`.
async fn names_and_versions(
    State(state): State<AppState>,
) -> Result<Json<BTreeMap<String, Vec<Value>>>, ApiError> {
    let mut by_name: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for d in state.store.list_definitions().await? {
        by_name.entry(d.name.clone()).or_default().push(summary(&d));
    }
    Ok(Json(by_name))
}

/// `GET /api/metadata/workflow/latest-versions`: the latest version of each definition.
async fn latest_versions(State(state): State<AppState>) -> Result<Json<Vec<Value>>, ApiError> {
    let mut latest: BTreeMap<String, (i32, Value)> = BTreeMap::new();
    for d in state.store.list_definitions().await? {
        let newer = latest.get(&d.name).is_none_or(|(v, _)| d.version > *v);
        if newer {
            latest.insert(d.name, (d.version, d.definition));
        }
    }
    Ok(Json(
        latest
            .into_values()
            .map(|(_, d)| secrets::masked(d))
            .collect(),
    ))
}

/// `GET /api/metadata/workflow/{name}/versions`: `[WorkflowDefSummary]`, oldest first;
/// 404 for an unknown name.
async fn versions(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<Vec<Value>>, ApiError> {
    let mut found: Vec<_> = state
        .store
        .list_definitions()
        .await?
        .into_iter()
        .filter(|d| d.name == name)
        .collect();
    if found.is_empty() {
        return Err(not_found(&name, None));
    }
    found.sort_by_key(|d| d.version);
    Ok(Json(found.iter().map(summary).collect()))
}

/// `DELETE /api/metadata/workflow/{name}/{version}`; 404 when there is no such version.
async fn remove(
    State(state): State<AppState>,
    Path((name, version)): Path<(String, i32)>,
) -> Result<(), ApiError> {
    if state.store.delete_definition(&name, version).await? {
        tracing::info!(%name, version, "definition removed");
        Ok(())
    } else {
        Err(not_found(&name, Some(version)))
    }
}

/// The 404 for a definition, naming it.
pub(crate) fn not_found(name: &str, version: Option<i32>) -> ApiError {
    ApiError::NotFound(match version {
        Some(v) => format!("workflow definition {name} version {v} not found"),
        None => format!("workflow definition {name} not found"),
    })
}
