//! [`WorkerBuilder`]: registers handlers and sets the worker's identity, concurrency and
//! heartbeat pacing.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::heartbeat::Policy;
use super::{ActivityContext, ActivityError, Worker};
use crate::admin::Metrics;
use crate::messages::ActivityTask;
use crate::Config;

/// Activities running at once in one worker process when not configured.
pub const DEFAULT_CONCURRENCY: usize = 16;
/// How long a stopped handler may take to return before it is aborted, when not configured.
pub const DEFAULT_STOP_GRACE: Duration = Duration::from_secs(10);
/// How long a handler runs, by default, before the run is told it started.
pub const DEFAULT_START_REPORT_AFTER: Duration = Duration::from_millis(20);
/// Shortest heartbeat tick accepted.
const MIN_TICK: Duration = Duration::from_millis(10);

/// The future a type-erased handler returns.
pub(crate) type HandlerFuture = Pin<Box<dyn Future<Output = Result<Value, ActivityError>> + Send>>;

/// A registered handler, type-erased so that one worker can serve several task names.
pub(crate) type BoxedHandler =
    Arc<dyn Fn(ActivityTask, ActivityContext) -> HandlerFuture + Send + Sync>;

/// Builds a [`Worker`]; start with [`Worker::builder`].
pub struct WorkerBuilder {
    config: Config,
    worker_id: Option<String>,
    concurrency: usize,
    handlers: BTreeMap<String, BoxedHandler>,
    heartbeat: Policy,
    stop_grace: Duration,
    start_report_after: Duration,
    eager: bool,
    domain: Option<String>,
    metrics: Metrics,
}

impl std::fmt::Debug for WorkerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerBuilder")
            .field("namespace", &self.config.namespace)
            .field("worker_id", &self.worker_id)
            .field("concurrency", &self.concurrency)
            .field("task_names", &self.handlers.keys().collect::<Vec<_>>())
            .field("heartbeat", &self.heartbeat)
            .field("stop_grace", &self.stop_grace)
            .finish()
    }
}

impl WorkerBuilder {
    pub(crate) fn new(config: &Config) -> Self {
        Self {
            config: config.clone(),
            worker_id: None,
            concurrency: DEFAULT_CONCURRENCY,
            handlers: BTreeMap::new(),
            heartbeat: Policy::default(),
            stop_grace: DEFAULT_STOP_GRACE,
            start_report_after: DEFAULT_START_REPORT_AFTER,
            eager: true,
            domain: None,
            metrics: Metrics::new(),
        }
    }

    /// The id reported in results (`workerId`); defaults to `<hostname>-<pid>`.
    pub fn worker_id(mut self, id: impl Into<String>) -> Self {
        self.worker_id = Some(id.into());
        self
    }

