//! Outbox, timers and hook deliveries on both backends.

use std::time::Duration;

use chrono::{DurationRound, TimeDelta, Utc};
use serde_json::{json, Map};
use uuid::Uuid;
use weft::hooks::{Backoff, NewDelivery};
use weft::messages::Command;
use weft::store::hooks::AttemptResult;
use weft::store::outbox::OutboxMessage;
use weft::store::runs::CommitBatch;
use weft::store::timers::TimerRecord;
use weft::Envelope;

use super::Env;

fn message(env: &Env, key: &str, n: u64) -> OutboxMessage {
    let envelope = Envelope::new(
        "wf-outbox",
        None,
        &weft::messages::Command::RollbackHooksDone(weft::messages::RollbackHooksDone {
            run_id: Uuid::from_u128(u128::from(n)),
            ok: true,
            reason: None,
        }),
    )
    .unwrap();
    OutboxMessage::new(env.names.commands_exchange(), key.into(), &envelope, None).unwrap()
}

bus_test!(
    outbox_publish_forgets_confirmed_rows_and_sweep_republishes_old_ones,
    outbox
);
async fn outbox(env: &Env) -> Vec<String> {
    let queue = env.listen("outbox.test").await;
    let (m1, m2) = (
        message(env, "outbox.test", 1),
        message(env, "outbox.test", 2),
    );
    let batch = CommitBatch {
        outbox: vec![m1.clone(), m2.clone()],
        ..CommitBatch::default()
    };
    env.store.commit(&batch).await.unwrap();
    // Nothing is old enough yet.
    let swept = env
        .store
        .sweep_outbox(&env.bus, Duration::from_secs(3600), 10)
        .await;
    assert_eq!(swept.unwrap(), 0);
    env.store
        .publish_outbox(&env.bus, std::slice::from_ref(&m1))
        .await
        .unwrap();
    assert_eq!(env.take(&queue, 1).await.len(), 1);
    // PostgreSQL forgets published rows in the background.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let swept = env.store.sweep_outbox(&env.bus, Duration::ZERO, 10).await;
    assert_eq!(swept.unwrap(), 1, "only the unpublished row is swept");
    let taken = env.take(&queue, 1).await;
    assert_eq!(taken.len(), 1);
    assert_eq!(taken[0].id, Envelope::from_bytes(&m2.body).unwrap().id);
    let swept = env.store.sweep_outbox(&env.bus, Duration::ZERO, 10).await;
    assert_eq!(swept.unwrap(), 0, "a swept row is deleted");
    vec![queue]
}

bus_test!(
    outbox_sends_raw_messages_first_and_holds_the_envelopes_back_until_they_are_confirmed,
    raw_first
);
async fn raw_first(env: &Env) -> Vec<String> {
    let commands = env.listen("outbox.order").await;
    let raw_queue = env.listen("outbox.raw-sink").await;
    // An EVENT task's message to a destination that refuses it, committed with the
    // command that would complete the task: neither the publish after the commit nor
    // the sweeper may send the command.
    let refused = OutboxMessage::raw(
        format!("{}.no-such-exchange", env.names.namespace()),
        "k".into(),
        Uuid::new_v4(),
        b"{\"order\": 1}".to_vec(),
        None,
    );
    let held = message(env, "outbox.order", 1);
    let batch = CommitBatch {
        outbox: vec![held.clone(), refused.clone()],
        ..CommitBatch::default()
    };
    env.store.commit(&batch).await.unwrap();
    let published = env
        .store
        .publish_outbox(&env.bus, &[held.clone(), refused.clone()])
        .await;
    assert!(published.is_err(), "the refused message is an error");
    assert!(
        env.take(&commands, 0).await.is_empty(),
        "the command waited"
    );
    let swept = env.store.sweep_outbox(&env.bus, Duration::ZERO, 10).await;
    assert!(swept.is_err(), "the sweeper meets the refusal first");
    assert!(
        env.take(&commands, 0).await.is_empty(),
        "the command still waits"
    );

    // A raw message that goes through: the command follows it.
    let sent = OutboxMessage::raw(
        String::new(),
        raw_queue.clone(),
        Uuid::new_v4(),
        b"{\"order\": 2}".to_vec(),
        None,
    );
    let follows = message(env, "outbox.order", 2);
    let batch = CommitBatch {
        outbox: vec![follows.clone(), sent.clone()],
        ..CommitBatch::default()
    };
    env.store.commit(&batch).await.unwrap();
    env.store
        .publish_outbox(&env.bus, &[follows.clone(), sent])
        .await
        .unwrap();
    assert_eq!(env.bus.message_count(&raw_queue).await.unwrap(), 1);
    let taken = env.take(&commands, 1).await;
    assert_eq!(taken.len(), 1);
    assert_eq!(taken[0].id, Envelope::from_bytes(&follows.body).unwrap().id);
    vec![commands, raw_queue]
}

