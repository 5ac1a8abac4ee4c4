//! Reads for the flowchart (`GET /api/workflow/{id}/graph`): which run and version to
//! show, and the run's graph computed from ONE snapshot of its task rows and its frozen
//! definition (history event 1, read by primary key; history is never scanned).

use uuid::Uuid;

/// A run located for the graph: the cache key is `(run_id, version)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::FromRow)]
pub struct RunVersion {
    /// The run.
    pub run_id: Uuid,
    /// Its version (history length) now.
    pub version: i64,
}
