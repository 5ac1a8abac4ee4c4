//! Reads of what the decider materialised: rows are inserted directly, as the decider
//! would write them, and read back through the API.

use axum::http::StatusCode;
use chrono::{DateTime, TimeZone, Utc};
use serde_json::json;
use uuid::Uuid;

use crate::utils::TestEnv;

const T0_MS: i64 = 1_700_000_000_000;

fn at(offset_ms: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(T0_MS + offset_ms)
        .single()
        .unwrap_or_default()
}

/// A run of `wf` with `is_current`, status COMPLETED or RUNNING.
async fn insert_run(env: &TestEnv, wf: &str, run: Uuid, current: bool, done: bool) {
    sqlx::query(
        "INSERT INTO runs (run_id, workflow_id, workflow_name, workflow_version, status,
             sub_status, input, output, variables, correlation_id, reason, failed_task_refs,
             start_time, end_time, update_time, version, is_current)
         VALUES ($1, $2, 'orders', 3, $3, $4, '{\"id\": 7}', $5, '{\"v\": true}', 'corr',
             $6, $7, $8, $9, $10, 5, $11)",
    )
    .bind(run)
    .bind(wf)
    .bind(if done { "FAILED" } else { "RUNNING" })
    .bind(if done { "FAILED" } else { "RUNNING" })
    .bind(done.then(|| json!({"total": 12})))
    .bind(done.then_some("charge failed"))
    .bind(if done {
        vec!["charge".to_owned()]
    } else {
        Vec::new()
    })
    .bind(at(0))
    .bind(done.then(|| at(5_000)))
    .bind(at(5_000))
    .bind(current)
    .execute(env.store.pg_pool().unwrap())
    .await
    .expect("insert run");
}

async fn insert_task(
    env: &TestEnv,
    wf: &str,
    run: Uuid,
    seq: i32,
    task_ref: &str,
    attempt: i32,
    ended: bool,
) -> Uuid {
    let id = Uuid::now_v7();
    sqlx::query(
        "INSERT INTO tasks (task_id, run_id, workflow_id, task_ref, task_type, task_name, seq,
             iteration, attempt, status, input, output, reason, worker_id, scheduled_time,
             start_time, end_time, update_time)
         VALUES ($1, $2, $3, $4, 'SIMPLE', $5, $6, 0, $7, $8, '{\"a\": 1}', $9, NULL, $10,
             $11, $12, $13, $14)",
    )
    .bind(id)
    .bind(run)
    .bind(wf)
    .bind(task_ref)
    .bind(format!("{task_ref}_task"))
    .bind(seq)
    .bind(attempt)
    .bind(if ended { "COMPLETED" } else { "SCHEDULED" })
    .bind(ended.then(|| json!({"ok": true})))
    .bind(ended.then_some("worker-1"))
    .bind(at(i64::from(seq) * 100))
    .bind(ended.then(|| at(i64::from(seq) * 100 + 10)))
    .bind(ended.then(|| at(i64::from(seq) * 100 + 50)))
    .bind(at(i64::from(seq) * 100 + 50))
    .execute(env.store.pg_pool().unwrap())
    .await
    .expect("insert task");
    id
}

async fn insert_events(env: &TestEnv, run: Uuid, count: i64) {
    for event_id in 1..=count {
        sqlx::query(
            "INSERT INTO history_events (run_id, event_id, type, time, attributes)
             VALUES ($1, $2, 'TaskScheduled', $3, $4)",
        )
        .bind(run)
        .bind(event_id)
        .bind(at(event_id))
        .bind(json!({"n": event_id}))
        .execute(env.store.pg_pool().unwrap())
        .await
        .expect("insert event");
    }
}

