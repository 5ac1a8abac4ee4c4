//! `weft-bench-reads` — the read side's figures (issue 5) against the real gateway
//! process (release build), PostgreSQL and Redis, in a fresh database and namespace.
//!
//! The runs are inserted as rows, the way the decider materialises them (run row,
//! `WorkflowStarted` with the frozen definition, one task row per attempt, history
//! events): building a 300-iteration loop through the decider would measure the decider,
//! not the reads.
//!
//! 1. `/graph` of a 1,000-node run: a FORK_JOIN whose first branch is a DO_WHILE of 300
//!    iterations × 3 SIMPLE tasks (every 50th `fetch` retried once) and whose second is
//!    95 SIMPLE tasks, then JOIN and one task. Warm: served from Redis. Cold: the Redis
//!    entry deleted before each request (not timed), so PostgreSQL computes it.
//! 2. `/history` of a 10,000-event run: pages of 100 (the default) at random `after`,
//!    and pages of 1,000 (the largest).
//! 3. `/search` over `--search-runs` current runs (default 1,000,000).
//!
//! Requests are sequential, over one keep-alive connection; prints a markdown block.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use chrono::{DateTime, TimeZone, Utc};
use rand::Rng as _;
use serde_json::{json, Value};
use sqlx::PgPool;
use uuid::Uuid;
use weft_e2e::process::Service;
use weft_e2e::{Client, Suite, TestEnv};

const LOOP_ITERATIONS: i32 = 300;
const SIDE_TASKS: i32 = 95;
const HISTORY_EVENTS: i64 = 10_000;

struct Args {
    requests: usize,
    search_runs: i64,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args {
        requests: 1_000,
        search_runs: 1_000_000,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--requests" => args.requests = value.parse()?,
            "--search-runs" => args.search_runs = value.parse()?,
            _ => anyhow::bail!(
                "unknown argument {flag:?}; usage: weft-bench-reads [--requests N] \
                 [--search-runs M]"
            ),
        }
    }
    Ok(args)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    let mut suite = Suite::start_with(TestEnv::new().await?, &[Service::Gateway]).await?;
    let result = bench(&suite, &args).await;
    if let Err(e) = &result {
        eprintln!("benchmark failed: {e:#}\nprocesses:\n{}", suite.describe());
    }
    suite.stop_all().await?;
    println!("{}", result?);
    Ok(())
}

