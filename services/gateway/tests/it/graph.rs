//! `GET /api/workflow/{id}/graph`: the flowchart from the frozen definition and the task
//! rows, as the decider writes them (inserted here directly), cached in the real Redis.

use axum::http::StatusCode;
use chrono::{DateTime, TimeZone, Utc};
use serde_json::{json, Value};
use uuid::Uuid;
use weft::store::graph_cache::GraphCache;
use weft_gateway::AppState;

use crate::utils::TestEnv;

const T0_MS: i64 = 1_700_000_000_000;

fn at(ms: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(T0_MS + ms)
        .single()
        .unwrap_or_default()
}

fn redis_url() -> String {
    std::env::var("WEFT_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

/// A loop inside a fork beside a switch with a sub-workflow, then a join and a task.
fn definition() -> Value {
    json!({"name": "flow", "version": 1, "tasks": [
        {"name": "start", "taskReferenceName": "start", "type": "SIMPLE"},
        {"name": "fork", "taskReferenceName": "fork", "type": "FORK_JOIN", "forkTasks": [
            [{"name": "loop", "taskReferenceName": "loop", "type": "DO_WHILE",
              "loopCondition": "true", "loopOver": [
                {"name": "a", "taskReferenceName": "a", "type": "SIMPLE"},
                {"name": "b", "taskReferenceName": "b", "type": "SIMPLE"}]}],
            [{"name": "sw", "taskReferenceName": "sw", "type": "SWITCH",
              "evaluatorType": "value-param", "expression": "x",
              "decisionCases": {
                "yes": [{"name": "kid", "taskReferenceName": "child", "type": "SUB_WORKFLOW",
                         "subWorkflowParam": {"name": "kid"}}],
                "no": [{"name": "n1", "taskReferenceName": "n1", "type": "SIMPLE"}]},
              "defaultCase": []}]]},
        {"name": "join", "taskReferenceName": "join", "type": "JOIN", "joinOn": ["loop", "sw"]},
        {"name": "last", "taskReferenceName": "last", "type": "SIMPLE"}]})
}

/// The trace of every test run's start request.
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

/// A RUNNING run of `wf` at `version`, with its `WorkflowStarted` event.
async fn insert_run(env: &TestEnv, wf: &str, run: Uuid, current: bool, version: i64) {
    sqlx::query(
        "INSERT INTO runs (run_id, workflow_id, workflow_name, workflow_version, status,
             sub_status, input, start_time, update_time, version, is_current)
         VALUES ($1, $2, 'flow', 1, 'RUNNING', 'RUNNING', '{}', $3, $3, $4, $5)",
    )
    .bind(run)
    .bind(wf)
    .bind(at(0))
    .bind(version)
    .bind(current)
    .execute(env.store.pg_pool().unwrap())
    .await
    .expect("insert run");
    sqlx::query(
        "INSERT INTO history_events (run_id, event_id, type, time, attributes)
         VALUES ($1, 1, 'WorkflowStarted', $2, $3)",
    )
    .bind(run)
    .bind(at(0))
    .bind(json!({"definition": definition(), "input": {},
                 "traceparent": format!("00-{TRACE_ID}-00f067aa0ba902b7-01")}))
    .execute(env.store.pg_pool().unwrap())
    .await
    .expect("insert event");
}

/// One task row: `(ref, type, seq, iteration, attempt, status, output)`.
type Row<'a> = (&'a str, &'a str, i32, i32, i32, &'a str, Option<Value>);

async fn insert_tasks(env: &TestEnv, wf: &str, run: Uuid, rows: &[Row<'_>]) {
    for (task_ref, kind, seq, iteration, attempt, status, output) in rows {
        let ended = !matches!(*status, "SCHEDULED" | "IN_PROGRESS");
        sqlx::query(
            "INSERT INTO tasks (task_id, run_id, workflow_id, task_ref, task_type, task_name,
                 seq, iteration, attempt, status, input, output, scheduled_time, start_time,
                 end_time, update_time)
             VALUES ($1, $2, $3, $4, $5, $4, $6, $7, $8, $9, '{\"a\": 1}', $10, $11, $11, $12,
                 $11)",
        )
        .bind(Uuid::new_v4())
        .bind(run)
        .bind(wf)
        .bind(task_ref)
        .bind(kind)
        .bind(seq)
        .bind(iteration)
        .bind(attempt)
        .bind(status)
        .bind(output)
        .bind(at(i64::from(*seq) * 10))
        .bind(ended.then(|| at(i64::from(*seq) * 10 + 5)))
        .execute(env.store.pg_pool().unwrap())
        .await
        .expect("insert task");
    }
}

