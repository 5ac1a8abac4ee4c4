//! What every handler shares: the store, the bus, limits and metrics.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use weft::admin::{self, CounterFamily, HistogramFamily, Labels, Metrics, ReadyCheck};
use weft::bus::Bus;
use weft::registry::Registry;
use weft::store::graph_cache::GraphCache;
use weft::store::Store;

/// The gateway's shared state; cheap to clone (every field is a handle).
#[derive(Clone, Debug)]
pub struct AppState {
    /// The database.
    pub store: Store,
    /// The broker; its names give the exchanges and routing keys.
    pub bus: Bus,
    /// Largest request body accepted, in bytes.
    pub max_body_bytes: usize,
    /// HTTP request metrics, also served on `/metrics`.
    pub http: HttpMetrics,
    /// The registry `/metrics` renders.
    pub metrics: Metrics,
    /// The running-activity registry (HTTP workers' heartbeats, polls, results).
    pub registry: Registry,
    /// The flowchart cache (Redis); `None`: graphs come from PostgreSQL alone.
    pub graph_cache: Option<GraphCache>,
    /// Cancelled when the gateway shuts down: long polls answer at once.
    pub shutdown: CancellationToken,
    /// The UI's link to a trace (`WEFT_TRACE_URL`, with `{traceId}`).
    pub trace_url: Option<String>,
    /// Woken when this gateway changed the event handlers: their listeners follow at once
    /// (other gateways follow on their next refresh).
    pub event_handlers_changed: std::sync::Arc<tokio::sync::Notify>,
    /// HTTP workers' polls, written as Conductor's poll data once a second.
    pub polls: weft::store::poll_data::Recorder,
    /// Starts over HTTP in flight at once; one more is answered 429
    /// (`WEFT_MAX_STARTS_IN_FLIGHT`).
    pub start_permits: std::sync::Arc<tokio::sync::Semaphore>,
    /// Checks tokens (docs/security.md); disabled unless configured.
    pub auth: std::sync::Arc<crate::auth::Authenticator>,
    /// The resolved definitions of recent starts (docs/definition-cache.md).
    pub start_definitions: crate::start_definitions::StartDefinitions,
    /// Sends the starts accepted over HTTP for one command shard together when they meet
    /// behind a message in flight (`WEFT_STARTS_TOGETHER`; docs/decider.md, "Starts sent
    /// together"); `None`: each start is its own message.
    pub starts_together: Option<weft::bus::together::Together<Bus>>,
}

impl AppState {
    /// State over `store` and `bus`, registering the HTTP metrics in `metrics`.
    /// The activity registry works on PostgreSQL alone until [`AppState::with_registry`]
    /// gives it one with Redis.
    pub fn new(store: Store, bus: Bus, max_body_bytes: usize, metrics: Metrics) -> Self {
        Self {
            registry: Registry::new(store.clone(), None, Duration::from_secs(60)),
            graph_cache: None,
            shutdown: CancellationToken::new(),
            trace_url: None,
            event_handlers_changed: std::sync::Arc::default(),
            polls: weft::store::poll_data::Recorder::default(),
            start_permits: std::sync::Arc::new(tokio::sync::Semaphore::new(
                weft::Config::default().max_starts_in_flight,
            )),
            auth: std::sync::Arc::new(crate::auth::Authenticator::new(
                &weft::auth_settings::AuthSettings::default(),
            )),
            start_definitions: Default::default(),
            starts_together: None,
            store,
            bus,
            max_body_bytes,
            http: HttpMetrics::register(&metrics),
            metrics,
        }
    }

    /// Replaces the activity registry (e.g. with one that has the Redis cache).
    /// At most `limit` starts over HTTP in flight at once.
    pub fn with_start_limit(mut self, limit: usize) -> Self {
        self.start_permits = std::sync::Arc::new(tokio::sync::Semaphore::new(limit));
        self
    }

