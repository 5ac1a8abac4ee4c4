//! The registry on the in-memory cache (`Cache::in_memory()`, what `weft dev` runs): the
//! same answers and PostgreSQL writes as on Redis, the fallback to PostgreSQL when the
//! cache is fresh (a restart), and the scanner's use of its heartbeats.

use std::time::Duration;

use serde_json::json;
use uuid::Uuid;
use weft::messages::{AttemptFinished, AttemptStarted, Beat, HeartbeatAction, StopAttempts};
use weft::registry::{AttemptStatus, Cache, Registry};

use crate::utils::{beat, is_stop, only, started, stored_status, TestEnv};

const INTERVAL: Duration = Duration::from_secs(60);

fn on_memory(env: &TestEnv) -> Registry {
    Registry::new(env.store.clone(), Some(Cache::in_memory()), INTERVAL)
}

/// Moves an attempt's stored deadline and last heartbeat `secs` into the past.
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

/// Drives `registry` through registrations, a stop that races its start, a batch of
/// heartbeats, an end, a probe, a read and a scan; returns what it saw, free of ids and
/// times so that two caches can be compared.
async fn scenario(env: &TestEnv, registry: &Registry) -> Vec<String> {
    let mut seen = Vec::new();
    let (a, b, unwatched, raced) = (started(30), started(30), started(0), started(30));
    let stop = StopAttempts {
        attempts: vec![raced.attempt],
        reason: "task skipped".into(),
    };
    registry.stop(&stop).await.unwrap();
    let registered = registry
        .register_many(&[a.clone(), b.clone(), unwatched.clone(), raced.clone()])
        .await
        .unwrap();
    seen.push(format!("registered {registered:?}"));

    let ids =
        |s: &[&AttemptStarted]| -> Vec<Uuid> { s.iter().map(|s| s.attempt.task_id).collect() };
    let mut beats: Vec<Beat> = ids(&[&a, &b, &unwatched, &raced])
        .into_iter()
        .map(beat)
        .collect();
    beats[0].details = Some(json!({"done": 1}));
    beats.push(beat(Uuid::new_v4()));
    for _ in 0..3 {
        let answers = registry.heartbeat(&beats).await.unwrap();
        let got: Vec<_> = answers
            .into_iter()
            .map(|(_, a)| (a.action, a.reason))
            .collect();
        seen.push(format!("beats {got:?}"));
    }

    let ended = registry
        .finish(&AttemptFinished {
            attempt: b.attempt,
            status: "FAILED".into(),
            output_bytes: 3,
        })
        .await
        .unwrap();
    seen.push(format!("finished {ended:?}"));
    let after_end = only(
        registry
            .heartbeat(&[beat(b.attempt.task_id)])
            .await
            .unwrap(),
    );
    seen.push(format!("after end {after_end:?}"));

    let probed = registry
        .probe(&[a.attempt.task_id, raced.attempt.task_id, Uuid::new_v4()])
        .await
        .unwrap();
    let probed: Vec<_> = probed.into_iter().map(|(_, a)| a).collect();
    seen.push(format!("probed {probed:?}"));

    let check = registry.get(a.attempt.task_id).await.unwrap().unwrap();
    seen.push(format!("read {:?} {:?}", check.status, check.details));

    // PostgreSQL's copy is stale (written behind); the cache saw heartbeats just now.
    age_in_postgres(env, a.attempt.task_id, 40).await;
    let report = registry.scan(&env.bus, 100).await.unwrap();
    seen.push(format!(
        "scan {} {} {} {}",
        report.candidates, report.extended, report.timed_out, report.deferred
    ));

    let stats = registry.stats();
    seen.push(format!(
        "stats hits {} misses {} unavailable {} heartbeat writes {} status writes {}",
        stats.cache_hits,
        stats.cache_misses,
        stats.cache_unavailable,
        stats.heartbeat_writes,
        stats.status_writes
    ));
    seen
}

#[tokio::test]
async fn the_registry_on_the_memory_cache_answers_and_writes_like_on_redis() {
    let env = TestEnv::new().await;
    let on_redis = scenario(&env, &env.registry()).await;
    let in_memory = on_memory(&env);
    let on_memory = scenario(&env, &in_memory).await;
    assert_eq!(on_memory, on_redis);
    // Sanity: the scenario did hit the cache, and kept every write behind.
    assert!(in_memory.stats().cache_hits >= 9, "{on_memory:#?}");
    env.finish().await;
}

