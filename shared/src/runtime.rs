//! Start-up shared by the back-end services: serve `/healthz`, `/readyz` and
//! `/metrics` first (so a service waiting for its dependencies is visibly alive and
//! not ready), then connect the store and the bus, retrying until they answer.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::admin::{self, Metrics};
use crate::bus::Bus;
use crate::store::Store;
use crate::topology::Names;
use crate::{Config, Result};

/// What a connected service works with.
#[derive(Debug, Clone)]
pub struct Deps {
    /// PostgreSQL.
    pub store: Store,
    /// RabbitMQ.
    pub bus: Bus,
    /// The service's metrics registry (rendered on `/metrics`).
    pub metrics: Metrics,
    /// The admin server task; ends after shutdown.
    pub admin: Arc<JoinHandle<()>>,
}

/// Serves the admin endpoints on `WEFT_ADMIN_ADDR` (or `default_admin`), then connects
/// PostgreSQL (applying migrations) and RabbitMQ (declaring the topology).
pub async fn connect(
    config: &Config,
    default_admin: SocketAddr,
    max_db_connections: u32,
    shutdown: &CancellationToken,
) -> Result<Deps> {
    let metrics = Metrics::new();
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
    let store = Store::connect(&config.database_url, max_db_connections, shutdown).await?;
    let names = Names::new(&config.namespace, config.shards);
    let bus = Bus::connect(&config.amqp_url, names, shutdown.clone()).await?;
    let _ = deps.set((store.clone(), bus.clone()));
    tracing::info!(namespace = %config.namespace, "connected to PostgreSQL and RabbitMQ");
    Ok(Deps {
        store,
        bus,
        metrics,
        admin: Arc::new(admin_task),
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
