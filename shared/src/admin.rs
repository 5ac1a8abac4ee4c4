//! Health, readiness and metrics over HTTP, the same for every service.
//!
//! - `GET /healthz`: 200 `{"status":"ok"}` as long as the process serves requests (liveness).
//! - `GET /readyz`: 200 `{"status":"ready"}` when the service's [`ReadyCheck`] passes, 503
//!   `{"status":"not ready","reason":"…"}` otherwise (e.g. the broker is not reachable yet).
//! - `GET /metrics`: the [`Metrics`] registry in the OpenMetrics text format.
//!
//! A service builds one [`Metrics`], registers its counters and histograms at start-up, and
//! serves [`router`] with [`serve`] (or merges it into its own router, as the gateway does).

use std::any::Any;
use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use futures_util::future::BoxFuture;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Metric, Registry};
use serde_json::json;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::Result;

/// Content type of `GET /metrics`.
pub const METRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// How long `GET /readyz` waits for the [`ReadyCheck`] before answering 503.
pub const READY_CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// Label set of the metric families: `(name, value)` pairs, e.g.
/// `vec![("queue".into(), "tasks".into())]`.
pub type Labels = Vec<(String, String)>;

/// The readiness probe of a service: resolves to `Err(reason)` while the service cannot do
/// its work (dependency unreachable, still starting, shutting down). Build one with
/// [`ready_check`] or [`always_ready`].
pub type ReadyCheck =
    Arc<dyn Fn() -> BoxFuture<'static, std::result::Result<(), String>> + Send + Sync>;

/// Wraps an async closure as a [`ReadyCheck`].
pub fn ready_check<F, Fut>(check: F) -> ReadyCheck
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = std::result::Result<(), String>> + Send + 'static,
{
    Arc::new(move || Box::pin(check()))
}

/// A [`ReadyCheck`] that always passes, for processes without dependencies to wait for.
pub fn always_ready() -> ReadyCheck {
    ready_check(|| async { Ok(()) })
}

/// Builds the histograms of a [`Family`] with fixed buckets.
#[derive(Debug, Clone)]
pub struct HistogramBuckets(Arc<[f64]>);

impl MetricConstructor<Histogram> for HistogramBuckets {
    fn new_metric(&self) -> Histogram {
        Histogram::new(self.0.iter().copied())
    }
}

/// A counter family: one counter per label set.
pub type CounterFamily = Family<Labels, Counter>;

/// A histogram family: one histogram per label set, all with the same buckets.
pub type HistogramFamily = Family<Labels, Histogram, HistogramBuckets>;

/// The metrics of one process: a Prometheus registry behind an `Arc`, so clones are cheap
/// and share the registry.
///
/// Metric getters are idempotent: asking twice for the same name returns the same metric
/// (the help text and buckets of the first registration win). Asking for a name already
/// registered with another metric type logs an error and returns a metric that is not
/// exported. Counters are exported with the `_total` suffix, which the name must not carry.
#[derive(Clone, Default)]
pub struct Metrics {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Default)]
struct Inner {
    registry: Registry,
    /// Every registered metric by name, to hand out the same metric again.
    by_name: HashMap<String, Box<dyn Any + Send + Sync>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inner = self.lock();
        let mut names: Vec<&String> = inner.by_name.keys().collect();
        names.sort();
        f.debug_struct("Metrics").field("names", &names).finish()
    }
}

impl Metrics {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave the registry half-updated in a way
        // that matters for metrics; keep serving.
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Returns the metric registered as `name`, registering `make()` if there is none.
    fn get_or_register<M>(&self, name: &str, help: &str, make: impl FnOnce() -> M) -> M
    where
        M: Metric + Clone,
    {
        let mut inner = self.lock();
        if let Some(existing) = inner.by_name.get(name) {
            if let Some(metric) = existing.downcast_ref::<M>() {
                return metric.clone();
            }
            tracing::error!(
                metric = name,
                "metric already registered with another type; this one is not exported"
            );
            return make();
        }
        let metric = make();
        inner.registry.register(name, help, metric.clone());
        inner
            .by_name
            .insert(name.to_owned(), Box::new(metric.clone()));
        metric
    }

    /// A counter (exported as `<name>_total`).
    pub fn counter(&self, name: &str, help: &str) -> Counter {
        self.get_or_register(name, help, Counter::default)
    }

    /// `counter` as a registration of `counter` itself: a process-wide counter kept by
    /// code that has no registry at hand (the bus's transports).
    pub fn counter_of(&self, name: &str, help: &str, counter: &Counter) -> Counter {
        self.get_or_register(name, help, || counter.clone())
    }