bus_test!(
    a_row_the_broker_refuses_does_not_make_the_sweeper_send_the_others_again,
    one_refused
);
async fn one_refused(env: &Env) -> Vec<String> {
    let queue = env.listen("outbox.sweep").await;
    // Written first, so swept first: an exchange that does not exist refuses it.
    let refused = OutboxMessage {
        exchange: format!("{}.no-such-exchange", env.names.namespace()),
        ..message(env, "outbox.sweep", 1)
    };
    let (m2, m3) = (
        message(env, "outbox.sweep", 2),
        message(env, "outbox.sweep", 3),
    );
    let batch = CommitBatch {
        outbox: vec![refused, m2.clone(), m3.clone()],
        ..CommitBatch::default()
    };
    env.store.commit(&batch).await.unwrap();

    let swept = env.store.sweep_outbox(&env.bus, Duration::ZERO, 10).await;
    assert!(swept.is_err(), "the refusal is reported");
    // PostgreSQL's sweeper publishes a sweep's envelopes concurrently: in any order.
    let mut ids: Vec<Uuid> = env.take(&queue, 2).await.iter().map(|e| e.id).collect();
    let mut expected: Vec<Uuid> = [&m2, &m3]
        .iter()
        .map(|m| Envelope::from_bytes(&m.body).unwrap().id)
        .collect();
    ids.sort_unstable();
    expected.sort_unstable();
    assert_eq!(ids, expected, "the rows after the refused one went");
    for _ in 0..2 {
        let swept = env.store.sweep_outbox(&env.bus, Duration::ZERO, 10).await;
        assert!(swept.is_err(), "the refused row stays, and is tried again");
        assert!(
            env.take(&queue, 0).await.is_empty(),
            "a confirmed row is not sent again"
        );
    }
    vec![queue]
}

bus_test!(timers_fire_when_due_and_not_before, timers);
async fn timers(env: &Env) -> Vec<String> {
    let queue = env.listen("timer.test").await;
    assert_eq!(env.store.next_timer_in().await.unwrap(), None);
    assert_eq!(env.store.next_timer_at().await.unwrap(), None);
    let now = Utc::now()
        .duration_trunc(TimeDelta::milliseconds(1))
        .unwrap();
    let envelope = Envelope::new(
        "wf-timer",
        None,
        &Command::RollbackHooksDone(weft::messages::RollbackHooksDone {
            run_id: Uuid::nil(),
            ok: true,
            reason: None,
        }),
    )
    .unwrap();
    let timer = |at| {
        TimerRecord::new(
            "wf-timer",
            Some(Uuid::now_v7()),
            at,
            env.names.commands_exchange(),
            "timer.test",
            &envelope,
            None,
        )
        .unwrap()
    };
    let due = timer(now - TimeDelta::seconds(2));
    let later = timer(now + TimeDelta::hours(1));
    let batch = CommitBatch {
        timers: vec![later.clone(), due.clone()],
        ..CommitBatch::default()
    };
    env.store.commit(&batch).await.unwrap();
    assert_eq!(env.store.next_timer_at().await.unwrap(), Some(due.fire_at));
    assert_eq!(
        env.store.next_timer_in().await.unwrap(),
        Some(Duration::ZERO)
    );
    let report = env.store.fire_timers(&env.bus, 10).await.unwrap();
    assert_eq!(report.fired(), 1);
    assert!(report.failed.is_empty());
    assert!(report.lateness[0] >= Duration::from_secs(2));
    assert_eq!(env.take(&queue, 1).await.len(), 1);
    assert_eq!(
        env.store.next_timer_at().await.unwrap(),
        Some(later.fire_at)
    );
    let wait = env.store.next_timer_in().await.unwrap().unwrap();
    assert!(
        wait > Duration::from_secs(3500) && wait <= Duration::from_secs(3600),
        "{wait:?}"
    );
    assert_eq!(env.store.fire_due_timers(&env.bus, 10).await.unwrap(), 0);
    vec![queue]
}

