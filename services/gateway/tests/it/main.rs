//! The gateway's integration tests, against the real PostgreSQL and RabbitMQ.

mod definitions;
mod reads;
mod requests;
mod server;
mod starts;
mod taskdefs;
mod utils;
