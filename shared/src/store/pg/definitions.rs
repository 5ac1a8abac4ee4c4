//! Workflow definitions on PostgreSQL (see [`crate::store::definitions`]).

use async_trait::async_trait;

use super::PgStore;
use crate::dsl::WorkflowDef;
use crate::store::backend::DefinitionStore;
use crate::store::definitions::{PutOutcome, StoredDefinition};
use crate::store::definitions_epoch::DefinitionsEpoch;
use crate::Result;
use tokio_util::sync::CancellationToken;

#[async_trait]
impl DefinitionStore for PgStore {
    /// Writes `def` under its `(name, version)`. Without `overwrite` an existing version is
    /// left untouched and [`PutOutcome::Exists`] is returned; the check and the write are
    /// one statement, so two concurrent registrations cannot both "create".
    async fn put_definition(&self, def: &WorkflowDef, overwrite: bool) -> Result<PutOutcome> {
        let json = serde_json::to_value(def)?;
        // `xmax = 0` is true only for a freshly inserted tuple, which tells an insert
        // from an update in the same round trip.
        let sql = if overwrite {
            "INSERT INTO definitions (name, version, definition) VALUES ($1, $2, $3)
             ON CONFLICT (name, version)
             DO UPDATE SET definition = EXCLUDED.definition, updated_at = now()
             RETURNING (xmax = 0) AS inserted"
        } else {
            "INSERT INTO definitions (name, version, definition) VALUES ($1, $2, $3)
             ON CONFLICT (name, version) DO NOTHING
             RETURNING (xmax = 0) AS inserted"
        };
        let inserted: std::result::Result<Option<bool>, _> = sqlx::query_scalar(sql)
            .bind(&def.name)
            .bind(def.version)
            .bind(&json)
            .fetch_optional(&self.pool)
            .await;
        // Also when the outcome is unknown (an error after the commit): a needless move
        // only costs the caches a read.
        self.definitions.changed();
        Ok(match inserted? {
            Some(true) => PutOutcome::Created,
            Some(false) => PutOutcome::Replaced,
            None => PutOutcome::Exists,
        })
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
                     FROM definitions WHERE name = $1 AND version = $2",
                )
                .bind(name)
                .bind(v)
                .fetch_optional(&self.pool)
                .await?
            }
            None => {
                sqlx::query_as::<_, StoredDefinition>(
                    "SELECT name, version, definition, created_at, updated_at
                     FROM definitions WHERE name = $1 ORDER BY version DESC LIMIT 1",
                )
                .bind(name)
                .fetch_optional(&self.pool)
                .await?
            }
        };
        Ok(row)
    }

    /// Every registered definition, all versions, ordered by name then version
    /// (Conductor's `GET /metadata/workflow` lists all versions too).
    async fn list_definitions(&self) -> Result<Vec<StoredDefinition>> {
        Ok(sqlx::query_as::<_, StoredDefinition>(
            "SELECT name, version, definition, created_at, updated_at
             FROM definitions ORDER BY name, version",
        )
        .fetch_all(&self.pool)
        .await?)
    }

    /// Removes one version; `false` when it did not exist. Runs already started keep the
    /// copy of the definition they were started with, so removal never breaks them.
    async fn delete_definition(&self, name: &str, version: i32) -> Result<bool> {
        let done = sqlx::query("DELETE FROM definitions WHERE name = $1 AND version = $2")
            .bind(name)
            .bind(version)
            .execute(&self.pool)
            .await;
        self.definitions.changed();
        Ok(done?.rows_affected() > 0)
    }

    fn definitions_epoch(&self) -> &DefinitionsEpoch {
        &self.definitions
    }

    /// Listens to the `NOTIFY` that a trigger on both definition tables sends at each
    /// change (migration `0016`), on a connection of its own.
    fn watch_definitions(&self, shutdown: CancellationToken) {
        super::definitions_watch::spawn(self.pool.clone(), self.definitions.clone(), shutdown);
    }
}
