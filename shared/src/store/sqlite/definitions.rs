//! Registered workflow definitions on SQLite (see [`crate::store::definitions`]).

use async_trait::async_trait;

use super::SqliteStore;
use crate::dsl::WorkflowDef;
use crate::store::backend::DefinitionStore;
use crate::store::definitions::{PutOutcome, StoredDefinition};
use crate::store::definitions_epoch::DefinitionsEpoch;
use crate::Result;
use tokio_util::sync::CancellationToken;

#[async_trait]
impl DefinitionStore for SqliteStore {
    /// Writes `def` under its `(name, version)`. Without `overwrite` an existing version is
    /// left untouched and [`PutOutcome::Exists`] is returned; the check and the write are
    /// one write transaction, so two concurrent registrations cannot both "create".
    async fn put_definition(&self, def: &WorkflowDef, overwrite: bool) -> Result<PutOutcome> {
        let json = serde_json::to_value(def)?;
        let now = chrono::Utc::now();
        let mut tx = self.writer.begin().await?;
        let inserted = sqlx::query(
            "INSERT INTO definitions (name, version, definition, created_at, updated_at)
             VALUES (?, ?, ?, ?, ?)
             ON CONFLICT (name, version) DO NOTHING",
        )
        .bind(&def.name)
        .bind(def.version)
        .bind(&json)
        .bind(now)
        .bind(now)
        .execute(&mut *tx)
        .await?
        .rows_affected()
            > 0;
        let outcome = match (inserted, overwrite) {
            (true, _) => PutOutcome::Created,
            (false, false) => PutOutcome::Exists,
            (false, true) => {
                sqlx::query(
                    "UPDATE definitions SET definition = ?, updated_at = ?
                     WHERE name = ? AND version = ?",
                )
                .bind(&json)
                .bind(now)
                .bind(&def.name)
                .bind(def.version)
                .execute(&mut *tx)
                .await?;
                PutOutcome::Replaced
            }
        };
        let committed = tx.commit().await;
        self.definitions.changed();
        committed?;
        Ok(outcome)
    }

    /// The definition `name` at `version`, or its highest version when `version` is `None`.
    async fn get_definition(
        &self,
        name: &str,
        version: Option<i32>,
    ) -> Result<Option<StoredDefinition>> {
        let row = match version {
            Some(v) => {
                sqlx::query_as::<_, StoredDefinition>(
                    "SELECT name, version, definition, created_at, updated_at
                     FROM definitions WHERE name = ? AND version = ?",
                )
                .bind(name)
                .bind(v)
                .fetch_optional(&self.pool)
                .await?
            }
            None => {
                sqlx::query_as::<_, StoredDefinition>(
                    "SELECT name, version, definition, created_at, updated_at
                     FROM definitions WHERE name = ? ORDER BY version DESC LIMIT 1",
                )
                .bind(name)
                .fetch_optional(&self.pool)
                .await?
            }
        };
        Ok(row)
    }

    /// Every registered definition, all versions, ordered by name then version.
    async fn list_definitions(&self) -> Result<Vec<StoredDefinition>> {
        Ok(sqlx::query_as::<_, StoredDefinition>(
            "SELECT name, version, definition, created_at, updated_at
             FROM definitions ORDER BY name, version",
        )
        .fetch_all(&self.pool)
        .await?)
    }

    /// Removes one version; `false` when it did not exist.
    async fn delete_definition(&self, name: &str, version: i32) -> Result<bool> {
        let done = sqlx::query("DELETE FROM definitions WHERE name = ? AND version = ?")
            .bind(name)
            .bind(version)
            .execute(&mut *self.writer.sqlx().await?)
            .await;
        self.definitions.changed();
        Ok(done?.rows_affected() > 0)
    }

    /// Watched from the start: the embedded database is this process's alone.
    fn definitions_epoch(&self) -> &DefinitionsEpoch {
        &self.definitions
    }

    /// Nothing to listen to: every change is made through this store.
    fn watch_definitions(&self, _shutdown: CancellationToken) {}
}
