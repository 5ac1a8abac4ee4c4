//! Integration tests of the history service against the real PostgreSQL
//! (`WEFT_TEST_PG_URL`, default `postgres://postgres@127.0.0.1:5432`) and RabbitMQ
//! (`WEFT_TEST_AMQP_URL`, default the local broker). One binary keeps link time down;
//! every test has a database and a bus namespace of its own.

mod dispatch;
mod hooks;
mod retention;
mod timers;
mod utils;
