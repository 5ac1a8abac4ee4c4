//! The service over the real bus: heartbeat batches answered on `reply_to`, stops that
//! reach the next heartbeat, silent attempts timed out, bad messages dead-lettered,
//! graceful shutdown.

use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;
use weft::messages::{
    AttemptStarted, ClaimAttempt, ClaimAttempts, Command, HeartbeatAction, HeartbeatAnswer,
    HeartbeatAnswers, HeartbeatMessage, Heartbeats, StopAttempts,
};
use weft::topology::Names;
use weft::{Config, Envelope};

use crate::utils::{amqp_url, beat, is_stop, redis_url, started, TestEnv, SHARDS, SOON};

/// The service running in-process on the test's database and namespace.
struct Service {
    stop: CancellationToken,
    task: JoinHandle<weft::Result<()>>,
}

impl Service {
    fn start(env: &TestEnv) -> Self {
        let config = Config {
            database_url: env.db_url.clone(),
            amqp_url: amqp_url(),
            redis_url: redis_url(),
            namespace: env.names.namespace().to_owned(),
            shards: SHARDS,
            admin_addr: Some(([127, 0, 0, 1], 0).into()),
            heartbeat_scan_interval: Duration::from_millis(100),
            ..Config::default()
        };
        let stop = CancellationToken::new();
        let task = tokio::spawn(weft_heartbeat::run(config, stop.clone()));
        Self { stop, task }
    }

    async fn shut_down(self) {
        self.stop.cancel();
        let ended = tokio::time::timeout(SOON, self.task).await;
        assert!(matches!(ended, Ok(Ok(Ok(())))), "clean stop: {ended:?}");
    }
}

async fn send(env: &TestEnv, message: &HeartbeatMessage) -> Envelope {
    let envelope = Envelope::new("hb-test", None, message).unwrap();
    env.bus
        .publish("", &env.names.heartbeat_queue(), &envelope)
        .await
        .unwrap();
    envelope
}

/// One heartbeat of `task_id` over `Bus::call`, as the SDK sends it.
async fn heartbeat(env: &TestEnv, task_id: Uuid) -> HeartbeatAnswer {
    let request = HeartbeatMessage::Heartbeats(Heartbeats {
        worker_id: "worker-1".into(),
        beats: vec![beat(task_id)],
        probe: false,
    });
    let envelope = Envelope::new("worker-1", None, &request).unwrap();
    let reply = env
        .bus
        .call("", &env.names.heartbeat_queue(), &envelope, SOON)
        .await
        .expect("an answer");
    assert_eq!(reply.kind, "HeartbeatAnswers");
    let mut answers: HeartbeatAnswers = serde_json::from_value(reply.payload).unwrap();
    answers
        .results
        .remove(&task_id)
        .expect("an answer for the task")
}

