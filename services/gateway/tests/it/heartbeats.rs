//! HTTP workers' heartbeats (`POST /api/tasks/{taskId}/heartbeat`, the batched
//! `POST /api/tasks/heartbeat`) over the real registry: PostgreSQL and Redis.

use std::time::Duration;

use axum::http::{Method, StatusCode};
use chrono::Utc;
use serde_json::json;
use uuid::Uuid;
use weft::messages::{AttemptRef, AttemptStarted, StopAttempts};
use weft::registry::{Cache, Registry};
use weft_gateway::AppState;

use crate::utils::{random_suffix, TestEnv};

/// A test world whose gateway has a registry with Redis under the test's namespace.
async fn world() -> (TestEnv, Registry) {
    let mut env = TestEnv::new().await;
    let ns = env.bus.names().namespace().to_owned();
    let cache = Cache::new(&weft::testing::redis_url(), &ns).unwrap();
    let registry = Registry::new(env.store.clone(), Some(cache), Duration::from_secs(60));
    let state = AppState::new(
        env.store.clone(),
        env.bus.clone(),
        weft::Config::default().max_body_bytes,
        weft::admin::Metrics::new(),
    )
    .with_registry(registry.clone());
    env.router = weft_gateway::router(state);
    (env, registry)
}

/// Deletes the namespace's Redis keys, then the rest of the world.
async fn finish(env: TestEnv) {
    weft::testing::delete_redis_keys(env.bus.names().namespace()).await;
    env.finish().await;
}

/// Registers a running attempt of a fresh task, as a poll handing it out would.
async fn running(registry: &Registry) -> AttemptStarted {
    let started = AttemptStarted {
        attempt: AttemptRef {
            task_id: Uuid::new_v4(),
            attempt: 1,
        },
        workflow_id: format!("wf-{}", random_suffix()),
        run_id: Uuid::new_v4(),
        task_name: "work".into(),
        task_ref: "work_ref".into(),
        worker_id: "http-worker".into(),
        response_timeout_seconds: 30,
        input_bytes: 2,
        reply_to: "shard.0".into(),
        started_at: Utc::now(),
    };
    registry.register(&started).await.unwrap();
    started
}

#[tokio::test]
async fn a_running_task_is_told_to_continue_and_its_details_are_kept() {
    let (env, registry) = world().await;
    let task = running(&registry).await;
    let id = task.attempt.task_id;
    let r = env
        .post(
            &format!("/api/tasks/{id}/heartbeat"),
            &json!({"details": {"pct": 40}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(r.json(), json!({"action": "CONTINUE"}));
    let check = registry.get(id).await.unwrap().unwrap();
    assert_eq!(check.details, Some(json!({"pct": 40})));
    // An empty body is a heartbeat without details.
    let r = env
        .send(Method::POST, &format!("/api/tasks/{id}/heartbeat"), None)
        .await;
    assert_eq!(r.json(), json!({"action": "CONTINUE"}));
    finish(env).await;
}

#[tokio::test]
async fn a_stopped_task_is_told_to_stop_with_the_reason() {
    let (env, registry) = world().await;
    let task = running(&registry).await;
    registry
        .stop(&StopAttempts {
            attempts: vec![task.attempt],
            reason: "workflow terminated: operator".into(),
        })
        .await
        .unwrap();
    let id = task.attempt.task_id;
    let r = env
        .post(&format!("/api/tasks/{id}/heartbeat"), &json!({}))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(
        r.json(),
        json!({"action": "STOP", "reason": "workflow terminated: operator"})
    );
    finish(env).await;
}

#[tokio::test]
async fn an_unknown_task_is_404_and_a_bad_body_400() {
    let (env, registry) = world().await;
    let unknown = Uuid::new_v4();
    let r = env
        .post(&format!("/api/tasks/{unknown}/heartbeat"), &json!({}))
        .await;
    r.error(StatusCode::NOT_FOUND);
    let r = env
        .post("/api/tasks/not-a-task/heartbeat", &json!({}))
        .await;
    r.error(StatusCode::NOT_FOUND);
    let task = running(&registry).await;
    let uri = format!("/api/tasks/{}/heartbeat", task.attempt.task_id);
    let r = env.send(Method::POST, &uri, Some(b"{nope".to_vec())).await;
    assert_eq!(r.error(StatusCode::BAD_REQUEST)["code"], "invalid_json");
    let r = env.post(&uri, &json!({"detail": 1})).await;
    r.error(StatusCode::BAD_REQUEST);
    finish(env).await;
}

#[tokio::test]
async fn a_batch_answers_every_task_in_one_request() {
    let (env, registry) = world().await;
    let (alive, stopped) = (running(&registry).await, running(&registry).await);
    registry
        .stop(&StopAttempts {
            attempts: vec![stopped.attempt],
            reason: "task skipped".into(),
        })
        .await
        .unwrap();
    let unknown = Uuid::new_v4().to_string();
    let (a, s) = (
        alive.attempt.task_id.to_string(),
        stopped.attempt.task_id.to_string(),
    );
    let r = env
        .post(
            "/api/tasks/heartbeat",
            &json!({"taskIds": [a, s, unknown, "bogus"]}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let results = &r.json()["results"];
    assert_eq!(results[&a], json!({"action": "CONTINUE"}));
    assert_eq!(
        results[&s],
        json!({"action": "STOP", "reason": "task skipped"})
    );
    assert_eq!(results[&unknown]["action"], "NOT_FOUND");
    assert_eq!(results["bogus"]["action"], "NOT_FOUND");
    let r = env.post("/api/tasks/heartbeat", &json!({"ids": []})).await;
    r.error(StatusCode::BAD_REQUEST);
    let too_many: Vec<String> = (0..=weft_gateway::routes::heartbeat::MAX_BATCH)
        .map(|_| Uuid::new_v4().to_string())
        .collect();
    let r = env
        .post("/api/tasks/heartbeat", &json!({ "taskIds": too_many }))
        .await;
    assert_eq!(r.error(StatusCode::BAD_REQUEST)["path"], "taskIds");
    finish(env).await;
}
