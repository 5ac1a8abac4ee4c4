//! The SDK's heartbeat scheduler against a test-side heartbeat service: a consumer of the
//! namespace's heartbeat queue that records every message, answers heartbeat batches by
//! rule (STOP for some tasks, THROTTLED once for others, CONTINUE otherwise) and counts
//! the requests. Assertions are on counts and on the worker's own send times, never on
//! how long something took.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use futures_util::future::join_all;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;
use weft::bus::{Bus, ConsumeOptions, Delivery, Disposition};
use weft::messages::{
    ActivityTask, ClaimAttempt, Command, HeartbeatAction, HeartbeatAnswer, HeartbeatAnswers,
    HeartbeatMessage,
};
use weft::worker::{ActivityContext, ActivityError};
use weft::Envelope;

use super::{spawn, stopped, Decider, QUIET};

/// Bound on waits for what 2,000 activities take to get going on 2 shared cores.
const LONG_WAIT: Duration = Duration::from_secs(90);

/// One heartbeat request as the service saw it.
#[derive(Debug, Clone)]
struct Request {
    /// When the worker sent it (the envelope's time, the worker's clock).
    sent: DateTime<Utc>,
    tasks: Vec<Uuid>,
    details: HashMap<Uuid, Value>,
}

/// Everything the test service saw.
#[derive(Debug, Default)]
struct Seen {
    requests: Vec<Request>,
    started: HashMap<Uuid, weft::messages::AttemptStarted>,
    finished: HashMap<Uuid, String>,
    /// Tasks already answered THROTTLED once.
    throttled: HashSet<Uuid>,
    /// Tasks probed before their handler started (not heartbeats: not in `requests`).
    probed: HashSet<Uuid>,
    /// Claim requests: how many claims each carried.
    claim_requests: Vec<usize>,
    /// Claim requests: the tasks each claimed.
    claim_groups: Vec<Vec<Uuid>>,
    /// Claim requests received (counted before `claim_delay`, unlike the others).
    claims_arrived: usize,
    /// Claims per task, each with whether it was granted, in arrival order.
    claims_of: HashMap<Uuid, Vec<(Instant, bool)>>,
}

impl Seen {
    /// Beats per task over `requests[from..]`.
    fn beats_since(&self, from: usize) -> HashMap<Uuid, usize> {
        let mut beats = HashMap::new();
        for r in &self.requests[from..] {
            for id in &r.tasks {
                *beats.entry(*id).or_insert(0) += 1;
            }
        }
        beats
    }
}

/// How the test service answers.
#[derive(Debug, Default, Clone)]
struct Rules {
    /// STOP with this reason.
    stop: HashMap<Uuid, String>,
    /// THROTTLED the first time, CONTINUE after.
    throttle_once: HashSet<Uuid>,
    /// STOP with this reason to the probe before the handler starts (stopped while it
    /// waited in its queue); every other probe is answered NOT_FOUND (not registered yet).
    stopped_before_start: HashMap<Uuid, String>,
    /// How long a claim request waits for its answer (the service is slow).
    claim_delay: Duration,
    /// A task claimed once is refused to every later claim, as the real service does.
    claim_once: bool,
    /// DEFER (over a limit) this many claims of the task, advising this wait, before
    /// CONTINUE.
    defer: HashMap<Uuid, (usize, Duration)>,
}

struct Service {
    seen: Arc<Mutex<Seen>>,
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl Service {
    fn start(bus: &Bus, rules: Rules) -> Self {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let stop = CancellationToken::new();
        let (responder, log, rules) = (bus.clone(), seen.clone(), Arc::new(rules));
        let handler = move |d: Delivery| {
            let (bus, log, rules) = (responder.clone(), log.clone(), rules.clone());
            async move {
                let claim = d.envelope.kind.starts_with("ClaimAttempt");
                if claim && !rules.claim_delay.is_zero() {
                    log.lock().unwrap().claims_arrived += 1;
                    tokio::time::sleep(rules.claim_delay).await;
                }
                if let Some(answer) = record(&log, &rules, &d) {
                    bus.reply(&d, &answer).await.expect("answer sent");
                }
                Disposition::Ack
            }
        };
        // One at a time: requests are seen in the order the worker sent them.
        let opts = ConsumeOptions {
            prefetch: 512,
            concurrency: 1,
        };
        let task = bus.consume(&bus.names().heartbeat_queue(), opts, handler, stop.clone());
        Self { seen, stop, task }
    }

    fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.seen.lock().unwrap()
    }

