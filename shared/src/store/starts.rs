//! Accepted workflow starts (`workflow_starts`).
//!
//! The gateway answers a start only after the start row and the `StartWorkflow` command
//! are committed together (outbox), so an accepted start is never lost (DESIGN.md §3.1).
//! The idempotency key is a UNIQUE column: a repeated key, even from concurrent requests,
//! finds the first start instead of creating a second run.

use async_trait::async_trait;

use super::backend::StartStore;
use super::pg::PgStore;
use chrono::{DateTime, Utc};
use serde_json::Value;

use super::outbox::{self, OutboxMessage};
use crate::{Error, Result};

/// A start to record.
#[derive(Debug, Clone)]
pub struct NewStart {
    /// The fresh workflow id.
    pub workflow_id: String,
    /// The caller's idempotency key, if any.
    pub idempotency_key: Option<String>,
    /// The definition's name.
    pub workflow_name: String,
    /// The definition's version.
    pub workflow_version: i32,
    /// The workflow input.
    pub input: Value,
    /// The caller's correlation id.
    pub correlation_id: Option<String>,
}

/// What [`Store::accept_start`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartOutcome {
    /// The start and its messages were committed; publish the messages now.
    Accepted,
    /// A start with the same idempotency key exists: this workflow id answers the
    /// request, and nothing was written.
    Existing(String),
}

/// An accepted start as stored.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct StartRow {
    /// The workflow id.
    pub workflow_id: String,
    /// The idempotency key, if any.
    pub idempotency_key: Option<String>,
    /// The definition's name.
    pub workflow_name: String,
    /// The definition's version.
    pub workflow_version: i32,
    /// The workflow input.
    pub input: Value,
    /// The caller's correlation id.
    pub correlation_id: Option<String>,
    /// When the start was accepted.
    pub created_at: DateTime<Utc>,
}

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
