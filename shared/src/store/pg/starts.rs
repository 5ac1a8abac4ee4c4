//! Accepted workflow starts on PostgreSQL (see [`crate::store::starts`]).

use async_trait::async_trait;

use super::outbox;
use super::PgStore;
use crate::store::backend::StartStore;
use crate::store::outbox::OutboxMessage;
use crate::store::starts::{NewStart, StartOutcome, StartRow};
use crate::{Error, Result};

#[async_trait]
impl StartStore for PgStore {
    /// In one transaction: records `start` and inserts `messages` into the outbox (their
    /// ids are set). When the idempotency key is already taken nothing is written and the
    /// first start's workflow id is returned.
    ///
    /// Concurrent requests with the same key are safe: the second `INSERT` waits on the
    /// first one's uniqueness check and, once it commits, does nothing; the following
    /// `SELECT` (a new snapshot under READ COMMITTED) then sees the committed row.
    async fn accept_start(
        &self,
        start: &NewStart,
        messages: &mut [OutboxMessage],
    ) -> Result<StartOutcome> {
        let mut tx = self.pool.begin().await?;
        let inserted: Option<String> = sqlx::query_scalar(
            "INSERT INTO workflow_starts
                 (workflow_id, idempotency_key, workflow_name, workflow_version, input, correlation_id)
             VALUES ($1, $2, $3, $4, $5, $6)
             ON CONFLICT (idempotency_key) DO NOTHING
             RETURNING workflow_id",
        )
        .bind(&start.workflow_id)
        .bind(&start.idempotency_key)
        .bind(&start.workflow_name)
        .bind(start.workflow_version)
        .bind(&start.input)
        .bind(&start.correlation_id)
        .fetch_optional(&mut *tx)
        .await?;
        if inserted.is_none() {
            tx.rollback().await?;
            let key = start.idempotency_key.as_deref().unwrap_or_default();
            let existing: Option<String> = sqlx::query_scalar(
                "SELECT workflow_id FROM workflow_starts WHERE idempotency_key = $1",
            )
            .bind(key)
            .fetch_optional(&self.pool)
            .await?;
            // Start rows are never deleted, so a conflict without a row cannot happen
            // unless someone edits the table by hand: report it rather than guess.
            return existing
                .map(StartOutcome::Existing)
                .ok_or(Error::Store(sqlx::Error::RowNotFound));
        }
        outbox::insert(&mut tx, messages).await?;
        tx.commit().await?;
        Ok(StartOutcome::Accepted)
    }

    /// The accepted start of `workflow_id`, if any.
    async fn get_start(&self, workflow_id: &str) -> Result<Option<StartRow>> {
        Ok(sqlx::query_as::<_, StartRow>(
            "SELECT workflow_id, idempotency_key, workflow_name, workflow_version, input,
                    correlation_id, created_at
             FROM workflow_starts WHERE workflow_id = $1",
        )
        .bind(workflow_id)
        .fetch_optional(&self.pool)
        .await?)
    }
}
