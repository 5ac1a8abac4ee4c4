//! Statistics of a definition's recent runs (`GET /api/metadata/workflow/{name}/stats`):
//! count by status, and percentiles of duration and input/output sizes.
//!
//! "Recent" is the runs started since a given time, newest first, at most a given
//! number (so a busy definition costs a bounded read of `runs_by_name_time`). Every run
//! counts, those replaced by a reset included (they did run).

use std::collections::BTreeMap;

/// p50, p95 and p99 of one measure (nearest rank: each is a value some run had).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Percentiles {
    /// Median.
    pub p50: i64,
    /// 95th percentile.
    pub p95: i64,
    /// 99th percentile.
    pub p99: i64,
}

/// What the statistics say.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RunStats {
    /// Runs in the window (at most the asked limit).
    pub count: i64,
    /// Runs per status.
    pub by_status: BTreeMap<String, i64>,
    /// Duration of the ended runs, in ms.
    pub duration_ms: Option<Percentiles>,
    /// Input sizes, bytes of JSON text.
    pub input_bytes: Option<Percentiles>,
    /// Output sizes of the runs that have an output.
    pub output_bytes: Option<Percentiles>,
}
