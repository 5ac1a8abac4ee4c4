//! `GET /api/workflow/search` and `GET /api/metadata/workflow/{name}/stats` over runs
//! inserted as the decider writes them.

use axum::http::StatusCode;
use chrono::{DateTime, TimeZone, Utc};
use serde_json::{json, Value};
use uuid::Uuid;

use crate::utils::TestEnv;

const T0_MS: i64 = 1_700_000_000_000;

fn at(ms: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(T0_MS + ms)
        .single()
        .unwrap_or_default()
}

/// A run to insert.
struct Run<'a> {
    wf: &'a str,
    name: &'a str,
    version: i32,
    status: &'a str,
    correlation: Option<&'a str>,
    start_ms: i64,
    duration_ms: Option<i64>,
    input: Value,
    output: Option<Value>,
    current: bool,
}

impl<'a> Run<'a> {
    fn new(wf: &'a str, name: &'a str, status: &'a str, start_ms: i64) -> Self {
        Self {
            wf,
            name,
            version: 1,
            status,
            correlation: None,
            start_ms,
            duration_ms: None,
            input: json!({}),
            output: None,
            current: true,
        }
    }
}

async fn insert(env: &TestEnv, r: Run<'_>) {
    let end = r.duration_ms.map(|d| at(r.start_ms + d));
    sqlx::query(
        "INSERT INTO runs (run_id, workflow_id, workflow_name, workflow_version, status,
             sub_status, input, output, correlation_id, start_time, end_time, update_time,
             version, is_current)
         VALUES ($1, $2, $3, $4, $5, $5, $6, $7, $8, $9, $10, $9, 3, $11)",
    )
    .bind(Uuid::now_v7())
    .bind(r.wf)
    .bind(r.name)
    .bind(r.version)
    .bind(r.status)
    .bind(r.input)
    .bind(r.output)
    .bind(r.correlation)
    .bind(at(r.start_ms))
    .bind(end)
    .bind(r.current)
    .execute(env.store.pg_pool().unwrap())
    .await
    .expect("insert run");
}