/// Heartbeats until the answer satisfies `done` (messages are handled concurrently, so
/// a heartbeat may overtake the message it should see).
async fn heartbeat_until(
    env: &TestEnv,
    task_id: Uuid,
    done: impl Fn(&HeartbeatAnswer) -> bool,
) -> HeartbeatAnswer {
    let deadline = tokio::time::Instant::now() + SOON;
    loop {
        let answer = heartbeat(env, task_id).await;
        if done(&answer) || tokio::time::Instant::now() > deadline {
            return answer;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One claim over `Bus::call`, as the SDK sends it before running a handler.
async fn claim(env: &TestEnv, started: &AttemptStarted, takeover: bool) -> HeartbeatAnswer {
    let request = HeartbeatMessage::ClaimAttempt(ClaimAttempt {
        started: started.clone(),
        takeover,
    });
    let envelope = Envelope::new(&started.workflow_id, Some(started.run_id), &request).unwrap();
    let reply = env
        .bus
        .call("", &env.names.heartbeat_queue(), &envelope, SOON)
        .await
        .expect("an answer to the claim");
    let mut answers: HeartbeatAnswers = serde_json::from_value(reply.payload).unwrap();
    answers
        .results
        .remove(&started.attempt.task_id)
        .expect("an answer for the task")
}

#[tokio::test]
async fn claims_of_a_limited_task_past_its_limit_are_deferred_and_the_others_claimed() {
    let env = TestEnv::new().await;
    let service = Service::start(&env);
    let limited: Vec<AttemptStarted> = (0..3)
        .map(|_| AttemptStarted {
            task_name: "capped".into(),
            ..started(30)
        })
        .collect();
    let free = started(30);
    let row = |s: &AttemptStarted, limits| weft::store::runs::AttemptCheck {
        task_id: s.attempt.task_id,
        attempt: 1,
        workflow_id: s.workflow_id.clone(),
        run_id: s.run_id,
        task_name: s.task_name.clone(),
        task_ref: s.task_ref.clone(),
        reply_to: s.reply_to.clone(),
        status: weft::registry::AttemptStatus::Scheduled,
        reason: None,
        timeout_seconds: 30,
        limits,
        worker_id: None,
    };
    let capped = weft::registry::AttemptLimits {
        concurrency: Some(1),
        rate: None,
    };
    let mut checks: Vec<_> = limited.iter().map(|s| row(s, capped)).collect();
    checks.push(row(&free, Default::default()));
    env.store
        .commit(&weft::store::runs::CommitBatch {
            checks,
            ..Default::default()
        })
        .await
        .unwrap();
    // One request, as a busy worker sends it: the unlimited claim is answered with the
    // others, one limited claim runs, the two others are told to come back.
    let group = limited
        .iter()
        .chain([&free])
        .map(|s| ClaimAttempt {
            started: s.clone(),
            takeover: false,
        })
        .collect();
    let request = HeartbeatMessage::ClaimAttempts(ClaimAttempts { claims: group });
    let envelope = Envelope::new(&free.workflow_id, Some(free.run_id), &request).unwrap();
    let reply = env
        .bus
        .call("", &env.names.heartbeat_queue(), &envelope, SOON)
        .await
        .expect("an answer");
    let answers: HeartbeatAnswers = serde_json::from_value(reply.payload).unwrap();
    assert_eq!(answers.results.len(), 4, "{answers:?}");
    assert_eq!(
        answers.results[&free.attempt.task_id].action,
        HeartbeatAction::Continue
    );
    let actions: Vec<_> = limited
        .iter()
        .map(|s| &answers.results[&s.attempt.task_id])
        .collect();
    assert_eq!(
        actions
            .iter()
            .filter(|a| a.action == HeartbeatAction::Continue)
            .count(),
        1,
        "{actions:?}"
    );
    for deferred in actions
        .iter()
        .filter(|a| a.action != HeartbeatAction::Continue)
    {
        assert_eq!(deferred.action, HeartbeatAction::Defer, "{deferred:?}");
        assert_eq!(deferred.retry_after_ms, Some(500));
        assert_eq!(
            deferred.reason.as_deref(),
            Some("concurrentExecLimit 1 reached")
        );
    }
    // Asked alone later, a deferred one is deferred again while the first runs.
    let waiting = limited
        .iter()
        .find(|s| answers.results[&s.attempt.task_id].action == HeartbeatAction::Defer)
        .unwrap();
    assert_eq!(
        claim(&env, waiting, false).await.action,
        HeartbeatAction::Defer
    );
    service.shut_down().await;
    env.finish().await;
}

#[tokio::test]
async fn claims_sent_together_are_answered_together_and_an_invalid_one_is_left_out() {
    let env = TestEnv::new().await;
    let service = Service::start(&env);
    let (a, b, held) = (started(30), started(30), started(30));
    let granted = claim(&env, &held, false).await;
    assert_eq!(granted.action, HeartbeatAction::Continue, "{granted:?}");
    let mut invalid = started(30);
    invalid.attempt.attempt = 0;
    let other = AttemptStarted {
        worker_id: "worker-2".into(),
        ..held.clone()
    };
    let group = [a.clone(), b.clone(), other, invalid.clone()]
        .into_iter()
        .map(|started| ClaimAttempt {
            started,
            takeover: false,
        })
        .collect();
    let request = HeartbeatMessage::ClaimAttempts(ClaimAttempts { claims: group });
    let envelope = Envelope::new(&a.workflow_id, Some(a.run_id), &request).unwrap();
    let reply = env
        .bus
        .call("", &env.names.heartbeat_queue(), &envelope, SOON)
        .await
        .expect("one answer to the group");
    let answers: HeartbeatAnswers = serde_json::from_value(reply.payload).unwrap();
    assert_eq!(answers.results.len(), 3, "{answers:?}");
    assert_eq!(
        answers.results[&a.attempt.task_id].action,
        HeartbeatAction::Continue
    );
    assert_eq!(
        answers.results[&b.attempt.task_id].action,
        HeartbeatAction::Continue
    );
    let refused = &answers.results[&held.attempt.task_id];
    assert!(is_stop(refused, "claimed by another worker"), "{refused:?}");
    assert!(!answers.results.contains_key(&invalid.attempt.task_id));
    // Both are claimed: a second claim of either is another worker's.
    let again = AttemptStarted {
        worker_id: "worker-3".into(),
        ..a.clone()
    };
    let refused = claim(&env, &again, false).await;
    assert!(
        is_stop(&refused, "claimed by another worker"),
        "{refused:?}"
    );
    service.shut_down().await;
    env.finish().await;
}

#[tokio::test]
async fn a_claim_is_granted_once_refused_to_others_and_to_a_stopped_attempt() {
    let env = TestEnv::new().await;
    let service = Service::start(&env);
    let (first, stopped) = (started(30), started(30));
    let granted = claim(&env, &first, false).await;
    assert_eq!(granted.action, HeartbeatAction::Continue, "{granted:?}");
    let other = AttemptStarted {
        worker_id: "worker-2".into(),
        ..first.clone()
    };
    let refused = claim(&env, &other, false).await;
    assert!(
        is_stop(&refused, "claimed by another worker"),
        "{refused:?}"
    );
    // A redelivery (its first consumer died) takes the attempt over.
    let over = claim(&env, &other, true).await;
    assert_eq!(over.action, HeartbeatAction::Continue, "{over:?}");
    // Stopped while it waited in its queue: refused with the reason, even on redelivery.
    let stop = StopAttempts {
        attempts: vec![stopped.attempt],
        reason: "skipped by an operator".into(),
    };
    send(&env, &HeartbeatMessage::StopAttempts(stop)).await;
    let answer = heartbeat_until(&env, stopped.attempt.task_id, |a| {
        a.action == HeartbeatAction::Stop
    })
    .await;
    assert!(is_stop(&answer, "skipped"), "{answer:?}");
    let refused = claim(&env, &stopped, true).await;
    assert!(is_stop(&refused, "skipped by an operator"), "{refused:?}");
    service.shut_down().await;
    env.finish().await;
}

#[tokio::test]
async fn heartbeats_over_the_bus_continue_until_the_decider_stops_the_attempt() {
    let env = TestEnv::new().await;
    let service = Service::start(&env);
    let s = started(30);
    let id = s.attempt.task_id;
    send(&env, &HeartbeatMessage::AttemptStarted(s.clone())).await;
    let answer = heartbeat_until(&env, id, |a| a.action == HeartbeatAction::Continue).await;
    assert_eq!(answer.action, HeartbeatAction::Continue);
    let stop = StopAttempts {
        attempts: vec![s.attempt],
        reason: "workflow terminated: enough".into(),
    };
    send(&env, &HeartbeatMessage::StopAttempts(stop)).await;
    let answer = heartbeat_until(&env, id, |a| a.action != HeartbeatAction::Continue).await;
    assert!(
        is_stop(&answer, "workflow terminated: enough"),
        "{answer:?}"
    );
    service.shut_down().await;
    env.finish().await;
}

#[tokio::test]
async fn the_service_times_out_a_silent_attempt_and_tells_its_run() {
    let mut env = TestEnv::new().await;
    let mut commands = env.receive_commands().await;
    let service = Service::start(&env);
    let s = AttemptStarted {
        response_timeout_seconds: 1,
        ..started(1)
    };
    send(&env, &HeartbeatMessage::AttemptStarted(s.clone())).await;
    let sent = tokio::time::timeout(SOON, commands.recv())
        .await
        .expect("ActivityTimedOut in time")
        .unwrap();
    match sent.envelope.decode::<Command>().unwrap() {
        Command::ActivityTimedOut(t) => assert_eq!(t.task_id, s.attempt.task_id),
        other => panic!("expected ActivityTimedOut, got {other:?}"),
    }
    let answer = heartbeat(&env, s.attempt.task_id).await;
    assert!(is_stop(&answer, "no heartbeat"), "{answer:?}");
    service.shut_down().await;
    env.finish().await;
}

#[tokio::test]
async fn messages_that_can_never_apply_are_dead_lettered() {
    let env = TestEnv::new().await;
    let mut dead = env.record(&Names::dlq(&env.names.heartbeat_queue()));
    let service = Service::start(&env);
    let mut bad = started(30);
    bad.attempt.attempt = 0;
    let first = send(&env, &HeartbeatMessage::AttemptStarted(bad)).await;
    let mut unknown = Envelope::new(
        "hb-test",
        None,
        &HeartbeatMessage::AttemptStarted(started(30)),
    )
    .unwrap();
    unknown.kind = "Bogus".into();
    env.bus
        .publish("", &env.names.heartbeat_queue(), &unknown)
        .await
        .unwrap();
    let mut ids = Vec::new();
    for _ in 0..2 {
        let d = tokio::time::timeout(SOON, dead.recv())
            .await
            .unwrap()
            .unwrap();
        ids.push(d.envelope.id);
    }
    ids.sort();
    let mut expected = vec![first.id, unknown.id];
    expected.sort();
    assert_eq!(ids, expected);
    // The queue keeps serving.
    let s = started(30);
    send(&env, &HeartbeatMessage::AttemptStarted(s.clone())).await;
    let answer = heartbeat_until(&env, s.attempt.task_id, |a| {
        a.action == HeartbeatAction::Continue
    })
    .await;
    assert_eq!(answer.action, HeartbeatAction::Continue);
    service.shut_down().await;
    env.finish().await;
}
