//! Registered task definitions (Conductor's TaskDef), keyed by name.
//!
//! Stored as the JSON of the parsed [`TaskDef`]: Conductor's defaults filled in, every
//! field Weft does not interpret kept (`extra`). Callers validate before writing.

use serde_json::Value;

/// A stored task definition with its bookkeeping times.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct StoredTaskDef {
    /// Name.
    pub name: String,
    /// The TaskDef as registered (defaults filled in).
    pub definition: Value,
    /// When it was first registered.
    pub created_at: chrono::DateTime<chrono::Utc>,
    /// When it was last replaced.
    pub updated_at: chrono::DateTime<chrono::Utc>,
}
