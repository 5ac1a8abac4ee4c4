//! The hot path's budget (BENCHMARKS.md, "The hot-path budget"): what one `greet` run
//! (three SIMPLE activities in sequence) costs the broker and the database, read off the
//! counters every process exports — never a timing. A change that adds to a run's path
//! fails here, and has to raise the budget on purpose, with its figure in BENCHMARKS.md.
//!
//! Per run, at most:
//! - 7 persistent messages on the run's own path: its start, three activity tasks, three
//!   results (eager tasks for one worker, and results for one shard, that meet a message
//!   in flight go as one) — nothing for registering, ending or reporting short activities;
//! - one claim round trip per run: the first activity's (a transient request and its
//!   transient answer, fewer when claims queue up and go together, none when the first
//!   activity takes an offer another run left unused); the worker that sends a result
//!   is sent the next activity already claimed for it (eager dispatch,
//!   docs/eager-dispatch.md);
//! - 4 decider commits (the start, then one per result; group commit may share them);
//! - no lifecycle-event message when no event is switched on, and exactly one per event
//!   with `WEFT_EVENTS=#`; at most one per event (several of one key in one message) with
//!   `WEFT_EVENTS_TOGETHER=true` as well.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use weft::bus::Bus;

use weft::activity_batch::MAX_MESSAGES;
use weft_e2e::{greet, poll_until, EnvOptions, Service, Suite, TestEnv};

use crate::{assert_all_completed, start_greets};

/// Runs measured per scenario.
const RUNS: usize = 20;
/// Events of one `greet` run besides `task.started`: `workflow.started`, three
/// `task.scheduled`, three `task.completed`, `workflow.completed`. An eagerly dispatched
/// activity also has a `task.started` at its dispatch (the second and third always, the
/// first when it takes a spare offer); one started by a claim reports none (it is short).
const EVENTS_PER_RUN_BUT_STARTS: u64 = 8;

/// Counters summed over every process of a suite: `(type, delivery)` → messages sent,
/// and the decider's commits.
#[derive(Debug, Default, Clone, PartialEq)]
struct Costs {
    published: BTreeMap<(String, String), u64>,
    commits: u64,
    /// Activities the decider dispatched eagerly.
    eager: u64,
    /// Lifecycle events a listener bound to `#` received (each of a message sent
    /// together counted), when events are switched on.
    events: u64,
}

impl Costs {
    fn sent(&self, kind: &str, delivery: &str) -> u64 {
        self.published
            .get(&(kind.to_owned(), delivery.to_owned()))
            .copied()
            .unwrap_or(0)
    }

    fn total(&self, delivery: &str, except: &[&str]) -> u64 {
        self.published
            .iter()
            .filter(|((kind, d), _)| d == delivery && !except.contains(&kind.as_str()))
            .map(|(_, n)| n)
            .sum()
    }

    /// Adds the counters of one process's `/metrics` text.
    fn add(&mut self, metrics: &str) {
        for ((kind, delivery), n) in weft_e2e::metrics::published(metrics) {
            *self.published.entry((kind, delivery)).or_default() += n;
        }
        for line in metrics.lines() {
            if let Some(value) = line.strip_prefix("weft_decider_commits_total ") {
                self.commits += value.trim().parse::<u64>().unwrap_or(0);
            } else if let Some(value) = line.strip_prefix("weft_decider_eager_dispatches_total ") {
                self.eager += value.trim().parse::<u64>().unwrap_or(0);
            }
        }
    }
}

/// The suite's counters now: the services' `/metrics`, the in-test worker's registry and
/// the in-test listener's count of events.
async fn costs(suite: &Suite, worker: &weft::admin::Metrics, events: &AtomicU64) -> Costs {
    let mut costs = Costs {
        events: events.load(Ordering::Relaxed),
        ..Costs::default()
    };
    for service in [
        Service::Gateway,
        Service::Decider,
        Service::History,
        Service::Heartbeat,
    ] {
        for text in suite.metrics_of(service).await.unwrap() {
            costs.add(&text);
        }
    }
    costs.add(&worker.render());
    costs
}

/// Runs [`RUNS`] greets on the services (events switched on by `events`), with the
/// example worker in this process, and returns what they cost once every counter is
/// still.
async fn measure(events: Option<&str>) -> Costs {
    let env = events
        .map(|e| vec![("WEFT_EVENTS".to_owned(), e.to_owned())])
        .unwrap_or_default();
    measure_with(env).await
}

