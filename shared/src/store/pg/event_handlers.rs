//! Event handlers on PostgreSQL (see [`crate::store::event_handlers`]).

use async_trait::async_trait;
use serde_json::Value;

use super::PgStore;
use crate::store::backend::EventHandlerStore;
use crate::store::event_handlers::{EventExecution, NewEventExecution, StoredEventHandler};
use crate::Result;

#[async_trait]
impl EventHandlerStore for PgStore {
    async fn add_event_handler(
        &self,
        name: &str,
        event: &str,
        active: bool,
        definition: &Value,
    ) -> Result<bool> {
        let done = sqlx::query(
            "INSERT INTO event_handlers (name, event, active, definition)
             VALUES ($1, $2, $3, $4) ON CONFLICT (name) DO NOTHING",
        )
        .bind(name)
        .bind(event)
        .bind(active)
        .bind(definition)
        .execute(&self.pool)
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
            "UPDATE event_handlers SET event = $2, active = $3, definition = $4,
                 updated_at = now()
             WHERE name = $1",
        )
        .bind(name)
        .bind(event)
        .bind(active)
        .bind(definition)
        .execute(&self.pool)
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
        let done = sqlx::query("DELETE FROM event_handlers WHERE name = $1")
            .bind(name)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn record_event_executions(&self, executions: &[NewEventExecution]) -> Result<()> {
        if executions.is_empty() {
            return Ok(());
        }
        let ids: Vec<uuid::Uuid> = executions.iter().map(|_| crate::ids::new_id()).collect();
        let handlers: Vec<&str> = executions.iter().map(|e| e.handler.as_str()).collect();
        let events: Vec<&str> = executions.iter().map(|e| e.event.as_str()).collect();
        let messages: Vec<Option<&str>> =
            executions.iter().map(|e| e.message_id.as_deref()).collect();
        let actions: Vec<Option<&str>> = executions.iter().map(|e| e.action.as_deref()).collect();
        let statuses: Vec<&str> = executions.iter().map(|e| e.status.as_str()).collect();
        let outputs: Vec<&Value> = executions.iter().map(|e| &e.output).collect();
        sqlx::query(
            "INSERT INTO event_executions (id, handler, event, message_id, action, status, output)
             SELECT * FROM UNNEST($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[],
                 $6::text[], $7::jsonb[])",
        )
        .bind(&ids)
        .bind(&handlers)
        .bind(&events)
        .bind(&messages)
        .bind(&actions)
        .bind(&statuses)
        .bind(&outputs)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn list_event_executions(
        &self,
        handler: &str,
        limit: i64,
    ) -> Result<Vec<EventExecution>> {
        Ok(sqlx::query_as::<_, EventExecution>(
            "SELECT id, handler, event, message_id, action, status, output, created_at
             FROM event_executions WHERE handler = $1
             ORDER BY created_at DESC, id DESC LIMIT $2",
        )
        .bind(handler)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?)
    }

    async fn prune_event_executions(&self, keep: i64) -> Result<u64> {
        let done = sqlx::query(
            "DELETE FROM event_executions e USING (
                 SELECT id, row_number() OVER (PARTITION BY handler
                     ORDER BY created_at DESC, id DESC) AS n
                 FROM event_executions
             ) ranked
             WHERE e.id = ranked.id AND ranked.n > $1",
        )
        .bind(keep)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected())
    }
}
