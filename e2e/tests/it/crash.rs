//! Invariant 1 (nothing is lost) and shard fail-over, with real SIGKILLs.

use std::collections::BTreeSet;
use std::time::Duration;

use weft::ids::shard_of;
use weft_e2e::{greet, poll_until, EnvOptions, Service, Suite, TestEnv};

use crate::{assert_all_completed, start_greets, RUN_TIMEOUT};

/// Rows in the runs table with `status` (any status when `None`).
async fn count_runs(suite: &Suite, status: Option<&str>) -> anyhow::Result<i64> {
    let n = sqlx::query_scalar("SELECT count(*) FROM runs WHERE $1::text IS NULL OR status = $1")
        .bind(status)
        .fetch_one(suite.env().pool())
        .await?;
    Ok(n)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_decider_and_history_mid_flight_loses_nothing() {
    let mut suite = Suite::start(TestEnv::new().await.unwrap()).await.unwrap();
    suite.client().register(&greet::definition()).await.unwrap();

    let runs = start_greets(&suite, "Kill", 30).await;
    let decider = suite.first(Service::Decider);
    let history = suite.first(Service::History);
    // Three kills at different points of progress: as soon as the decider has written
    // anything, then with about a third and two thirds of the runs completed.
    for (round, completed_at_least) in [0, 10, 20].into_iter().enumerate() {
        poll_until(
            RUN_TIMEOUT,
            Duration::from_millis(5),
            || format!("round {round}: never {completed_at_least} runs COMPLETED"),
            || async {
                let written = count_runs(&suite, None).await?;
                let done = count_runs(&suite, Some("COMPLETED")).await?;
                Ok((written > 0 && done >= completed_at_least).then_some(()))
            },
        )
        .await
        .unwrap();
        suite.kill(decider).await.unwrap();
        suite.kill(history).await.unwrap();
        let done = count_runs(&suite, Some("COMPLETED")).await.unwrap();
        eprintln!("round {round}: SIGKILLed decider and history with {done} of 30 runs completed");
        suite.restart(decider).await.unwrap();
        suite.restart(history).await.unwrap();
    }

    // Exactly once: check_run wants 3 tasks each COMPLETED once, check_history one
    // TaskCompleted per ref, contiguous event ids.
    assert_all_completed(&suite, &runs).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decider_failover_moves_shards_to_the_survivor() {
    const SHARDS: u16 = 4;
    let options = EnvOptions {
        shards: SHARDS,
        ..EnvOptions::default()
    };
    let mut suite = Suite::start(TestEnv::create(options).await.unwrap())
        .await
        .unwrap();
    // The first decider holds the shards (single active consumer); this one waits.
    suite.spawn(Service::Decider).await.unwrap();
    suite.client().register(&greet::definition()).await.unwrap();

    let mut runs = start_greets(&suite, "Before", 10).await;
    suite.kill(suite.first(Service::Decider)).await.unwrap();

    // Runs started after the kill cover every shard, so every shard must have moved.
    let mut covered = BTreeSet::new();
    for i in 0..200 {
        if covered.len() == usize::from(SHARDS) {
            break;
        }
        let first = format!("After{i}");
        let id = suite
            .client()
            .start("greet", greet::input(&first, 2))
            .await
            .unwrap();
        covered.insert(shard_of(&id, SHARDS));
        runs.push((id, first, 2));
    }
    assert_eq!(
        covered.len(),
        usize::from(SHARDS),
        "200 starts did not cover every shard"
    );
    assert_all_completed(&suite, &runs).await;
}
