//! Weft's end-to-end harness: starts the real service binaries as separate OS
//! processes against a fresh PostgreSQL database and a random RabbitMQ namespace,
//! and talks to them the way users do (REST through the gateway, raw AMQP).
//!
//! Shared by the end-to-end tests (`tests/it`), the demo (`weft-demo`) and the
//! benchmark (`weft-bench`).
//!
//! ```no_run
//! # async fn example() -> anyhow::Result<()> {
//! use weft_e2e::{greet, Suite, TestEnv};
//! let suite = Suite::start(TestEnv::new().await?).await?;
//! suite.client().register(&greet::definition()).await?;
//! let id = suite.client().start("greet", greet::input("Ada", 3)).await?;
//! let run = suite
//!     .client()
//!     .wait_for_status(&id, &["COMPLETED"], std::time::Duration::from_secs(60))
//!     .await?;
//! assert_eq!(run["output"], greet::expected_output("Ada", 3));
//! # Ok(())
//! # }
//! ```

pub mod amqp;
pub mod client;
pub mod env;
pub mod greet;
pub mod infra;
pub mod metrics;
pub mod process;
pub mod python;
pub mod starts;
pub mod suite;

pub use client::{Client, HistoryEvent, RawResponse};
pub use env::{EnvOptions, TestEnv};
pub use process::Service;
pub use suite::{Backend, ProcId, Suite};

use std::time::Duration;

/// Polls `probe` every `every` until it yields `Some`, or fails after `timeout` with an
/// error built by `what` (called once, on timeout). The one waiting loop of the harness:
/// nothing here sleeps a fixed time and hopes.
pub async fn poll_until<T, F, Fut>(
    timeout: Duration,
    every: Duration,
    what: impl FnOnce() -> String,
    mut probe: F,
) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Option<T>>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = probe().await? {
            return Ok(v);
        }
        if tokio::time::Instant::now() >= deadline {
            anyhow::bail!("timed out after {timeout:?}: {}", what());
        }
        tokio::time::sleep(every).await;
    }
}
