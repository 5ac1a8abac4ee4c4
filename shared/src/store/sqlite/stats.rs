//! Statistics of a definition's recent runs on SQLite: the window is read (at most
//! `limit` rows, newest first) and counted in Rust, with the same nearest-rank
//! percentiles as PostgreSQL's `percentile_disc`.

use std::collections::BTreeMap;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::SqliteStore;
use crate::store::backend::StatsStore;
use crate::store::stats::{Percentiles, RunStats};
use crate::Result;

/// `(status, start_time, end_time, input_bytes, output_bytes)` of one run.
type Recent = (
    String,
    DateTime<Utc>,
    Option<DateTime<Utc>>,
    Option<i64>,
    Option<i64>,
);

/// `percentile_disc(p)` of sorted `values`: the first value whose cumulative share
/// reaches `p`.
fn disc(sorted: &[i64], p: f64) -> i64 {
    let n = sorted.len();
    // ceil(p * n) as a 1-based rank, at least 1.
    let rank = ((p * n as f64).ceil() as usize).clamp(1, n);
    sorted[rank - 1]
}

/// Whole milliseconds, rounded half away from zero (as PostgreSQL's numeric cast).
fn millis(d: chrono::Duration) -> i64 {
    match d.num_microseconds() {
        Some(us) => (us.abs() + 500) / 1000 * us.signum(),
        None => d.num_milliseconds(),
    }
}

fn percentiles(mut values: Vec<i64>) -> Option<Percentiles> {
    if values.is_empty() {
        return None;
    }
    values.sort_unstable();
    Some(Percentiles {
        p50: disc(&values, 0.5),
        p95: disc(&values, 0.95),
        p99: disc(&values, 0.99),
    })
}

#[async_trait]
impl StatsStore for SqliteStore {
    /// Statistics of the newest `limit` runs of definition `name` (of `version`, when
    /// given) started at or after `since`.
    async fn run_stats(
        &self,
        name: &str,
        version: Option<i32>,
        since: DateTime<Utc>,
        limit: i64,
    ) -> Result<RunStats> {
        let rows: Vec<Recent> = sqlx::query_as(
            "SELECT status, start_time, end_time, input_bytes, output_bytes FROM runs
             WHERE workflow_name = ?1 AND start_time >= ?2
               AND (?3 IS NULL OR workflow_version = ?3)
             ORDER BY start_time DESC LIMIT ?4",
        )
        .bind(name)
        .bind(since)
        .bind(version)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        let mut by_status = BTreeMap::new();
        let mut durations = Vec::new();
        let mut inputs = Vec::new();
        let mut outputs = Vec::new();
        for (status, start, end, input, output) in &rows {
            *by_status.entry(status.clone()).or_insert(0) += 1;
            if let Some(end) = end {
                durations.push(millis(*end - *start));
            }
            inputs.extend(*input);
            outputs.extend(*output);
        }
        Ok(RunStats {
            count: i64::try_from(rows.len()).unwrap_or(i64::MAX),
            by_status,
            duration_ms: percentiles(durations),
            input_bytes: percentiles(inputs),
            output_bytes: percentiles(outputs),
        })
    }
}