/// [`measure`] with the services' environment `extra_env`.
async fn measure_with(extra_env: Vec<(String, String)>) -> Costs {
    let options = EnvOptions {
        // The service default (5 s): at the suite's 500 ms a busy box re-publishes
        // outbox rows whose publish is merely slow, which is not the run's cost.
        outbox_sweep_after_ms: None,
        extra_env,
        ..EnvOptions::default()
    };
    let env = TestEnv::create(options).await.unwrap();
    let config = weft::Config {
        amqp_url: env.amqp_url.clone(),
        namespace: env.namespace.clone(),
        shards: env.options.shards,
        ..weft::Config::default()
    };
    let suite = Suite::start_with(
        env,
        &[
            Service::Gateway,
            Service::Decider,
            Service::History,
            Service::Heartbeat,
        ],
    )
    .await
    .unwrap();
    let metrics = weft::admin::Metrics::new();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let (listener, listener_queue, events) = count_events(&suite, &shutdown).await;
    // An instant handler never reports its start, however slow the box.
    let worker = weft_worker_example::register(weft::worker::Worker::builder(&config))
        .metrics(&metrics)
        .start_report_after(Duration::from_secs(60))
        .build();
    let worker = tokio::spawn(worker.run(shutdown.clone()));
    suite.client().register(&greet::definition()).await.unwrap();

    let runs = start_greets(&suite, "Budget", RUNS).await;
    assert_all_completed(&suite, &runs).await;
    // Publishing follows the commits: wait until the counters stop moving.
    let last = std::sync::Mutex::new(Costs::default());
    let settled = poll_until(
        Duration::from_secs(30),
        Duration::from_millis(300),
        || "the counters kept moving for 30 s".to_owned(),
        || {
            let (suite, metrics, last, events) = (&suite, &metrics, &last, &events);
            async move {
                let now = costs(suite, metrics, events).await;
                let mut last = last.lock().unwrap();
                let still = *last == now;
                *last = now.clone();
                Ok(still.then_some(now))
            }
        },
    )
    .await
    .unwrap();
    shutdown.cancel();
    worker.await.unwrap().unwrap();
    listener.teardown(&[listener_queue]).await.unwrap();
    settled
}

/// A queue of the test's own bound to `#` on the events exchange, counting each event it
/// receives (each of a message of events sent together); until `stop`. Its bus and queue
/// (to tear down), and the count.
async fn count_events(
    suite: &Suite,
    stop: &tokio_util::sync::CancellationToken,
) -> (Bus, String, Arc<AtomicU64>) {
    let (bus, queue, mut received) = crate::events::listen(suite, stop, &["#"]).await;
    let seen = Arc::new(AtomicU64::new(0));
    let count = seen.clone();
    tokio::spawn(async move {
        while received.recv().await.is_some() {
            count.fetch_add(1, Ordering::Relaxed);
        }
    });
    (bus, queue, seen)
}

/// The run's own path: one start, three activity tasks, at most seven persistent messages
/// a run; the second and third activities go to the worker that sent the result before,
/// claimed for it, and the first one too when it finds an offer that a run which ended
/// left unused (docs/eager-dispatch.md, "Spare offers").
fn assert_run_path(costs: &Costs, runs: u64, detail: &str) {
    // One start a run, alone or with others for its shard (docs/decider.md, "Starts
    // sent together"); three tasks a run: one message each, or several eager ones sent
    // together to one worker's queue; three results, one message each or several for one
    // shard sent together (docs/worker-sdk.md, "Results sent together").
    for (each_run, alone, together) in [
        (1, "StartWorkflow", "StartWorkflows"),
        (3, "ActivityTask", "ActivityTasks"),
        (3, "ActivityCompleted", "ActivityResults"),
    ] {
        assert_so_many_a_run(costs, runs, each_run, alone, together, detail);
    }
    assert!(
        costs.total("persistent", &[]) <= 7 * runs,
        "more than 7 persistent messages a run: {detail}"
    );
    assert!(
        (2 * runs..=3 * runs).contains(&costs.eager),
        "the second and third activities of every run dispatched eagerly, the first of \
         some: {detail}"
    );
}

/// `each_run` messages of kind `alone` a run, some of them perhaps sent together as
/// `together` messages (at least two, at most `MAX_MESSAGES` each).
fn assert_so_many_a_run(
    costs: &Costs,
    runs: u64,
    each_run: u64,
    alone: &str,
    together: &str,
    detail: &str,
) {
    let (one, many) = (
        costs.sent(alone, "persistent"),
        costs.sent(together, "persistent"),
    );
    assert!(
        one + 2 * many <= each_run * runs && one + MAX_MESSAGES as u64 * many >= each_run * runs,
        "{each_run} {alone} a run, alone or as {together}: {detail}"
    );
}