fn delivery(
    workflow_id: &str,
    run_id: Uuid,
    n: u32,
    seq: Option<i32>,
    blocking: bool,
) -> NewDelivery {
    NewDelivery {
        id: Uuid::now_v7(),
        workflow_id: workflow_id.into(),
        run_id,
        hook: if seq.is_some() {
            "onRollback"
        } else {
            "onComplete"
        }
        .into(),
        event: "test".into(),
        task_ref: Some(format!("t{n}")),
        task_id: None,
        iteration: 0,
        url: format!("http://127.0.0.1:9/{n}"),
        headers: Map::new(),
        body: json!({ "n": n }).to_string(),
        signature: None,
        blocking,
        group_seq: seq,
        traceparent: None,
    }
}

fn failed() -> AttemptResult {
    AttemptResult {
        status_code: Some(500),
        error: Some("HTTP 500".into()),
        duration: Duration::from_millis(3),
        permanent: false,
    }
}

fn succeeded() -> AttemptResult {
    AttemptResult {
        status_code: Some(200),
        error: None,
        duration: Duration::from_millis(3),
        permanent: false,
    }
}

fn backoff(max_attempts: u32) -> Backoff {
    Backoff {
        initial: Duration::from_secs(3600),
        max: Duration::from_secs(3600),
        max_attempts,
    }
}

