//! Conductor's event handlers (`/api/event`) and what they did with each event.
//!
//! A handler is stored as the JSON it was registered with, beside the two columns the
//! gateway selects on (`event`, `active`); its meaning (sources, conditions, actions) is
//! the gateway's business (docs/event-handlers.md). Executions are kept per handler, the
//! newest first, and pruned to a bounded number per handler.

use serde_json::Value;
use uuid::Uuid;

/// A registered event handler.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct StoredEventHandler {
    /// Its name (unique).
    pub name: String,
    /// The event source it listens to, e.g. `amqp:orders`.
    pub event: String,
    /// Listened to and matched only when active.
    pub active: bool,
    /// The handler as registered.
    pub definition: Value,
    /// When it was first registered.
    pub created_at: chrono::DateTime<chrono::Utc>,
    /// When it was last replaced.
    pub updated_at: chrono::DateTime<chrono::Utc>,
}

/// One outcome of a handler on one event: an action's, or the handler's when its
/// condition skipped the event.
#[derive(Debug, Clone)]
pub struct NewEventExecution {
    /// The handler.
    pub handler: String,
    /// The event source the message came from.
    pub event: String,
    /// The message's id, when it had one.
    pub message_id: Option<String>,
    /// The action (`start_workflow`, ...); `None` when the condition skipped the event.
    pub action: Option<String>,
    /// COMPLETED, FAILED or SKIPPED.
    pub status: String,
    /// What the action produced (`workflowId`, ...) or why it failed or was skipped.
    pub output: Value,
}

/// A recorded execution.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct EventExecution {
    /// Its id.
    pub id: Uuid,
    /// The handler.
    pub handler: String,
    /// The event source.
    pub event: String,
    /// The message's id, when it had one.
    pub message_id: Option<String>,
    /// The action; `None` when skipped.
    pub action: Option<String>,
    /// COMPLETED, FAILED or SKIPPED.
    pub status: String,
    /// What it produced, or why not.
    pub output: Value,
    /// When.
    pub created_at: chrono::DateTime<chrono::Utc>,
}
