//! Accepted workflow starts on SQLite (see [`crate::store::starts`]).

use async_trait::async_trait;

use super::SqliteStore;
use crate::store::auth::AuditEntry;
use crate::store::backend::StartStore;
use crate::store::outbox::OutboxMessage;
use crate::store::starts::{NewStart, StartOutcome, StartRow};
use crate::{Error, Result};

#[async_trait]
impl StartStore for SqliteStore {
    /// In one write transaction: records `start` and inserts `messages` into the outbox.
    /// When the idempotency key is already taken nothing is written and the first start's
    /// workflow id is returned. Publishes nothing (the caller does, after the commit).
    ///
    /// Concurrent requests with the same key are serialized by the write lock
    /// (`BEGIN IMMEDIATE`): the second one sees the first one's committed row.
    async fn accept_start(
        &self,
        start: &NewStart,
        messages: &mut [OutboxMessage],
        audit: Option<&AuditEntry>,
    ) -> Result<StartOutcome> {
        let mut tx = self.write_tx().await?;
        let inserted: Option<String> = sqlx::query_scalar(
            "INSERT INTO workflow_starts (workflow_id, idempotency_key, workflow_name,
                 workflow_version, input, correlation_id, created_at)
             VALUES (?, ?, ?, ?, ?, ?, ?)
             ON CONFLICT (idempotency_key) DO NOTHING
             RETURNING workflow_id",
        )
        .bind(&start.workflow_id)
        .bind(&start.idempotency_key)
        .bind(&start.workflow_name)
        .bind(start.workflow_version)
        .bind(&start.input)
        .bind(&start.correlation_id)
        .bind(chrono::Utc::now())
        .fetch_optional(&mut *tx)
        .await?;
        if inserted.is_none() {
            let key = start.idempotency_key.as_deref().unwrap_or_default();
            let existing: Option<String> = sqlx::query_scalar(
                "SELECT workflow_id FROM workflow_starts WHERE idempotency_key = ?",
            )
            .bind(key)
            .fetch_optional(&mut *tx)
            .await?;
            tx.rollback().await?;
            // Start rows are never deleted, so a conflict without a row cannot happen
            // unless someone edits the table by hand: report it rather than guess.
            return existing
                .map(StartOutcome::Existing)
                .ok_or(Error::Store(sqlx::Error::RowNotFound));
        }
        super::outbox::insert(&mut tx, messages).await?;
        if let Some(e) = audit {
            let entry = AuditEntry {
                target: Some(start.workflow_name.clone()),
                workflow_id: Some(start.workflow_id.clone()),
                status: None,
                ..e.clone()
            };
            super::auth::insert_audit(&mut tx, &entry).await?;
        }
        tx.commit().await?;
        Ok(StartOutcome::Accepted)
    }

    /// The accepted start of `workflow_id`, if any.
    async fn get_start(&self, workflow_id: &str) -> Result<Option<StartRow>> {
        Ok(sqlx::query_as::<_, StartRow>(
            "SELECT workflow_id, idempotency_key, workflow_name, workflow_version, input,
                    correlation_id, created_at
             FROM workflow_starts WHERE workflow_id = ?",
        )
        .bind(workflow_id)
        .fetch_optional(&self.pool)
        .await?)
    }
}