    /// Waits (bounded) until `ready` holds of what was seen.
    async fn wait_for(&self, what: &str, ready: impl Fn(&Seen) -> bool) {
        let deadline = Instant::now() + LONG_WAIT;
        while !ready(&self.seen()) {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn stop(self) {
        self.stop.cancel();
        self.task.await.unwrap();
    }
}

/// Records claims and answers them: STOP for the tasks the rules stop, CONTINUE else.
fn claims(seen: &mut Seen, rules: &Rules, d: &Delivery, claims: Vec<ClaimAttempt>) -> Envelope {
    seen.claim_requests.push(claims.len());
    seen.claim_groups
        .push(claims.iter().map(|c| c.started.attempt.task_id).collect());
    let mut results = BTreeMap::new();
    for claim in claims {
        let id = claim.started.attempt.task_id;
        seen.probed.insert(id);
        let earlier = seen.claims_of.get(&id).map_or(0, Vec::len);
        if let Some(&(_, wait)) = rules.defer.get(&id).filter(|(n, _)| earlier < *n) {
            seen.claims_of
                .entry(id)
                .or_default()
                .push((Instant::now(), false));
            results.insert(
                id,
                HeartbeatAnswer {
                    action: HeartbeatAction::Defer,
                    reason: Some("concurrentExecLimit 1 reached".into()),
                    retry_after_ms: Some(wait.as_millis() as u64),
                },
            );
            continue;
        }
        seen.claims_of
            .entry(id)
            .or_default()
            .push((Instant::now(), true));
        let claimed_before = seen.started.insert(id, claim.started).is_some();
        let answer = match rules.stopped_before_start.get(&id) {
            Some(reason) => HeartbeatAnswer {
                action: HeartbeatAction::Stop,
                reason: Some(reason.clone()),
                retry_after_ms: None,
            },
            None if rules.claim_once && claimed_before => HeartbeatAnswer {
                action: HeartbeatAction::Stop,
                reason: Some("claimed by another worker".into()),
                retry_after_ms: None,
            },
            None => HeartbeatAnswer {
                action: HeartbeatAction::Continue,
                reason: None,
                retry_after_ms: None,
            },
        };
        results.insert(id, answer);
    }
    answers(d, results)
}

/// Records one message; the answer to send when it is a heartbeat batch.
fn record(log: &Mutex<Seen>, rules: &Rules, d: &Delivery) -> Option<Envelope> {
    let mut seen = log.lock().unwrap();
    match d
        .envelope
        .decode::<HeartbeatMessage>()
        .expect("a heartbeat message")
    {
        HeartbeatMessage::ClaimAttempt(claim) => Some(claims(&mut seen, rules, d, vec![claim])),
        HeartbeatMessage::ClaimAttempts(group) => Some(claims(&mut seen, rules, d, group.claims)),
        HeartbeatMessage::AttemptStarted(s) => {
            seen.started.insert(s.attempt.task_id, s);
            None
        }
        HeartbeatMessage::AttemptFinished(f) => {
            seen.finished.insert(f.attempt.task_id, f.status);
            None
        }
        HeartbeatMessage::StopAttempts(_) | HeartbeatMessage::Barrier(_) => None,
        HeartbeatMessage::Heartbeats(batch) if batch.probe => {
            let mut results = BTreeMap::new();
            for beat in &batch.beats {
                seen.probed.insert(beat.task_id);
                let answer = match rules.stopped_before_start.get(&beat.task_id) {
                    Some(reason) => HeartbeatAnswer {
                        action: HeartbeatAction::Stop,
                        reason: Some(reason.clone()),
                        retry_after_ms: None,
                    },
                    None => HeartbeatAnswer {
                        action: HeartbeatAction::NotFound,
                        reason: None,
                        retry_after_ms: None,
                    },
                };
                results.insert(beat.task_id, answer);
            }
            Some(answers(d, results))
        }
        HeartbeatMessage::Heartbeats(batch) => {
            let mut results = BTreeMap::new();
            for beat in &batch.beats {
                let id = beat.task_id;
                let (action, reason) = if let Some(reason) = rules.stop.get(&id) {
                    (HeartbeatAction::Stop, Some(reason.clone()))
                } else if rules.throttle_once.contains(&id) && seen.throttled.insert(id) {
                    (HeartbeatAction::Throttled, None)
                } else {
                    (HeartbeatAction::Continue, None)
                };
                results.insert(
                    id,
                    HeartbeatAnswer {
                        action,
                        reason,
                        retry_after_ms: None,
                    },
                );
            }
            seen.requests.push(Request {
                sent: d.envelope.time,
                tasks: batch.beats.iter().map(|b| b.task_id).collect(),
                details: batch
                    .beats
                    .iter()
                    .filter_map(|b| Some((b.task_id, b.details.clone()?)))
                    .collect(),
            });
            Some(answers(d, results))
        }
    }
}

/// The reply to the request `d`.
fn answers(d: &Delivery, results: BTreeMap<Uuid, HeartbeatAnswer>) -> Envelope {
    let mut answer = d.envelope.clone();
    answer.id = Uuid::now_v7();
    answer.kind = "HeartbeatAnswers".into();
    answer.payload = serde_json::to_value(HeartbeatAnswers { results }).unwrap();
    answer
}

/// `n` tasks of `task_name` with a heartbeat timeout, scheduled concurrently.
async fn schedule_many(decider: &Decider, task_name: &str, n: usize) -> Vec<ActivityTask> {
    let tasks: Vec<ActivityTask> = (0..n)
        .map(|i| {
            let mut t = decider.task(task_name, json!({ "i": i }));
            t.response_timeout_seconds = 30;
            t
        })
        .collect();
    for chunk in tasks.chunks(200) {
        join_all(chunk.iter().map(|t| decider.schedule(t))).await;
    }
    tasks
}

/// A handler that runs until `release` (completing) or until its attempt is stopped.
fn held(
    release: CancellationToken,
) -> impl Fn(
    ActivityTask,
    ActivityContext,
) -> futures_util::future::BoxFuture<'static, Result<Value, ActivityError>>
       + Send
       + Sync
       + 'static {
    move |task, ctx| {
        let release = release.clone();
        Box::pin(async move {
            tokio::select! {
                _ = release.cancelled() => Ok(json!({ "done": task.task_id })),
                _ = ctx.cancelled() => Err(ActivityError::retryable("stopped")),
            }
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_running_activities_are_kept_alive_with_about_one_request_per_tick() {
    const N: usize = 2_000;
    let tick = Duration::from_millis(250);
    let mut decider = Decider::without_registry().await;
    let service = Service::start(&decider.bus, Rules::default());
    let tasks = schedule_many(&decider, "hold", N).await;
    let release = CancellationToken::new();
    let worker = decider
        .worker()
        .concurrency(N)
        .heartbeat_tick(tick)
        .heartbeat_interval(tick)
        .activity("hold", held(release.clone()))
        .build();
    let shutdown = CancellationToken::new();
    let run = spawn(worker, &shutdown);

    service
        .wait_for("every attempt registered", |s| s.started.len() == N)
        .await;
    let registered = service.seen().started[&tasks[0].task_id].clone();
    assert_eq!(registered.worker_id, "w-test");
    assert_eq!(registered.response_timeout_seconds, 30);
    assert_eq!(registered.reply_to, tasks[0].reply_to);
    // Let every activity get its first beat (the first beats are spread by the starts).
    service
        .wait_for("a first beat of every activity", |s| {
            s.beats_since(0).len() == N
        })
        .await;
    let from = service.seen().requests.len();
    let clock = Instant::now();
    service
        .wait_for("ten more beats of every activity", |s| {
            let beats = s.beats_since(from);
            beats.len() == N && beats.values().all(|b| *b >= 10)
        })
        .await;
    let elapsed = clock.elapsed();
    let (requests, beats) = {
        let seen = service.seen();
        let window = &seen.requests[from..];
        (
            window.len(),
            window.iter().map(|r| r.tasks.len()).sum::<usize>(),
        )
    };
    eprintln!(
        "{N} activities, tick {tick:?}: {requests} requests carrying {beats} beats in {elapsed:?} \
         ({:.1} requests per tick, {} beats per request)",
        requests as f64 / (elapsed.as_secs_f64() / tick.as_secs_f64()),
        beats / requests.max(1)
    );
    // One request per activity would be 2,000 per tick; one per tick carries them all.
    assert!(
        beats / requests >= N / 2,
        "{requests} requests for {beats} beats: not batched"
    );
    assert!(service.seen().finished.is_empty(), "nothing stopped");

    release.cancel();
    let done = decider.results_by_task(N).await;
    assert!(done
        .iter()
        .all(|(_, c)| matches!(c, Command::ActivityCompleted(_))));
    // Nothing follows a result: the decider ends the attempt with the result's commit.
    assert!(service.seen().finished.is_empty(), "no AttemptFinished");
    shutdown.cancel();
    stopped(run).await;
    service.stop().await;
    decider.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_cancels_the_handler_and_its_task_is_acked_without_a_result() {
    let mut decider = Decider::without_registry().await;
    let [cooperative, stubborn, normal] = [0, 1, 2].map(|i| {
        let mut t = decider.task("op", json!({ "mode": i }));
        t.response_timeout_seconds = 3;
        t
    });
    let rules = Rules {
        stop: HashMap::from([
            (cooperative.task_id, "terminated by the test".to_owned()),
            (stubborn.task_id, "skipped by the test".to_owned()),
        ]),
        ..Rules::default()
    };
    let service = Service::start(&decider.bus, rules);
    for t in [&cooperative, &stubborn, &normal] {
        decider.schedule(t).await;
    }
    let (events_tx, mut events) = mpsc::unbounded_channel::<String>();
    let release = CancellationToken::new();
    let gate = release.clone();
    let worker = decider
        .worker()
        .heartbeat_tick(Duration::from_millis(100))
        .heartbeat_interval(Duration::from_millis(100))
        .stop_grace(Duration::from_millis(300))
        .activity("op", move |task: ActivityTask, ctx: ActivityContext| {
            let (events, gate) = (events_tx.clone(), gate.clone());
            async move {
                match task.input["mode"].as_i64() {
                    Some(0) => {
                        ctx.cancelled().await;
                        assert!(ctx.is_cancelled());
                        let _ = events.send(format!("stopped: {}", ctx.stop_reason().unwrap()));
                        Ok(json!("a late result nobody reads"))
                    }
                    Some(1) => {
                        // Ignores its token: aborted after the stop grace.
                        struct Dropped(mpsc::UnboundedSender<String>);
                        impl Drop for Dropped {
                            fn drop(&mut self) {
                                let _ = self.0.send("aborted".into());
                            }
                        }
                        let _dropped = Dropped(events);
                        std::future::pending::<()>().await;
                        unreachable!()
                    }
                    _ => {
                        ctx.heartbeat(json!({ "progress": 50 }));
                        gate.cancelled().await;
                        Ok(json!("normal"))
                    }
                }
            }
        })
        .build();
    let shutdown = CancellationToken::new();
    let run = spawn(worker, &shutdown);

    let mut got = Vec::new();
    for _ in 0..2 {
        let event = tokio::time::timeout(LONG_WAIT, events.recv())
            .await
            .unwrap();
        got.push(event.unwrap());
    }
    got.sort();
    assert_eq!(got, ["aborted", "stopped: terminated by the test"]);
    // The normal activity reported its progress and goes on.
    service
        .wait_for("the progress details", |s| {
            s.requests
                .iter()
                .any(|r| r.details.get(&normal.task_id) == Some(&json!({ "progress": 50 })))
        })
        .await;
    release.cancel();
    let (_, command) = decider.next_result().await;
    assert!(matches!(command, Command::ActivityCompleted(c) if c.task_id == normal.task_id));
    decider.assert_no_result().await;
    shutdown.cancel();
    stopped(run).await;
    {
        let seen = service.seen();
        assert!(
            seen.finished.is_empty(),
            "no AttemptFinished after a result"
        );
    }

    // The stopped tasks were acknowledged: another worker finds nothing to run.
    let (ran_tx, mut ran) = mpsc::unbounded_channel();
    let next = decider
        .worker()
        .handler("op", move |t: ActivityTask| {
            let _ = ran_tx.send(t.task_id);
            async { Ok(Value::Null) }
        })
        .build();
    let shutdown = CancellationToken::new();
    let run = spawn(next, &shutdown);
    assert!(
        tokio::time::timeout(QUIET, ran.recv()).await.is_err(),
        "a stopped activity ran again"
    );
    shutdown.cancel();
    stopped(run).await;
    service.stop().await;
    decider.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttled_beats_are_sent_again_at_once_in_their_own_request() {
    let mut decider = Decider::without_registry().await;
    let tasks = schedule_many(&decider, "hold", 50).await;
    let throttled: HashSet<Uuid> = tasks.iter().take(10).map(|t| t.task_id).collect();
    let rules = Rules {
        throttle_once: throttled.clone(),
        ..Rules::default()
    };
    let service = Service::start(&decider.bus, rules);
    let release = CancellationToken::new();
    let worker = decider
        .worker()
        .heartbeat_tick(Duration::from_millis(100))
        // Regular beats every 10 ticks, so the retry cannot be mistaken for one.
        .heartbeat_interval(Duration::from_secs(1))
        .concurrency(50)
        .activity("hold", held(release.clone()))
        .build();
    let shutdown = CancellationToken::new();
    let run = spawn(worker, &shutdown);

    service
        .wait_for("every throttled beat retried", |s| {
            s.beats_since(0)
                .iter()
                .filter(|(id, n)| throttled.contains(id) && **n >= 2)
                .count()
                == throttled.len()
        })
        .await;
    {
        let seen = service.seen();
        // Right after a request that throttled some beats comes the retry of exactly those.
        let mut retried = HashSet::new();
        for (i, r) in seen.requests.iter().enumerate() {
            let hit: HashSet<Uuid> = r
                .tasks
                .iter()
                .filter(|id| throttled.contains(id) && !retried.contains(*id))
                .copied()
                .collect();
            if hit.is_empty() {
                continue;
            }
            let next: HashSet<Uuid> = seen.requests[i + 1].tasks.iter().copied().collect();
            assert_eq!(
                next,
                hit,
                "request {} retries exactly the throttled beats",
                i + 1
            );
            retried.extend(hit);
            if retried.len() == throttled.len() {
                break;
            }
        }
    }
    release.cancel();
    let done = decider.results_by_task(tasks.len()).await;
    assert!(done
        .iter()
        .all(|(_, c)| matches!(c, Command::ActivityCompleted(_))));
    shutdown.cancel();
    stopped(run).await;
    service.stop().await;
    decider.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_worker_sends_what_is_overdue_once_not_a_burst() {
    const N: usize = 20;
    let interval = Duration::from_millis(500);
    let stall = Duration::from_secs(2);
    let mut decider = Decider::without_registry().await;
    let service = Service::start(&decider.bus, Rules::default());
    schedule_many(&decider, "hold", N).await;
    let release = CancellationToken::new();
    let (stalled_tx, stalled) = std::sync::mpsc::channel();
    let worker = decider
        .worker()
        .concurrency(N + 1)
        .heartbeat_tick(Duration::from_millis(100))
        .heartbeat_interval(interval)
        .activity("hold", held(release.clone()))
        .handler("stall", move |_t: ActivityTask| {
            // Blocks the worker's only runtime thread: the whole worker stalls, as a
            // process paused or starved of CPU would.
            std::thread::sleep(stall);
            let _ = stalled_tx.send(Utc::now());
            async { Ok(Value::Null) }
        })
        .build();
    // The worker gets a runtime of its own with a single thread, so that it can be stalled.
    let shutdown = CancellationToken::new();
    let token = shutdown.clone();
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(worker.run(token))
    });

    service
        .wait_for("three beats of every activity", |s| {
            let beats = s.beats_since(0);
            beats.len() == N && beats.values().all(|b| *b >= 3)
        })
        .await;
    let stall_task = decider.task("stall", Value::Null);
    decider.schedule(&stall_task).await;
    let stall_end = tokio::task::spawn_blocking(move || stalled.recv_timeout(LONG_WAIT).unwrap())
        .await
        .unwrap();
    service
        .wait_for("three beats of every activity after the stall", |s| {
            let mut after = HashMap::new();
            for r in s.requests.iter().filter(|r| r.sent >= stall_end) {
                for id in &r.tasks {
                    *after.entry(*id).or_insert(0) += 1;
                }
            }
            after.len() == N && after.values().all(|b| *b >= 3)
        })
        .await;
    {
        let seen = service.seen();
        let mut sends: HashMap<Uuid, Vec<DateTime<Utc>>> = HashMap::new();
        for r in &seen.requests {
            for id in &r.tasks {
                sends.entry(*id).or_default().push(r.sent);
            }
        }
        let gaps: Vec<chrono::Duration> = sends
            .values()
            .flat_map(|times| times.windows(2).map(|w| w[1] - w[0]))
            .collect();
        let (min, max) = (gaps.iter().min().unwrap(), gaps.iter().max().unwrap());
        // The scheduler's own pacing, measured on its own clock: a stalled scheduler that
        // caught up would send beats of one activity back to back.
        assert!(
            min.to_std().unwrap() >= interval / 2,
            "two beats of one activity {min} apart: a burst"
        );
        assert!(
            max.to_std().unwrap() >= stall,
            "the worker did stall ({max})"
        );
    }
    release.cancel();
    let done = decider.results_by_task(N + 1).await;
    assert_eq!(done.len(), N + 1);
    shutdown.cancel();
    tokio::task::spawn_blocking(move || thread.join().unwrap().unwrap())
        .await
        .unwrap();
    service.stop().await;
    decider.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_automatic_heartbeats_only_handlers_that_report_are_beaten() {
    let mut decider = Decider::without_registry().await;
    let [silent, reporting] = [0, 1].map(|i| {
        let mut t = decider.task("manual", json!({ "report": i == 1 }));
        t.response_timeout_seconds = 30;
        t
    });
    let service = Service::start(&decider.bus, Rules::default());
    decider.schedule(&silent).await;
    decider.schedule(&reporting).await;
    let release = CancellationToken::new();
    let gate = release.clone();
    let worker = decider
        .worker()
        .automatic_heartbeats(false)
        .heartbeat_tick(Duration::from_millis(50))
        .heartbeat_interval(Duration::from_millis(50))
        .activity("manual", move |task: ActivityTask, ctx: ActivityContext| {
            let gate = gate.clone();
            async move {
                let mut step = 0;
                loop {
                    if task.input["report"] == json!(true) {
                        ctx.heartbeat(json!({ "step": step }));
                    }
                    step += 1;
                    tokio::select! {
                        _ = gate.cancelled() => return Ok(json!(step)),
                        _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                    }
                }
            }
        })
        .build();
    let shutdown = CancellationToken::new();
    let run = spawn(worker, &shutdown);

    service
        .wait_for("five beats of the reporting handler", |s| {
            s.beats_since(0)
                .get(&reporting.task_id)
                .copied()
                .unwrap_or(0)
                >= 5
        })
        .await;
    {
        let seen = service.seen();
        assert!(
            !seen.beats_since(0).contains_key(&silent.task_id),
            "the silent handler was beaten"
        );
        let last = seen
            .requests
            .iter()
            .rev()
            .find_map(|r| r.details.get(&reporting.task_id));
        assert!(
            last.is_some_and(|d| d["step"].as_u64().is_some()),
            "{last:?}"
        );
    }
    release.cancel();
    decider.results_by_task(2).await;
    shutdown.cancel();
    stopped(run).await;
    service.stop().await;
    decider.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_stopped_before_it_started_is_acked_without_running() {
    let mut decider = Decider::without_registry().await;
    let skipped = decider.task("gate", json!({"n": 1}));
    let normal = decider.task("gate", json!({"n": 2}));
    let rules = Rules {
        stopped_before_start: HashMap::from([(skipped.task_id, "skipped by an operator".into())]),
        ..Rules::default()
    };
    let service = Service::start(&decider.bus, rules);
    decider.schedule(&skipped).await;
    decider.schedule(&normal).await;
    let ran: Arc<Mutex<Vec<Uuid>>> = Arc::default();
    let log = ran.clone();
    let worker = decider
        .worker()
        .handler("gate", move |task: ActivityTask| {
            let log = log.clone();
            async move {
                log.lock().unwrap().push(task.task_id);
                Ok(json!("ran"))
            }
        })
        .build();
    let shutdown = CancellationToken::new();
    let run = spawn(worker, &shutdown);

    let (_, command) = decider.next_result().await;
    assert!(matches!(command, Command::ActivityCompleted(c) if c.task_id == normal.task_id));
    decider.assert_no_result().await;
    service
        .wait_for("both attempts claimed", |s| {
            s.probed.contains(&skipped.task_id) && s.probed.contains(&normal.task_id)
        })
        .await;
    assert_eq!(
        *ran.lock().unwrap(),
        vec![normal.task_id],
        "the stopped one never ran"
    );
    // Claimed like any attempt (and refused), and its delivery acked: nothing is left in
    // the queue for another worker.
    assert!(service.seen().started.contains_key(&skipped.task_id));
    shutdown.cancel();
    stopped(run).await;
    let queue = decider.bus.names().activity_queue("gate");
    let left = decider.bus.get(&queue).await.unwrap();
    assert!(left.is_none(), "the stopped attempt's delivery was acked");
    service.stop().await;
    decider.bus.teardown(&[queue]).await.unwrap();
    decider.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_taken_while_one_is_answered_go_in_one_request() {
    const N: usize = 50;
    let mut decider = Decider::without_registry().await;
    let rules = Rules {
        claim_delay: Duration::from_millis(300),
        ..Rules::default()
    };
    let service = Service::start(&decider.bus, rules);
    let tasks: Vec<ActivityTask> = (0..N)
        .map(|i| decider.task("quick", json!({ "i": i })))
        .collect();
    join_all(tasks.iter().map(|t| decider.schedule(t))).await;
    let worker = decider
        .worker()
        .concurrency(N)
        .handler("quick", |task: ActivityTask| async move {
            Ok(json!({ "done": task.task_id }))
        })
        .build();
    let shutdown = CancellationToken::new();
    let run = spawn(worker, &shutdown);

    let done = decider.results_by_task(N).await;
    assert_eq!(done.len(), N);
    assert!(done
        .iter()
        .all(|(_, c)| matches!(c, Command::ActivityCompleted(_))));
    let requests = service.seen().claim_requests.clone();
    assert_eq!(
        requests.iter().sum::<usize>(),
        N,
        "each attempt claimed once"
    );
    // While the first request waits its 300 ms, the other tasks arrive and wait for the
    // next: a handful of requests, not one per task.
    assert!(
        requests.len() <= 5,
        "{} claim requests for {N} tasks: {requests:?}",
        requests.len()
    );
    assert!(requests.iter().any(|&n| n > 1), "{requests:?}");
    shutdown.cancel();
    stopped(run).await;
    service.stop().await;
    decider.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_delivered_twice_while_its_claim_waits_runs_once() {
    let mut decider = Decider::without_registry().await;
    let rules = Rules {
        claim_delay: Duration::from_millis(300),
        claim_once: true,
        ..Rules::default()
    };
    let service = Service::start(&decider.bus, rules);
    let first = decider.task("twice", json!({ "i": 1 }));
    let twice = decider.task("twice", json!({ "i": 2 }));
    let ran: Arc<Mutex<Vec<Uuid>>> = Arc::default();
    let log = ran.clone();
    let worker = decider
        .worker()
        .concurrency(8)
        .handler("twice", move |task: ActivityTask| {
            let log = log.clone();
            async move {
                log.lock().unwrap().push(task.task_id);
                Ok(json!("ran"))
            }
        })
        .build();
    let shutdown = CancellationToken::new();
    let run = spawn(worker, &shutdown);
    // The first claim waits 300 ms for its answer; meanwhile the other task arrives twice
    // (as when the outbox sweeper publishes a row again) and both of its claims wait for
    // the next request.
    decider.schedule(&first).await;
    service
        .wait_for("the first claim request", |s| s.claims_arrived == 1)
        .await;
    decider.schedule(&twice).await;
    decider.schedule(&twice).await;

    let done = decider.results_by_task(2).await;
    assert!(done
        .iter()
        .all(|(_, c)| matches!(c, Command::ActivityCompleted(_))));
    decider.assert_no_result().await;
    service
        .wait_for("three claims", |s| {
            s.claim_requests.iter().sum::<usize>() == 3
        })
        .await;
    for group in &service.seen().claim_groups {
        let distinct: HashSet<&Uuid> = group.iter().collect();
        assert_eq!(
            distinct.len(),
            group.len(),
            "a task twice in one request: {group:?}"
        );
    }
    let mut ran = ran.lock().unwrap().clone();
    ran.sort();
    let mut expected = vec![first.task_id, twice.task_id];
    expected.sort();
    assert_eq!(ran, expected, "each task ran once");
    shutdown.cancel();
    stopped(run).await;
    let queue = decider.bus.names().activity_queue("twice");
    let left = decider.bus.get(&queue).await.unwrap();
    assert!(left.is_none(), "the second delivery was acked");
    service.stop().await;
    decider.bus.teardown(&[queue]).await.unwrap();
    decider.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deferred_task_waits_without_its_slot_and_runs_once_when_granted() {
    let mut decider = Decider::without_registry().await;
    let limited = decider.task("capped", json!({"n": 1}));
    let free = decider.task("free", json!({"n": 2}));
    let advised = Duration::from_secs(1);
    let rules = Rules {
        defer: HashMap::from([(limited.task_id, (2, advised))]),
        ..Rules::default()
    };
    let service = Service::start(&decider.bus, rules);
    let ran: Arc<Mutex<Vec<(Uuid, Instant)>>> = Arc::default();
    let handler = |log: Arc<Mutex<Vec<(Uuid, Instant)>>>| {
        move |task: ActivityTask| {
            let log = log.clone();
            async move {
                log.lock().unwrap().push((task.task_id, Instant::now()));
                Ok(json!("ran"))
            }
        }
    };
    // One slot for both queues: the deferred task must not hold it while it waits.
    let worker = decider
        .worker()
        .concurrency(1)
        .handler("capped", handler(ran.clone()))
        .handler("free", handler(ran.clone()))
        .build();
    let shutdown = CancellationToken::new();
    let run = spawn(worker, &shutdown);
    decider.schedule(&limited).await;
    service
        .wait_for("a first claim of the limited task", |s| {
            s.claims_of.contains_key(&limited.task_id)
        })
        .await;
    decider.schedule(&free).await;

    let (_, first) = decider.next_result().await;
    assert!(
        matches!(&first, Command::ActivityCompleted(c) if c.task_id == free.task_id),
        "the free task ran while the limited one waited: {first:?}"
    );
    let (_, second) = decider.next_result().await;
    assert!(matches!(&second, Command::ActivityCompleted(c) if c.task_id == limited.task_id));
    let ran = ran.lock().unwrap().clone();
    assert_eq!(
        ran.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
        vec![free.task_id, limited.task_id],
        "the limited task ran once, after its deferrals"
    );
    let claims = service.seen().claims_of[&limited.task_id].clone();
    assert_eq!(
        claims
            .iter()
            .map(|(_, granted)| *granted)
            .collect::<Vec<_>>(),
        [false, false, true],
        "claimed again after each deferral, until granted"
    );
    // The free task ran during the first wait: the deferred one did not keep the slot.
    assert!(
        ran[0].1 < claims[0].0 + advised,
        "the free task waited for the limited one's wait to end"
    );
    // Each claim came after the advised wait (a lower bound the worker guarantees).
    for pair in claims.windows(2) {
        let gap = pair[1].0 - pair[0].0;
        assert!(
            gap >= advised,
            "claimed again {gap:?} after a deferral, before {advised:?}"
        );
    }
    decider.assert_no_result().await;
    shutdown.cancel();
    stopped(run).await;
    service.stop().await;
    let queues = ["capped", "free"].map(|q| decider.bus.names().activity_queue(q));
    decider.bus.teardown(&queues).await.unwrap();
    decider.teardown().await;
}
