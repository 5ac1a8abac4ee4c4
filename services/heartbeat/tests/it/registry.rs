//! The registry against the real PostgreSQL and Redis: answers, write-behind, stops that
//! race starts, Redis misses and outages.

use std::time::Duration;

use serde_json::json;
use weft::messages::{AttemptFinished, Beat, HeartbeatAction, StopAttempts};
use weft::registry::{AttemptStatus, Cache, Registry};

use crate::utils::{beat, is_stop, only, started, stored_status, TestEnv};

#[tokio::test]
async fn heartbeats_of_a_running_attempt_continue_without_writing_postgres_each_time() {
    let env = TestEnv::new().await;
    let registry = env.registry();
    let s = started(30);
    assert_eq!(registry.register(&s).await.unwrap(), AttemptStatus::Running);
    let id = s.attempt.task_id;
    let before = registry.stats();
    for _ in 0..20 {
        let answer = only(registry.heartbeat(&[beat(id)]).await.unwrap());
        assert_eq!(answer.action, HeartbeatAction::Continue);
    }
    let after = registry.stats();
    // The claim does not cache the attempt: its first heartbeat misses, is written
    // through and cached; the others are answered from Redis.
    assert_eq!(after.cache_misses - before.cache_misses, 1);
    assert_eq!(after.cache_hits - before.cache_hits, 19);
    assert_eq!(
        after.heartbeat_writes - before.heartbeat_writes,
        1,
        "only the first heartbeat (a miss) may write PostgreSQL within the write interval"
    );
    env.finish().await;
}

#[tokio::test]
async fn progress_details_are_kept_and_visible_before_they_reach_postgres() {
    let env = TestEnv::new().await;
    let registry = env.registry();
    let s = started(30);
    registry.register(&s).await.unwrap();
    let id = s.attempt.task_id;
    let with_details = Beat {
        task_id: id,
        details: Some(json!({"done": 42})),
    };
    registry.heartbeat(&[with_details]).await.unwrap();
    let seen = registry.get(id).await.unwrap().expect("a registered task");
    assert_eq!(seen.details, Some(json!({"done": 42})));
    assert_eq!(seen.status, AttemptStatus::Running);
    assert_eq!(seen.workflow_id, s.workflow_id);
    env.finish().await;
}

#[tokio::test]
async fn an_attempt_due_for_a_write_gets_its_heartbeat_and_details_written() {
    let env = TestEnv::new().await;
    // A write interval of 1 ms: every heartbeat after the registration is due.
    let registry = Registry::new(
        env.store.clone(),
        Some(env.cache()),
        Duration::from_millis(1),
    );
    let s = started(30);
    registry.register(&s).await.unwrap();
    let id = s.attempt.task_id;
    tokio::time::sleep(Duration::from_millis(5)).await;
    let with_details = Beat {
        task_id: id,
        details: Some(json!({"step": "b"})),
    };
    registry.heartbeat(&[with_details]).await.unwrap();
    assert_eq!(registry.stats().heartbeat_writes, 1);
    let details: Option<serde_json::Value> =
        sqlx::query_scalar("SELECT details FROM task_check WHERE task_id = $1")
            .bind(id)
            .fetch_one(env.store.pg_pool().unwrap())
            .await
            .unwrap();
    assert_eq!(details, Some(json!({"step": "b"})));
    env.finish().await;
}

#[tokio::test]
async fn an_unknown_task_is_not_found() {
    let env = TestEnv::new().await;
    let registry = env.registry();
    let answer = only(
        registry
            .heartbeat(&[beat(uuid::Uuid::new_v4())])
            .await
            .unwrap(),
    );
    assert_eq!(answer.action, HeartbeatAction::NotFound);
    assert!(registry.get(uuid::Uuid::new_v4()).await.unwrap().is_none());
    env.finish().await;
}