/// The run halfway: loop iteration 2 running (`a` on its second attempt), the switch
/// took `yes` and its child runs; the join and `last` not reached.
async fn halfway(env: &TestEnv, wf: &str, run: Uuid) {
    insert_run(env, wf, run, true, 20).await;
    let child = Some(json!({"subWorkflowId": "child-wf-1"}));
    insert_tasks(
        env,
        wf,
        run,
        &[
            (
                "start",
                "SIMPLE",
                0,
                0,
                1,
                "COMPLETED",
                Some(json!({"ok": true})),
            ),
            ("fork", "FORK_JOIN", 1, 0, 1, "COMPLETED", Some(json!({}))),
            ("loop", "DO_WHILE", 2, 0, 1, "IN_PROGRESS", None),
            ("a", "SIMPLE", 3, 1, 1, "COMPLETED", Some(json!({}))),
            (
                "sw",
                "SWITCH",
                4,
                0,
                1,
                "COMPLETED",
                Some(json!({"selectedCase": "yes"})),
            ),
            ("b", "SIMPLE", 5, 1, 1, "COMPLETED", Some(json!({}))),
            ("child", "SUB_WORKFLOW", 6, 0, 1, "IN_PROGRESS", child),
            ("a", "SIMPLE", 7, 2, 1, "FAILED", Some(json!({}))),
            ("a", "SIMPLE", 8, 2, 2, "IN_PROGRESS", None),
        ],
    )
    .await;
}

fn node<'a>(g: &'a Value, id: &str) -> &'a Value {
    g["nodes"]
        .as_array()
        .and_then(|n| n.iter().find(|n| n["id"] == id))
        .unwrap_or_else(|| panic!("no node {id} in {g}"))
}

/// The edges as `from>to kind followed [label]` lines, sorted.
fn edges(g: &Value) -> Vec<String> {
    let mut out: Vec<String> = g["edges"]
        .as_array()
        .expect("edges")
        .iter()
        .map(|e| {
            let label = e["label"]
                .as_str()
                .map(|l| format!(" {l}"))
                .unwrap_or_default();
            format!(
                "{}>{} {} {}{label}",
                e["from"].as_str().unwrap_or_default(),
                e["to"].as_str().unwrap_or_default(),
                e["kind"].as_str().unwrap_or_default(),
                e["followed"]
            )
        })
        .collect();
    out.sort();
    out
}