#[tokio::test]
async fn heartbeats_on_the_memory_cache_do_not_write_postgres_each_time_and_keep_details() {
    let env = TestEnv::new().await;
    let registry = on_memory(&env);
    let s = started(30);
    registry.register(&s).await.unwrap();
    let id = s.attempt.task_id;
    let before = registry.stats();
    for i in 0..20 {
        let b = Beat {
            task_id: id,
            details: Some(json!({ "step": i })),
        };
        let answer = only(registry.heartbeat(&[b]).await.unwrap());
        assert_eq!(answer.action, HeartbeatAction::Continue);
    }
    let after = registry.stats();
    // The claim does not cache the attempt: the first heartbeat misses and is written
    // through; the other nineteen stay in memory.
    assert_eq!(after.cache_hits - before.cache_hits, 19);
    assert_eq!(after.heartbeat_writes - before.heartbeat_writes, 1);
    let seen = registry.get(id).await.unwrap().unwrap();
    assert_eq!(
        seen.details,
        Some(json!({"step": 19})),
        "newer than PostgreSQL"
    );
    env.finish().await;
}

#[tokio::test]
async fn a_fresh_memory_cache_answers_from_postgres_and_caches_again_as_on_a_redis_miss() {
    let env = TestEnv::new().await;
    let before_restart = on_memory(&env);
    let (s, stopped) = (started(30), started(30));
    before_restart.register(&s).await.unwrap();
    before_restart.register(&stopped).await.unwrap();
    before_restart
        .stop(&StopAttempts {
            attempts: vec![stopped.attempt],
            reason: "reset".into(),
        })
        .await
        .unwrap();
    // A restart: same database, empty memory.
    let after_restart = on_memory(&env);
    let id = s.attempt.task_id;
    let answer = only(after_restart.heartbeat(&[beat(id)]).await.unwrap());
    assert_eq!(answer.action, HeartbeatAction::Continue);
    let stats = after_restart.stats();
    assert_eq!((stats.cache_misses, stats.heartbeat_writes), (1, 1));
    only(after_restart.heartbeat(&[beat(id)]).await.unwrap());
    assert_eq!(after_restart.stats().cache_misses, 1, "cached again: a hit");
    let answer = only(
        after_restart
            .heartbeat(&[beat(stopped.attempt.task_id)])
            .await
            .unwrap(),
    );
    assert!(is_stop(&answer, "reset"), "{answer:?}");
    let probed = after_restart
        .probe(&[stopped.attempt.task_id])
        .await
        .unwrap();
    assert!(is_stop(&probed[0].1, "reset"), "{probed:?}");
    env.finish().await;
}

#[tokio::test]
async fn a_silent_attempt_is_timed_out_from_the_memory_caches_last_heartbeat() {
    let env = TestEnv::new().await;
    let registry = on_memory(&env);
    let s = started(1);
    registry.register(&s).await.unwrap();
    let id = s.attempt.task_id;
    // One heartbeat (cached), then more than the 1 s timeout without one (a lower bound,
    // not a measurement).
    only(registry.heartbeat(&[beat(id)]).await.unwrap());
    let misses = registry.stats().cache_misses;
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    age_in_postgres(&env, id, 5).await;
    let report = registry.scan(&env.bus, 100).await.unwrap();
    assert_eq!((report.candidates, report.timed_out), (1, 1), "{report:?}");
    let answer = only(registry.heartbeat(&[beat(id)]).await.unwrap());
    assert!(is_stop(&answer, "no heartbeat"), "{answer:?}");
    assert_eq!(
        registry.stats().cache_misses,
        misses,
        "the time-out was cached, not only stored"
    );
    assert_eq!(
        stored_status(&env.store, id).await.as_deref(),
        Some("TIMED_OUT")
    );
    env.finish().await;
}

#[tokio::test]
async fn after_a_restart_the_scanner_trusts_the_stored_deadline_only_past_a_write_interval() {
    let env = TestEnv::new().await;
    let (recent, old) = (started(10), started(10));
    let before = on_memory(&env);
    for s in [&recent, &old] {
        before.register(s).await.unwrap();
        // A heartbeat reached PostgreSQL (the first one always does).
        only(before.heartbeat(&[beat(s.attempt.task_id)]).await.unwrap());
    }
    let registry = on_memory(&env); // knows neither: no heartbeat evidence
    age_in_postgres(&env, recent.attempt.task_id, 15).await;
    age_in_postgres(&env, old.attempt.task_id, 110).await;
    let report = registry.scan(&env.bus, 100).await.unwrap();
    assert_eq!((report.timed_out, report.deferred), (1, 1), "{report:?}");
    let status = |s: &AttemptStarted| stored_status(&env.store, s.attempt.task_id);
    assert_eq!(status(&old).await.as_deref(), Some("TIMED_OUT"));
    assert_eq!(status(&recent).await.as_deref(), Some("RUNNING"));
    let check = registry.get(recent.attempt.task_id).await.unwrap().unwrap();
    assert_eq!(check.status, AttemptStatus::Running);
    env.finish().await;
}
