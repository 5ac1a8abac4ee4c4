//! Lifecycle events sent together (`WEFT_EVENTS_TOGETHER`, docs/events.md, "Events sent
//! together") over the real services: events with one routing key that meet at the
//! decider go as one `LifecycleEvents` message with that key, so a queue bound to a key
//! gets only events of that key, and every event still arrives once.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use tokio_util::sync::CancellationToken;
use weft::listener::{EventListener, ListenerError};
use weft::messages::LifecycleEvent;
use weft_e2e::{greet, poll_until, EnvOptions, Suite, TestEnv};

use crate::events::listen;
use crate::{assert_all_completed, start_greets, RUN_TIMEOUT};

/// The whole suite, its decider publishing every event, together.
async fn suite() -> Suite {
    let env = TestEnv::create(EnvOptions {
        extra_env: vec![
            ("WEFT_EVENTS".into(), "#".into()),
            ("WEFT_EVENTS_TOGETHER".into(), "true".into()),
        ],
        // The services' default (5 s): the suite's 500 ms would re-publish rows whose
        // publish is merely slow on a busy box, and this test counts copies.
        outbox_sweep_after_ms: None,
        ..EnvOptions::default()
    })
    .await
    .unwrap();
    Suite::start(env).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_of_one_key_in_one_commit_go_as_one_message_with_that_key() {
    let suite = suite().await;
    let stop = CancellationToken::new();
    let (bus, queue, mut scheduled) = listen(&suite, &stop, &["task.scheduled"]).await;
    suite
        .client()
        .register(&json!({"name": "fan", "version": 1, "tasks": [
            {"name": "fan", "taskReferenceName": "fan", "type": "FORK_JOIN", "forkTasks": [
                [{"name": "nobody", "taskReferenceName": "a", "type": "SIMPLE"}],
                [{"name": "nobody", "taskReferenceName": "b", "type": "SIMPLE"}],
                [{"name": "nobody", "taskReferenceName": "c", "type": "SIMPLE"}]]},
            {"name": "join", "taskReferenceName": "join", "type": "JOIN",
             "joinOn": ["a", "b", "c"]}]}))
        .await
        .unwrap();
    let id = suite.client().start("fan", json!({})).await.unwrap();

    // The start's commit schedules the three branches (with the fork and the join): their
    // `task.scheduled` events are queued for the exchange at once, so they start one
    // round together whether or not a message of that key is in flight.
    let mut branches = BTreeMap::new();
    while branches.len() < 3 {
        let (kind, message, event) = tokio::time::timeout(RUN_TIMEOUT, scheduled.recv())
            .await
            .unwrap_or_else(|_| panic!("the branches' task.scheduled; got {branches:#?}"))
            .expect("listener alive");
        assert!(
            event.event == "task.scheduled" && event.workflow_id == id,
            "a queue bound to task.scheduled gets only those: {event:#?}"
        );
        if let Some(r) = event
            .task_ref
            .filter(|r| ["a", "b", "c"].contains(&r.as_str()))
        {
            branches.insert(r, (kind, message));
        }
    }
    let messages: HashSet<&(String, uuid::Uuid)> = branches.values().collect();
    assert_eq!(
        messages.len(),
        1,
        "the three branches scheduled in one message: {branches:#?}"
    );
    assert!(
        branches
            .values()
            .all(|(kind, _)| kind == weft::event_batch::EVENTS_KIND),
        "{branches:#?}"
    );
    stop.cancel();
    let nobody = suite.env().names().activity_queue("nobody");
    bus.teardown(&[queue, nobody]).await.unwrap();
}

/// The SDK's listener: every event it is handed, by run.
#[derive(Clone, Default)]
struct Completions(Arc<Mutex<Vec<LifecycleEvent>>>);

impl EventListener for Completions {
    fn bindings(&self) -> Vec<String> {
        vec!["workflow.completed".into()]
    }

    async fn on_event(&self, event: LifecycleEvent) -> Result<(), ListenerError> {
        self.0.lock().unwrap().push(event);
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_event_of_many_runs_arrives_once_and_only_where_its_key_is_bound() {
    const RUNS: usize = 30;
    let suite = suite().await;
    let stop = CancellationToken::new();
    let (bus, everything_queue, mut everything) = listen(&suite, &stop, &["#"]).await;
    let env = suite.env();
    let config = suite.worker_config();
    let completions = Completions::default();
    let listening = {
        let (completions, stop) = (completions.clone(), stop.clone());
        tokio::spawn(async move { weft::listener::run(&config, "ends", completions, stop).await })
    };
    let queue = weft::listener::queue_name(&env.names(), "ends");
    poll_until(
        Duration::from_secs(20),
        Duration::from_millis(50),
        || "the SDK listener never declared its queue".into(),
        || async { Ok(bus.message_count(&queue).await.ok()) },
    )
    .await
    .unwrap();
    suite.client().register(&greet::definition()).await.unwrap();

    let runs = start_greets(&suite, "Together", RUNS).await;
    assert_all_completed(&suite, &runs).await;

    // Each run's events but `task.started` (an eagerly dispatched activity has one), by
    // (event, task): once each.
    let mut by_run: BTreeMap<String, Vec<(String, Option<String>)>> = BTreeMap::new();
    let mut copies = HashSet::new();
    let wanted = |by_run: &BTreeMap<String, Vec<(String, Option<String>)>>| {
        by_run.len() == RUNS && by_run.values().all(|events| events.len() == 8)
    };
    while !wanted(&by_run) {
        let (_, _, e) = tokio::time::timeout(RUN_TIMEOUT, everything.recv())
            .await
            .unwrap_or_else(|_| panic!("not every event arrived: {by_run:#?}"))
            .expect("listener alive");
        assert!(
            copies.insert((e.run_id, e.event_id, e.task_id, e.event.clone())),
            "an event twice: {e:?}"
        );
        if e.event != "task.started" {
            by_run
                .entry(e.workflow_id.clone())
                .or_default()
                .push((e.event.clone(), e.task_ref.clone()));
        }
    }
    for (id, events) in &mut by_run {
        events.sort();
        let mut expected: Vec<(String, Option<String>)> = greet::REFS
            .iter()
            .flat_map(|r| {
                [
                    ("task.completed".to_owned(), Some((*r).to_owned())),
                    ("task.scheduled".to_owned(), Some((*r).to_owned())),
                ]
            })
            .chain([
                ("workflow.completed".to_owned(), None),
                ("workflow.started".to_owned(), None),
            ])
            .collect();
        expected.sort();
        assert_eq!(*events, expected, "the events of {id}");
    }

    // The SDK's listener, bound to one key, is handed each run's end once, and nothing
    // else.
    let ended = poll_until(
        RUN_TIMEOUT,
        Duration::from_millis(50),
        || format!("{RUNS} completions: {:#?}", completions.0.lock().unwrap()),
        || async {
            let seen = completions.0.lock().unwrap().clone();
            Ok((seen.len() >= RUNS).then_some(seen))
        },
    )
    .await
    .unwrap();
    assert!(ended.iter().all(|e| e.event == "workflow.completed"));
    let ids: HashSet<&str> = ended.iter().map(|e| e.workflow_id.as_str()).collect();
    let started: HashSet<&str> = runs.iter().map(|(id, _, _)| id.as_str()).collect();
    assert_eq!(ids, started, "each run's end once");
    assert_eq!(ended.len(), RUNS);
    stop.cancel();
    listening
        .await
        .unwrap()
        .expect("the listener stops cleanly");
    bus.teardown(&[everything_queue, queue]).await.unwrap();
}
