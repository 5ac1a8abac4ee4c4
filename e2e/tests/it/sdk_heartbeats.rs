//! The worker SDK's heartbeat scheduler against the real services: one worker keeps 2,000
//! concurrent activities alive through the real heartbeat service with about one request
//! per tick, for longer than their heartbeat timeout, and every run completes.
//!
//! The services are separate processes; the worker runs in the test process so the test
//! can read its counters (`weft_worker_heartbeat_requests`, `weft_worker_heartbeats`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use weft::admin::Metrics;
use weft::worker::{ActivityError, Worker};
use weft_e2e::{poll_until, EnvOptions, Service, Suite, TestEnv};

use crate::RUN_TIMEOUT;

const TASK: &str = "sdk_hold";
const RUNS: usize = 2_000;
/// Heartbeat timeout of the task: the SDK beats every two seconds (a third). Not
/// shorter: on two cores shared with the rest of the suite, the heartbeat service can
/// fall seconds behind 2,000 beats a tick, and a late beat is a false timeout.
const HEARTBEAT_TIMEOUT_S: u64 = 6;
/// The worker's scheduler tick, equal to the beat interval: every attempt is due at
/// every tick, so one request carries them all.
const TICK: Duration = Duration::from_secs(2);
/// Beats each activity gets while held: five intervals, longer than the timeout.
const HELD_BEATS: u64 = 5;

