//! Integration tests of the `weft` crate against the real services (RabbitMQ at
//! `amqp://guest:guest@127.0.0.1:5672/%2f`) and against the in-process bus. One binary
//! keeps link time down.

/// Runs each scenario `name(kind: Kind)` of the module against both transports, as the
/// tests `name::amqp` and `name::in_process`.
macro_rules! both_transports {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[tokio::test]
                async fn amqp() {
                    super::$name(crate::bus::Kind::Amqp).await
                }

                #[tokio::test]
                async fn in_process() {
                    super::$name(crate::bus::Kind::InProcess).await
                }
            }
        )*
    };
}

mod bus;
mod bus_get;
mod bus_local;
mod bus_wait;
mod rpc;
mod store;
mod worker;