    /// The most activities running at once in this process, across all task names
    /// (default [`DEFAULT_CONCURRENCY`]; clamped to `1..=65535`). It is also each
    /// queue's prefetch, so the broker never pushes more than the worker can start.
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n.clamp(1, usize::from(u16::MAX));
        self
    }

    /// Runs `f` for every activity of the task named `task_name` (queue
    /// `<namespace>.activity.<task_name>`). Registering the same name twice keeps the
    /// last handler.
    ///
    /// `Ok(output)` completes the activity with `output`; `Err` fails it, terminally or
    /// not (see [`ActivityError`]). A handler that panics fails the attempt (retryable).
    /// Heartbeats are sent for it automatically; use [`WorkerBuilder::activity`] to report
    /// progress or to notice that the attempt was stopped.
    pub fn handler<F, Fut>(self, task_name: impl Into<String>, f: F) -> Self
    where
        F: Fn(ActivityTask) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, ActivityError>> + Send + 'static,
    {
        self.activity(task_name, move |task, _ctx| f(task))
    }

    /// Like [`WorkerBuilder::handler`], with the attempt's [`ActivityContext`]: report
    /// progress with [`ActivityContext::heartbeat`], observe a STOP with
    /// [`ActivityContext::cancelled`] / [`ActivityContext::is_cancelled`].
    pub fn activity<F, Fut>(mut self, task_name: impl Into<String>, f: F) -> Self
    where
        F: Fn(ActivityTask, ActivityContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, ActivityError>> + Send + 'static,
    {
        let boxed: BoxedHandler =
            Arc::new(move |task, ctx| Box::pin(f(task, ctx)) as HandlerFuture);
        let name = task_name.into();
        if self.handlers.insert(name.clone(), boxed).is_some() {
            tracing::warn!(task_name = %name, "handler registered twice; the last one wins");
        }
        self
    }

    /// How often the heartbeat scheduler sends the heartbeats that are due, all in one
    /// request (default 1 s; at least 10 ms).
    pub fn heartbeat_tick(mut self, tick: Duration) -> Self {
        self.heartbeat.tick = tick.max(MIN_TICK);
        self
    }

    /// One heartbeat interval for every activity with a heartbeat timeout, instead of a
    /// third of its timeout clamped to [1 s, 30 s]. Activities without a timeout
    /// (`responseTimeoutSeconds` 0) get no heartbeats either way.
    pub fn heartbeat_interval(mut self, interval: Duration) -> Self {
        self.heartbeat.interval = Some(interval);
        self
    }

    /// With `false`, an activity is heartbeated only after its handler called
    /// [`ActivityContext::heartbeat`], so a handler that hangs is timed out by the
    /// heartbeat service (default `true`: every running activity is kept alive).
    pub fn automatic_heartbeats(mut self, automatic: bool) -> Self {
        self.heartbeat.automatic = automatic;
        self
    }

    /// How long a handler whose attempt was stopped may take to return before it is
    /// aborted (default [`DEFAULT_STOP_GRACE`]). Either way its result is not reported.
    pub fn stop_grace(mut self, grace: Duration) -> Self {
        self.stop_grace = grace;
        self
    }

    /// How long a handler runs before the run is told it started (task IN_PROGRESS,
    /// `task.started`; default [`DEFAULT_START_REPORT_AFTER`]). An activity that ends
    /// sooner is reported by its result alone, which carries its start time: no message
    /// and no decider commit for the start of a short activity.
    pub fn start_report_after(mut self, after: Duration) -> Self {
        self.start_report_after = after;
        self
    }

    /// Whether the worker offers, with each result, to run the run's next activity itself
    /// (default on): the decider then sends that activity to this process's own queue,
    /// already claimed for it — no claim round trip (docs/eager-dispatch.md). Needs
    /// RabbitMQ and permission to declare `<ns>.eager.*` queues; without them the worker
    /// goes without, and says so.
    pub fn eager_dispatch(mut self, on: bool) -> Self {
        self.eager = on;
        self
    }

    /// Takes only tasks of `domain` (Conductor's `taskToDomain`: a run started with
    /// `{"<task>": "<domain>"}` sends its tasks to that domain's queues, for its workers
    /// alone; docs/domains.md). Without it (the default) the worker takes the tasks of no
    /// domain. A worker of a domain makes no eager offers.
    pub fn domain(mut self, domain: impl Into<String>) -> Self {
        self.domain = Some(domain.into()).filter(|d| !d.is_empty() && d != "NO_DOMAIN");
        self
    }

    /// Where the worker's counters go (`weft_worker_heartbeat_requests`,
    /// `weft_worker_heartbeats`, `weft_worker_heartbeat_failures`,
    /// `weft_worker_activities_stopped`), e.g. the registry served on the process's
    /// `/metrics`. Without it they are kept but not exported.
    pub fn metrics(mut self, metrics: &Metrics) -> Self {
        self.metrics = metrics.clone();
        self
    }

    /// The worker, ready to [`run`](Worker::run).
    pub fn build(self) -> Worker {
        Worker {
            config: self.config,
            worker_id: self.worker_id.unwrap_or_else(default_worker_id),
            concurrency: self.concurrency,
            handlers: self.handlers,
            heartbeat: self.heartbeat,
            stop_grace: self.stop_grace,
            start_report_after: self.start_report_after,
            eager: self.eager,
            domain: self.domain,
            metrics: self.metrics,
        }
    }
}

/// `<hostname>-<pid>`, the hostname from `/etc/hostname` or `HOSTNAME`.
pub(crate) fn default_worker_id() -> String {
    let from_file = std::fs::read_to_string("/etc/hostname").ok();
    let host = pick_hostname(
        from_file.as_deref(),
        std::env::var("HOSTNAME").ok().as_deref(),
    );
    format!("{host}-{}", std::process::id())
}

fn pick_hostname(file: Option<&str>, env: Option<&str>) -> String {
    [file, env]
        .into_iter()
        .flatten()
        .map(str::trim)
        .find(|h| !h.is_empty())
        .unwrap_or("worker")
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostname_prefers_the_file_then_the_env() {
        assert_eq!(pick_hostname(Some("box1\n"), Some("env")), "box1");
        assert_eq!(pick_hostname(Some("  \n"), Some("env")), "env");
        assert_eq!(pick_hostname(None, None), "worker");
    }

    #[test]
    fn default_worker_id_ends_with_the_pid() {
        let id = default_worker_id();
        assert!(id.ends_with(&format!("-{}", std::process::id())), "{id}");
    }

    #[test]
    fn builder_sets_identity_concurrency_and_handlers() {
        let w = Worker::builder(&Config::default())
            .worker_id("w-1")
            .concurrency(0)
            .handler("b", |_t| async { Ok(Value::Null) })
            .handler("a", |t| async move { Ok(t.input) })
            .build();
        assert_eq!(w.worker_id(), "w-1");
        assert_eq!(w.concurrency(), 1);
        assert_eq!(w.task_names().collect::<Vec<_>>(), ["a", "b"]);
        let w = Worker::builder(&Config::default()).build();
        assert_eq!(w.concurrency(), DEFAULT_CONCURRENCY);
    }
}
