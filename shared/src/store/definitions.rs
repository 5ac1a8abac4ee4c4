//! Registered workflow definitions, keyed by `(name, version)`.
//!
//! Definitions are stored as the JSON of the parsed [`WorkflowDef`](crate::dsl::WorkflowDef),
//! which keeps every Conductor field Weft does not interpret (`extra`), so register → get
//! round-trips.
//! Callers validate before writing: nothing here checks the DSL.

use serde_json::Value;

/// What [`Store::put_definition`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutOutcome {
    /// No definition had this `(name, version)`; it was inserted.
    Created,
    /// One existed and `overwrite` allowed replacing it.
    Replaced,
    /// One existed and `overwrite` was false; nothing was written.
    Exists,
}

/// A stored definition with its bookkeeping times.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct StoredDefinition {
    /// Name.
    pub name: String,
    /// Version.
    pub version: i32,
    /// The definition as registered.
    pub definition: Value,
    /// When it was first registered.
    pub created_at: chrono::DateTime<chrono::Utc>,
    /// When it was last replaced.
    pub updated_at: chrono::DateTime<chrono::Utc>,
}
