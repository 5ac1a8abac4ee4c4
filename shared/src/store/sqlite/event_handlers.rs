//! Event handlers on SQLite (see [`crate::store::event_handlers`]).

use async_trait::async_trait;
use serde_json::Value;

use super::SqliteStore;
use crate::store::backend::EventHandlerStore;
use crate::store::event_handlers::{EventExecution, NewEventExecution, StoredEventHandler};
use crate::Result;

#[async_trait]
impl EventHandlerStore for SqliteStore {
    async fn add_event_handler(
        &self,
        name: &str,
        event: &str,
        active: bool,
        definition: &Value,
    ) -> Result<bool> {
        let now = chrono::Utc::now();
        let done = sqlx::query(
            "INSERT INTO event_handlers (name, event, active, definition, created_at, updated_at)
             VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (name) DO NOTHING",
        )
        .bind(name)
        .bind(event)
        .bind(active)
        .bind(definition)
        .bind(now)
        .bind(now)
        .execute(&mut *self.writer.sqlx().await?)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn update_event_handler(
        &self,
        name: &str,
        event: &str,
        active: bool,
        definition: &Value,
    ) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE event_handlers SET event = ?, active = ?, definition = ?, updated_at = ?
             WHERE name = ?",
        )
        .bind(event)
        .bind(active)
        .bind(definition)
        .bind(chrono::Utc::now())
        .bind(name)
        .execute(&mut *self.writer.sqlx().await?)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn list_event_handlers(&self) -> Result<Vec<StoredEventHandler>> {
        Ok(sqlx::query_as::<_, StoredEventHandler>(
            "SELECT name, event, active, definition, created_at, updated_at
             FROM event_handlers ORDER BY name",
        )
        .fetch_all(&self.pool)
        .await?)
    }

    async fn delete_event_handler(&self, name: &str) -> Result<bool> {
        let done = sqlx::query("DELETE FROM event_handlers WHERE name = ?")
            .bind(name)
            .execute(&mut *self.writer.sqlx().await?)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn record_event_executions(&self, executions: &[NewEventExecution]) -> Result<()> {
        if executions.is_empty() {
            return Ok(());
        }
        let now = chrono::Utc::now();
        let mut tx = self.writer.begin().await?;
        for e in executions {
            sqlx::query(
                "INSERT INTO event_executions
                     (id, handler, event, message_id, action, status, output, created_at)
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            )
            .bind(crate::ids::new_id())
            .bind(&e.handler)
            .bind(&e.event)
            .bind(&e.message_id)
            .bind(&e.action)
            .bind(&e.status)
            .bind(&e.output)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn list_event_executions(
        &self,
        handler: &str,
        limit: i64,
    ) -> Result<Vec<EventExecution>> {
        Ok(sqlx::query_as::<_, EventExecution>(
            "SELECT id, handler, event, message_id, action, status, output, created_at
             FROM event_executions WHERE handler = ?
             ORDER BY created_at DESC, id DESC LIMIT ?",
        )
        .bind(handler)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?)
    }

    async fn prune_event_executions(&self, keep: i64) -> Result<u64> {
        let done = sqlx::query(
            "DELETE FROM event_executions WHERE id IN (
                 SELECT id FROM (
                     SELECT id, row_number() OVER (PARTITION BY handler
                         ORDER BY created_at DESC, id DESC) AS n
                     FROM event_executions
                 ) WHERE n > ?
             )",
        )
        .bind(keep)
        .execute(&mut *self.writer.sqlx().await?)
        .await?;
        Ok(done.rows_affected())
    }
}
