//! Start-up shared by the back-end services: serve `/healthz`, `/readyz` and
//! `/metrics` first (so a service waiting for its dependencies is visibly alive and
//! not ready), then connect the store and the bus, retrying until they answer.
//!
//! What a service runs on is its [`Backing`]: connected from the configuration
//! (PostgreSQL, RabbitMQ, Redis: a service's own binary), or handed over already open
//! (`weft dev`: SQLite, the in-process bus and in-memory caches, shared by every service
//! of the process). Services pass it through and never look inside.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::admin::{self, Metrics};
use crate::bus::Bus;
use crate::registry::Cache;
use crate::store::graph_cache::GraphCache;
use crate::store::Store;
use crate::{Config, Result};

/// Where a service's store, bus and caches come from.
#[derive(Debug, Clone, Default)]
pub enum Backing {
    /// Connect what the configuration names (`WEFT_DATABASE_URL`, `WEFT_AMQP_URL`,
    /// `WEFT_REDIS_URL`), retrying until each answers, and serve the admin endpoints on
    /// `WEFT_ADMIN_ADDR`.
    #[default]
    Connect,
    /// Use these, already open and shared with the other services of the process; the
    /// process serves health and metrics on its own (the gateway's port).
    Provided(Provided),
}

/// A store, a bus and caches opened once for every service of a process.
#[derive(Debug, Clone)]
pub struct Provided {
    /// The store.
    pub store: Store,
    /// The bus.
    pub bus: Bus,
    /// The heartbeat registry's cache.
    pub cache: Cache,
    /// The flowchart cache.
    pub graphs: GraphCache,
    /// One metrics registry for every service of the process, served on the gateway's
    /// `/metrics` (metrics are looked up by name, so services sharing a name share it).
    pub metrics: Metrics,
}

impl Backing {
    /// The registry a service registers its metrics in: its own, or the process's.
    pub fn metrics(&self) -> Metrics {
        match self {
            Backing::Connect => Metrics::new(),
            Backing::Provided(p) => p.metrics.clone(),
        }
    }

    /// The store and the bus: connected per the configuration, or the provided ones.
    pub async fn store_and_bus(
        &self,
        config: &Config,
        max_db_connections: u32,
        shutdown: &CancellationToken,
    ) -> Result<(Store, Bus)> {
        match self {
            Backing::Connect => {
                let store = Store::connect_with_replica(
                    &config.database_url,
                    config.database_read_url.as_deref(),
                    max_db_connections,
                    shutdown,
                )
                .await?;
                let names = config.names();
                let bus = Bus::connect(&config.amqp_url, names, shutdown.clone()).await?;
                tracing::info!(namespace = %config.namespace, "connected to PostgreSQL and RabbitMQ");
                Ok((store, bus))
            }
            Backing::Provided(p) => Ok((p.store.clone(), p.bus.clone())),
        }
    }

    /// The provided bus, if any.
    pub fn provided_bus(&self) -> Option<Bus> {
        match self {
            Backing::Connect => None,
            Backing::Provided(p) => Some(p.bus.clone()),
        }
    }

    /// The heartbeat registry's cache (Redis, or the provided one).
    pub fn cache(&self, config: &Config) -> Result<Cache> {
        match self {
            Backing::Connect => Cache::new(&config.redis_url, &config.namespace),
            Backing::Provided(p) => Ok(p.cache.clone()),
        }
    }

    /// The flowchart cache (Redis, or the provided one).
    pub fn graphs(&self, config: &Config) -> Result<GraphCache> {
        match self {
            Backing::Connect => GraphCache::new(&config.redis_url, &config.namespace),
            Backing::Provided(p) => Ok(p.graphs.clone()),
        }
    }
}

/// What a connected service works with.
#[derive(Debug, Clone)]
pub struct Deps {
    /// The store.
    pub store: Store,
    /// The bus.
    pub bus: Bus,
    /// The service's metrics registry (rendered on `/metrics`).
    pub metrics: Metrics,
    /// The admin server task, when the service serves its own; ends after shutdown.
    pub admin: Option<Arc<JoinHandle<()>>>,
}