#[tokio::test]
async fn workflow_of_a_run_has_conductor_shape_times_in_ms_and_tasks_in_seq_order() {
    let env = TestEnv::new().await;
    let wf = "wf-read-1";
    let run = Uuid::now_v7();
    insert_run(&env, wf, run, true, true).await;
    // Inserted out of order on purpose.
    insert_task(&env, wf, run, 2, "charge", 2, false).await;
    let first = insert_task(&env, wf, run, 0, "reserve", 1, true).await;
    insert_task(&env, wf, run, 1, "price", 1, true).await;

    let r = env.get(&format!("/api/workflow/{wf}")).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let w = r.json();
    assert_eq!(w["workflowId"], wf);
    assert_eq!(w["runId"], run.to_string());
    assert_eq!(w["workflowName"], "orders");
    assert_eq!(w["workflowVersion"], 3);
    assert_eq!(w["status"], "FAILED");
    assert_eq!(w["subStatus"], "FAILED");
    assert_eq!(w["input"], json!({"id": 7}));
    assert_eq!(w["output"], json!({"total": 12}));
    assert_eq!(w["variables"], json!({"v": true}));
    assert_eq!(w["startTime"], T0_MS);
    assert_eq!(w["endTime"], T0_MS + 5_000);
    assert_eq!(w["updateTime"], T0_MS + 5_000);
    assert_eq!(w["reasonForIncompletion"], "charge failed");
    assert_eq!(w["failedReferenceTaskNames"], json!(["charge"]));
    assert_eq!(w["correlationId"], "corr");

    let refs: Vec<&str> = w["tasks"]
        .as_array()
        .expect("tasks")
        .iter()
        .map(|t| t["referenceTaskName"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(refs, ["reserve", "price", "charge"]);
    let t0 = &w["tasks"][0];
    assert_eq!(t0["taskId"], first.to_string());
    assert_eq!(
        t0["taskType"], "reserve_task",
        "a worker task's type is its name"
    );
    assert_eq!(t0["taskDefName"], "reserve_task");
    assert_eq!(t0["status"], "COMPLETED");
    assert_eq!(t0["inputData"], json!({"a": 1}));
    assert_eq!(t0["outputData"], json!({"ok": true}));
    assert_eq!(t0["retryCount"], 0);
    assert_eq!(t0["seq"], 1, "Conductor numbers a run's tasks from 1");
    assert_eq!(t0["scheduledTime"], T0_MS);
    assert_eq!(t0["startTime"], T0_MS + 10);
    assert_eq!(t0["endTime"], T0_MS + 50);
    assert_eq!(t0["workerId"], "worker-1");
    assert_eq!(t0["workflowInstanceId"], wf);
    let t2 = &w["tasks"][2];
    assert_eq!(t2["retryCount"], 1, "attempt 2 is the first retry");
    assert_eq!(t2["startTime"], 0, "not started yet");
    assert_eq!(t2["endTime"], 0);
    assert_eq!(t2["outputData"], json!({}));

    let lean = env
        .get(&format!("/api/workflow/{wf}?includeTasks=false"))
        .await
        .json();
    assert_eq!(lean["tasks"], json!([]));
    assert_eq!(lean["status"], "FAILED");

    let status = env.get(&format!("/api/workflow/{wf}/status")).await.json();
    assert_eq!(
        status,
        json!({"workflowId": wf, "correlationId": "corr", "status": "FAILED",
               "subStatus": "FAILED", "output": {"total": 12}, "variables": {"v": true}})
    );
    env.finish().await;
}

#[tokio::test]
async fn the_current_run_wins_over_earlier_runs_of_a_reset_chain() {
    let env = TestEnv::new().await;
    let wf = "wf-chain";
    let old = Uuid::now_v7();
    let new = Uuid::now_v7();
    insert_run(&env, wf, old, false, true).await;
    insert_run(&env, wf, new, true, false).await;
    insert_events(&env, old, 2).await;
    insert_events(&env, new, 1).await;

    let w = env.get(&format!("/api/workflow/{wf}")).await.json();
    assert_eq!(w["runId"], new.to_string());
    assert_eq!(w["status"], "RUNNING");
    assert_eq!(w["endTime"], 0);
    assert_eq!(w["output"], json!({}));

    let current = env.get(&format!("/api/workflow/{wf}/history")).await.json();
    assert_eq!(current["events"].as_array().map(Vec::len), Some(1));
    let earlier = env
        .get(&format!("/api/workflow/{wf}/history?runId={old}"))
        .await
        .json();
    assert_eq!(earlier["events"].as_array().map(Vec::len), Some(2));

    env.get(&format!(
        "/api/workflow/{wf}/history?runId={}",
        Uuid::now_v7()
    ))
    .await
    .error(StatusCode::NOT_FOUND);
    let bad = env
        .get(&format!("/api/workflow/{wf}/history?runId=nope"))
        .await
        .error(StatusCode::BAD_REQUEST);
    assert_eq!(bad["path"], "runId");
    env.finish().await;
}

#[tokio::test]
async fn history_pages_with_after_limit_and_next() {
    let env = TestEnv::new().await;
    let wf = "wf-history";
    let run = Uuid::now_v7();
    insert_run(&env, wf, run, true, false).await;
    insert_events(&env, run, 5).await;

    let page = env
        .get(&format!("/api/workflow/{wf}/history?limit=2"))
        .await
        .json();
    assert_eq!(
        page["events"][0],
        json!({"eventId": 1, "type": "TaskScheduled", "time": T0_MS + 1, "attributes": {"n": 1}})
    );
    assert_eq!(page["events"].as_array().map(Vec::len), Some(2));
    assert_eq!(page["next"], 2);

    let mut seen = Vec::new();
    let mut after = 0;
    loop {
        let page = env
            .get(&format!("/api/workflow/{wf}/history?after={after}&limit=2"))
            .await
            .json();
        seen.extend(
            page["events"]
                .as_array()
                .expect("events")
                .iter()
                .map(|e| e["eventId"].as_i64().unwrap_or_default()),
        );
        match page["next"].as_i64() {
            Some(next) => after = next,
            None => break,
        }
        assert!(seen.len() <= 5, "paging must end");
    }
    assert_eq!(seen, [1, 2, 3, 4, 5]);

    let all = env.get(&format!("/api/workflow/{wf}/history")).await.json();
    assert_eq!(all["events"].as_array().map(Vec::len), Some(5));
    assert_eq!(all["next"], json!(null));
    let exact = env
        .get(&format!("/api/workflow/{wf}/history?limit=5"))
        .await
        .json();
    assert_eq!(exact["next"], json!(null), "no empty last page");
    let bad = env
        .get(&format!("/api/workflow/{wf}/history?limit=0"))
        .await
        .error(StatusCode::BAD_REQUEST);
    assert_eq!(bad["path"], "limit");
    env.finish().await;
}

#[tokio::test]
async fn unknown_workflow_id_is_404_json_everywhere() {
    let env = TestEnv::new().await;
    for uri in [
        "/api/workflow/missing",
        "/api/workflow/missing/status",
        "/api/workflow/missing/history",
    ] {
        let body = env.get(uri).await.error(StatusCode::NOT_FOUND);
        assert!(
            body["message"]
                .as_str()
                .unwrap_or_default()
                .contains("missing"),
            "{body}"
        );
    }
    env.finish().await;
}