async fn bench(suite: &Suite, args: &Args) -> anyhow::Result<String> {
    let pool = suite.env().pool();
    let client = suite.client();
    let namespace = suite.env().names().namespace().to_owned();

    eprintln!("inserting the 1,000-node run");
    let (graph_wf, graph_run, version) = insert_graph_run(pool).await?;
    let graph_path = format!("/api/workflow/{graph_wf}/graph");
    let first = client.raw(reqwest::Method::GET, &graph_path, None).await?;
    anyhow::ensure!(first.status == 200, "graph: {}", first.text);
    let nodes = first
        .json
        .as_ref()
        .map_or(0, |g| g["nodes"].as_array().map_or(0, Vec::len));
    anyhow::ensure!(nodes == 1_000, "the graph has {nodes} nodes, not 1,000");
    let bytes = first.text.len();

    eprintln!("graph warm: {} requests", args.requests);
    let warm = time_gets(client, args.requests, |_| graph_path.clone()).await?;

    let redis_url =
        std::env::var("WEFT_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let key =
        weft::store::graph_cache::GraphCache::new(&redis_url, &namespace)?.key(graph_run, version);
    let mut redis = redis::Client::open(redis_url)?
        .get_multiplexed_async_connection()
        .await?;
    let cold_n = (args.requests / 3).max(1);
    eprintln!("graph cold: {cold_n} requests");
    let mut cold = Vec::with_capacity(cold_n);
    for _ in 0..cold_n {
        let () = redis::cmd("DEL").arg(&key).query_async(&mut redis).await?;
        cold.extend(time_gets(client, 1, |_| graph_path.clone()).await?);
    }
    cold.sort_unstable();

    eprintln!("inserting the 10,000-event run");
    let history_wf = insert_history_run(pool).await?;
    let mut rng = rand::rng();
    let afters: Vec<i64> = (0..args.requests)
        .map(|_| rng.random_range(0..HISTORY_EVENTS))
        .collect();
    let page100 = time_gets(client, args.requests, |i| {
        format!(
            "/api/workflow/{history_wf}/history?after={}&limit=100",
            afters[i]
        )
    })
    .await?;
    let page1000 = time_gets(client, args.requests / 5, |i| {
        format!(
            "/api/workflow/{history_wf}/history?after={}&limit=1000",
            afters[i] % (HISTORY_EVENTS - 1_000)
        )
    })
    .await?;

    let search = if args.search_runs > 0 {
        eprintln!("inserting {} runs for search", args.search_runs);
        insert_search_runs(pool, args.search_runs).await?;
        let queries = [
            ("no filter, first page of 100", "/api/workflow/search".to_owned()),
            (
                "status = FAILED (1 run in 10)",
                "/api/workflow/search?query=status%20%3D%20FAILED".to_owned(),
            ),
            (
                "workflowType = type_3 AND status IN (RUNNING, FAILED)",
                "/api/workflow/search?query=workflowType%20%3D%20type_3%20AND%20status%20IN%20(RUNNING%2C%20FAILED)"
                    .to_owned(),
            ),
            (
                "startTime window of 1 hour",
                format!(
                    "/api/workflow/search?query=startTime%20%3E%20{}%20AND%20startTime%20%3C%20{}",
                    T0_MS + 100_000_000,
                    T0_MS + 103_600_000
                ),
            ),
            (
                "freeText prefix on correlationId",
                "/api/workflow/search?freeText=corr-12345*".to_owned(),
            ),
        ];
        let mut rows = String::new();
        for (what, path) in queries {
            let t = time_gets(client, (args.requests / 5).max(1), |_| path.clone()).await?;
            rows.push_str(&format!(
                "| search, {} runs: {what} | p50 {:.2?}, p99 {:.2?} |\n",
                args.search_runs,
                percentile(&t, 50.0),
                percentile(&t, 99.0)
            ));
        }
        rows
    } else {
        String::new()
    };

    let argv: String = std::env::args().skip(1).map(|a| format!(" {a}")).collect();
    Ok(format!(
        "### Reads: graph, history, search (gateway process, release build)\n\n\
         | measure | result |\n\
         |---|---|\n\
         | `/graph`, 1,000 nodes ({bytes} bytes), warm (Redis), {wn} requests | p50 {w50:.2?}, p99 {w99:.2?} |\n\
         | `/graph`, same run, cold (PostgreSQL), {cn} requests | p50 {c50:.2?}, p99 {c99:.2?} |\n\
         | `/history`, 10,000-event run, pages of 100 at random `after`, {hn} requests | p50 {h50:.2?}, p99 {h99:.2?} |\n\
         | `/history`, same run, pages of 1,000, {kn} requests | p50 {k50:.2?}, p99 {k99:.2?} |\n\
         {search}\
         | machine | {machine} |\n\
         | command | `scripts/bench-reads{argv}` |\n",
        wn = warm.len(),
        w50 = percentile(&warm, 50.0),
        w99 = percentile(&warm, 99.0),
        cn = cold.len(),
        c50 = percentile(&cold, 50.0),
        c99 = percentile(&cold, 99.0),
        hn = page100.len(),
        h50 = percentile(&page100, 50.0),
        h99 = percentile(&page100, 99.0),
        kn = page1000.len(),
        k50 = percentile(&page1000, 50.0),
        k99 = percentile(&page1000, 99.0),
        machine = machine(),
    ))
}

/// Times `n` sequential GETs of `path(i)`, each required to answer 200; sorted. The
/// body is read whole but not parsed: parsing a 370 kB graph is the client's cost.
async fn time_gets(
    client: &Client,
    n: usize,
    path: impl Fn(usize) -> String,
) -> anyhow::Result<Vec<Duration>> {
    let http = http_client();
    let mut times = Vec::with_capacity(n);
    for i in 0..n {
        let url = format!("{}{}", client.base_url(), path(i));
        let t = Instant::now();
        let r = http.get(&url).send().await?;
        let status = r.status();
        let body = r.bytes().await?;
        times.push(t.elapsed());
        anyhow::ensure!(status == 200, "GET {url}: {status} {body:?}");
    }
    times.sort_unstable();
    Ok(times)
}

/// One keep-alive connection, reused by every request of the benchmark.
fn http_client() -> reqwest::Client {
    static HTTP: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
    HTTP.get_or_init(reqwest::Client::new).clone()
}

const T0_MS: i64 = 1_700_000_000_000;

fn at(ms: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(T0_MS + ms)
        .single()
        .unwrap_or_default()
}

fn simple(r: &str) -> Value {
    json!({"name": r, "taskReferenceName": r, "type": "SIMPLE",
           "inputParameters": {"item": "${workflow.input.item}"}})
}

fn graph_definition() -> Value {
    let side: Vec<Value> = (0..SIDE_TASKS)
        .map(|i| simple(&format!("side_{i}")))
        .collect();
    json!({"name": "bench_graph", "version": 1, "tasks": [
        simple("prepare"),
        {"name": "fork", "taskReferenceName": "fork", "type": "FORK_JOIN", "forkTasks": [
            [{"name": "loop", "taskReferenceName": "loop", "type": "DO_WHILE",
              "loopCondition": "if ($.loop['iteration'] < 300) { true; } else { false; }",
              "loopOver": [simple("fetch"), simple("transform"), simple("store")]}],
            side]},
        {"name": "join", "taskReferenceName": "join", "type": "JOIN",
         "joinOn": ["loop", format!("side_{}", SIDE_TASKS - 1)]},
        simple("finish")]})
}

/// Task rows as the decider writes them, in schedule order.
#[derive(Default)]
struct Rows {
    refs: Vec<String>,
    types: Vec<String>,
    iterations: Vec<i32>,
    attempts: Vec<i32>,
    statuses: Vec<String>,
}

impl Rows {
    fn push(&mut self, r: &str, kind: &str, iteration: i32, attempt: i32, status: &str) {
        self.refs.push(r.to_owned());
        self.types.push(kind.to_owned());
        self.iterations.push(iteration);
        self.attempts.push(attempt);
        self.statuses.push(status.to_owned());
    }
}

async fn insert_run(
    pool: &PgPool,
    wf: &str,
    run: Uuid,
    name: &str,
    def: &Value,
    version: i64,
) -> anyhow::Result<()> {
    sqlx::query(
        "INSERT INTO runs (run_id, workflow_id, workflow_name, workflow_version, status,
             sub_status, input, output, start_time, end_time, update_time, version)
         VALUES ($1, $2, $3, 1, 'COMPLETED', 'COMPLETED', '{\"item\": \"abc\"}', '{}', $4, $5,
             $5, $6)",
    )
    .bind(run)
    .bind(wf)
    .bind(name)
    .bind(at(0))
    .bind(at(60_000))
    .bind(version)
    .execute(pool)
    .await?;
    sqlx::query(
        "INSERT INTO history_events (run_id, event_id, type, time, attributes)
         VALUES ($1, 1, 'WorkflowStarted', $2, $3)",
    )
    .bind(run)
    .bind(at(0))
    .bind(json!({"definition": def, "input": {"item": "abc"}}))
    .execute(pool)
    .await?;
    Ok(())
}

