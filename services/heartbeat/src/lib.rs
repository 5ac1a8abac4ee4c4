//! The heartbeat service (DESIGN.md §2): registry of running activities, heartbeat
//! ingest and timeout scanner. In this version it connects, declares its queue
//! (`<ns>.heartbeat`, part of the core topology) and answers health; the registry and
//! scanner are the heartbeat issue's work.

use std::net::SocketAddr;

use tokio_util::sync::CancellationToken;
use weft::Config;

/// The heartbeat service's admin port when `WEFT_ADMIN_ADDR` is unset.
pub const DEFAULT_ADMIN_ADDR: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 9093);

/// Runs the heartbeat service until `shutdown`.
pub async fn run(config: Config, shutdown: CancellationToken) -> weft::Result<()> {
    let deps = weft::runtime::connect(&config, DEFAULT_ADMIN_ADDR, 2, &shutdown).await?;
    tracing::info!(queue = %deps.bus.names().heartbeat_queue(), "heartbeat service ready");
    shutdown.cancelled().await;
    Ok(())
}
