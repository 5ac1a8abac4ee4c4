//! Run statistics on PostgreSQL (see [`crate::store::stats`]): counts and
//! `percentile_disc` computed in one statement.

use std::collections::BTreeMap;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::PgStore;
use crate::store::backend::StatsStore;
use crate::store::stats::{Percentiles, RunStats};
use crate::Result;

#[derive(sqlx::FromRow)]
struct Row {
    count: i64,
    by_status: Option<sqlx::types::Json<BTreeMap<String, i64>>>,
    duration_ms: Option<Vec<i64>>,
    input_bytes: Option<Vec<i64>>,
    output_bytes: Option<Vec<i64>>,
}

/// `percentile_disc` of an expression at p50/p95/p99 over the `recent` rows.
macro_rules! percentiles {
    ($expr:literal, $filter:literal, $name:literal) => {
        concat!(
            "percentile_disc(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY ",
            $expr,
            ") FILTER (WHERE ",
            $filter,
            ") AS ",
            $name
        )
    };
}

const STATS: &str = concat!(
    "WITH recent AS (
        SELECT status, start_time, end_time, input_bytes, output_bytes FROM runs
        WHERE workflow_name = $1 AND start_time >= $2
            AND ($3::int IS NULL OR workflow_version = $3)
        ORDER BY start_time DESC LIMIT $4
    )
    SELECT count(*) AS count,
        (SELECT jsonb_object_agg(status, n)
            FROM (SELECT status, count(*) AS n FROM recent GROUP BY status) s) AS by_status,
        ",
    percentiles!(
        "(extract(epoch FROM end_time - start_time) * 1000)::bigint",
        "end_time IS NOT NULL",
        "duration_ms"
    ),
    ",\n        ",
    percentiles!(
        "input_bytes::bigint",
        "input_bytes IS NOT NULL",
        "input_bytes"
    ),
    ",\n        ",
    percentiles!(
        "output_bytes::bigint",
        "output_bytes IS NOT NULL",
        "output_bytes"
    ),
    "\n    FROM recent"
);

fn triple(v: Option<Vec<i64>>) -> Option<Percentiles> {
    match v.as_deref() {
        Some([p50, p95, p99]) => Some(Percentiles {
            p50: *p50,
            p95: *p95,
            p99: *p99,
        }),
        _ => None,
    }
}

#[async_trait]
impl StatsStore for PgStore {
    /// Statistics of the newest `limit` runs of definition `name` (of `version`, when
    /// given) started at or after `since`.
    async fn run_stats(
        &self,
        name: &str,
        version: Option<i32>,
        since: DateTime<Utc>,
        limit: i64,
    ) -> Result<RunStats> {
        // On the read replica when there is one: statistics may lag.
        let row = self
            .lagging_read(|pool| async move {
                Ok(sqlx::query_as::<_, Row>(STATS)
                    .bind(name)
                    .bind(since)
                    .bind(version)
                    .bind(limit)
                    .fetch_one(&pool)
                    .await?)
            })
            .await?;
        Ok(RunStats {
            count: row.count,
            by_status: row.by_status.map(|j| j.0).unwrap_or_default(),
            duration_ms: triple(row.duration_ms),
            input_bytes: triple(row.input_bytes),
            output_bytes: triple(row.output_bytes),
        })
    }
}
