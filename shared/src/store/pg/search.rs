//! Workflow search on PostgreSQL (see [`crate::store::search`]): one index walk per
//! value of a multi-valued status or type filter, merged.

use async_trait::async_trait;
use sqlx::{Postgres, QueryBuilder};

use super::PgStore;
use crate::store::backend::SearchStore;
use crate::store::search::{Filter, Search, SearchHit, MAX_COUNTED_HITS};
use crate::Result;

#[async_trait]
impl SearchStore for PgStore {
    /// The page of matches and how many there are (at most [`MAX_COUNTED_HITS`]); on
    /// the read replica when there is one.
    async fn search_runs(&self, search: &Search) -> Result<(i64, Vec<SearchHit>)> {
        self.lagging_read(|pool| async move { search_on(&pool, search).await })
            .await
    }
}

/// [`SearchStore::search_runs`] on `pool`.
async fn search_on(pool: &sqlx::PgPool, search: &Search) -> Result<(i64, Vec<SearchHit>)> {
    // One index walk per value of a multi-valued status/type filter, each stopping
    // after `start + size` rows, merged: PostgreSQL 15 cannot walk `= ANY` in order.
    let mut page = QueryBuilder::<Postgres>::new(format!("SELECT {HIT_COLUMNS} FROM ("));
    for (i, branch) in branches(search).iter().enumerate() {
        if i > 0 {
            page.push(" UNION ALL ");
        }
        page.push(format_args!("(SELECT {HIT_COLUMNS} FROM runs"));
        where_clause(&mut page, branch);
        page.push(" ORDER BY start_time DESC, run_id DESC LIMIT ")
            .push_bind(search.start + search.size)
            .push(")");
    }
    page.push(") AS hits ORDER BY start_time DESC, run_id DESC OFFSET ")
        .push_bind(search.start)
        .push(" LIMIT ")
        .push_bind(search.size);
    let hits = page.build_query_as::<SearchHit>().fetch_all(pool).await?;

    let mut count = QueryBuilder::<Postgres>::new("SELECT count(*) FROM (SELECT 1 FROM runs");
    where_clause(&mut count, search);
    count
        .push(" LIMIT ")
        .push_bind(MAX_COUNTED_HITS)
        .push(") AS hits");
    let total: i64 = count.build_query_scalar().fetch_one(pool).await?;
    Ok((total, hits))
}

const HIT_COLUMNS: &str = "run_id, workflow_id, workflow_name, workflow_version, status,
    sub_status, input, output, variables, correlation_id, parent_workflow_id, reason,
    failed_task_refs, start_time, end_time, update_time, is_current, input_bytes, output_bytes";

/// The search split by the values of its first multi-valued status or type filter
/// (duplicates dropped), or itself.
fn branches(search: &Search) -> Vec<Search> {
    let split = search
        .filters
        .iter()
        .enumerate()
        .find_map(|(i, f)| match f {
            Filter::Status(v) | Filter::WorkflowType(v) if v.len() > 1 => Some((i, v)),
            _ => None,
        });
    let Some((i, values)) = split else {
        return vec![search.clone()];
    };
    let mut values = values.clone();
    values.sort_unstable();
    values.dedup();
    values
        .into_iter()
        .map(|v| {
            let mut one = search.clone();
            one.filters[i] = match &search.filters[i] {
                Filter::Status(_) => Filter::Status(vec![v]),
                _ => Filter::WorkflowType(vec![v]),
            };
            one
        })
        .collect()
}

fn where_clause(q: &mut QueryBuilder<'_, Postgres>, search: &Search) {
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
                let pattern = format!("{}%", escape_like(prefix));
                q.push(" AND (workflow_id LIKE ")
                    .push_bind(pattern.clone())
                    .push(" OR correlation_id LIKE ")
                    .push_bind(pattern)
                    .push(")");
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

/// `AND column = v`, or `= ANY(list)` for several values: a single value must be a
/// plain equality for PostgreSQL to walk the `(column, start_time DESC)` index in the
/// answer's order (PostgreSQL 15 cannot for `= ANY`, and sorts every match instead).
fn any_of(q: &mut QueryBuilder<'_, Postgres>, column: &str, values: &[String]) {
    match values {
        [one] => q
            .push(format_args!(" AND {column} = "))
            .push_bind(one.clone()),
        many => q
            .push(format_args!(" AND {column} = ANY("))
            .push_bind(many.to_vec())
            .push(")"),
    };
}

/// Escapes LIKE's wildcards (the default escape character is `\`).
fn escape_like(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('%', "\\%")
        .replace('_', "\\_")
}
