//! Conductor's event handlers (docs/event-handlers.md): `/api/event` registers handlers
//! that listen to a queue or an exchange and, when an event's condition holds, start runs,
//! complete or fail tasks, or terminate runs.
//!
//! `model` reads and checks a handler, `routes` is the REST resource, `listeners` keeps a
//! consumer per queue that active handlers listen to, `actions` does what a handler says.

pub mod actions;
pub mod listeners;
pub mod model;
pub mod routes;
