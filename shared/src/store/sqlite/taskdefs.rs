//! Registered task definitions on SQLite (see [`crate::store::taskdefs`]).

use std::collections::HashSet;

use async_trait::async_trait;

use super::SqliteStore;
use crate::dsl::taskdef::TaskDef;
use crate::store::backend::TaskDefStore;
use crate::store::taskdefs::StoredTaskDef;
use crate::Result;

#[async_trait]
impl TaskDefStore for SqliteStore {
    /// Creates or replaces each of `defs` in one transaction. When a name occurs more than
    /// once the last one wins, as if they were written in order.
    async fn put_task_defs(&self, defs: &[TaskDef]) -> Result<()> {
        let mut seen = HashSet::new();
        let unique: Vec<&TaskDef> = defs
            .iter()
            .rev()
            .filter(|d| seen.insert(d.name.as_str()))
            .collect();
        if unique.is_empty() {
            return Ok(());
        }
        let now = chrono::Utc::now();
        let mut tx = self.writer.begin().await?;
        for def in unique {
            sqlx::query(
                "INSERT INTO task_definitions (name, definition, created_at, updated_at)
                 VALUES (?, ?, ?, ?)
                 ON CONFLICT (name)
                 DO UPDATE SET definition = excluded.definition, updated_at = excluded.updated_at",
            )
            .bind(&def.name)
            .bind(serde_json::to_value(def)?)
            .bind(now)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        }
        let committed = tx.commit().await;
        self.definitions.changed();
        committed?;
        Ok(())
    }

    /// The task definition `name`.
    async fn get_task_def(&self, name: &str) -> Result<Option<StoredTaskDef>> {
        Ok(sqlx::query_as::<_, StoredTaskDef>(
            "SELECT name, definition, created_at, updated_at
             FROM task_definitions WHERE name = ?",
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
             FROM task_definitions WHERE name IN (SELECT value FROM json_each(?))",
        )
        .bind(serde_json::to_string(names)?)
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

    /// Removes `name`; `false` when it did not exist.
    async fn delete_task_def(&self, name: &str) -> Result<bool> {
        let done = sqlx::query("DELETE FROM task_definitions WHERE name = ?")
            .bind(name)
            .execute(&mut *self.writer.sqlx().await?)
            .await;
        self.definitions.changed();
        Ok(done?.rows_affected() > 0)
    }
}
