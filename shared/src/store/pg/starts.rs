//! Accepted workflow starts on PostgreSQL (see [`crate::store::starts`]).

use async_trait::async_trait;

use super::PgStore;
use crate::store::auth::AuditEntry;
use crate::store::backend::StartStore;
use crate::store::outbox::OutboxMessage;
use crate::store::starts::{NewStart, StartOutcome, StartRow};
use crate::{Error, Result};

#[async_trait]
impl StartStore for PgStore {
    /// In one statement: records `start` and inserts `messages` into the outbox (their
    /// ids are set). When the idempotency key is already taken nothing is written and the
    /// first start's workflow id is returned.
    ///
    /// Concurrent requests with the same key are safe: the second `INSERT` waits on the
    /// first one's uniqueness check and, once it commits, does nothing; the following
    /// `SELECT` (a new statement, so a new snapshot under READ COMMITTED) then sees the
    /// committed row.
    async fn accept_start(
        &self,
        start: &NewStart,
        messages: &mut [OutboxMessage],
        audit: Option<&AuditEntry>,
    ) -> Result<StartOutcome> {
        let ids: Vec<uuid::Uuid> = messages.iter().map(|m| m.id).collect();
        let exchanges: Vec<&str> = messages.iter().map(|m| m.exchange.as_str()).collect();
        let keys: Vec<&str> = messages.iter().map(|m| m.routing_key.as_str()).collect();
        let bodies: Vec<&[u8]> = messages.iter().map(|m| m.body.as_slice()).collect();
        let traces: Vec<Option<&str>> = messages.iter().map(|m| m.traceparent.as_deref()).collect();
        let sql = match audit {
            None => START_SQL,
            Some(_) => AUDITED_START_SQL,
        };
        let query = sqlx::query_scalar::<_, i64>(sql)
            .bind(&start.workflow_id)
            .bind(&start.idempotency_key)
            .bind(&start.workflow_name)
            .bind(start.workflow_version)
            .bind(&start.input)
            .bind(&start.correlation_id)
            .bind(&ids)
            .bind(&exchanges)
            .bind(&keys)
            .bind(&bodies)
            .bind(&traces);
        let query = match audit {
            None => query,
            Some(e) => query
                .bind(e.at)
                .bind(&e.actor)
                .bind(&e.action)
                .bind(&e.reason)
                .bind(&e.method)
                .bind(&e.path),
        };
        let mut conn = self.held.starts.take().await?;
        let accepted = query.fetch_one(&mut *conn).await;
        conn.keep_if_sound(&accepted);
        let accepted: i64 = accepted?;
        if accepted == 1 {
            return Ok(StartOutcome::Accepted);
        }
        // The key was taken (the insert waited for a concurrent start with it to commit):
        // a new statement sees that start's row.
        let key = start.idempotency_key.as_deref().unwrap_or_default();
        let existing: Option<String> = sqlx::query_scalar(
            "SELECT workflow_id FROM workflow_starts WHERE idempotency_key = $1",
        )
        .bind(key)
        .fetch_optional(&self.pool)
        .await?;
        // Start rows are never deleted, so a conflict without a row cannot happen unless
        // someone edits the table by hand: report it rather than guess.
        existing
            .map(StartOutcome::Existing)
            .ok_or(Error::Store(sqlx::Error::RowNotFound))
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

/// The start row, and the outbox rows only when the start row went in (`o` runs whether
/// read or not, as every data-modifying CTE does).
macro_rules! start_rows {
    () => {
        "WITH s AS (
            INSERT INTO workflow_starts (workflow_id, idempotency_key, workflow_name,
                workflow_version, input, correlation_id)
            VALUES ($1, $2, $3, $4, $5, $6)
            ON CONFLICT (idempotency_key) DO NOTHING
            RETURNING workflow_id
        ), o AS (
            INSERT INTO outbox (id, exchange, routing_key, body, traceparent)
            SELECT m.* FROM UNNEST($7::uuid[], $8::text[], $9::text[], $10::bytea[],
                $11::text[]) AS m
            WHERE EXISTS (SELECT 1 FROM s)
        )"
    };
}

/// A start in one statement.
const START_SQL: &str = concat!(start_rows!(), " SELECT count(*) FROM s");

/// [`START_SQL`] with the caller's audit row, written only when the start row went in
/// (auth on; without auth no row is written, so the unaudited start costs nothing more).
const AUDITED_START_SQL: &str = concat!(
    start_rows!(),
    ", a AS (
        INSERT INTO audit_log (at, actor, action, target, workflow_id, reason, status,
            method, path)
        SELECT $12, $13, $14, $3, s.workflow_id, $15, NULL, $16, $17 FROM s
    ) SELECT count(*) FROM s"
);