fn ids(body: &Value) -> Vec<&str> {
    body["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|s| s["workflowId"].as_str().unwrap_or_default())
        .collect()
}

/// Five current runs (w1 oldest … w5 newest) and one replaced by a reset.
async fn five_runs(env: &TestEnv) {
    let mut w1 = Run::new("w1", "orders", "COMPLETED", 0);
    w1.correlation = Some("cust-17");
    w1.duration_ms = Some(1_000);
    insert(env, w1).await;
    insert(env, Run::new("w2", "orders", "RUNNING", 1_000)).await;
    let mut w3 = Run::new("w3", "billing", "FAILED", 2_000);
    w3.correlation = Some("cust-18");
    insert(env, w3).await;
    insert(env, Run::new("w4", "orders", "FAILED", 3_000)).await;
    let mut old = Run::new("w5", "orders", "TERMINATED", 3_500);
    old.current = false;
    insert(env, old).await;
    insert(env, Run::new("w5", "orders", "RUNNING", 4_000)).await;
}

#[tokio::test]
async fn search_filters_by_status_type_and_time_newest_first_with_paging() {
    let env = TestEnv::new().await;
    five_runs(&env).await;
    let search = |q: &str| format!("/api/workflow/search?query={}", urlencode(q));

    let all = env.get("/api/workflow/search").await;
    assert_eq!(all.status, StatusCode::OK, "{}", all.text());
    let all = all.json();
    assert_eq!(all["totalHits"], 5, "current runs only: {all}");
    assert_eq!(ids(&all), ["w5", "w4", "w3", "w2", "w1"]);

    let failed = env
        .get(&search(
            "status IN (FAILED, COMPLETED) AND workflowType = orders",
        ))
        .await
        .json();
    assert_eq!(ids(&failed), ["w4", "w1"]);
    assert_eq!(failed["totalHits"], 2);

    let window = env
        .get(&search(&format!(
            "startTime > {} AND startTime < {}",
            T0_MS,
            T0_MS + 4_000
        )))
        .await
        .json();
    assert_eq!(ids(&window), ["w4", "w3", "w2"]);

    let page = env
        .get("/api/workflow/search?start=1&size=2&query=workflowType%20%3D%20'orders'")
        .await
        .json();
    assert_eq!(ids(&page), ["w4", "w2"]);
    assert_eq!(page["totalHits"], 4);

    let w1 = &env.get(&search("status = COMPLETED")).await.json()["results"][0];
    assert_eq!(w1["workflowType"], "orders");
    assert_eq!(w1["version"], 1);
    assert_eq!(w1["correlationId"], "cust-17");
    assert_eq!(w1["startTime"], "2023-11-14T22:13:20.000Z");
    assert_eq!(w1["endTime"], "2023-11-14T22:13:21.000Z");
    assert_eq!(w1["executionTime"], 1_000);
    assert_eq!(w1["input"], "{}");
    assert_eq!(w1["inputSize"], 2);
    assert_eq!(w1["status"], "COMPLETED");
    env.finish().await;
}

#[tokio::test]
async fn search_free_text_matches_workflow_or_correlation_id_exactly_or_by_prefix() {
    let env = TestEnv::new().await;
    five_runs(&env).await;
    let free = |t: &str| format!("/api/workflow/search?freeText={}", urlencode(t));
    assert_eq!(ids(&env.get(&free("w3")).await.json()), ["w3"]);
    assert_eq!(ids(&env.get(&free("cust-17")).await.json()), ["w1"]);
    assert_eq!(ids(&env.get(&free("cust-*")).await.json()), ["w3", "w1"]);
    assert_eq!(ids(&env.get(&free("*")).await.json()).len(), 5);
    assert_eq!(ids(&env.get(&free("cust")).await.json()).len(), 0);
    let both = env
        .get(&format!(
            "/api/workflow/search?freeText=w*&query={}",
            urlencode("status = RUNNING")
        ))
        .await
        .json();
    assert_eq!(ids(&both), ["w5", "w2"]);
    env.finish().await;
}

#[tokio::test]
async fn search_refuses_bad_queries_naming_the_parameter() {
    let env = TestEnv::new().await;
    for (uri, path) in [
        ("/api/workflow/search?query=color%20%3D%20red", "query"),
        ("/api/workflow/search?query=status%20IN%20(A", "query"),
        ("/api/workflow/search?query=startTime%20%3E%20soon", "query"),
        ("/api/workflow/search?size=5000", "size"),
        ("/api/workflow/search?start=-1", "start"),
    ] {
        let body = env.get(uri).await.error(StatusCode::BAD_REQUEST);
        assert_eq!(body["path"], path, "{uri}: {body}");
    }
    env.finish().await;
}

#[tokio::test]
async fn stats_count_by_status_and_give_duration_and_size_percentiles_of_the_window() {
    let env = TestEnv::new().await;
    for i in 0..100_i64 {
        let wf = format!("s{i}");
        let mut r = Run::new(
            &wf,
            "stats-flow",
            if i < 90 { "COMPLETED" } else { "FAILED" },
            i,
        );
        r.duration_ms = Some((i + 1) * 10);
        r.input = json!({ "pad": "x".repeat(usize::try_from(i).unwrap_or(0)) });
        r.output = (i < 90).then(|| json!({}));
        insert(&env, r).await;
    }
    let mut running = Run::new("s-run", "stats-flow", "RUNNING", 200);
    running.version = 2;
    insert(&env, running).await;
    // Before the window.
    insert(&env, Run::new("s-old", "stats-flow", "COMPLETED", -60_000)).await;

    let uri = format!("/api/metadata/workflow/stats-flow/stats?since={T0_MS}");
    let r = env.get(&uri).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let s = r.json();
    assert_eq!(s["count"], 101);
    assert_eq!(
        s["byStatus"],
        json!({"COMPLETED": 90, "FAILED": 10, "RUNNING": 1})
    );
    assert_eq!(s["durationMs"], json!({"p50": 500, "p95": 950, "p99": 990}));
    // {"pad": ""} is 11 bytes of JSON text; each run pads one more.
    assert_eq!(s["inputBytes"]["p50"], 11 + 49);
    assert_eq!(s["outputBytes"], json!({"p50": 2, "p95": 2, "p99": 2}));
    assert_eq!(s["since"], T0_MS);

    let v2 = env.get(&format!("{uri}&version=2")).await.json();
    assert_eq!(v2["count"], 1);
    assert_eq!(v2["durationMs"], Value::Null, "no run of version 2 ended");

    let none = env
        .get("/api/metadata/workflow/nothing-here/stats")
        .await
        .json();
    assert_eq!(none["count"], 0);
    assert_eq!(none["byStatus"], json!({}));
    let bad = env
        .get("/api/metadata/workflow/stats-flow/stats?limit=0")
        .await
        .error(StatusCode::BAD_REQUEST);
    assert_eq!(bad["path"], "limit");
    env.finish().await;
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}