async fn insert_graph_run(pool: &PgPool) -> anyhow::Result<(String, Uuid, i64)> {
    let (wf, run) = (format!("bench-graph-{}", Uuid::new_v4()), Uuid::now_v7());
    let mut rows = Rows::default();
    rows.push("prepare", "SIMPLE", 0, 1, "COMPLETED");
    rows.push("fork", "FORK_JOIN", 0, 1, "COMPLETED");
    rows.push("loop", "DO_WHILE", 0, 1, "COMPLETED");
    for i in 1..=LOOP_ITERATIONS {
        if i % 50 == 0 {
            rows.push("fetch", "SIMPLE", i, 1, "FAILED");
        }
        rows.push(
            "fetch",
            "SIMPLE",
            i,
            1 + i32::from(i % 50 == 0),
            "COMPLETED",
        );
        rows.push("transform", "SIMPLE", i, 1, "COMPLETED");
        rows.push("store", "SIMPLE", i, 1, "COMPLETED");
        if i <= SIDE_TASKS {
            rows.push(&format!("side_{}", i - 1), "SIMPLE", 0, 1, "COMPLETED");
        }
    }
    rows.push("join", "JOIN", 0, 1, "COMPLETED");
    rows.push("finish", "SIMPLE", 0, 1, "COMPLETED");
    // Three events per task (scheduled, started, completed), roughly.
    let version = 3 * rows.refs.len() as i64;
    insert_run(pool, &wf, run, "bench_graph", &graph_definition(), version).await?;
    let n = rows.refs.len();
    let seqs: Vec<i32> = (0..n as i32).collect();
    let ids: Vec<Uuid> = (0..n).map(|_| Uuid::new_v4()).collect();
    sqlx::query(
        "INSERT INTO tasks (task_id, run_id, workflow_id, task_ref, task_type, task_name, seq,
             iteration, attempt, status, input, output, worker_id, scheduled_time, start_time,
             end_time, update_time)
         SELECT id, $2, $3, r, t, r, s, i, a, st,
             jsonb_build_object('item', 'abc', 'ref', r, 'iteration', i),
             jsonb_build_object('ok', true, 'rows', 42, 'note', repeat('x', 64)),
             'bench-worker', $9 + s * interval '10 ms', $9 + s * interval '10 ms' + interval '2 ms',
             $9 + s * interval '10 ms' + interval '8 ms', $9 + s * interval '10 ms' + interval '8 ms'
         FROM UNNEST($1::uuid[], $4::text[], $5::text[], $6::int[], $7::int[], $8::int[],
             $10::text[]) AS u(id, r, t, s, i, a, st)",
    )
    .bind(&ids)
    .bind(run)
    .bind(&wf)
    .bind(&rows.refs)
    .bind(&rows.types)
    .bind(&seqs)
    .bind(&rows.iterations)
    .bind(&rows.attempts)
    .bind(at(0))
    .bind(&rows.statuses)
    .execute(pool)
    .await?;
    Ok((wf, run, version))
}

