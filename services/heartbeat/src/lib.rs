//! The heartbeat service (DESIGN.md §2): the registry of running activities.
//!
//! - `ingest`: consumes `<ns>.heartbeat` (attempts started, heartbeat batches answered on
//!   the request's `reply_to`, attempts finished, attempts stopped by the decider).
//! - `scanner`: times out attempts whose heartbeats stopped, every scan interval.
//! - `purge`: deletes ended attempts after their retention, in batches.
//! - `metrics`: the registry's counters on `/metrics`.
//!
//! The work itself is [`weft::registry`], shared with the gateway (HTTP workers).

pub mod group;
pub mod ingest;
pub mod metrics;
pub mod pending;
pub mod purge;
pub mod scanner;

use std::net::SocketAddr;

use tokio_util::sync::CancellationToken;
use weft::registry::Registry;
use weft::runtime::Backing;
use weft::Config;

/// The heartbeat service's admin port when `WEFT_ADMIN_ADDR` is unset.
pub const DEFAULT_ADMIN_ADDR: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 9093);

/// PostgreSQL connections: ingest handlers, the scanner and the purge share them.
const DB_CONNECTIONS: u32 = 8;

/// Runs the heartbeat service until `shutdown`: stops taking messages, lets the handlers
/// in flight finish (bounded; nothing unfinished is acknowledged) and ends the loops.
pub async fn run(config: Config, shutdown: CancellationToken) -> weft::Result<()> {
    run_on(Backing::Connect, config, shutdown).await
}

/// [`run`] on `backing` (`weft dev` provides an open store, bus and cache).
pub async fn run_on(
    backing: Backing,
    config: Config,
    shutdown: CancellationToken,
) -> weft::Result<()> {
    let deps = weft::runtime::connect_on(
        &backing,
        &config,
        DEFAULT_ADMIN_ADDR,
        DB_CONNECTIONS,
        &shutdown,
    )
    .await?;
    let cache = backing.cache(&config)?;
    let registry = Registry::new(
        deps.store.clone(),
        Some(cache),
        config.heartbeat_write_interval,
    )
    .with_metrics(&deps.metrics);
    let consumer = ingest::start(
        &deps.bus,
        registry.clone(),
        config.prefetch,
        shutdown.clone(),
    );
    tracing::info!(
        queue = %deps.bus.names().heartbeat_queue(),
        write_interval_ms = config.heartbeat_write_interval.as_millis() as u64,
        scan_interval_ms = config.heartbeat_scan_interval.as_millis() as u64,
        "heartbeat service ready"
    );
    let scanner = scanner::Scanner::new(registry.clone(), deps.bus.clone(), &deps.metrics);
    let purge = purge::Purge::new(registry.clone(), config.task_check_retention, &deps.metrics);
    let exporter = metrics::Exporter::new(registry, &deps.metrics);
    // Every loop ends at shutdown; the consumer after its in-flight handlers.
    let (consumed, (), (), ()) = tokio::join!(
        consumer,
        scanner.run(config.heartbeat_scan_interval, shutdown.clone()),
        purge.run(shutdown.clone()),
        exporter.run(shutdown)
    );
    if let Err(e) = consumed {
        tracing::error!(error = %e, "heartbeat consumer ended abnormally");
    }
    Ok(())
}
