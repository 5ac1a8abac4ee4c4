//! End-to-end tests: the real service binaries as separate processes, each test in
//! its own database, namespace and ports (so tests run in parallel, in any order).
//!
//! Build the binaries first: `cargo build --workspace --bins` (or `scripts/test`).

mod activities;
mod bad_input;
mod big_runs;
mod broker_failover;
mod budget;
mod callbacks;
mod children;
mod cli;
mod conductor_auth;
mod conductor_harness;
mod conductor_python;
mod conductor_samples;
mod conductor_sdk;
mod constructs;
mod crash;
mod dev;
mod domains;
mod eager;
mod event_handlers;
mod event_task;
mod events;
mod events_together;
mod execute;
mod greet;
mod heartbeats;
mod hooks;
mod http_tasks;
mod listener_restart;
mod long_settles;
mod operations;
mod outbound;
mod overload;
mod poison;
mod priority;
mod protocol;
mod python_worker;
mod quorum;
mod rabbitmq_users;
mod read_replica;
mod results_together;
mod run_routes;
mod sdk_heartbeats;
mod start_events;
mod starts_together;
mod system_tasks;
mod task_limits;
mod task_routes;
mod task_updates;
mod trace;
mod ui;
mod waiting;

use std::time::Duration;

use weft_e2e::{greet as g, Client, Suite};

/// Runs each scenario (an `async fn(Suite)`) on both back-ends, as the tests
/// `<scenario>::on_services` (the service binaries on PostgreSQL, RabbitMQ and Redis)
/// and `<scenario>::on_weft_dev` (`weft dev`: SQLite, the in-process bus, in-memory
/// caches): one scenario list, two back-ends.
#[macro_export]
macro_rules! on_both_backends {
    ($($scenario:ident),* $(,)?) => {$(
        mod $scenario {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn on_services() {
                let suite = weft_e2e::Suite::start_on(weft_e2e::Backend::Services)
                    .await
                    .unwrap();
                super::$scenario(suite).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn on_weft_dev() {
                let suite = weft_e2e::Suite::start_on(weft_e2e::Backend::Dev)
                    .await
                    .unwrap();
                super::$scenario(suite).await;
            }
        }
    )*};
}

/// Bound on one run reaching its final status. Generous: debug builds, several suites
/// on two cores at once. A bound, not a timing assertion.
pub const RUN_TIMEOUT: Duration = Duration::from_secs(120);

/// Waits for run `id` (started with `greet::input(first, n)`) to complete, then checks
/// its output, its tasks and its history; panics with the details otherwise.
pub async fn assert_greet_completed(client: &Client, id: &str, first: &str, n: u32) {
    let wf = client
        .wait_for_status(id, &["COMPLETED"], RUN_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("run {id} ({first}, {n}): {e:#}"));
    if let Err(e) = g::check_run(&wf, first, n) {
        panic!("run {id} ({first}, {n}): {e}");
    }
    let events = client
        .history(id)
        .await
        .unwrap_or_else(|e| panic!("history of {id}: {e:#}"));
    if let Err(e) = g::check_history(&events) {
        panic!("run {id} ({first}, {n}): {e}");
    }
}

/// Waits for run `id` to reach `status` and returns it; on a timeout or another final
/// status, panics with the run and every process's log path.
pub async fn ended(suite: &Suite, id: &str, status: &str) -> serde_json::Value {
    suite
        .client()
        .wait_for_status(id, &[status], RUN_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", suite.describe()))
}

/// Starts `count` greet runs at once, with inputs `("P<i>", i % 5 + 1)`; returns
/// `(id, first, n)` for each.
pub async fn start_greets(suite: &Suite, prefix: &str, count: usize) -> Vec<(String, String, u32)> {
    let starts = (0..count).map(|i| {
        let first = format!("{prefix}{i}");
        let n = (i % 5) as u32 + 1;
        let client = suite.client().clone();
        async move {
            let id = client
                .start("greet", g::input(&first, n))
                .await
                .unwrap_or_else(|e| panic!("starting greet({first}, {n}): {e:#}"));
            (id, first, n)
        }
    });
    futures_util::future::join_all(starts).await
}

/// Checks every run of `runs` completed correctly, all at once.
pub async fn assert_all_completed(suite: &Suite, runs: &[(String, String, u32)]) {
    let checks = runs
        .iter()
        .map(|(id, first, n)| assert_greet_completed(suite.client(), id, first, *n));
    futures_util::future::join_all(checks).await;
}
