//! Task definitions on PostgreSQL (see [`crate::store::taskdefs`]).

use std::collections::HashSet;

use async_trait::async_trait;

use super::PgStore;
use crate::dsl::taskdef::TaskDef;
use crate::store::backend::TaskDefStore;
use crate::store::taskdefs::StoredTaskDef;
use crate::Result;

#[async_trait]
impl TaskDefStore for PgStore {
    /// Creates or replaces each of `defs` in one statement. When a name occurs more than
    /// once the last one wins, as if they were written in order.
    async fn put_task_defs(&self, defs: &[TaskDef]) -> Result<()> {
        // One INSERT cannot touch a row twice: keep each name's last occurrence.
        let mut seen = HashSet::new();
        let unique: Vec<&TaskDef> = defs
            .iter()
            .rev()
            .filter(|d| seen.insert(d.name.as_str()))
            .collect();
        if unique.is_empty() {
            return Ok(());
        }
        let json = serde_json::to_value(&unique)?;
        let written = sqlx::query(
            "INSERT INTO task_definitions (name, definition)
             SELECT d->>'name', d FROM jsonb_array_elements($1) AS d
             ON CONFLICT (name)
             DO UPDATE SET definition = EXCLUDED.definition, updated_at = now()",
        )
        .bind(&json)
        .execute(&self.pool)
        .await;
        self.definitions.changed();
        written?;
        Ok(())
    }

    /// The task definition `name`.
    async fn get_task_def(&self, name: &str) -> Result<Option<StoredTaskDef>> {
        Ok(sqlx::query_as::<_, StoredTaskDef>(
            "SELECT name, definition, created_at, updated_at
             FROM task_definitions WHERE name = $1",
        )
        .bind(name)
        .fetch_optional(&self.pool)
        .await?)
    }

    /// The task definitions among `names` that exist (one query; order unspecified).
    async fn get_task_defs(&self, names: &[String]) -> Result<Vec<StoredTaskDef>> {
        if names.is_empty() {
            return Ok(Vec::new());
        }
        Ok(sqlx::query_as::<_, StoredTaskDef>(
            "SELECT name, definition, created_at, updated_at
             FROM task_definitions WHERE name = ANY($1)",
        )
        .bind(names)
        .fetch_all(&self.pool)
        .await?)
    }

    /// Every task definition, ordered by name.
    async fn list_task_defs(&self) -> Result<Vec<StoredTaskDef>> {
        Ok(sqlx::query_as::<_, StoredTaskDef>(
            "SELECT name, definition, created_at, updated_at
             FROM task_definitions ORDER BY name",
        )
        .fetch_all(&self.pool)
        .await?)
    }

    /// Removes `name`; `false` when it did not exist. Started runs keep the copy frozen
    /// into their definition, so removal never changes them.
    async fn delete_task_def(&self, name: &str) -> Result<bool> {
        let done = sqlx::query("DELETE FROM task_definitions WHERE name = $1")
            .bind(name)
            .execute(&self.pool)
            .await;
        self.definitions.changed();
        Ok(done?.rows_affected() > 0)
    }
}
