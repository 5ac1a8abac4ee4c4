//! Accepted workflow starts on SQLite (see [`crate::store::starts`]).

use async_trait::async_trait;
use rusqlite::{params, OptionalExtension};

use super::writer::{json, ts};
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
        self.writer
            .transaction(|tx| {
                let inserted: Option<String> = tx
                    .prepare_cached(
                        "INSERT INTO workflow_starts (workflow_id, idempotency_key,
                             workflow_name, workflow_version, input, correlation_id, created_at)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                         ON CONFLICT (idempotency_key) DO NOTHING
                         RETURNING workflow_id",
                    )?
                    .query_row(
                        params![
                            start.workflow_id,
                            start.idempotency_key,
                            start.workflow_name,
                            start.workflow_version,
                            json(&start.input),
                            start.correlation_id,
                            ts(chrono::Utc::now())
                        ],
                        |row| row.get(0),
                    )
                    .optional()?;
                if inserted.is_none() {
                    let key = start.idempotency_key.as_deref().unwrap_or_default();
                    let existing: Option<String> = tx
                        .prepare_cached(
                            "SELECT workflow_id FROM workflow_starts WHERE idempotency_key = ?1",
                        )?
                        .query_row([key], |row| row.get(0))
                        .optional()?;
                    // Nothing was written; committing the empty transaction ends it.
                    // Start rows are never deleted, so a conflict without a row cannot
                    // happen unless someone edits the table by hand: report it rather
                    // than guess.
                    return existing
                        .map(StartOutcome::Existing)
                        .ok_or(Error::Store(sqlx::Error::RowNotFound));
                }
                super::outbox::insert_sync(tx, messages)?;
                if let Some(e) = audit {
                    let entry = AuditEntry {
                        target: Some(start.workflow_name.clone()),
                        workflow_id: Some(start.workflow_id.clone()),
                        status: None,
                        ..e.clone()
                    };
                    super::auth::insert_audit_sync(tx, &entry)?;
                }
                Ok(StartOutcome::Accepted)
            })
            .await
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