    /// A counter per label set (exported as `<name>_total{…}`).
    pub fn counter_family(&self, name: &str, help: &str) -> CounterFamily {
        self.get_or_register(name, help, CounterFamily::default)
    }

    /// A gauge: a value that goes up and down (in-flight tasks, open connections).
    pub fn gauge(&self, name: &str, help: &str) -> Gauge {
        self.get_or_register(name, help, Gauge::default)
    }

    /// A histogram with the given bucket upper bounds (see
    /// [`prometheus_client::metrics::histogram::exponential_buckets`]).
    pub fn histogram(
        &self,
        name: &str,
        help: &str,
        buckets: impl IntoIterator<Item = f64>,
    ) -> Histogram {
        self.get_or_register(name, help, || Histogram::new(buckets))
    }

    /// A histogram per label set, all with the given bucket upper bounds.
    pub fn histogram_family(
        &self,
        name: &str,
        help: &str,
        buckets: impl IntoIterator<Item = f64>,
    ) -> HistogramFamily {
        self.get_or_register(name, help, || {
            HistogramFamily::new_with_constructor(HistogramBuckets(buckets.into_iter().collect()))
        })
    }

    /// Every registered metric in the OpenMetrics text format (ends with `# EOF`).
    pub fn render(&self) -> String {
        let mut out = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.lock().registry) {
            // Writing to a String does not fail; a metric's encoder might.
            tracing::error!(error = %e, "encoding metrics failed");
        }
        out
    }
}

/// State shared by the admin handlers.
#[derive(Clone)]
struct AdminState {
    metrics: Metrics,
    ready: ReadyCheck,
}

/// The admin routes (`/healthz`, `/readyz`, `/metrics`) for `metrics` and `ready`.
pub fn router(metrics: Metrics, ready: ReadyCheck) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .with_state(AdminState { metrics, ready })
}

async fn healthz() -> Json<serde_json::Value> {
    Json(json!({ "status": "ok" }))
}

async fn readyz(State(state): State<AdminState>) -> Response {
    let outcome = match tokio::time::timeout(READY_CHECK_TIMEOUT, (state.ready)()).await {
        Ok(outcome) => outcome,
        Err(_) => Err(format!(
            "readiness check did not answer within {READY_CHECK_TIMEOUT:?}"
        )),
    };
    match outcome {
        Ok(()) => (StatusCode::OK, Json(json!({ "status": "ready" }))).into_response(),
        Err(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({ "status": "not ready", "reason": reason })),
        )
            .into_response(),
    }
}

async fn metrics_text(State(state): State<AdminState>) -> Response {
    (
        [(header::CONTENT_TYPE, METRICS_CONTENT_TYPE)],
        state.metrics.render(),
    )
        .into_response()
}

/// Binds a TCP listener on `addr`; returns it with the address actually bound (useful with
/// port 0).
///
/// # Errors
/// [`crate::Error::Io`] when the address cannot be bound.
pub async fn bind(addr: SocketAddr) -> Result<(TcpListener, SocketAddr)> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    Ok((listener, local))
}

/// Binds `addr` and serves `router` until `shutdown` is cancelled, then stops accepting and
/// lets in-flight requests finish.
///
/// # Errors
/// [`crate::Error::Io`] when the address cannot be bound or the listener fails.
pub async fn serve(addr: SocketAddr, router: Router, shutdown: CancellationToken) -> Result<()> {
    let (listener, local) = bind(addr).await?;
    tracing::info!(addr = %local, "admin endpoint listening");
    serve_listener(listener, router, shutdown).await
}