/// Claims: one round trip at most for each activity not dispatched eagerly (one request
/// or several together when they queue up: `ClaimAttempts`), which is the first of a run
/// at most.
fn assert_claims(costs: &Costs, runs: u64, detail: &str) {
    let claimed = 3 * runs - costs.eager;
    let claims = costs.sent("ClaimAttempt", "transient") + costs.sent("ClaimAttempts", "transient");
    assert!(
        claims <= claimed && costs.sent("HeartbeatAnswers", "transient") <= claimed,
        "more than one claim round trip for an activity not dispatched eagerly: {detail}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_greet_run_stays_within_its_budget_when_no_event_is_switched_on() {
    let costs = measure(None).await;
    let runs = RUNS as u64;
    let detail = format!("{runs} runs cost {costs:#?}");
    eprintln!("{detail}");
    assert_run_path(&costs, runs, &detail);
    assert_eq!(costs.sent("LifecycleEvent", "persistent"), 0, "{detail}");
    assert_eq!(
        costs.events, 0,
        "no event when none is switched on: {detail}"
    );
    assert_claims(&costs, runs, &detail);
    assert!(
        costs.total(
            "transient",
            &["ClaimAttempt", "ClaimAttempts", "HeartbeatAnswers"]
        ) == 0,
        "other round trips on the hot path: {detail}"
    );
    assert!(costs.commits >= 1, "{detail}");
    assert!(
        costs.commits <= 4 * runs,
        "more than 4 commits a run: {detail}"
    );
}

/// With starts sent together (`WEFT_STARTS_TOGETHER=true`) a run costs no more: its start
/// is one message, or a share of one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_starts_sent_together_a_greet_run_stays_within_its_budget() {
    let on = vec![("WEFT_STARTS_TOGETHER".to_owned(), "true".to_owned())];
    let costs = measure_with(on).await;
    let runs = RUNS as u64;
    let detail = format!("{runs} runs cost {costs:#?}");
    eprintln!("{detail}");
    assert_run_path(&costs, runs, &detail);
    assert_claims(&costs, runs, &detail);
    assert!(
        costs.commits <= 4 * runs,
        "more than 4 commits a run: {detail}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_every_event_switched_on_each_event_is_one_message() {
    let costs = measure(Some("#")).await;
    let runs = RUNS as u64;
    let detail = format!("{runs} runs cost {costs:#?}");
    eprintln!("{detail}");
    assert_eq!(
        costs.sent("LifecycleEvent", "persistent"),
        EVENTS_PER_RUN_BUT_STARTS * runs + costs.eager,
        "{detail}"
    );
    assert_eq!(
        costs.events,
        EVENTS_PER_RUN_BUT_STARTS * runs + costs.eager,
        "each event received once: {detail}"
    );
    assert!(
        costs.total("persistent", &["LifecycleEvent"]) <= 7 * runs,
        "more than 7 persistent messages a run besides events: {detail}"
    );
    assert!(
        costs.commits <= 4 * runs,
        "more than 4 commits a run: {detail}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_every_event_sent_together_no_event_costs_more_than_one_message() {
    let costs = measure_with(vec![
        ("WEFT_EVENTS".to_owned(), "#".to_owned()),
        ("WEFT_EVENTS_TOGETHER".to_owned(), "true".to_owned()),
    ])
    .await;
    let runs = RUNS as u64;
    let detail = format!("{runs} runs cost {costs:#?}");
    eprintln!("{detail}");
    let (alone, together) = (
        costs.sent("LifecycleEvent", "persistent"),
        costs.sent(weft::event_batch::EVENTS_KIND, "persistent"),
    );
    // Every event received once; how many of them met in a message depends on the timing.
    let events = EVENTS_PER_RUN_BUT_STARTS * runs + costs.eager;
    assert_eq!(costs.events, events, "each event received once: {detail}");
    assert!(
        alone + 2 * together <= events && alone + MAX_MESSAGES as u64 * together >= events,
        "at most one message an event, a message together two to {MAX_MESSAGES}: {detail}"
    );
    assert!(
        costs.total(
            "persistent",
            &["LifecycleEvent", weft::event_batch::EVENTS_KIND]
        ) <= 7 * runs,
        "more than 7 persistent messages a run besides events: {detail}"
    );
    assert!(
        costs.commits <= 4 * runs,
        "more than 4 commits a run: {detail}"
    );
}

/// `weft dev` keeps the hot path's shape: the example worker in the process is sent the
/// second and third activities of each run already claimed for it (eager dispatch over
/// the in-process bus, whose eager queues expire as RabbitMQ's do), and a run costs the
/// same messages and commits as on the services.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_weft_dev_a_greet_run_keeps_the_same_budget_and_dispatches_eagerly() {
    let suite = Suite::start_on(weft_e2e::Backend::Dev).await.unwrap();
    suite.client().register(&greet::definition()).await.unwrap();
    let runs = start_greets(&suite, "DevBudget", RUNS).await;
    assert_all_completed(&suite, &runs).await;
    let url = format!("{}/metrics", suite.gateway_url());
    let costs = poll_until(
        Duration::from_secs(30),
        Duration::from_millis(300),
        || "the counters kept moving for 30 s".to_owned(),
        || {
            let url = url.clone();
            async move {
                let read = || async {
                    let mut costs = Costs::default();
                    costs.add(&reqwest::get(&url).await?.error_for_status()?.text().await?);
                    Ok::<_, reqwest::Error>(costs)
                };
                let (before, after) = (read().await?, {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    read().await?
                });
                Ok((before == after).then_some(after))
            }
        },
    )
    .await
    .unwrap();
    let runs = RUNS as u64;
    let detail = format!("{runs} runs on weft dev cost {costs:#?}");
    assert_run_path(&costs, runs, &detail);
    // Results go alone there: the in-process bus journals what is published at once in one
    // statement already (docs/worker-sdk.md, "Results sent together").
    assert_eq!(costs.sent("ActivityResults", "persistent"), 0, "{detail}");
    assert_claims(&costs, runs, &detail);
    assert!(costs.commits <= 4 * runs, "{detail}");
}
