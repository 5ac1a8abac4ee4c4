//! Weft's common crate: the protocol every service speaks (ids, envelope, commands,
//! events), the workflow DSL, and the plumbing shared by the services and by users'
//! workers (bus over RabbitMQ, PostgreSQL store, telemetry, configuration, the worker SDK).

pub mod activity_batch;
pub mod admin;
pub mod auth_settings;
pub mod bus;
pub mod config;
pub mod dsl;
pub mod envelope;
pub mod error;
pub mod event_batch;
pub mod event_location;
pub mod events;
pub mod hooks;
pub mod ids;
pub mod listener;
pub mod messages;
pub mod outbound;
pub mod purge;
pub mod registry;
pub mod runtime;
pub mod secret;
pub mod shutdown;
pub mod store;
pub mod telemetry;
#[cfg(feature = "testing")]
pub mod testing;
pub mod topology;
pub mod worker;

pub use config::Config;
pub use envelope::Envelope;
pub use error::{Error, Result};
