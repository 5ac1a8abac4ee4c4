//! The worker SDK: run activities of the task names you register, in your own process.
//!
//! A worker consumes `<namespace>.activity.<task_name>` for every handler it has, runs the
//! handler for each activity task, and publishes the result (`ActivityCompleted` or
//! `ActivityFailed`) to the run's command shard, acknowledging the task only once the
//! broker confirmed the result. Delivery is at-least-once: a worker that dies mid-activity,
//! or cannot publish the result, leaves the task on its queue and it runs again; the
//! decider ignores a duplicate result for an attempt it already recorded.
//!
//! - **Concurrency**: at most [`WorkerBuilder::concurrency`] handlers run at once in the
//!   process, across all task names.
//! - **Failures**: a handler's [`ActivityError`] is reported as is (terminal or retryable);
//!   a panicking handler is reported as a retryable failure; a message that is not an
//!   activity task goes to the queue's dead-letter queue.
//! - **Tracing**: each activity runs in an `activity` span that joins the workflow's trace.
//! - **Shutdown**: when the token is cancelled the worker takes no new activity, lets the
//!   running ones finish and publish within `config.shutdown_grace`, then returns; what did
//!   not finish is not acknowledged and goes back to its queue.
//!
//! # Heartbeats and stopping
//!
//! Before running a handler the worker **claims** the attempt: one `ClaimAttempt` request
//! to the heartbeat service (a [`Bus::call`](crate::bus::Bus::call), transient), answered
//! once the attempt's registry row moved from SCHEDULED to RUNNING. An attempt stopped
//! while it waited in its queue (skipped, its run terminated or reset) or held by another
//! worker is refused: the task is acknowledged and the handler never runs. Without an
//! answer the task goes back to its queue untouched. The decider ends the row when it
//! applies the result, so nothing more is sent. While handlers run, one scheduler per
//! process keeps them alive:
//!
//! - Every [`WorkerBuilder::heartbeat_tick`] (1 s) it sends **one** `Heartbeats` request
//!   (a [`Bus::call`](crate::bus::Bus::call)) carrying every activity that is due, split
//!   only above 10,000 beats: 10,000 running activities cost about one request a second.
//! - An activity is due every third of its `responseTimeoutSeconds`, clamped to
//!   [[`MIN_INTERVAL`], [`MAX_INTERVAL`]] (or [`WorkerBuilder::heartbeat_interval`]),
//!   counted from when its last beat was sent. Due times are absolute: after a stall the
//!   overdue activities are sent once, never a burst of the missed beats. An activity
//!   with `responseTimeoutSeconds` 0 is not watched and gets no beats.
//! - A beat answered THROTTLED is sent again first, within the same tick; a beat whose
//!   request failed (timeout, connection lost) is sent again later in the same tick, at
//!   most three times, then waits for the next tick.
//! - A beat answered STOP (the run was terminated, reset or skipped; the attempt timed
//!   out) or NOT_FOUND cancels the handler's [`ActivityContext`] and drops the activity
//!   from the schedule. The handler has [`WorkerBuilder::stop_grace`] to return, then it
//!   is aborted; either way its result is **not** published (the decider would ignore
//!   it) and its task is acknowledged, so it never runs again.
//!
//! Handlers registered with [`WorkerBuilder::activity`] get the [`ActivityContext`]:
//! [`ActivityContext::heartbeat`] sends progress details with the next tick,
//! [`ActivityContext::cancelled`] resolves on STOP. Heartbeats are automatic unless
//! [`WorkerBuilder::automatic_heartbeats`] is off; then only the handler's own calls
//! keep its attempt alive, and a handler that hangs is timed out. The scheduler's
//! counters go to [`WorkerBuilder::metrics`]. `docs/worker-sdk.md` explains the design.
//!
//! ```no_run
//! use serde_json::json;
//! use weft::worker::{ActivityError, Worker};
//!
//! # async fn example() -> weft::Result<()> {
//! let config = weft::Config::from_env()?;
//! let shutdown = tokio_util::sync::CancellationToken::new();
//! Worker::builder(&config)
//!     .concurrency(8)
//!     .handler("shout", |task| async move {
//!         let text = task.input["text"]
//!             .as_str()
//!             .ok_or_else(|| ActivityError::terminal("input `text` must be a string"))?;
//!         Ok(json!({ "text": text.to_uppercase() }))
//!     })
//!     .activity("crunch", |task, ctx| async move {
//!         for step in 0..100 {
//!             tokio::select! {
//!                 _ = ctx.cancelled() => return Err(ActivityError::terminal("stopped")),
//!                 _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
//!             }
//!             ctx.heartbeat(json!({ "step": step })); // progress, optional
//!         }
//!         Ok(task.input)
//!     })
//!     .build()
//!     .run(shutdown)
//!     .await
//! # }
//! ```

