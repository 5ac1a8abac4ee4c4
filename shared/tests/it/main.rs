//! Integration tests of the `weft` crate against the real services (RabbitMQ at
//! `amqp://guest:guest@127.0.0.1:5672/%2f`). One binary keeps link time down.

mod bus;
mod bus_get;
mod rpc;
mod store;
mod store_b;
mod worker;
