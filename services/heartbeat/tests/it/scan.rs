//! The timeout scanner: time-outs sent once through the outbox, live attempts spared,
//! several scanners sharing the work, and the retention purge.

use std::collections::HashSet;
use std::time::Duration;

use uuid::Uuid;
use weft::messages::{AttemptFinished, Command, HeartbeatAction, HeartbeatMessage, Heartbeats};
use weft::registry::AttemptStatus;

use crate::utils::{beat, is_stop, only, started, stored_status, TestEnv, SOON};

/// Moves an attempt's stored deadline and last heartbeat `secs` into the past, as if
/// that much time had gone by since the last write.
async fn age_in_postgres(env: &TestEnv, task_id: Uuid, secs: i64) {
    sqlx::query(
        "UPDATE task_check SET last_heartbeat_at = last_heartbeat_at - make_interval(secs => $2),
             expires_at = expires_at - make_interval(secs => $2)
         WHERE task_id = $1",
    )
    .bind(task_id)
    .bind(secs as f64)
    .execute(env.store.pg_pool().unwrap())
    .await
    .unwrap();
}

/// Moves the last heartbeat Redis holds `secs` into the past.
async fn age_in_redis(env: &TestEnv, task_id: Uuid, secs: i64) {
    let mut redis = env.redis().await;
    let last: i64 = redis::cmd("HGET")
        .arg(env.key(task_id))
        .arg("l")
        .query_async(&mut redis)
        .await
        .unwrap();
    let _: () = redis::cmd("HSET")
        .arg(env.key(task_id))
        .arg("l")
        .arg(last - secs * 1000)
        .query_async(&mut redis)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_silent_attempt_is_timed_out_once_and_its_run_is_told() {
    let mut env = TestEnv::new().await;
    let mut commands = env.receive_commands().await;
    let registry = env.registry();
    let s = started(10);
    registry.register(&s).await.unwrap();
    let id = s.attempt.task_id;
    // One heartbeat (written through and cached), then silence.
    only(registry.heartbeat(&[beat(id)]).await.unwrap());
    age_in_postgres(&env, id, 11).await;
    age_in_redis(&env, id, 11).await;
    let report = registry.scan(&env.bus, 100).await.unwrap();
    assert_eq!((report.candidates, report.timed_out), (1, 1), "{report:?}");
    let again = registry.scan(&env.bus, 100).await.unwrap();
    assert_eq!(
        again.candidates, 0,
        "a timed-out attempt is no longer scanned"
    );

    let sent = tokio::time::timeout(SOON, commands.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(sent.envelope.workflow_id, s.workflow_id);
    match sent.envelope.decode::<Command>().unwrap() {
        Command::ActivityTimedOut(t) => {
            assert_eq!((t.task_id, t.run_id, t.attempt), (id, s.run_id, 1));
            assert!(t.reason.contains("10s"), "{}", t.reason);
        }
        other => panic!("expected ActivityTimedOut, got {other:?}"),
    }
    let answer = only(registry.heartbeat(&[beat(id)]).await.unwrap());
    assert!(is_stop(&answer, "no heartbeat"), "{answer:?}");
    assert_eq!(
        stored_status(&env.store, id).await.as_deref(),
        Some("TIMED_OUT")
    );
    let outbox: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox")
        .fetch_one(env.store.pg_pool().unwrap())
        .await
        .unwrap();
    assert!(
        outbox <= 1,
        "the published row is deleted in the background"
    );
    env.finish().await;
}

#[tokio::test]
async fn an_attempt_whose_recent_heartbeats_are_only_in_redis_is_spared() {
    let env = TestEnv::new().await;
    let registry = env.registry();
    let s = started(10);
    registry.register(&s).await.unwrap();
    let id = s.attempt.task_id;
    // The first heartbeat is written through; PostgreSQL's copy then goes stale (written
    // behind) while Redis sees a heartbeat just now.
    only(registry.heartbeat(&[beat(id)]).await.unwrap());
    age_in_postgres(&env, id, 30).await;
    only(registry.heartbeat(&[beat(id)]).await.unwrap());
    let report = registry.scan(&env.bus, 100).await.unwrap();
    assert_eq!((report.timed_out, report.extended), (0, 1), "{report:?}");
    let check = registry.get(id).await.unwrap().unwrap();
    assert_eq!(check.status, AttemptStatus::Running);
    assert!(
        check.expires_at > Some(chrono::Utc::now()),
        "deadline moved: {check:?}"
    );
    let again = registry.scan(&env.bus, 100).await.unwrap();
    assert_eq!(again.candidates, 0);
    env.finish().await;
}

#[tokio::test]
async fn without_redis_evidence_only_a_deadline_passed_by_a_write_interval_times_out() {
    let env = TestEnv::new().await;
    let registry = env.registry();
    let (recent, old) = (started(10), started(10));
    for s in [&recent, &old] {
        registry.register(s).await.unwrap();
        // A heartbeat reached PostgreSQL (the first one always does) ...
        only(
            registry
                .heartbeat(&[beat(s.attempt.task_id)])
                .await
                .unwrap(),
        );
    }
    // ... and Redis lost the evidence.
    let mut redis = env.redis().await;
    for s in [&recent, &old] {
        let _: () = redis::cmd("DEL")
            .arg(env.key(s.attempt.task_id))
            .query_async(&mut redis)
            .await
            .unwrap();
    }
    // Past the deadline by 5 s (less than the 60 s write interval), and by 100 s.
    age_in_postgres(&env, recent.attempt.task_id, 15).await;
    age_in_postgres(&env, old.attempt.task_id, 110).await;
    let report = registry.scan(&env.bus, 100).await.unwrap();
    assert_eq!((report.timed_out, report.deferred), (1, 1), "{report:?}");
    let status = |s: &weft::messages::AttemptStarted| stored_status(&env.store, s.attempt.task_id);
    assert_eq!(status(&old).await.as_deref(), Some("TIMED_OUT"));
    assert_eq!(status(&recent).await.as_deref(), Some("RUNNING"));
    env.finish().await;
}

#[tokio::test]
async fn two_scanners_time_each_attempt_out_exactly_once() {
    let mut env = TestEnv::new().await;
    let mut commands = env.receive_commands().await;
    let (one, two) = (env.registry(), env.registry());
    let mut ids = HashSet::new();
    for _ in 0..120 {
        let s = started(5);
        one.register(&s).await.unwrap();
        ids.insert(s.attempt.task_id);
    }
    sqlx::query(
        "UPDATE task_check SET expires_at = expires_at - interval '200 seconds',
             last_heartbeat_at = last_heartbeat_at - interval '200 seconds'",
    )
    .execute(env.store.pg_pool().unwrap())
    .await
    .unwrap();
    let mut redis = env.redis().await;
    for id in &ids {
        let _: () = redis::cmd("HSET")
            .arg(env.key(*id))
            .arg("l")
            .arg(0)
            .query_async(&mut redis)
            .await
            .unwrap();
    }
    let mut timed_out = 0;
    loop {
        let (a, b) = tokio::join!(one.scan(&env.bus, 25), two.scan(&env.bus, 25));
        let (a, b) = (a.unwrap(), b.unwrap());
        timed_out += a.timed_out + b.timed_out;
        if a.candidates + b.candidates == 0 {
            break;
        }
    }
    assert_eq!(timed_out, 120);
    let mut told = HashSet::new();
    while told.len() < 120 {
        let d = tokio::time::timeout(SOON, commands.recv())
            .await
            .unwrap()
            .unwrap();
        if let Ok(Command::ActivityTimedOut(t)) = d.envelope.decode::<Command>() {
            assert!(told.insert(t.task_id), "told twice about {}", t.task_id);
        }
    }
    assert_eq!(told, ids);
    // Nothing more arrives (a duplicate would come right behind the others).
    let extra = tokio::time::timeout(Duration::from_millis(500), commands.recv()).await;
    assert!(extra.is_err(), "an extra command: {extra:?}");
    env.finish().await;
}

#[tokio::test]
async fn ended_attempts_are_purged_after_their_retention_and_running_ones_kept() {
    let env = TestEnv::new().await;
    let registry = env.registry();
    let (running, done) = (started(10), started(10));
    registry.register(&running).await.unwrap();
    registry.register(&done).await.unwrap();
    registry
        .finish(&AttemptFinished {
            attempt: done.attempt,
            status: "COMPLETED".into(),
            output_bytes: 1,
        })
        .await
        .unwrap();
    sqlx::query("UPDATE task_check SET updated_at = now() - interval '3 hours'")
        .execute(env.store.pg_pool().unwrap())
        .await
        .unwrap();
    let retention = Duration::from_secs(3600);
    assert_eq!(registry.purge(retention, 10).await.unwrap(), 1);
    assert_eq!(registry.purge(retention, 10).await.unwrap(), 0);
    assert!(stored_status(&env.store, done.attempt.task_id)
        .await
        .is_none());
    assert_eq!(
        stored_status(&env.store, running.attempt.task_id)
            .await
            .as_deref(),
        Some("RUNNING")
    );
    let answer = only(
        registry
            .heartbeat(&[beat(running.attempt.task_id)])
            .await
            .unwrap(),
    );
    assert_eq!(answer.action, HeartbeatAction::Continue);
    env.finish().await;
}

#[tokio::test]
async fn the_scanner_query_uses_the_partial_index() {
    let env = TestEnv::new().await;
    // Enough finished rows that a sequential scan would not be chosen by accident.
    sqlx::query(
        "INSERT INTO task_check (task_id, attempt, status, updated_at)
         SELECT gen_random_uuid(), 1, 'COMPLETED', now() FROM generate_series(1, 20000)",
    )
    .execute(env.store.pg_pool().unwrap())
    .await
    .unwrap();
    sqlx::query("ANALYZE task_check")
        .execute(env.store.pg_pool().unwrap())
        .await
        .unwrap();
    let sql = format!("EXPLAIN {}", weft::registry::SCAN_SQL);
    let plan: Vec<String> = sqlx::query_scalar(&sql)
        .bind(500_i64)
        .bind(60.0_f64)
        .bind(None::<Vec<Uuid>>)
        .fetch_all(env.store.pg_pool().unwrap())
        .await
        .unwrap();
    let plan = plan.join("\n");
    assert!(plan.contains("task_check_running_expiry"), "{plan}");
    env.finish().await;
}

#[tokio::test]
async fn a_limited_claim_counts_running_attempts_through_the_partial_index() {
    let env = TestEnv::new().await;
    let pool = env.store.pg_pool().unwrap();
    // Many running attempts without a limit (which the index leaves out), a few with.
    sqlx::query(
        "INSERT INTO task_check (task_id, attempt, task_name, status, concurrency_limit)
         SELECT gen_random_uuid(), 1, 'work', 'RUNNING',
                CASE WHEN i % 1000 = 0 THEN 2 END
         FROM generate_series(1, 20000) AS i",
    )
    .execute(pool)
    .await
    .unwrap();
    sqlx::query("ANALYZE task_check")
        .execute(pool)
        .await
        .unwrap();
    let plan: Vec<String> = sqlx::query_scalar(&format!("EXPLAIN {}", weft::registry::GATE_SQL))
        .bind("work")
        .bind(true)
        .fetch_all(pool)
        .await
        .unwrap();
    let plan = plan.join("\n");
    assert!(plan.contains("task_check_limited_running"), "{plan}");
    env.finish().await;
}

/// Publishes a heartbeat of `task_id` to the heartbeat queue as a worker's request (no
/// answer asked: the ingest records it all the same).
async fn beat_into_queue(env: &TestEnv, task_id: Uuid) {
    let message = HeartbeatMessage::Heartbeats(Heartbeats {
        worker_id: "worker-1".into(),
        beats: vec![beat(task_id)],
        probe: false,
    });
    let envelope = weft::Envelope::new("worker-1", None, &message).unwrap();
    env.bus
        .publish("", &env.names.heartbeat_queue(), &envelope)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_is_never_timed_out_while_its_heartbeats_wait_in_the_queue() {
    let mut env = TestEnv::new().await;
    let mut commands = env.receive_commands().await;
    let registry = env.registry();
    let s = started(2);
    registry.register(&s).await.unwrap();
    let id = s.attempt.task_id;
    only(registry.heartbeat(&[beat(id)]).await.unwrap());
    // The heartbeat consumer is held back (not started): the worker's next beats, every
    // 500 ms for 3 s, pile up in the queue. The registry's last beat is then 3 s old,
    // past the 2 s timeout.
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        beat_into_queue(&env, id).await;
    }
    let metrics = weft::admin::Metrics::new();
    let scanner = std::sync::Arc::new(weft_heartbeat::scanner::Scanner::new(
        registry.clone(),
        env.bus.clone(),
        &metrics,
    ));
    let shutdown = env.shutdown.clone();
    let scanning = {
        let (scanner, shutdown) = (scanner.clone(), shutdown.clone());
        tokio::spawn(async move { scanner.scan_all(&shutdown).await })
    };
    // The scanner suspects the attempt and waits for its barrier, behind the beats.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!scanning.is_finished(), "the scan waits for the queue");
    assert_eq!(
        stored_status(&env.store, id).await.as_deref(),
        Some("RUNNING")
    );
    // The consumer catches up: the beats, then the barrier; the attempt lives.
    let consumer = weft_heartbeat::ingest::start(&env.bus, registry.clone(), 64, shutdown.clone());
    tokio::time::timeout(SOON, scanning).await.unwrap().unwrap();
    assert_eq!(
        stored_status(&env.store, id).await.as_deref(),
        Some("RUNNING"),
        "alive: its heartbeats were only late"
    );
    let early = tokio::time::timeout(Duration::from_millis(300), commands.recv()).await;
    assert!(early.is_err(), "no ActivityTimedOut: {early:?}");

    // Silent from now on: timed out once its timeout has passed, the queue being empty.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    scanner.scan_all(&shutdown).await;
    assert_eq!(
        stored_status(&env.store, id).await.as_deref(),
        Some("TIMED_OUT")
    );
    let sent = tokio::time::timeout(SOON, commands.recv())
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(
        sent.envelope.decode::<Command>().unwrap(),
        Command::ActivityTimedOut(t) if t.task_id == id
    ));
    env.finish().await;
    consumer.await.unwrap();
}
