//! `weft-http-worker`: the built-in worker for Conductor `HTTP` tasks (DESIGN.md §6).
//!
//! The decider publishes every task of type `HTTP` to the activity queue `HTTP`
//! (`<namespace>.activity.HTTP`) with the task's resolved `inputParameters` as input.
//! This worker consumes that queue through the worker SDK ([`weft::worker`]), performs
//! the request ([`request`] reads the input, [`execute`] sends it and shapes the output)
//! and reports the result:
//!
//! - a 2xx answer completes the task with `{"response": {"statusCode", "headers",
//!   "body", "reasonPhrase"}}`;
//! - any other status, a connection error or a timeout is a retryable failure whose
//!   reason names the status (with the start of the body) or the error, so the task
//!   definition's retry policy applies;
//! - a missing or malformed input field is a terminal failure naming the field;
//! - a call the outbound guard refuses (an address outside the public ranges not in
//!   `WEFT_OUTBOUND_ALLOW`, docs/outbound.md) is a terminal failure saying why.
//!
//! Configuration: the usual `WEFT_*` environment (DESIGN.md §8), plus
//! `WEFT_HTTP_WORKER_CONCURRENCY`, the most requests in flight at once (default
//! [`DEFAULT_CONCURRENCY`]). Plain `http://` only unless built with the `https` feature
//! (reqwest with rustls), which is off by default because it is heavy to build.

pub mod execute;
pub mod request;

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use weft::runtime::Backing;
use weft::worker::{ActivityTask, Worker};
use weft::Config;

pub use execute::HttpExecutor;

/// The task name (and activity queue) of Conductor HTTP tasks.
pub const TASK_NAME: &str = "HTTP";
/// Requests in flight at once when `WEFT_HTTP_WORKER_CONCURRENCY` is unset.
pub const DEFAULT_CONCURRENCY: usize = 32;
/// The environment variable setting the concurrency.
pub const CONCURRENCY_ENV: &str = "WEFT_HTTP_WORKER_CONCURRENCY";

/// Reads the concurrency from `value` (the variable's content, if set): a positive
/// integer, [`DEFAULT_CONCURRENCY`] when unset or empty.
pub fn concurrency_from(value: Option<&str>) -> weft::Result<usize> {
    let Some(raw) = value.map(str::trim).filter(|v| !v.is_empty()) else {
        return Ok(DEFAULT_CONCURRENCY);
    };
    match raw.parse::<usize>() {
        Ok(n) if (1..=usize::from(u16::MAX)).contains(&n) => Ok(n),
        _ => Err(weft::Error::Config(format!(
            "{CONCURRENCY_ENV} must be an integer from 1 to 65535, got {raw:?}"
        ))),
    }
}

/// The worker serving the `HTTP` queue with at most `concurrency` requests at once.
pub fn worker(config: &Config, concurrency: usize) -> Worker {
    let executor = Arc::new(HttpExecutor::new(weft::outbound::Guard::from_config(
        config,
    )));
    Worker::builder(config)
        .concurrency(concurrency)
        .handler(TASK_NAME, move |task: ActivityTask| {
            let executor = executor.clone();
            async move { executor.execute(&task.input).await }
        })
        .build()
}

/// Runs the HTTP worker until `shutdown`; running requests finish within
/// `config.shutdown_grace`, what does not finish goes back to the queue.
pub async fn run(config: Config, shutdown: CancellationToken) -> weft::Result<()> {
    run_on(Backing::Connect, config, shutdown).await
}

/// [`run`] on `backing` (`weft dev` provides the in-process bus).
pub async fn run_on(
    backing: Backing,
    config: Config,
    shutdown: CancellationToken,
) -> weft::Result<()> {
    let concurrency = concurrency_from(std::env::var(CONCURRENCY_ENV).ok().as_deref())?;
    let worker = worker(&config, concurrency);
    tracing::info!(
        worker_id = worker.worker_id(),
        concurrency,
        https = cfg!(feature = "https"),
        outbound_allow = %config.outbound_allow.clone().unwrap_or_default(),
        "weft-http-worker serving the {TASK_NAME} queue"
    );
    worker.run_on_backing(&backing, shutdown).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concurrency_defaults_and_is_checked() {
        assert_eq!(concurrency_from(None).unwrap(), DEFAULT_CONCURRENCY);
        assert_eq!(concurrency_from(Some(" ")).unwrap(), DEFAULT_CONCURRENCY);
        assert_eq!(concurrency_from(Some("8")).unwrap(), 8);
        for bad in ["0", "-1", "many", "70000"] {
            let e = concurrency_from(Some(bad)).unwrap_err().to_string();
            assert!(e.contains(CONCURRENCY_ENV), "{e}");
        }
    }

    #[test]
    fn the_worker_serves_the_http_queue() {
        let w = worker(&Config::default(), 4);
        assert_eq!(w.task_names().collect::<Vec<_>>(), [TASK_NAME]);
        assert_eq!(w.concurrency(), 4);
    }
}