    /// Sends starts for one command shard together when `on`, unless the bus publishes
    /// through the store (`weft dev`: its in-process bus journals each publish in one
    /// statement already, and a start waiting behind another would wait for the store's
    /// writer twice).
    pub fn with_starts_together(mut self, on: bool) -> Self {
        self.starts_together = (on && !self.bus.publishes_through_the_store()).then(|| {
            weft::bus::together::Together::new(self.bus.clone(), weft::activity_batch::STARTS_KIND)
        });
        self
    }

    /// Checks tokens as `settings` say.
    pub fn with_auth(mut self, settings: &weft::auth_settings::AuthSettings) -> Self {
        self.auth = std::sync::Arc::new(crate::auth::Authenticator::new(settings));
        self
    }

    pub fn with_registry(mut self, registry: Registry) -> Self {
        self.registry = registry;
        self
    }

    /// Ends long polls when `shutdown` is cancelled.
    pub fn with_shutdown(mut self, shutdown: CancellationToken) -> Self {
        self.shutdown = shutdown;
        self
    }

    /// Links the UI's run pages to their traces (`{traceId}` in `url` is replaced).
    pub fn with_trace_url(mut self, url: Option<String>) -> Self {
        self.trace_url = url;
        self
    }

    /// Caches flowcharts in Redis.
    pub fn with_graph_cache(mut self, cache: GraphCache) -> Self {
        self.graph_cache = Some(cache);
        self
    }

    /// Readiness: the broker connection is up and the database answers.
    pub fn ready_check(&self) -> ReadyCheck {
        let store = self.store.clone();
        let bus = self.bus.clone();
        admin::ready_check(move || {
            let store = store.clone();
            let connected = bus.is_connected();
            async move {
                if !connected {
                    return Err("not connected to the broker".to_owned());
                }
                store
                    .ping()
                    .await
                    .map_err(|e| format!("database unreachable: {e}"))
            }
        })
    }
}

/// Request count and latency per route template (never per concrete path, which would
/// give one series per workflow id).
#[derive(Clone, Debug)]
pub struct HttpMetrics {
    requests: CounterFamily,
    latency: HistogramFamily,
    verdicts: CounterFamily,
    polled: CounterFamily,
}

impl HttpMetrics {
    fn register(metrics: &Metrics) -> Self {
        Self {
            requests: metrics.counter_family(
                "weft_gateway_http_requests",
                "HTTP requests answered, by method, route and status",
            ),
            latency: metrics.histogram_family(
                "weft_gateway_http_request_duration_seconds",
                "HTTP request latency in seconds, by method and route",
                prometheus_client::metrics::histogram::exponential_buckets(0.001, 2.0, 14),
            ),
            verdicts: metrics.counter_family(
                "weft_gateway_verdicts",
                "Decider verdicts the gateway waited for, by how they came: pushed (the \
                 decider's reply), read (the store, no reply came) or none (202)",
            ),
            polled: metrics.counter_family(
                "weft_gateway_polled_tasks",
                "Tasks handed to HTTP pollers, by how the gateway found them: taken from \
                 the queue (looked) or pushed by the broker to a waiting long poll (pushed)",
            ),
        }
    }

    /// Counts `n` tasks handed to pollers, found as `via` (`looked`, `pushed`).
    pub fn polled(&self, via: &str, n: usize) {
        if n == 0 {
            return;
        }
        let labels: Labels = vec![("via".to_owned(), via.to_owned())];
        self.polled.get_or_create(&labels).inc_by(n as u64);
    }

    /// Counts one verdict wait that ended as `source` (`pushed`, `read`, `none`).
    pub fn verdict(&self, source: &str) {
        let labels: Labels = vec![("source".to_owned(), source.to_owned())];
        self.verdicts.get_or_create(&labels).inc();
    }

    /// Records one answered request.
    pub fn observe(&self, method: &str, route: &str, status: u16, elapsed: Duration) {
        let base: Labels = vec![
            ("method".to_owned(), method.to_owned()),
            ("route".to_owned(), route.to_owned()),
        ];
        self.latency
            .get_or_create(&base)
            .observe(elapsed.as_secs_f64());
        let mut with_status = base;
        with_status.push(("status".to_owned(), status.to_string()));
        self.requests.get_or_create(&with_status).inc();
    }
}