bus_test!(hook_claims_lease_and_rollback_sequences_move_on, hooks);
async fn hooks(env: &Env) -> Vec<String> {
    let wf = "wf-hooks";
    let run = Uuid::now_v7();
    let (s0, s1, s2) = (
        delivery(wf, run, 0, Some(0), false),
        delivery(wf, run, 1, Some(1), true),
        delivery(wf, run, 2, Some(2), false),
    );
    let plain = delivery(wf, run, 9, None, false);
    let batch = CommitBatch {
        hook_deliveries: vec![s0.clone(), s1.clone(), s2.clone(), plain.clone()],
        ..CommitBatch::default()
    };
    env.store.commit(&batch).await.unwrap();
    assert_eq!(
        env.store.next_hook_delivery_in().await.unwrap(),
        Some(Duration::ZERO)
    );

    // Only the head of the sequence and the plain hook are due.
    let lease = Duration::from_secs(60);
    let mut claimed = env.store.claim_hook_deliveries(10, lease).await.unwrap();
    claimed.sort_by_key(|c| c.group_seq);
    assert_eq!(
        claimed.iter().map(|c| c.id).collect::<Vec<_>>(),
        [plain.id, s0.id]
    );
    assert!(claimed.iter().all(|c| c.attempt == 1 && !c.released));
    assert_eq!(claimed[1].headers, json!({}));
    // Leased: not claimed again, due again when the lease ends.
    assert!(env
        .store
        .claim_hook_deliveries(10, lease)
        .await
        .unwrap()
        .is_empty());
    let next = env.store.next_hook_delivery_in().await.unwrap().unwrap();
    assert!(next > Duration::from_secs(50) && next <= lease, "{next:?}");

    // The plain one succeeds; the head fails, but as a non-awaited hook its first
    // attempt releases the next member.
    let out = env
        .store
        .settle_hook_attempt(&env.names, &claimed[0], &succeeded(), &backoff(3))
        .await;
    assert!(out.unwrap().is_empty());
    let out = env
        .store
        .settle_hook_attempt(&env.names, &claimed[1], &failed(), &backoff(3))
        .await;
    assert!(out.unwrap().is_empty());
    // Settling twice does nothing (the row is no longer pending... or settled already).
    let out = env
        .store
        .settle_hook_attempt(&env.names, &claimed[0], &failed(), &backoff(3))
        .await;
    assert!(out.unwrap().is_empty());

    let next = env.store.claim_hook_deliveries(10, lease).await.unwrap();
    assert_eq!(next.len(), 1);
    assert_eq!(next[0].id, s1.id);
    assert!(next[0].blocking);
    // An awaited hook that fails with attempts left holds the sequence...
    let out = env
        .store
        .settle_hook_attempt(&env.names, &next[0], &failed(), &backoff(3))
        .await;
    assert!(out.unwrap().is_empty());
    assert!(env
        .store
        .claim_hook_deliveries(10, lease)
        .await
        .unwrap()
        .is_empty());
    // ...and once dead-lettered, skips the rest and tells the run.
    let mut again = next[0].clone();
    again.attempt = 2;
    let out = env
        .store
        .settle_hook_attempt(&env.names, &again, &failed(), &backoff(2))
        .await
        .unwrap();
    assert_eq!(out.len(), 1);
    let done = Envelope::from_bytes(&out[0].body).unwrap();
    assert_eq!(done.workflow_id, wf);
    match done.decode::<Command>().unwrap() {
        Command::RollbackHooksDone(d) => {
            assert_eq!(d.run_id, run);
            assert!(!d.ok);
            assert!(d.reason.unwrap().contains("failed after 2 attempts"));
        }
        other => panic!("unexpected {other:?}"),
    }
    let views = env.store.hook_deliveries(wf).await.unwrap();
    let status = |id| {
        let v = views.iter().find(|v| v.delivery_id == id).unwrap();
        (v.status.clone(), v.attempts.as_array().map_or(0, Vec::len))
    };
    assert_eq!(status(plain.id), ("DELIVERED".into(), 1));
    assert_eq!(status(s0.id), ("PENDING".into(), 1));
    assert_eq!(status(s1.id), ("DEAD".into(), 2));
    assert_eq!(status(s2.id), ("SKIPPED".into(), 0));
    let s0_view = views.iter().find(|v| v.delivery_id == s0.id).unwrap();
    assert!(s0_view.next_attempt_at.unwrap() > Utc::now() + TimeDelta::minutes(59));
    assert_eq!(
        views
            .iter()
            .find(|v| v.delivery_id == s2.id)
            .unwrap()
            .next_attempt_at,
        None
    );

    // A sequence whose last member is released tells the run it is done.
    let run2 = Uuid::now_v7();
    let only = delivery(wf, run2, 5, Some(0), true);
    let batch = CommitBatch {
        hook_deliveries: vec![only.clone()],
        ..CommitBatch::default()
    };
    env.store.commit(&batch).await.unwrap();
    let c = env.store.claim_hook_deliveries(10, lease).await.unwrap();
    assert_eq!(c.len(), 1);
    let out = env
        .store
        .settle_hook_attempt(&env.names, &c[0], &succeeded(), &backoff(3))
        .await
        .unwrap();
    assert_eq!(out.len(), 1);
    match Envelope::from_bytes(&out[0].body)
        .unwrap()
        .decode::<Command>()
        .unwrap()
    {
        Command::RollbackHooksDone(d) => assert!(d.ok && d.run_id == run2),
        other => panic!("unexpected {other:?}"),
    }
    // The message was committed to the outbox with the settle: the sweeper has it.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let queue = env.listen(&env.names.command_key_for(wf)).await;
    assert_eq!(
        env.store
            .sweep_outbox(&env.bus, Duration::ZERO, 10)
            .await
            .unwrap(),
        2
    );
    assert_eq!(env.take(&queue, 2).await.len(), 2);
    vec![queue]
}

