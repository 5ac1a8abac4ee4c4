//! The cycle driver over a fake transport that records every request and answers by rule.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use super::*;
use crate::admin::Metrics;
use crate::messages::{AttemptRef, Beat, HeartbeatAction, HeartbeatAnswer};
use crate::{Error, Result};
use uuid::Uuid;

/// Answers each beat with what `rule(request number, task)` says; `None` fails the whole
/// request. Records the task ids of every request.
struct Fake<R> {
    rule: R,
    requests: Mutex<Vec<Vec<Uuid>>>,
}

impl<R> Fake<R>
where
    R: Fn(usize, Uuid) -> Option<HeartbeatAction> + Send + Sync,
{
    fn new(rule: R) -> Self {
        Self {
            rule,
            requests: Mutex::new(Vec::new()),
        }
    }

    fn requests(&self) -> Vec<Vec<Uuid>> {
        self.requests.lock().unwrap().clone()
    }
}

impl<R> Transport for Fake<R>
where
    R: Fn(usize, Uuid) -> Option<HeartbeatAction> + Send + Sync,
{
    async fn send(&self, beats: Vec<Beat>) -> Result<BTreeMap<Uuid, HeartbeatAnswer>> {
        let n = {
            let mut requests = self.requests.lock().unwrap();
            requests.push(beats.iter().map(|b| b.task_id).collect());
            requests.len() - 1
        };
        let mut answers = BTreeMap::new();
        for beat in beats {
            let Some(action) = (self.rule)(n, beat.task_id) else {
                return Err(Error::Bus("fake: request failed".into()));
            };
            answers.insert(
                beat.task_id,
                HeartbeatAnswer {
                    action,
                    reason: None,
                    retry_after_ms: None,
                },
            );
        }
        Ok(answers)
    }
}

/// A policy under which every registered activity is due at once and pauses are short.
fn eager() -> Policy {
    Policy {
        interval: Some(Duration::ZERO),
        throttle_pause: Duration::from_millis(1),
        failure_pause: Duration::from_millis(2),
        ..Policy::default()
    }
}

fn register(hb: &Heartbeats, n: usize) -> Vec<Registered> {
    (0..n)
        .map(|_| {
            let key = AttemptRef {
                task_id: Uuid::new_v4(),
                attempt: 1,
            };
            hb.register(key, 60)
        })
        .collect()
}

#[tokio::test]
async fn one_request_carries_every_due_activity() {
    let hb = Heartbeats::new(eager(), &Metrics::new());
    let _running = register(&hb, 10_000);
    let fake = Fake::new(|_, _| Some(HeartbeatAction::Continue));
    cycle(&hb, &fake).await;
    let requests = fake.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].len(), 10_000);
    assert_eq!(hb.counters().requests.get(), 1);
    assert_eq!(hb.counters().beats.get(), 10_000);
}

#[tokio::test]
async fn batches_are_split_only_above_the_batch_size() {
    let hb = Heartbeats::new(
        Policy {
            max_batch: 4_000,
            ..eager()
        },
        &Metrics::new(),
    );
    let _running = register(&hb, 10_000);
    let fake = Fake::new(|_, _| Some(HeartbeatAction::Continue));
    cycle(&hb, &fake).await;
    let sizes: Vec<usize> = fake.requests().iter().map(Vec::len).collect();
    assert_eq!(sizes, [4_000, 4_000, 2_000]);
}

#[tokio::test]
async fn throttled_beats_go_again_in_the_same_cycle_and_only_they() {
    let hb = Heartbeats::new(eager(), &Metrics::new());
    let running = register(&hb, 100);
    let throttled: HashSet<Uuid> = running.iter().take(10).map(|r| r.key.task_id).collect();
    let once = throttled.clone();
    let fake = Fake::new(move |n, id| {
        Some(if n == 0 && once.contains(&id) {
            HeartbeatAction::Throttled
        } else {
            HeartbeatAction::Continue
        })
    });
    cycle(&hb, &fake).await;
    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        requests[1].iter().copied().collect::<HashSet<_>>(),
        throttled
    );
}

#[tokio::test]
async fn a_failing_service_gets_a_bounded_number_of_requests_per_cycle() {
    let policy = eager();
    let max = policy.max_retries as usize;
    let hb = Heartbeats::new(policy, &Metrics::new());
    let _running = register(&hb, 50);
    let fake = Fake::new(|_, _| None);
    cycle(&hb, &fake).await;
    let requests = fake.requests();
    assert_eq!(requests.len(), 1 + max);
    assert!(requests.iter().all(|r| r.len() == 50));
    assert_eq!(hb.counters().failed.get(), 1 + max as u64);
    // The next cycle tries again.
    cycle(&hb, &fake).await;
    assert_eq!(fake.requests().len(), 2 * (1 + max));
}

#[tokio::test]
async fn stop_cancels_the_activity_and_drops_it_from_the_schedule() {
    let hb = Heartbeats::new(eager(), &Metrics::new());
    let running = register(&hb, 20);
    let stopped = running[3].key.task_id;
    let fake = Fake::new(move |_, id| {
        Some(if id == stopped {
            HeartbeatAction::Stop
        } else {
            HeartbeatAction::Continue
        })
    });
    cycle(&hb, &fake).await;
    assert!(running[3].stop().token().is_cancelled());
    assert!(
        running
            .iter()
            .filter(|r| r.stop().token().is_cancelled())
            .count()
            == 1
    );
    assert_eq!(hb.len(), 19);
    cycle(&hb, &fake).await;
    assert!(!fake.requests()[1].contains(&stopped));
}

#[tokio::test]
async fn a_finished_activity_leaves_the_schedule() {
    let hb = Heartbeats::new(eager(), &Metrics::new());
    let mut running = register(&hb, 3);
    drop(running.pop());
    assert_eq!(hb.len(), 2);
    let fake = Fake::new(|_, _| Some(HeartbeatAction::Continue));
    cycle(&hb, &fake).await;
    assert_eq!(fake.requests()[0].len(), 2);
}

#[tokio::test]
async fn nothing_due_sends_nothing() {
    let hb = Heartbeats::new(Policy::default(), &Metrics::new());
    let _running = register(&hb, 10); // first due in 20 s
    let fake = Fake::new(|_, _| Some(HeartbeatAction::Continue));
    cycle(&hb, &fake).await;
    assert!(fake.requests().is_empty());
}

#[tokio::test]
async fn the_loop_stops_on_shutdown() {
    let hb = Heartbeats::new(eager(), &Metrics::new());
    let shutdown = CancellationToken::new();
    shutdown.cancel();
    let fake = Fake::new(|_, _| Some(HeartbeatAction::Continue));
    tokio::time::timeout(Duration::from_secs(10), run(hb, fake, shutdown))
        .await
        .expect("returns on shutdown");
}

#[tokio::test]
async fn the_same_attempt_running_twice_is_beaten_twice_and_ends_apart() {
    let hb = Heartbeats::new(eager(), &Metrics::new());
    let attempt = AttemptRef {
        task_id: Uuid::new_v4(),
        attempt: 1,
    };
    let first = hb.register(attempt, 60);
    let second = hb.register(attempt, 60); // a redelivery of the same task
    let fake = Fake::new(|_, _| Some(HeartbeatAction::Continue));
    cycle(&hb, &fake).await;
    assert_eq!(fake.requests()[0], [attempt.task_id, attempt.task_id]);
    drop(first);
    cycle(&hb, &fake).await;
    assert_eq!(fake.requests()[1], [attempt.task_id]);
    drop(second);
    assert_eq!(hb.len(), 0);
}
