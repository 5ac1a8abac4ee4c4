//! Integration tests of the heartbeat service and the registry against the real
//! PostgreSQL (`WEFT_TEST_PG_URL`), Redis (`WEFT_TEST_REDIS_URL`) and RabbitMQ
//! (`WEFT_TEST_AMQP_URL`), local servers by default. One binary keeps link time down;
//! every test has a database, a bus namespace and a Redis key prefix of its own.

mod memory;
mod registry;
mod scan;
mod service;
mod utils;