bus_test!(a_permanent_failure_dead_letters_at_once, permanent);
async fn permanent(env: &Env) -> Vec<String> {
    let wf = "wf-refused";
    let run = Uuid::now_v7();
    let (head, next) = (
        delivery(wf, run, 0, Some(0), true),
        delivery(wf, run, 1, Some(1), false),
    );
    let batch = CommitBatch {
        hook_deliveries: vec![head.clone(), next.clone()],
        ..CommitBatch::default()
    };
    env.store.commit(&batch).await.unwrap();
    let claimed = env
        .store
        .claim_hook_deliveries(10, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    // Refused by the outbound guard on its first attempt, with seven attempts left: dead
    // at once, and as an awaited rollback hook it fails the rollback.
    let refused = AttemptResult {
        status_code: None,
        error: Some("outbound call refused: 127.0.0.1 is in the loopback range".into()),
        duration: Duration::ZERO,
        permanent: true,
    };
    let out = env
        .store
        .settle_hook_attempt(&env.names, &claimed[0], &refused, &backoff(8))
        .await
        .unwrap();
    assert_eq!(out.len(), 1);
    match Envelope::from_bytes(&out[0].body)
        .unwrap()
        .decode::<Command>()
        .unwrap()
    {
        Command::RollbackHooksDone(d) => {
            assert!(!d.ok);
            assert!(
                d.reason
                    .as_deref()
                    .unwrap()
                    .contains("outbound call refused"),
                "{d:?}"
            );
        }
        other => panic!("unexpected {other:?}"),
    }
    let views = env.store.hook_deliveries(wf).await.unwrap();
    let view = views.iter().find(|v| v.delivery_id == head.id).unwrap();
    assert_eq!(view.status, "DEAD");
    assert_eq!(view.next_attempt_at, None);
    assert_eq!(view.attempts.as_array().map_or(0, Vec::len), 1);
    assert!(view
        .last_error
        .as_deref()
        .unwrap()
        .starts_with("outbound call refused"));
    let skipped = views.iter().find(|v| v.delivery_id == next.id).unwrap();
    assert_eq!(skipped.status, "SKIPPED");
    // The RollbackHooksDone is in the outbox: leave nothing for the next test.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let queue = env.listen(&env.names.command_key_for(wf)).await;
    assert_eq!(
        env.store
            .sweep_outbox(&env.bus, Duration::ZERO, 10)
            .await
            .unwrap(),
        1
    );
    assert_eq!(env.take(&queue, 1).await.len(), 1);
    vec![queue]
}

/// An eager task whose worker's queue refuses it (its node is down in a cluster; here a
/// queue that refuses every publish) is swept to `<ns>.eager.expired`, from where the
/// decider sends it on to its shared queue, instead of being tried on that queue again
/// at every sweep while its run waits. PostgreSQL only: the in-process bus of `weft dev`
/// has no queue that refuses.
#[tokio::test]
async fn an_eager_task_its_queue_refuses_is_swept_the_way_of_an_expired_one() {
    use lapin::options::{QueueBindOptions, QueueDeclareOptions};
    use lapin::types::{AMQPValue, FieldTable};

    let env = Env::new(super::Fixture::postgres().await).await;
    let expired = env.names.eager_expired_queue();
    env.bus.declare_queue(&expired, &[]).await.unwrap();
    // A worker's eager queue that takes nothing: full at zero messages, refusing more.
    let refusing = format!("{}.eager.refusing.make_name", env.names.namespace());
    let conn = lapin::Connection::connect(&weft::testing::amqp_url(), Default::default())
        .await
        .unwrap();
    let channel = conn.create_channel().await.unwrap();
    let mut args = FieldTable::default();
    args.insert("x-max-length".into(), AMQPValue::LongInt(0));
    args.insert(
        "x-overflow".into(),
        AMQPValue::LongString("reject-publish".into()),
    );
    let durable = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };
    channel
        .queue_declare(refusing.as_str().into(), durable, args)
        .await
        .unwrap();
    channel
        .queue_bind(
            refusing.as_str().into(),
            env.names.eager_exchange().as_str().into(),
            refusing.as_str().into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();

    let task = message(&env, "unused", 7);
    let eager = OutboxMessage {
        exchange: env.names.eager_exchange(),
        routing_key: refusing.clone(),
        ..task
    };
    let batch = CommitBatch {
        outbox: vec![eager.clone()],
        ..CommitBatch::default()
    };
    env.store.commit(&batch).await.unwrap();
    let published = env
        .store
        .publish_outbox(&env.bus, std::slice::from_ref(&eager))
        .await;
    assert!(published.is_err(), "the eager queue refuses the task");

    let swept = env.store.sweep_outbox(&env.bus, Duration::ZERO, 10).await;
    assert_eq!(swept.unwrap(), 1, "swept elsewhere, the row goes");
    let taken = env.take(&expired, 1).await;
    assert_eq!(taken.len(), 1, "the task waits on {expired}");
    assert_eq!(taken[0].id, Envelope::from_bytes(&eager.body).unwrap().id);
    let swept = env.store.sweep_outbox(&env.bus, Duration::ZERO, 10).await;
    assert_eq!(swept.unwrap(), 0, "nothing is left to sweep");
    let _ = conn.close(200, "done".into()).await;
    env.teardown(&[expired, refusing]).await;
}