/// A counter's value in a Prometheus text exposition (0 when absent).
fn counter_in(text: &str, name: &str) -> u64 {
    let line = format!("{name}_total ");
    text.lines()
        .find_map(|l| l.strip_prefix(&line))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

/// A counter of the worker's registry.
fn counter(metrics: &Metrics, name: &str) -> u64 {
    counter_in(&metrics.render(), name)
}

/// A counter of the heartbeat service, read from its `/metrics`.
async fn service_counter(suite: &Suite, name: &str) -> u64 {
    let addr = suite.proc(suite.first(Service::Heartbeat)).addr;
    let text = reqwest::get(format!("http://{addr}/metrics"))
        .await
        .and_then(|r| r.error_for_status())
        .expect("the heartbeat service's /metrics")
        .text()
        .await
        .unwrap();
    counter_in(&text, name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_worker_keeps_two_thousand_activities_alive_with_about_one_request_per_tick() {
    // The service default for the outbox sweeper (5 s), not the suite's 500 ms: with
    // 2,000 runs started at once on two cores, publishing a commit's messages can take
    // longer than 500 ms, and the sweeper would then publish every activity again. The
    // duplicates are harmless (a late result is ignored) but double the load of a test
    // about heartbeats, until attempts time out behind the backlog.
    let options = EnvOptions {
        outbox_sweep_after_ms: None,
        ..EnvOptions::default()
    };
    let mut env = TestEnv::create(options).await.unwrap();
    env.activity_queues.push(env.names().activity_queue(TASK));
    let mut suite = Suite::start_with(env, &Service::CORE).await.unwrap();
    let client = suite.client().clone();
    // No retry: an attempt the heartbeat service timed out would fail its run.
    let taskdef = json!([{
        "name": TASK, "retryCount": 0, "timeoutSeconds": 0,
        "responseTimeoutSeconds": HEARTBEAT_TIMEOUT_S, "ownerEmail": "e2e@weft.dev"
    }]);
    let r = client
        .raw(
            reqwest::Method::POST,
            "/api/metadata/taskdefs",
            Some(("application/json", taskdef.to_string().into_bytes())),
        )
        .await
        .unwrap();
    assert!(
        (200..300).contains(&r.status),
        "taskdef: {} {}",
        r.status,
        r.text
    );
    client
        .register(&json!({"name": "sdk_hold_wf", "version": 1, "tasks": [
            {"name": TASK, "taskReferenceName": "hold", "type": "SIMPLE"}]}))
        .await
        .unwrap();

    let env = suite.env();
    let config = weft::Config {
        namespace: env.namespace.clone(),
        amqp_url: env.amqp_url.clone(),
        shards: env.options.shards,
        ..weft::Config::default()
    };
    let metrics = Metrics::new();
    let (started, release) = (Arc::new(AtomicUsize::new(0)), CancellationToken::new());
    let (count, gate) = (started.clone(), release.clone());
    let worker = Worker::builder(&config)
        .worker_id("sdk-e2e")
        .concurrency(RUNS)
        .heartbeat_tick(TICK)
        .metrics(&metrics)
        .activity(TASK, move |_task, ctx| {
            let (count, gate) = (count.clone(), gate.clone());
            async move {
                count.fetch_add(1, Ordering::Relaxed);
                tokio::select! {
                    _ = gate.cancelled() => Ok(json!({ "held": true })),
                    _ = ctx.cancelled() => Err(ActivityError::terminal(format!(
                        "stopped: {}", ctx.stop_reason().unwrap_or_default()
                    ))),
                }
            }
        })
        .build();
    let shutdown = CancellationToken::new();
    let run = tokio::spawn(worker.run(shutdown.clone()));

    for chunk in (0..RUNS).collect::<Vec<_>>().chunks(100) {
        let starts = chunk
            .iter()
            .map(|i| client.start("sdk_hold_wf", json!({ "i": i })));
        for id in join_all(starts).await {
            id.unwrap();
        }
    }
    poll_until(
        RUN_TIMEOUT,
        Duration::from_millis(50),
        || {
            format!(
                "only {} of {RUNS} activities started",
                started.load(Ordering::Relaxed)
            )
        },
        // At least: a delivery may come twice (at-least-once), each one counted.
        || async { Ok((started.load(Ordering::Relaxed) >= RUNS).then_some(())) },
    )
    .await
    .unwrap();

    // Hold every activity for several heartbeat intervals, longer than its timeout.
    let (requests0, beats0) = (
        counter(&metrics, "weft_worker_heartbeat_requests"),
        counter(&metrics, "weft_worker_heartbeats"),
    );
    let clock = std::time::Instant::now();
    let want = beats0 + HELD_BEATS * RUNS as u64;
    poll_until(
        RUN_TIMEOUT,
        Duration::from_millis(100),
        || "the activities were not heartbeated".into(),
        || async { Ok((counter(&metrics, "weft_worker_heartbeats") >= want).then_some(())) },
    )
    .await
    .unwrap();
    let elapsed = clock.elapsed();
    let requests = counter(&metrics, "weft_worker_heartbeat_requests") - requests0;
    let beats = counter(&metrics, "weft_worker_heartbeats") - beats0;
    eprintln!(
        "{RUNS} activities held {elapsed:?}: {requests} heartbeat requests carrying {beats} beats \
         ({} per request; failures {}, stopped {})",
        beats / requests.max(1),
        counter(&metrics, "weft_worker_heartbeat_failures"),
        counter(&metrics, "weft_worker_activities_stopped"),
    );
    // One request per activity would carry one beat; one per tick carries them all.
    assert!(
        beats / requests.max(1) >= RUNS as u64 / 2,
        "{requests} requests for {beats} beats: not one request per tick"
    );
    assert_eq!(counter(&metrics, "weft_worker_activities_stopped"), 0);
    // The service exports its counters every second: after a second more, every attempt
    // it had timed out by now would show.
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let received = service_counter(&suite, "weft_heartbeats").await;
    let timed_out = service_counter(&suite, "weft_attempts_timed_out").await;
    eprintln!("the heartbeat service received {received} beats and timed out {timed_out} attempts while they were held");
    assert_eq!(
        timed_out, 0,
        "an activity kept alive by the SDK was timed out"
    );

    release.cancel();
    let pool = suite.env().pool().clone();
    poll_until(
        RUN_TIMEOUT,
        Duration::from_millis(200),
        || "not every run completed".into(),
        || async {
            let done: i64 =
                sqlx::query_scalar("SELECT count(*) FROM runs WHERE status = 'COMPLETED'")
                    .fetch_one(&pool)
                    .await?;
            Ok((done == RUNS as i64).then_some(()))
        },
    )
    .await
    .unwrap();
    shutdown.cancel();
    run.await.unwrap().unwrap();
    suite.stop_all().await.unwrap();
}
