//! Conductor's execution lookups and removal over REST: runs by correlation id (one,
//! many, batch), the running ids of a definition, a run's tasks page by page, and the
//! removal of an ended workflow. Rows are inserted as the decider writes them.

use axum::http::{Method, StatusCode};
use serde_json::{json, Value};
use uuid::Uuid;

use crate::utils::TestEnv;

/// A current run of `wf` (definition `name` version 1) with `correlation` and `status`.
async fn insert_run(env: &TestEnv, wf: &str, name: &str, correlation: &str, status: &str) -> Uuid {
    let run = Uuid::now_v7();
    let ended = status != "RUNNING" && status != "PAUSED";
    sqlx::query(
        "INSERT INTO runs (run_id, workflow_id, workflow_name, workflow_version, status,
             sub_status, input, output, variables, correlation_id, failed_task_refs,
             start_time, end_time, update_time, version, is_current)
         VALUES ($1, $2, $3, 1, $4, $4, '{}', NULL, '{}', $5, '{}', now(),
             CASE WHEN $6 THEN now() END, now(), 1, true)",
    )
    .bind(run)
    .bind(wf)
    .bind(name)
    .bind(status)
    .bind(correlation)
    .bind(ended)
    .execute(env.store.pg_pool().unwrap())
    .await
    .expect("insert run");
    run
}

async fn insert_task(env: &TestEnv, wf: &str, run: Uuid, seq: i32, status: &str) {
    sqlx::query(
        "INSERT INTO tasks (task_id, run_id, workflow_id, task_ref, task_type, task_name, seq,
             iteration, attempt, status, input, scheduled_time, update_time)
         VALUES ($1, $2, $3, $4, 'SIMPLE', 'step', $5, 0, 1, $6, '{}', now(), now())",
    )
    .bind(Uuid::now_v7())
    .bind(run)
    .bind(wf)
    .bind(format!("t{seq}"))
    .bind(seq)
    .bind(status)
    .execute(env.store.pg_pool().unwrap())
    .await
    .expect("insert task");
}

fn ids(list: &Value) -> Vec<String> {
    let mut ids: Vec<String> = list
        .as_array()
        .unwrap_or_else(|| panic!("a list: {list}"))
        .iter()
        .map(|w| w["workflowId"].as_str().unwrap_or_default().to_owned())
        .collect();
    ids.sort();
    ids
}

#[tokio::test]
async fn runs_are_found_by_correlation_id_one_many_and_in_a_batch() {
    let env = TestEnv::new().await;
    let open = insert_run(&env, "x-1", "orders", "cart-1", "RUNNING").await;
    insert_task(&env, "x-1", open, 0, "COMPLETED").await;
    insert_run(&env, "x-2", "orders", "cart-1", "COMPLETED").await;
    insert_run(&env, "x-3", "orders", "cart-2", "RUNNING").await;
    insert_run(&env, "x-4", "refunds", "cart-2", "FAILED").await;

    let one = env.get("/api/workflow/orders/correlated/cart-1").await;
    assert_eq!(one.status, StatusCode::OK, "{}", one.text());
    assert_eq!(ids(&one.json()), ["x-1"]);
    assert_eq!(
        one.json()[0]["tasks"],
        json!([]),
        "tasks only when asked for"
    );
    let closed = env
        .get("/api/workflow/orders/correlated/cart-1?includeClosed=true&includeTasks=true")
        .await
        .json();
    assert_eq!(ids(&closed), ["x-1", "x-2"]);
    let with_tasks = closed
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["workflowId"] == "x-1")
        .unwrap();
    assert_eq!(with_tasks["tasks"][0]["referenceTaskName"], "t0");

    let many = env
        .post(
            "/api/workflow/orders/correlated?includeClosed=true",
            &json!(["cart-1", "cart-2", "cart-9"]),
        )
        .await;
    assert_eq!(many.status, StatusCode::OK, "{}", many.text());
    let many = many.json();
    assert_eq!(ids(&many["cart-1"]), ["x-1", "x-2"]);
    assert_eq!(ids(&many["cart-2"]), ["x-3"]);
    assert_eq!(many["cart-9"], json!([]), "every id asked for is a key");

    let batch = env
        .post(
            "/api/workflow/correlated/batch?includeClosed=true",
            &json!({"correlationIds": ["cart-2"], "workflowNames": ["orders", "refunds"]}),
        )
        .await;
    assert_eq!(batch.status, StatusCode::OK, "{}", batch.text());
    assert_eq!(ids(&batch.json()["cart-2"]), ["x-3", "x-4"]);

    let bad = env
        .post("/api/workflow/orders/correlated", &json!({"not": "a list"}))
        .await;
    let error = bad.error(StatusCode::BAD_REQUEST);
    assert_eq!(error["path"], "correlationIds");
    let bad = env
        .post(
            "/api/workflow/correlated/batch",
            &json!({"correlationIds": ["a"], "workflowNames": [1]}),
        )
        .await;
    assert_eq!(bad.error(StatusCode::BAD_REQUEST)["path"], "workflowNames");
    env.finish().await;
}

