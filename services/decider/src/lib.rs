//! The decider: the single writer of run state (DESIGN.md §2).
//!
//! It consumes the command shard queues (one single-active consumer per shard, so a
//! run's commands are applied one at a time, in order), applies each command, runs the
//! DSL interpreter — a pure function of (definition, history) → decisions — and commits
//! events, run state, task rows and outbox in one transaction with a version check,
//! then publishes the outbox and acknowledges.

pub mod apply;
pub mod committer;
pub mod eager_batcher;
pub mod eager_expired;
pub mod engine;
pub mod hooks;
pub mod interpreter;
pub mod lifecycle;
pub mod metrics;
pub mod poison;
pub mod recent_starts;
pub mod recent_verdicts;
pub mod reset;
pub mod result_batches;
pub mod skip;
pub mod spare_offers;
pub mod state;
pub mod task_index;
pub mod task_update;
pub mod watch;

#[cfg(test)]
mod callbacks_tests;
#[cfg(test)]
mod history_builder;
#[cfg(test)]
mod hooks_tests;
#[cfg(test)]
mod operations_tests;
#[cfg(test)]
mod rules_tests;
#[cfg(test)]
mod sim;
#[cfg(test)]
mod task_update_tests;

use std::net::SocketAddr;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use weft::bus::together::Together;
use weft::runtime::Backing;
use weft::Config;

/// The decider's admin port when `WEFT_ADMIN_ADDR` is unset.
pub const DEFAULT_ADMIN_ADDR: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 9091);

/// Runs the decider until `shutdown`; in-flight batches finish and are acknowledged,
/// nothing unfinished is.
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
        weft::runtime::connect_on(&backing, &config, DEFAULT_ADMIN_ADDR, 8, &shutdown).await?;
    let names = deps.bus.names().clone();
    let batch = usize::from(config.prefetch);
    let publishers = TaskTracker::new();
    let metrics = metrics::DeciderMetrics::new(&deps.metrics);
    let (committer, writers) = committer::Committer::start(
        deps.store.clone(),
        metrics.clone(),
        usize::from(config.decider_writers),
    );
    let mut consumers = Vec::new();
    let spares = spare_offers::SpareOffers::default();
    let eager_sender = eager_batcher::EagerBatcher::new(deps.bus.clone());
    // Not where a publish waits for the store's writer (`weft dev`): its journal writes a
    // commit's messages in one statement already, and a message waiting behind another
    // would wait for the writer twice (as results, docs/worker-sdk.md).
    let events_together = (config.events_together && !deps.bus.publishes_through_the_store())
        .then(|| Together::new(deps.bus.clone(), weft::event_batch::EVENTS_KIND));
    for k in 0..names.shards() {
        let shard = Arc::new(
            engine::Shard::new(
                deps.store.clone(),
                deps.bus.clone(),
                committer.clone(),
                publishers.clone(),
                metrics.clone(),
                engine::RunLimits {
                    max_loop_iterations: config.max_loop_iterations,
                    max_fork_branches: config.max_fork_branches,
                    max_variables_kb: config.max_variables_kb,
                },
                config.events.clone(),
            )
            .sharing_offers(spares.clone())
            .sharing_eager_sender(eager_sender.clone())
            .taking_results_together(config.results_together)
            .sending_events_together(events_together.clone()),
        );
        consumers.push(deps.bus.consume_batches(
            &names.command_queue(k),
            config.prefetch,
            batch,
            move |deliveries| {
                let shard = shard.clone();
                async move {
                    let unpacked = result_batches::unpack(deliveries);
                    let applied = match unpacked.deliveries.is_empty() {
                        true => Vec::new(),
                        false => shard.handle_batch(unpacked.deliveries).await,
                    };
                    unpacked.origins.repack(applied)
                }
            },
            shutdown.clone(),
        ));
    }
    consumers.push(eager_expired::consume(&deps.bus, shutdown.clone()));
    tracing::info!(
        shards = names.shards(),
        events = %config.events,
        events_together = events_together.is_some(),
        "decider consuming command shards"
    );
    shutdown.cancelled().await;
    for c in consumers {
        let _ = c.await;
    }
    // The shards are gone with their consumers: the committers drain and end.
    drop(committer);
    for w in writers {
        let _ = w.await;
    }
    // Committed messages still being published: give them the grace period; whatever
    // is left stays in the outbox for the sweeper.
    publishers.close();
    if tokio::time::timeout(config.shutdown_grace, publishers.wait())
        .await
        .is_err()
    {
        tracing::warn!("outbox publishes still running at shutdown; left for the sweeper");
    }
    tracing::info!("decider stopped");
    Ok(())
}
