//! The history service (DESIGN.md §2): keeper of the event log. In this version it
//! re-publishes outbox rows that a crashed decider or gateway committed but did not
//! publish (the sweeper), publishes durable timers when they are due (the timer
//! firer), sends hook deliveries (the dispatcher, docs/hooks.md), and deletes verdicts
//! on operator commands after their retention. Reads (status, history pages) are served
//! by the gateway from the same store.

pub mod hooks;
pub mod retention;
pub mod sweeper;
pub mod timers;

use std::net::SocketAddr;

use tokio_util::sync::CancellationToken;
use weft::runtime::Backing;
use weft::Config;

/// The history service's admin port when `WEFT_ADMIN_ADDR` is unset.
pub const DEFAULT_ADMIN_ADDR: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 9092);

/// Runs the history service until `shutdown`.
pub async fn run(config: Config, shutdown: CancellationToken) -> weft::Result<()> {
    run_on(Backing::Connect, config, shutdown).await
}

/// [`run`] on `backing` (`weft dev` provides an open store and bus).
pub async fn run_on(
    backing: Backing,
    config: Config,
    shutdown: CancellationToken,
) -> weft::Result<()> {
    let deps =
        weft::runtime::connect_on(&backing, &config, DEFAULT_ADMIN_ADDR, 4, &shutdown).await?;
    let sweeper = sweeper::Sweeper::new(
        deps.store.clone(),
        deps.bus.clone(),
        &deps.metrics,
        config.outbox_sweep_after,
    );
    let firer = timers::TimerFirer::new(deps.store.clone(), deps.bus.clone(), &deps.metrics);
    let retention =
        retention::Retention::new(deps.store.clone(), &deps.metrics, config.audit_retention);
    let dispatcher = hooks::Dispatcher::new(
        deps.store.clone(),
        deps.bus.clone(),
        &deps.metrics,
        hooks::HookConfig::from_env()?,
        weft::outbound::Guard::from_config(&config),
    )?;
    // Every loop ends at shutdown.
    tokio::join!(
        sweeper.run(shutdown.clone()),
        retention.run(shutdown.clone()),
        dispatcher.run(shutdown.clone()),
        firer.run(shutdown)
    );
    Ok(())
}
