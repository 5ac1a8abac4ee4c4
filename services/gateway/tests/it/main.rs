//! The gateway's integration tests, against the real PostgreSQL and RabbitMQ.

mod auth;
mod conductor_api;
mod definitions;
mod event_handlers;
mod executions;
mod graph;
mod heartbeats;
mod reads;
mod requests;
mod search;
mod server;
mod start_events;
mod starts;
mod taskdefs;
mod tasks;
mod utils;
