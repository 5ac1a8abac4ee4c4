//! Workflow search on SQLite: the same parsed filters ([`crate::store::search`]) over the
//! current runs, newest first, as one statement (SQLite walks `IN` lists itself; no
//! per-value branches are needed). Free-text prefixes are matched case-sensitively, as
//! PostgreSQL's `LIKE` does (SQLite's `LIKE` folds ASCII case).

use async_trait::async_trait;
use sqlx::sqlite::SqliteRow;
use sqlx::types::Json;
use sqlx::{QueryBuilder, Row, Sqlite};

use super::SqliteStore;
use crate::store::backend::SearchStore;
use crate::store::reads::RunView;
use crate::store::search::{Filter, Search, SearchHit, MAX_COUNTED_HITS};
use crate::Result;

const HIT_COLUMNS: &str = "run_id, workflow_id, workflow_name, workflow_version, status,
    sub_status, input, output, variables, correlation_id, parent_workflow_id, reason,
    failed_task_refs, start_time, end_time, update_time, is_current, input_bytes, output_bytes";

/// A run as SQLite stores it (`failed_task_refs` is a JSON array).
pub(super) fn run_view(row: &SqliteRow) -> Result<RunView> {
    let refs: Json<Vec<String>> = row.try_get("failed_task_refs")?;
    Ok(RunView {
        run_id: row.try_get("run_id")?,
        workflow_id: row.try_get("workflow_id")?,
        workflow_name: row.try_get("workflow_name")?,
        workflow_version: row.try_get("workflow_version")?,
        status: row.try_get("status")?,
        sub_status: row.try_get("sub_status")?,
        input: row.try_get("input")?,
        output: row.try_get("output")?,
        variables: row.try_get("variables")?,
        correlation_id: row.try_get("correlation_id")?,
        parent_workflow_id: row.try_get("parent_workflow_id")?,
        reason: row.try_get("reason")?,
        failed_task_refs: refs.0,
        start_time: row.try_get("start_time")?,
        end_time: row.try_get("end_time")?,
        update_time: row.try_get("update_time")?,
        is_current: row.try_get("is_current")?,
        // Search results do not show them.
        pending_signals: None,
    })
}

fn hit(row: &SqliteRow) -> Result<SearchHit> {
    Ok(SearchHit {
        run: run_view(row)?,
        input_bytes: row.try_get("input_bytes")?,
        output_bytes: row.try_get("output_bytes")?,
    })
}

#[async_trait]
impl SearchStore for SqliteStore {
    /// The page of matches and how many there are (at most [`MAX_COUNTED_HITS`]).
    async fn search_runs(&self, search: &Search) -> Result<(i64, Vec<SearchHit>)> {
        let mut page = QueryBuilder::<Sqlite>::new(format!("SELECT {HIT_COLUMNS} FROM runs"));
        where_clause(&mut page, search);
        page.push(" ORDER BY start_time DESC, run_id DESC LIMIT ")
            .push_bind(search.size)
            .push(" OFFSET ")
            .push_bind(search.start);
        let rows = page.build().fetch_all(&self.pool).await?;
        let hits = rows.iter().map(hit).collect::<Result<Vec<_>>>()?;

        let mut count = QueryBuilder::<Sqlite>::new("SELECT count(*) FROM (SELECT 1 FROM runs");
        where_clause(&mut count, search);
        count
            .push(" LIMIT ")
            .push_bind(MAX_COUNTED_HITS)
            .push(") AS hits");
        let total: i64 = count.build_query_scalar().fetch_one(&self.pool).await?;
        Ok((total, hits))
    }
}

fn where_clause(q: &mut QueryBuilder<'_, Sqlite>, search: &Search) {
    q.push(" WHERE is_current");
    for f in &search.filters {
        match f {
            Filter::Status(v) => any_of(q, "status", v),
            Filter::WorkflowType(v) => any_of(q, "workflow_name", v),
            Filter::WorkflowId(v) => any_of(q, "workflow_id", v),
            Filter::CorrelationId(v) => any_of(q, "correlation_id", v),
            Filter::StartTime(op, at) => {
                q.push(format_args!(" AND start_time {op} ")).push_bind(*at);
            }
        }
    }
    match search.free_text.as_deref().map(str::trim) {
        None | Some("") | Some("*") => {}
        Some(text) => match text.strip_suffix('*') {
            Some(prefix) => {
                q.push(" AND (");
                starts_with(q, "workflow_id", prefix);
                q.push(" OR ");
                starts_with(q, "correlation_id", prefix);
                q.push(")");
            }
            None => {
                q.push(" AND (workflow_id = ")
                    .push_bind(text.to_owned())
                    .push(" OR correlation_id = ")
                    .push_bind(text.to_owned())
                    .push(")");
            }
        },
    }
}

/// `column` begins with `prefix`, byte for byte (the `>=` bound lets an index start at
/// the prefix).
fn starts_with(q: &mut QueryBuilder<'_, Sqlite>, column: &str, prefix: &str) {
    q.push(format_args!("({column} >= "))
        .push_bind(prefix.to_owned())
        .push(format_args!(" AND substr({column}, 1, "))
        .push_bind(i64::try_from(prefix.chars().count()).unwrap_or(i64::MAX))
        .push(") = ")
        .push_bind(prefix.to_owned())
        .push(")");
}

/// `AND column IN (values)`.
fn any_of(q: &mut QueryBuilder<'_, Sqlite>, column: &str, values: &[String]) {
    q.push(format_args!(" AND {column} IN ("));
    let mut list = q.separated(", ");
    for v in values {
        list.push_bind(v.clone());
    }
    q.push(")");
}