#[tokio::test]
async fn running_ids_and_a_page_of_a_runs_tasks() {
    let env = TestEnv::new().await;
    let run = insert_run(&env, "r-1", "orders", "c", "RUNNING").await;
    insert_run(&env, "r-2", "orders", "c", "COMPLETED").await;
    for seq in 0..5 {
        let status = if seq < 3 { "COMPLETED" } else { "SCHEDULED" };
        insert_task(&env, "r-1", run, seq, status).await;
    }

    let running = env.get("/api/workflow/running/orders").await;
    assert_eq!(running.status, StatusCode::OK, "{}", running.text());
    assert_eq!(running.json(), json!(["r-1"]));
    assert_eq!(
        env.get("/api/workflow/running/orders?version=2")
            .await
            .json(),
        json!([])
    );
    let now = chrono::Utc::now().timestamp_millis();
    let window = env
        .get(&format!(
            "/api/workflow/running/orders?startTime={}&endTime={}",
            now - 60_000,
            now + 60_000
        ))
        .await
        .json();
    let mut window: Vec<String> = serde_json::from_value(window).unwrap();
    window.sort();
    assert_eq!(window, ["r-1", "r-2"]);

    let page = env
        .get("/api/workflow/r-1/tasks?start=1&count=2")
        .await
        .json();
    assert_eq!(page["totalHits"], 5);
    let refs: Vec<&str> = page["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["referenceTaskName"].as_str().unwrap())
        .collect();
    assert_eq!(refs, ["t1", "t2"]);
    let scheduled = env
        .get("/api/workflow/r-1/tasks?status=SCHEDULED&status=IN_PROGRESS")
        .await
        .json();
    assert_eq!(scheduled["totalHits"], 2);
    let bad = env.get("/api/workflow/r-1/tasks?count=many").await;
    assert_eq!(bad.error(StatusCode::BAD_REQUEST)["path"], "count");
    let missing = env.get("/api/workflow/nobody/tasks").await;
    missing.error(StatusCode::NOT_FOUND);
    env.finish().await;
}

#[tokio::test]
async fn an_ended_workflow_is_removed_and_a_running_one_is_refused() {
    let env = TestEnv::new().await;
    let done = insert_run(&env, "rm-1", "orders", "c", "COMPLETED").await;
    insert_task(&env, "rm-1", done, 0, "COMPLETED").await;
    insert_run(&env, "rm-2", "orders", "c", "RUNNING").await;

    let refused = env
        .send(Method::DELETE, "/api/workflow/rm-2/remove", None)
        .await;
    let error = refused.error(StatusCode::CONFLICT);
    assert!(
        error["message"].as_str().unwrap().contains("RUNNING"),
        "{error}"
    );
    assert_eq!(env.get("/api/workflow/rm-2").await.status, StatusCode::OK);

    let removed = env
        .send(
            Method::DELETE,
            "/api/workflow/rm-1/remove?archiveWorkflow=false",
            None,
        )
        .await;
    assert_eq!(removed.status, StatusCode::OK, "{}", removed.text());
    env.get("/api/workflow/rm-1")
        .await
        .error(StatusCode::NOT_FOUND);
    env.send(Method::DELETE, "/api/workflow/rm-1/remove", None)
        .await
        .error(StatusCode::NOT_FOUND);
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM tasks WHERE run_id = $1")
        .bind(done)
        .fetch_one(env.store.pg_pool().unwrap())
        .await
        .unwrap();
    assert_eq!(left, 0);
    env.finish().await;
}