#[tokio::test]
async fn graph_shows_every_node_loop_iterations_branches_taken_and_not_and_the_child() {
    let env = TestEnv::new().await;
    let (wf, run) = ("wf-graph-1", Uuid::now_v7());
    halfway(&env, wf, run).await;

    let r = env.get(&format!("/api/workflow/{wf}/graph")).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let g = r.json();
    assert_eq!(g["runId"], run.to_string());
    assert_eq!(g["version"], 20);
    assert_eq!(g["traceId"], TRACE_ID, "the run's trace, for the UI's link");
    let ids: Vec<&str> = g["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .map(|n| n["id"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        ids,
        [
            "start", "fork", "loop", "a#1", "b#1", "a#2", "b#2", "sw", "n1", "child", "join",
            "last"
        ]
    );
    let a2 = node(&g, "a#2");
    assert_eq!(a2["ref"], "a");
    assert_eq!(a2["iteration"], 2);
    assert_eq!(a2["attempt"], 2, "the latest attempt");
    assert_eq!(a2["status"], "IN_PROGRESS");
    assert_eq!(a2["logical"], false);
    assert_eq!(a2["inputBytes"], 8, "{{\"a\": 1}} as JSON text");
    assert_eq!(a2["outputBytes"], Value::Null);
    let b1 = node(&g, "b#1");
    assert_eq!(b1["startTime"], T0_MS + 50);
    assert_eq!(b1["endTime"], T0_MS + 55);
    assert_eq!(b1["outputBytes"], 2);
    assert_eq!(node(&g, "b#2")["status"], Value::Null, "not reached yet");
    assert_eq!(node(&g, "b#2")["iteration"], 2);
    assert_eq!(node(&g, "join")["status"], Value::Null);
    assert_eq!(
        node(&g, "n1")["status"],
        Value::Null,
        "the branch not taken"
    );
    assert_eq!(node(&g, "loop")["logical"], true);
    assert_eq!(node(&g, "loop")["type"], "DO_WHILE");
    assert_eq!(node(&g, "child")["subWorkflowId"], "child-wf-1");

    assert_eq!(
        edges(&g),
        [
            "a#1>b#1 sequence true",
            "a#2>b#2 sequence false",
            "b#1>a#2 loop_back true",
            "b#2>join join false",
            "child>join join false",
            "fork>loop fork true",
            "fork>sw fork true",
            "loop>a#1 sequence true",
            "n1>join join false",
            "start>fork sequence true",
            "sw>child branch_taken true yes",
            "sw>join branch_not_taken false default",
            "sw>n1 branch_not_taken false no",
            "join>last sequence false",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect::<Vec<_>>()
    );
    env.finish().await;
}

#[tokio::test]
async fn a_run_not_started_yet_shows_every_node_unreached_with_the_loop_body_once() {
    let env = TestEnv::new().await;
    let (wf, run) = ("wf-graph-2", Uuid::now_v7());
    insert_run(&env, wf, run, true, 1).await;
    let g = env.get(&format!("/api/workflow/{wf}/graph")).await.json();
    let nodes = g["nodes"].as_array().expect("nodes");
    assert_eq!(nodes.len(), 10, "{g}");
    assert!(nodes.iter().all(|n| n["status"].is_null()), "{g}");
    assert_eq!(node(&g, "a#1")["iteration"], 1);
    let edges = g["edges"].as_array().expect("edges");
    assert!(edges.iter().all(|e| e["followed"] == false), "{g}");
    assert!(
        edges
            .iter()
            .any(|e| e["kind"] == "branch" && e["label"] == "yes"),
        "an undecided switch: {g}"
    );
    env.finish().await;
}

#[tokio::test]
async fn graph_of_an_earlier_run_by_run_id_and_errors_name_the_problem() {
    let env = TestEnv::new().await;
    let wf = "wf-graph-3";
    let (old, new) = (Uuid::now_v7(), Uuid::now_v7());
    halfway(&env, wf, old).await;
    sqlx::query("UPDATE runs SET is_current = false WHERE run_id = $1")
        .bind(old)
        .execute(env.store.pg_pool().unwrap())
        .await
        .expect("retire");
    insert_run(&env, wf, new, true, 1).await;

    let current = env.get(&format!("/api/workflow/{wf}/graph")).await.json();
    assert_eq!(current["runId"], new.to_string());
    assert!(node(&current, "start")["status"].is_null());
    let earlier = env
        .get(&format!("/api/workflow/{wf}/graph?runId={old}"))
        .await
        .json();
    assert_eq!(node(&earlier, "start")["status"], "COMPLETED");

    let bad = env
        .get(&format!("/api/workflow/{wf}/graph?runId=nope"))
        .await
        .error(StatusCode::BAD_REQUEST);
    assert_eq!(bad["path"], "runId");
    env.get("/api/workflow/no-such-wf/graph")
        .await
        .error(StatusCode::NOT_FOUND);
    env.get(&format!(
        "/api/workflow/{wf}/graph?runId={}",
        Uuid::now_v7()
    ))
    .await
    .error(StatusCode::NOT_FOUND);
    env.finish().await;
}

/// Points the test's gateway at a graph cache on `url` under the test's namespace.
fn with_cache(env: &mut TestEnv, url: &str) -> GraphCache {
    let cache = GraphCache::new(url, env.bus.names().namespace()).expect("cache");
    use_cache(env, cache)
}

/// Points the test's gateway at `cache`.
fn use_cache(env: &mut TestEnv, cache: GraphCache) -> GraphCache {
    let state = AppState::new(
        env.store.clone(),
        env.bus.clone(),
        weft::Config::default().max_body_bytes,
        weft::admin::Metrics::new(),
    )
    .with_graph_cache(cache.clone());
    env.router = weft_gateway::router(state);
    cache
}

async fn redis() -> redis::aio::MultiplexedConnection {
    redis::Client::open(redis_url())
        .expect("redis url")
        .get_multiplexed_async_connection()
        .await
        .expect("redis")
}

#[tokio::test]
async fn graph_is_cached_by_run_version_and_a_new_event_is_never_hidden_by_the_cache() {
    let mut env = TestEnv::new().await;
    let cache = with_cache(&mut env, &redis_url());
    let (wf, run) = ("wf-graph-4", Uuid::now_v7());
    halfway(&env, wf, run).await;
    let uri = format!("/api/workflow/{wf}/graph");

    let cold = env.get(&uri).await.json();
    let mut conn = redis().await;
    let key = cache.key(run, 20);
    let cached: Option<Vec<u8>> = redis::cmd("GET")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .expect("GET");
    let cached: Value = serde_json::from_slice(&cached.expect("cached at version 20")).unwrap();
    assert_eq!(cached, cold);

    // The next read comes from Redis: a marked entry shows through.
    let mut marked = cold.clone();
    marked["nodes"][0]["status"] = json!("FROM_CACHE");
    let () = redis::cmd("SET")
        .arg(&key)
        .arg(marked.to_string())
        .query_async(&mut conn)
        .await
        .expect("SET");
    assert_eq!(env.get(&uri).await.json(), marked);

    // The decider commits an event: a new version, so the graph is computed afresh.
    sqlx::query("UPDATE runs SET version = 21 WHERE run_id = $1")
        .bind(run)
        .execute(env.store.pg_pool().unwrap())
        .await
        .expect("bump");
    sqlx::query("UPDATE tasks SET status = 'COMPLETED' WHERE run_id = $1 AND seq = 8")
        .bind(run)
        .execute(env.store.pg_pool().unwrap())
        .await
        .expect("complete a#2");
    let fresh = env.get(&uri).await.json();
    assert_eq!(fresh["version"], 21);
    assert_eq!(node(&fresh, "start")["status"], "COMPLETED");
    assert_eq!(node(&fresh, "a#2")["status"], "COMPLETED");

    let _: () = redis::cmd("DEL")
        .arg(&key)
        .arg(cache.key(run, 21))
        .query_async(&mut conn)
        .await
        .expect("DEL");
    env.finish().await;
}

#[tokio::test]
async fn graph_is_answered_from_postgres_when_redis_is_down() {
    let mut env = TestEnv::new().await;
    // Nothing listens on port 1.
    with_cache(&mut env, "redis://127.0.0.1:1");
    let (wf, run) = ("wf-graph-5", Uuid::now_v7());
    halfway(&env, wf, run).await;
    for _ in 0..2 {
        let r = env.get(&format!("/api/workflow/{wf}/graph")).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        assert_eq!(node(&r.json(), "child")["status"], "IN_PROGRESS");
    }
    env.finish().await;
}

#[tokio::test]
async fn graph_is_cached_in_memory_by_run_version_like_in_redis() {
    let mut env = TestEnv::new().await;
    let cache = use_cache(&mut env, GraphCache::in_memory());
    let (wf, run) = ("wf-graph-6", Uuid::now_v7());
    halfway(&env, wf, run).await;
    let uri = format!("/api/workflow/{wf}/graph");

    let cold = env.get(&uri).await.json();
    let cached = cache.get(run, 20).await.expect("cached at version 20");
    assert_eq!(serde_json::from_slice::<Value>(&cached).unwrap(), cold);

    // The next read comes from memory: a marked entry shows through.
    let mut marked = cold.clone();
    marked["nodes"][0]["status"] = json!("FROM_CACHE");
    cache.put(run, 20, marked.to_string().as_bytes()).await;
    assert_eq!(env.get(&uri).await.json(), marked);

    // A new version is another key: computed afresh, and cached beside the old one.
    sqlx::query("UPDATE runs SET version = 21 WHERE run_id = $1")
        .bind(run)
        .execute(env.store.pg_pool().unwrap())
        .await
        .expect("bump");
    let fresh = env.get(&uri).await.json();
    assert_eq!(fresh["version"], 21);
    assert_eq!(node(&fresh, "start")["status"], "COMPLETED");
    let at_21 = cache.get(run, 21).await.expect("cached at version 21");
    assert_eq!(serde_json::from_slice::<Value>(&at_21).unwrap(), fresh);
    assert!(
        cache.get(run, 20).await.is_some(),
        "old versions only expire"
    );
    env.finish().await;
}