/// Serves the admin endpoints on `WEFT_ADMIN_ADDR` (or `default_admin`), then connects
/// PostgreSQL (applying migrations) and RabbitMQ (declaring the topology).
pub async fn connect(
    config: &Config,
    default_admin: SocketAddr,
    max_db_connections: u32,
    shutdown: &CancellationToken,
) -> Result<Deps> {
    connect_on(
        &Backing::Connect,
        config,
        default_admin,
        max_db_connections,
        shutdown,
    )
    .await
}

/// [`connect`] on `backing`: a provided backing is used as it is, without an admin
/// server of the service's own.
pub async fn connect_on(
    backing: &Backing,
    config: &Config,
    default_admin: SocketAddr,
    max_db_connections: u32,
    shutdown: &CancellationToken,
) -> Result<Deps> {
    let metrics = backing.metrics();
    if let Backing::Provided(p) = backing {
        p.bus.count_publishes(&metrics);
        return Ok(Deps {
            store: p.store.clone(),
            bus: p.bus.clone(),
            metrics,
            admin: None,
        });
    }
    let deps: Arc<OnceLock<(Store, Bus)>> = Arc::new(OnceLock::new());
    let probe = deps.clone();
    let ready = admin::ready_check(move || {
        let probe = probe.clone();
        async move {
            let Some((store, bus)) = probe.get() else {
                return Err("connecting to PostgreSQL and RabbitMQ".to_owned());
            };
            if !bus.is_connected() {
                return Err("RabbitMQ connection is down".to_owned());
            }
            store.ping().await.map_err(|e| format!("PostgreSQL: {e}"))
        }
    });
    let addr = config.admin_addr.unwrap_or(default_admin);
    let (listener, local) = admin::bind(addr).await?;
    tracing::info!(addr = %local, "admin endpoints (/healthz /readyz /metrics) listening");
    let router = admin::router(metrics.clone(), ready);
    let token = shutdown.clone();
    let admin_task = tokio::spawn(async move {
        if let Err(e) = admin::serve_listener(listener, router, token).await {
            tracing::error!(error = %e, "admin endpoint failed");
        }
    });
    let (store, bus) = backing
        .store_and_bus(config, max_db_connections, shutdown)
        .await?;
    bus.count_publishes(&metrics);
    let _ = deps.set((store.clone(), bus.clone()));
    Ok(Deps {
        store,
        bus,
        metrics,
        admin: Some(Arc::new(admin_task)),
    })
}

/// The whole of a service binary's `main`: telemetry, configuration from the
/// environment, SIGINT/SIGTERM handling, then `run`; maps the outcome to an exit code.
/// An error caused by shutdown arriving first (anywhere in its source chain) is a clean
/// exit.
pub async fn main<F, Fut, E>(service: &str, run: F) -> std::process::ExitCode
where
    F: FnOnce(Config, CancellationToken) -> Fut,
    Fut: std::future::Future<Output = std::result::Result<(), E>>,
    E: std::error::Error + 'static,
{
    use std::process::ExitCode;
    let _telemetry = match crate::telemetry::init(service) {
        Ok(guard) => guard,
        Err(e) => {
            eprintln!("{service}: telemetry: {e}");
            return ExitCode::FAILURE;
        }
    };
    let config = match Config::from_env() {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "invalid configuration");
            return ExitCode::FAILURE;
        }
    };
    let shutdown = crate::shutdown::on_signals();
    match run(config, shutdown).await {
        Ok(()) => {
            tracing::info!("{service} stopped");
            ExitCode::SUCCESS
        }
        Err(e) if caused_by_shutdown(&e) => {
            tracing::info!("{service} stopped before it was connected");
            ExitCode::SUCCESS
        }
        Err(e) => {
            tracing::error!(error = %e, "{service} failed");
            ExitCode::FAILURE
        }
    }
}

/// Whether `e` or one of its sources is [`crate::Error::ShuttingDown`].
fn caused_by_shutdown(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(e);
    while let Some(err) = next {
        if matches!(
            err.downcast_ref::<crate::Error>(),
            Some(crate::Error::ShuttingDown)
        ) {
            return true;
        }
        next = err.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("wrapped")]
    struct Wrapper(#[source] crate::Error);

    #[test]
    fn shutdown_is_found_anywhere_in_the_source_chain() {
        assert!(caused_by_shutdown(&crate::Error::ShuttingDown));
        assert!(caused_by_shutdown(&Wrapper(crate::Error::ShuttingDown)));
        assert!(!caused_by_shutdown(&Wrapper(crate::Error::Bus(
            "down".into()
        ))));
    }
}