mod builder;
mod claims;
mod context;
mod error;
mod heartbeat;
mod runner;
mod stats;

use std::collections::BTreeMap;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

pub use self::builder::{WorkerBuilder, DEFAULT_CONCURRENCY, DEFAULT_STOP_GRACE};
pub use self::context::ActivityContext;
pub use self::error::ActivityError;
pub use self::heartbeat::{MAX_INTERVAL, MIN_INTERVAL};
pub use crate::messages::ActivityTask;

use self::builder::BoxedHandler;
use self::heartbeat::Policy;
use crate::{Config, Result};

/// A configured worker; build one with [`Worker::builder`], then [`run`](Worker::run) it.
pub struct Worker {
    config: Config,
    worker_id: String,
    concurrency: usize,
    handlers: BTreeMap<String, BoxedHandler>,
    heartbeat: Policy,
    stop_grace: Duration,
    start_report_after: Duration,
    eager: bool,
    /// Takes only the tasks of this domain (docs/domains.md).
    domain: Option<String>,
    metrics: crate::admin::Metrics,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("namespace", &self.config.namespace)
            .field("worker_id", &self.worker_id)
            .field("concurrency", &self.concurrency)
            .field("task_names", &self.handlers.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Worker {
    /// Starts building a worker that talks to the broker and namespace of `config`.
    pub fn builder(config: &Config) -> WorkerBuilder {
        WorkerBuilder::new(config)
    }

    /// The id reported in results.
    pub fn worker_id(&self) -> &str {
        &self.worker_id
    }

    /// The most activities running at once.
    pub fn concurrency(&self) -> usize {
        self.concurrency
    }

    /// The task names this worker serves, in order.
    pub fn task_names(&self) -> impl Iterator<Item = &str> + '_ {
        self.handlers.keys().map(String::as_str)
    }

    /// Connects to the broker as a client of the services (waiting with back-off for the
    /// broker, then for the services' exchanges), declares the activity queues and runs
    /// activities until `shutdown` is cancelled; then drains within
    /// `config.shutdown_grace` and returns.
    ///
    /// Credentials that only let the worker consume its queues are enough: a declaration
    /// refused for want of permission is left to the decider, which declares each
    /// activity queue before its first task (docs/rabbitmq-users.md).
    ///
    /// Fails with [`Error::Config`](crate::Error::Config) when no handler is registered,
    /// and with a bus error when the broker refuses the topology or a consumer stops for
    /// good; a shutdown requested while still connecting is a clean `Ok(())`.
    pub async fn run(self, shutdown: CancellationToken) -> Result<()> {
        runner::run(self, None, shutdown).await
    }

    /// [`Worker::run`] on an open bus instead of connecting one from the configuration:
    /// a worker embedded in the process of `weft dev` takes its activities from the
    /// in-process bus.
    pub async fn run_on(self, bus: crate::bus::Bus, shutdown: CancellationToken) -> Result<()> {
        runner::run(self, Some(bus), shutdown).await
    }

    /// [`Worker::run`] on a service's [`crate::runtime::Backing`]: the provided bus, or
    /// one connected from the configuration.
    pub async fn run_on_backing(
        self,
        backing: &crate::runtime::Backing,
        shutdown: CancellationToken,
    ) -> Result<()> {
        runner::run(self, backing.provided_bus(), shutdown).await
    }
}
