//! Reads for the flowchart on SQLite (see [`crate::store::graph`]). PostgreSQL derives
//! the graph's per-task columns in SQL (`jsonb` operators, epoch arithmetic); here they
//! are derived in Rust from the task rows, with the same meaning.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::sqlite::SqliteRow;
use sqlx::Row;
use uuid::Uuid;

use super::SqliteStore;
use crate::dsl::WorkflowDef;
use crate::store::backend::GraphStore;
use crate::store::graph::RunVersion;
use crate::store::graph_build::{self, Graph, GraphRow};
use crate::{Error, Result};

const GRAPH_ROWS: &str = "SELECT task_id, task_ref, task_type, seq, iteration, attempt, status,
        scheduled_time, start_time, end_time, input_bytes, output_bytes, output
    FROM tasks WHERE run_id = ?";

/// Epoch milliseconds, rounded as PostgreSQL's `(extract(epoch FROM t) * 1000)::bigint`.
fn epoch_ms(t: DateTime<Utc>) -> i64 {
    let us = t.timestamp_micros();
    (us + if us >= 0 { 500 } else { -500 }) / 1000
}

/// PostgreSQL's `->>`: a JSON value as text (a string unquoted), SQL NULL for null.
fn as_text(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    }
}

/// A task row as the graph needs it (see [`GraphRow`]).
fn graph_row(r: &SqliteRow) -> Result<GraphRow> {
    let task_type: String = r.try_get("task_type")?;
    let output: Option<Value> = r.try_get("output")?;
    let out = output.as_ref();
    let selected_case = match task_type.as_str() {
        "SWITCH" | "DECISION" => as_text(out.and_then(|o| o.get("selectedCase")))
            .or_else(|| as_text(out.and_then(|o| o.get("caseOutput")).and_then(|c| c.get(0)))),
        _ => None,
    };
    let sub_workflow_id = match task_type.as_str() {
        "SUB_WORKFLOW" => as_text(out.and_then(|o| o.get("subWorkflowId"))),
        _ => None,
    };
    let forked = match (task_type.as_str(), out.and_then(|o| o.get("forkedTasks"))) {
        ("FORK_JOIN_DYNAMIC", Some(list @ Value::Array(_))) => Some(sqlx::types::Json(
            serde_json::from_value::<Vec<String>>(list.clone())
                .map_err(|e| Error::Decode(format!("forkedTasks: {e}")))?,
        )),
        _ => None,
    };
    let scheduled: DateTime<Utc> = r.try_get("scheduled_time")?;
    let start: Option<DateTime<Utc>> = r.try_get("start_time")?;
    let end: Option<DateTime<Utc>> = r.try_get("end_time")?;
    Ok(GraphRow {
        task_id: r.try_get("task_id")?,
        task_ref: r.try_get("task_ref")?,
        seq: r.try_get("seq")?,
        iteration: r.try_get("iteration")?,
        attempt: r.try_get("attempt")?,
        status: r.try_get("status")?,
        scheduled_ms: epoch_ms(scheduled),
        start_ms: start.map(epoch_ms),
        end_ms: end.map(epoch_ms),
        input_bytes: r.try_get("input_bytes")?,
        output_bytes: r.try_get("output_bytes")?,
        selected_case,
        sub_workflow_id,
        forked,
        task_type,
    })
}

#[async_trait]
impl GraphStore for SqliteStore {
    /// The run `run_id` of `workflow_id` (or its current run) and its version.
    async fn run_version(
        &self,
        workflow_id: &str,
        run_id: Option<Uuid>,
    ) -> Result<Option<RunVersion>> {
        let q = match run_id {
            Some(run) => sqlx::query_as::<_, RunVersion>(
                "SELECT run_id, version FROM runs WHERE run_id = ? AND workflow_id = ?",
            )
            .bind(run)
            .bind(workflow_id),
            None => sqlx::query_as::<_, RunVersion>(
                "SELECT run_id, version FROM runs WHERE workflow_id = ? AND is_current",
            )
            .bind(workflow_id),
        };
        Ok(q.fetch_optional(&self.pool).await?)
    }

    /// The graph of run `run_id` of `workflow_id`, computed from one read transaction
    /// (one snapshot): its version, task rows and definition agree. `None`: no such run.
    async fn run_graph(&self, workflow_id: &str, run_id: Uuid) -> Result<Option<Graph>> {
        let mut tx = self.pool.begin().await?;
        let Some(version) = sqlx::query_scalar::<_, i64>(
            "SELECT version FROM runs WHERE run_id = ? AND workflow_id = ?",
        )
        .bind(run_id)
        .bind(workflow_id)
        .fetch_optional(&mut *tx)
        .await?
        else {
            return Ok(None);
        };
        let attributes = sqlx::query_scalar::<_, Value>(
            "SELECT attributes FROM history_events WHERE run_id = ? AND event_id = 1",
        )
        .bind(run_id)
        .fetch_optional(&mut *tx)
        .await?
        .ok_or_else(|| Error::Decode(format!("run {run_id} has no WorkflowStarted event")))?;
        let rows = sqlx::query(GRAPH_ROWS)
            .bind(run_id)
            .fetch_all(&mut *tx)
            .await?;
        tx.commit().await?;
        let rows = rows.iter().map(graph_row).collect::<Result<Vec<_>>>()?;
        let definition = attributes.get("definition").cloned().ok_or_else(|| {
            Error::Decode(format!("run {run_id}: WorkflowStarted has no definition"))
        })?;
        let traceparent = as_text(attributes.get("traceparent"));
        let def: WorkflowDef = serde_json::from_value(definition)?;
        let mut graph = graph_build::build(workflow_id, run_id, version, &def, &rows);
        // traceparent: version-traceid-spanid-flags.
        graph.trace_id = traceparent.and_then(|tp| tp.split('-').nth(1).map(str::to_owned));
        Ok(Some(graph))
    }
}