/// Serves `router` on an already bound `listener` until `shutdown` is cancelled, then stops
/// accepting and lets in-flight requests finish.
///
/// # Errors
/// [`crate::Error::Io`] when the listener fails.
pub async fn serve_listener(
    listener: TcpListener,
    router: Router,
    shutdown: CancellationToken,
) -> Result<()> {
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    /// Serves `router` on an ephemeral port; returns its address and the stop token.
    async fn start(
        router: Router,
    ) -> (
        SocketAddr,
        CancellationToken,
        tokio::task::JoinHandle<Result<()>>,
    ) {
        let (listener, addr) = bind(SocketAddr::from(([127, 0, 0, 1], 0)))
            .await
            .expect("bind");
        let token = CancellationToken::new();
        let task = tokio::spawn(serve_listener(listener, router, token.clone()));
        (addr, token, task)
    }

    /// A minimal HTTP/1.1 GET; returns (status, head, body).
    async fn get(addr: SocketAddr, path: &str) -> (u16, String, String) {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.expect("write");
        let mut raw = String::new();
        stream.read_to_string(&mut raw).await.expect("read");
        let (head, body) = raw.split_once("\r\n\r\n").expect("a full response");
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .expect("a status code");
        (status, head.to_ascii_lowercase(), body.to_owned())
    }

    fn json(body: &str) -> serde_json::Value {
        serde_json::from_str(body).expect("a JSON body")
    }

    #[tokio::test]
    async fn healthz_and_readyz_answer_ok_when_ready() {
        let (addr, token, task) = start(router(Metrics::new(), always_ready())).await;

        let (status, _, body) = get(addr, "/healthz").await;
        assert_eq!(status, 200);
        assert_eq!(json(&body), json!({ "status": "ok" }));

        let (status, _, body) = get(addr, "/readyz").await;
        assert_eq!(status, 200);
        assert_eq!(json(&body), json!({ "status": "ready" }));

        token.cancel();
        task.await.expect("join").expect("serve ends cleanly");
    }

    #[tokio::test]
    async fn readyz_answers_503_with_the_reason_while_not_ready() {
        let check = ready_check(|| async { Err("broker unreachable".to_owned()) });
        let (addr, token, _task) = start(router(Metrics::new(), check)).await;

        let (status, _, body) = get(addr, "/readyz").await;
        assert_eq!(status, 503);
        assert_eq!(
            json(&body),
            json!({ "status": "not ready", "reason": "broker unreachable" })
        );
        let (status, _, _) = get(addr, "/healthz").await;
        assert_eq!(status, 200, "liveness does not depend on readiness");
        token.cancel();
    }

    #[tokio::test]
    async fn metrics_exposes_registered_metrics_as_openmetrics() {
        let metrics = Metrics::new();
        metrics
            .counter("tasks_dispatched", "Tasks dispatched")
            .inc_by(3);
        metrics
            .histogram("decision_seconds", "Decision latency", [0.1, 1.0])
            .observe(0.5);
        metrics
            .counter_family("messages", "Messages consumed")
            .get_or_create(&vec![("queue".to_owned(), "history".to_owned())])
            .inc();
        let (addr, token, _task) = start(router(metrics, always_ready())).await;

        let (status, head, body) = get(addr, "/metrics").await;
        assert_eq!(status, 200);
        assert!(
            head.contains("content-type: application/openmetrics-text"),
            "{head}"
        );
        assert!(body.contains("tasks_dispatched_total 3"), "{body}");
        assert!(
            body.contains("decision_seconds_bucket{le=\"1.0\"} 1"),
            "{body}"
        );
        assert!(
            body.contains("messages_total{queue=\"history\"} 1"),
            "{body}"
        );
        assert!(body.trim_end().ends_with("# EOF"), "{body}");
        token.cancel();
    }

    #[test]
    fn asking_twice_for_a_metric_returns_the_same_one() {
        let metrics = Metrics::new();
        metrics.counter("runs_started", "Runs started").inc();
        metrics.clone().counter("runs_started", "ignored").inc();
        let text = metrics.render();
        assert!(text.contains("runs_started_total 2"), "{text}");
        assert_eq!(
            text.matches("# TYPE runs_started counter").count(),
            1,
            "{text}"
        );
    }

    #[test]
    fn a_name_reused_with_another_type_is_not_exported_twice() {
        let metrics = Metrics::new();
        metrics.counter("inflight", "In flight").inc();
        metrics.gauge("inflight", "In flight").set(7);
        let text = metrics.render();
        assert!(text.contains("inflight_total 1"), "{text}");
        assert!(!text.contains("inflight 7"), "{text}");
    }

    #[tokio::test]
    async fn serve_returns_once_shutdown_is_cancelled() {
        let token = CancellationToken::new();
        let task = tokio::spawn(serve(
            SocketAddr::from(([127, 0, 0, 1], 0)),
            router(Metrics::new(), always_ready()),
            token.clone(),
        ));
        token.cancel();
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("serve stops promptly")
            .expect("join")
            .expect("serve ends cleanly");
    }

    #[tokio::test]
    async fn serve_reports_an_address_in_use() {
        let (_held, addr) = bind(SocketAddr::from(([127, 0, 0, 1], 0)))
            .await
            .expect("bind");
        let err = serve(
            addr,
            router(Metrics::new(), always_ready()),
            CancellationToken::new(),
        )
        .await
        .expect_err("the port is taken");
        assert!(matches!(err, crate::Error::Io(_)), "{err}");
    }
}