#[tokio::test]
async fn a_stopped_attempt_is_told_to_stop_with_the_reason() {
    let env = TestEnv::new().await;
    let registry = env.registry();
    let s = started(30);
    registry.register(&s).await.unwrap();
    let stop = StopAttempts {
        attempts: vec![s.attempt],
        reason: "workflow terminated: by test".into(),
    };
    registry.stop(&stop).await.unwrap();
    registry.stop(&stop).await.unwrap(); // redelivered: nothing changes twice
    let answer = only(
        registry
            .heartbeat(&[beat(s.attempt.task_id)])
            .await
            .unwrap(),
    );
    assert!(
        is_stop(&answer, "workflow terminated: by test"),
        "{answer:?}"
    );
    let stored = stored_status(&env.store, s.attempt.task_id).await;
    assert_eq!(stored.as_deref(), Some("STOPPED"));
    env.finish().await;
}

#[tokio::test]
async fn a_stop_that_raced_the_start_is_not_undone_by_the_claim() {
    let env = TestEnv::new().await;
    let registry = env.registry();
    let s = started(30);
    let stop = StopAttempts {
        attempts: vec![s.attempt],
        reason: "task skipped".into(),
    };
    registry.stop(&stop).await.unwrap();
    assert_eq!(registry.register(&s).await.unwrap(), AttemptStatus::Stopped);
    let answer = only(
        registry
            .heartbeat(&[beat(s.attempt.task_id)])
            .await
            .unwrap(),
    );
    assert!(is_stop(&answer, "task skipped"), "{answer:?}");
    let check = registry.get(s.attempt.task_id).await.unwrap().unwrap();
    assert_eq!(check.status, AttemptStatus::Stopped);
    assert_eq!(check.stop_reason.as_deref(), Some("task skipped"));
    env.finish().await;
}

#[tokio::test]
async fn a_finished_attempt_answers_stop_and_keeps_its_first_end() {
    let env = TestEnv::new().await;
    let registry = env.registry();
    let s = started(30);
    registry.register(&s).await.unwrap();
    let finished = AttemptFinished {
        attempt: s.attempt,
        status: "COMPLETED".into(),
        output_bytes: 99,
    };
    assert_eq!(
        registry.finish(&finished).await.unwrap(),
        AttemptStatus::Completed
    );
    let answer = only(
        registry
            .heartbeat(&[beat(s.attempt.task_id)])
            .await
            .unwrap(),
    );
    assert!(is_stop(&answer, "already finished"), "{answer:?}");
    // A stop after the end changes nothing.
    let stop = StopAttempts {
        attempts: vec![s.attempt],
        reason: "late".into(),
    };
    registry.stop(&stop).await.unwrap();
    let check = registry.get(s.attempt.task_id).await.unwrap().unwrap();
    assert_eq!(check.status, AttemptStatus::Completed);
    assert_eq!(check.output_bytes, Some(99));
    let bad = AttemptFinished {
        status: "IN_PROGRESS".into(),
        ..finished
    };
    assert!(matches!(
        registry.finish(&bad).await,
        Err(weft::Error::Decode(_))
    ));
    env.finish().await;
}

#[tokio::test]
async fn a_redis_miss_is_answered_from_postgres_and_cached_again() {
    let env = TestEnv::new().await;
    let registry = env.registry();
    let s = started(30);
    registry.register(&s).await.unwrap();
    let id = s.attempt.task_id;
    let mut redis = env.redis().await;
    let _: () = redis::cmd("DEL")
        .arg(env.key(id))
        .query_async(&mut redis)
        .await
        .unwrap();
    let answer = only(registry.heartbeat(&[beat(id)]).await.unwrap());
    assert_eq!(answer.action, HeartbeatAction::Continue);
    assert_eq!(registry.stats().cache_misses, 1);
    let cached: bool = redis::cmd("EXISTS")
        .arg(env.key(id))
        .query_async(&mut redis)
        .await
        .unwrap();
    assert!(cached, "the miss repopulated Redis");
    only(registry.heartbeat(&[beat(id)]).await.unwrap());
    assert_eq!(registry.stats().cache_misses, 1, "the next heartbeat hits");
    env.finish().await;
}

