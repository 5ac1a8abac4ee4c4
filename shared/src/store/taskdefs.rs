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

impl super::Store {
    /// Freezes the registered task definitions into `def`: every task (any type) without
    /// an inline `taskDefinition` gets the TaskDef registered under its name (read with one
    /// query), so a run applies the policies it started with even if the TaskDef changes
    /// later. Each is re-read through the model, so the frozen copy has every policy
    /// field, defaults included, whatever version of Weft stored it. A task whose TaskDef
    /// is not registered keeps none and runs with the default policies.
    pub async fn freeze_task_defs(&self, def: &mut crate::dsl::WorkflowDef) -> crate::Result<()> {
        use crate::dsl::taskdef::{self, TaskDef};
        let names: Vec<String> = taskdef::task_def_names(&def.tasks).into_iter().collect();
        if names.is_empty() {
            return Ok(());
        }
        let mut registered = std::collections::HashMap::new();
        for stored in self.get_task_defs(&names).await? {
            let parsed: TaskDef = serde_json::from_value(stored.definition)?;
            registered.insert(stored.name, serde_json::to_value(&parsed)?);
        }
        taskdef::freeze_task_defs(&mut def.tasks, &registered);
        Ok(())
    }
}