async fn insert_history_run(pool: &PgPool) -> anyhow::Result<String> {
    let (wf, run) = (format!("bench-history-{}", Uuid::new_v4()), Uuid::now_v7());
    let def = json!({"name": "bench_history", "version": 1, "tasks": [simple("a")]});
    insert_run(pool, &wf, run, "bench_history", &def, HISTORY_EVENTS).await?;
    // Events 2..=10,000: scheduled / started / completed triples with realistic payloads.
    sqlx::query(
        "INSERT INTO history_events (run_id, event_id, type, time, attributes)
         SELECT $1, e,
             (ARRAY['TaskScheduled', 'TaskStarted', 'TaskCompleted'])[e % 3 + 1],
             $2 + e * interval '1 ms',
             jsonb_build_object('taskId', gen_random_uuid(), 'taskRef', 'task_' || (e / 3),
                 'attempt', 1, 'input', jsonb_build_object('item', 'abc', 'n', e),
                 'output', jsonb_build_object('ok', true, 'note', repeat('y', 64)))
         FROM generate_series(2, $3) AS e",
    )
    .bind(run)
    .bind(at(0))
    .bind(HISTORY_EVENTS)
    .execute(pool)
    .await?;
    Ok(wf)
}

/// `n` current runs over 10 definitions, one in ten FAILED, one in twenty RUNNING,
/// started 1 s apart, each with a correlation id; then ANALYZE.
async fn insert_search_runs(pool: &PgPool, n: i64) -> anyhow::Result<()> {
    let batch = 100_000;
    let mut from = 0;
    while from < n {
        let to = (from + batch).min(n);
        sqlx::query(
            "INSERT INTO runs (run_id, workflow_id, workflow_name, workflow_version, status,
                 sub_status, input, output, correlation_id, start_time, end_time, update_time,
                 version)
             SELECT gen_random_uuid(), 'search-' || g, 'type_' || (g % 10), 1,
                 CASE WHEN g % 10 = 7 THEN 'FAILED' WHEN g % 20 = 3 THEN 'RUNNING'
                      ELSE 'COMPLETED' END,
                 'COMPLETED', jsonb_build_object('n', g), '{}', 'corr-' || g,
                 $1 + g * interval '1 s', $1 + g * interval '1 s' + interval '3 s',
                 $1 + g * interval '1 s' + interval '3 s', 12
             FROM generate_series($2::bigint, $3::bigint - 1) AS g",
        )
        .bind(at(0))
        .bind(from)
        .bind(to)
        .execute(pool)
        .await?;
        from = to;
    }
    // What autovacuum does on a live table: statistics and the visibility map (index-only
    // counts need it).
    sqlx::query("VACUUM ANALYZE runs").execute(pool).await?;
    Ok(())
}

/// The `p`th percentile (nearest rank) of sorted `xs`.
fn percentile(xs: &[Duration], p: f64) -> Duration {
    if xs.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * xs.len() as f64).ceil() as usize;
    xs[rank.clamp(1, xs.len()) - 1]
}

/// `nproc N, <cpu model>` from /proc.
fn machine() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    format!("nproc {cpus}, {model}")
}