#[tokio::test]
async fn without_redis_heartbeats_are_answered_and_written_through_to_postgres() {
    let env = TestEnv::new().await;
    // Nothing listens on port 1: Redis is down for this registry.
    let dead = Cache::new("redis://127.0.0.1:1", env.names.namespace()).unwrap();
    let registry = Registry::new(env.store.clone(), Some(dead), Duration::from_secs(60));
    let s = started(30);
    registry.register(&s).await.unwrap();
    let id = s.attempt.task_id;
    for _ in 0..3 {
        let answer = only(registry.heartbeat(&[beat(id)]).await.unwrap());
        assert_eq!(answer.action, HeartbeatAction::Continue);
    }
    let stats = registry.stats();
    assert_eq!(stats.cache_unavailable, 3);
    assert_eq!(stats.heartbeat_writes, 3, "each heartbeat written through");
    registry
        .stop(&StopAttempts {
            attempts: vec![s.attempt],
            reason: "reset".into(),
        })
        .await
        .unwrap();
    let answer = only(registry.heartbeat(&[beat(id)]).await.unwrap());
    assert!(is_stop(&answer, "reset"), "{answer:?}");
    env.finish().await;
}

#[tokio::test]
async fn a_batch_gets_one_answer_per_beat_in_order() {
    let env = TestEnv::new().await;
    let registry = env.registry();
    let (a, b) = (started(30), started(30));
    registry.register(&a).await.unwrap();
    registry.register(&b).await.unwrap();
    registry
        .finish(&AttemptFinished {
            attempt: b.attempt,
            status: "FAILED".into(),
            output_bytes: 0,
        })
        .await
        .unwrap();
    let unknown = uuid::Uuid::new_v4();
    let ids = [a.attempt.task_id, b.attempt.task_id, unknown];
    let beats: Vec<Beat> = ids.iter().map(|id| beat(*id)).collect();
    let answers = registry.heartbeat(&beats).await.unwrap();
    let got: Vec<_> = answers.iter().map(|(id, a)| (*id, a.action)).collect();
    assert_eq!(
        got,
        vec![
            (ids[0], HeartbeatAction::Continue),
            (ids[1], HeartbeatAction::Stop),
            (ids[2], HeartbeatAction::NotFound)
        ]
    );
    env.finish().await;
}

#[tokio::test]
async fn registrations_and_ends_written_in_groups_keep_each_attempts_outcome() {
    let env = TestEnv::new().await;
    let registry = env.registry();
    let (a, b, stopped) = (started(30), started(30), started(30));
    registry
        .stop(&StopAttempts {
            attempts: vec![stopped.attempt],
            reason: "skipped by an operator".into(),
        })
        .await
        .unwrap();
    // `a` twice in one group (a redelivery): written once.
    let statuses = registry
        .register_many(&[a.clone(), b.clone(), stopped.clone(), a.clone()])
        .await
        .unwrap();
    assert_eq!(
        statuses,
        vec![
            AttemptStatus::Running,
            AttemptStatus::Running,
            AttemptStatus::Stopped,
            AttemptStatus::Running
        ]
    );
    // The probe before a start sees the stop and the registrations, and records nothing.
    let probed = registry
        .probe(&[
            a.attempt.task_id,
            stopped.attempt.task_id,
            uuid::Uuid::new_v4(),
        ])
        .await
        .unwrap();
    let actions: Vec<HeartbeatAction> = probed.iter().map(|(_, p)| p.action).collect();
    assert_eq!(
        actions,
        vec![
            HeartbeatAction::Continue,
            HeartbeatAction::Stop,
            HeartbeatAction::NotFound
        ]
    );
    assert!(is_stop(&probed[1].1, "skipped by an operator"));

    let finished = |s: &weft::messages::AttemptStarted, status: &str| AttemptFinished {
        attempt: s.attempt,
        status: status.into(),
        output_bytes: 7,
    };
    let ends = registry
        .finish_many(&[finished(&a, "COMPLETED"), finished(&b, "DONE?")])
        .await
        .unwrap();
    assert_eq!(ends[0].as_ref().unwrap(), &AttemptStatus::Completed);
    assert!(
        matches!(&ends[1], Err(weft::Error::Decode(why)) if why.contains("DONE?")),
        "{:?}",
        ends[1]
    );
    assert_eq!(
        stored_status(&env.store, a.attempt.task_id)
            .await
            .as_deref(),
        Some("COMPLETED")
    );
    assert_eq!(
        stored_status(&env.store, b.attempt.task_id)
            .await
            .as_deref(),
        Some("RUNNING"),
        "a bad end changes nothing"
    );
    env.finish().await;
}
