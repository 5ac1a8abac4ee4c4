//! `weft-bench-heartbeat` — the heartbeat registry's figures (issue 8). Build in release
//! first: `cargo build --release --workspace --bins`.
//!
//! 1. Ingest: `weft-heartbeat` runs as a process in a fresh database and namespace;
//!    `--activities` attempts (default 100,000) are registered through the bus
//!    (`AttemptStarted`), then `--workers` simulated SDK workers (default 20, one AMQP
//!    connection each) heartbeat them every `--interval` seconds (default 5) for
//!    `--seconds` (default 130): each worker sends one batched `Heartbeats` call per
//!    1 s tick, on absolute due times, with the attempts due in that tick. Reports the
//!    heartbeats answered per second, call latency, and the PostgreSQL writes the
//!    heartbeats caused (the service's counter, and `pg_stat_user_tables` as a check).
//! 2. Scanner: `--scan-rows` rows (default 10,000,000) in `task_check`, 1% RUNNING with
//!    a deadline an hour ahead, none expired: `EXPLAIN ANALYZE` of the scanner's query and
//!    the time of `Registry::scan` (p50/p99 of 200 calls); then the same with 1,000
//!    expired attempts, to show the cost follows the expired ones.
//!
//! `--skip-ingest` / `--skip-scan` run one part. Prints a markdown block.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures_util::StreamExt as _;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;
use weft::bus::Bus;
use weft::messages::{
    AttemptRef, AttemptStarted, Beat, HeartbeatAction, HeartbeatAnswers, HeartbeatMessage,
    Heartbeats,
};
use weft::registry::{Cache, Registry, SCAN_SQL};
use weft::store::Store;
use weft::Envelope;
use weft_e2e::{EnvOptions, Service, Suite, TestEnv};

#[derive(Debug)]
struct Args {
    activities: usize,
    workers: usize,
    interval: u64,
    seconds: u64,
    scan_rows: u64,
    ingest: bool,
    scan: bool,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args {
        activities: 100_000,
        workers: 20,
        interval: 5,
        seconds: 130,
        scan_rows: 10_000_000,
        ingest: true,
        scan: true,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = |name: &str| -> anyhow::Result<u64> {
            it.next()
                .with_context(|| format!("{name} needs a value"))?
                .parse()
                .with_context(|| format!("{name} wants a number"))
        };
        match flag.as_str() {
            "--activities" => args.activities = value("--activities")? as usize,
            "--workers" => args.workers = (value("--workers")? as usize).max(1),
            "--interval" => args.interval = value("--interval")?.max(1),
            "--seconds" => args.seconds = value("--seconds")?.max(1),
            "--scan-rows" => args.scan_rows = value("--scan-rows")?,
            "--skip-ingest" => args.ingest = false,
            "--skip-scan" => args.scan = false,
            _ => anyhow::bail!(
                "unknown argument {flag:?}; usage: weft-bench-heartbeat [--activities N] \
                 [--workers W] [--interval S] [--seconds D] [--scan-rows R] [--skip-ingest] \
                 [--skip-scan]"
            ),
        }
    }
    Ok(args)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    let mut report = String::from("### Heartbeats: ingest and timeout scanner\n\n");
    if args.ingest {
        report.push_str(&ingest(&args).await?);
    }
    if args.scan {
        report.push_str(&scan(&args).await?);
    }
    let argv: String = std::env::args().skip(1).map(|a| format!(" {a}")).collect();
    report.push_str(&format!(
        "\nmachine: {}; command: `cargo build --release --workspace --bins && \
         target/release/weft-bench-heartbeat{argv}`\n",
        machine()
    ));
    println!("{report}");
    Ok(())
}

// ---------------------------------------------------------------- ingest

/// What the simulated workers saw.
#[derive(Default)]
struct Tally {
    beats: AtomicU64,
    continued: AtomicU64,
    throttled: AtomicU64,
    other: AtomicU64,
    failed_calls: AtomicU64,
    late_ticks: AtomicU64,
    latencies_us: std::sync::Mutex<Vec<u64>>,
}

async fn ingest(args: &Args) -> anyhow::Result<String> {
    let options = EnvOptions {
        extra_env: vec![("RUST_LOG".into(), "warn".into())],
        ..EnvOptions::default()
    };
    let mut suite =
        Suite::start_with(TestEnv::create(options).await?, &[Service::Heartbeat]).await?;
    let result = ingest_on(&suite, args).await;
    if let Err(e) = &result {
        eprintln!("ingest failed: {e:#}\n{}", suite.describe());
    }
    suite.stop_all().await?;
    result
}

async fn ingest_on(suite: &Suite, args: &Args) -> anyhow::Result<String> {
    let env = suite.env();
    let pool = env.pool();
    let token = CancellationToken::new();
    let bus = Bus::connect(&env.amqp_url, env.names(), token.clone()).await?;
    let service = suite.proc(suite.first(Service::Heartbeat));
    let (pid, metrics_url) = (service.pid(), format!("http://{}/metrics", service.addr));

    eprintln!("registering {} attempts through the bus", args.activities);
    let tasks: Vec<Uuid> = (0..args.activities).map(|_| Uuid::new_v4()).collect();
    let t0 = Instant::now();
    futures_util::stream::iter(tasks.iter().copied())
        .map(|task_id| {
            let bus = bus.clone();
            async move {
                let started = AttemptStarted {
                    attempt: AttemptRef {
                        task_id,
                        attempt: 1,
                    },
                    workflow_id: format!("bench-{task_id}"),
                    run_id: Uuid::new_v4(),
                    task_name: "work".into(),
                    task_ref: "work_ref".into(),
                    worker_id: "bench".into(),
                    response_timeout_seconds: 3600,
                    input_bytes: 100,
                    reply_to: "shard.0".into(),
                    started_at: chrono::Utc::now(),
                };
                let message = HeartbeatMessage::AttemptStarted(started);
                let envelope = Envelope::new(&format!("bench-{task_id}"), None, &message)?;
                bus.publish("", &bus.names().heartbeat_queue(), &envelope)
                    .await
            }
        })
        .buffer_unordered(256)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<weft::Result<Vec<()>>>()?;
    weft_e2e::poll_until(
        Duration::from_secs(900),
        Duration::from_millis(250),
        || "registrations".into(),
        || async {
            let n: i64 = sqlx::query_scalar("SELECT count(*) FROM task_check")
                .fetch_one(pool)
                .await?;
            Ok((n as usize >= args.activities).then_some(()))
        },
    )
    .await?;
    let registration = t0.elapsed();
    eprintln!(
        "registered in {registration:.1?}; heartbeating for {}s",
        args.seconds
    );

    let writes_before = metric(&metrics_url, "weft_heartbeat_pg_writes_total").await?;
    let updates_before = table_updates(pool).await?;
    let cpu_before = cpu_ticks(pid);
    let tally = Arc::new(Tally::default());
    let per_worker = args.activities.div_ceil(args.workers);
    let start = tokio::time::Instant::now() + Duration::from_millis(500);
    let mut workers = Vec::new();
    for (w, mine) in tasks.chunks(per_worker).enumerate() {
        let bus = Bus::connect(&env.amqp_url, env.names(), token.clone()).await?;
        let (mine, tally) = (mine.to_vec(), tally.clone());
        let (interval, seconds) = (args.interval, args.seconds);
        workers.push(tokio::spawn(async move {
            worker(w, bus, mine, interval, seconds, start, tally).await
        }));
    }
    for w in workers {
        w.await?;
    }
    let elapsed = start.elapsed();
    let cpu_after = cpu_ticks(pid);
    // Let the exporter and the statistics collector catch up (1 s and 10 s).
    tokio::time::sleep(Duration::from_secs(11)).await;
    let writes = metric(&metrics_url, "weft_heartbeat_pg_writes_total").await? - writes_before;
    let updates = table_updates(pool).await? - updates_before;
    token.cancel();

    let beats = tally.beats.load(Ordering::Relaxed);
    let per_sec = beats as f64 / elapsed.as_secs_f64();
    let mut lat = std::mem::take(&mut *tally.latencies_us.lock().unwrap());
    lat.sort_unstable();
    let pct = |p: f64| -> f64 {
        if lat.is_empty() {
            return 0.0;
        }
        let i = ((p / 100.0) * lat.len() as f64).ceil() as usize;
        lat[i.clamp(1, lat.len()) - 1] as f64 / 1000.0
    };
    let minutes = elapsed.as_secs_f64() / 60.0;
    let per_activity_minute = writes as f64 / args.activities as f64 / minutes;
    let cpu = match (cpu_before, cpu_after) {
        (Some(a), Some(b)) => format!(
            "{:.0}% of one core",
            (b - a) as f64 / ticks_per_second() / elapsed.as_secs_f64() * 100.0
        ),
        _ => "n/a".into(),
    };
    Ok(format!(
        "| ingest measure | result |\n\
         |---|---|\n\
         | load | {n} running attempts, heartbeat every {iv} s, {w} workers (one AMQP \
         connection each, one batched call per 1 s tick), {secs:.0} s |\n\
         | registration ({n} `AttemptStarted` through the bus) | {reg:.1?} ({reg_rate:.0}/s) |\n\
         | heartbeats answered | {beats} in {secs:.1} s = **{per_sec:.0}/s** (target 20,000/s) |\n\
         | answers | CONTINUE {cont}, THROTTLED {thr}, other {other}; failed calls {failed}; \
         ticks started late {late} |\n\
         | call latency (one batch of ~{batch} beats) | p50 {p50:.1} ms, p99 {p99:.1} ms, \
         max {max:.1} ms |\n\
         | PostgreSQL writes caused by heartbeats (service counter) | {writes} = \
         **{pam:.2} per attempt per 60 s** (target ≤ 1) |\n\
         | `task_check` row updates (pg_stat_user_tables, same window) | {updates} |\n\
         | weft-heartbeat CPU | {cpu} |\n",
        n = args.activities,
        iv = args.interval,
        w = args.workers,
        secs = elapsed.as_secs_f64(),
        reg = registration,
        reg_rate = args.activities as f64 / registration.as_secs_f64(),
        cont = tally.continued.load(Ordering::Relaxed),
        thr = tally.throttled.load(Ordering::Relaxed),
        other = tally.other.load(Ordering::Relaxed),
        failed = tally.failed_calls.load(Ordering::Relaxed),
        late = tally.late_ticks.load(Ordering::Relaxed),
        batch = per_worker as u64 / args.interval,
        p50 = pct(50.0),
        p99 = pct(99.0),
        max = pct(100.0),
        pam = per_activity_minute,
    ))
}

/// One simulated SDK worker: every second, one call with the attempts due (those whose
/// index falls in this tick's slice of the interval).
async fn worker(
    w: usize,
    bus: Bus,
    mine: Vec<Uuid>,
    interval: u64,
    seconds: u64,
    start: tokio::time::Instant,
    tally: Arc<Tally>,
) {
    let queue = bus.names().heartbeat_queue();
    for tick in 0..seconds {
        let due = start + Duration::from_secs(tick);
        if tokio::time::Instant::now() > due + Duration::from_millis(500) {
            tally.late_ticks.fetch_add(1, Ordering::Relaxed);
        }
        tokio::time::sleep_until(due).await;
        let slice = tick % interval;
        let beats: Vec<Beat> = mine
            .iter()
            .enumerate()
            .filter(|(i, _)| *i as u64 % interval == slice)
            .map(|(_, id)| Beat {
                task_id: *id,
                details: None,
            })
            .collect();
        let message = HeartbeatMessage::Heartbeats(Heartbeats {
            worker_id: format!("bench-{w}"),
            beats,
            probe: false,
        });
        let Ok(request) = Envelope::new("", None, &message) else {
            continue;
        };
        let t = Instant::now();
        match bus
            .call("", &queue, &request, Duration::from_secs(10))
            .await
        {
            Ok(reply) => {
                tally
                    .latencies_us
                    .lock()
                    .unwrap()
                    .push(t.elapsed().as_micros() as u64);
                let Ok(answers) = serde_json::from_value::<HeartbeatAnswers>(reply.payload) else {
                    tally.failed_calls.fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                for answer in answers.results.values() {
                    let counter = match answer.action {
                        HeartbeatAction::Continue => &tally.continued,
                        HeartbeatAction::Throttled => &tally.throttled,
                        _ => &tally.other,
                    };
                    counter.fetch_add(1, Ordering::Relaxed);
                }
                tally
                    .beats
                    .fetch_add(answers.results.len() as u64, Ordering::Relaxed);
            }
            Err(_) => {
                tally.failed_calls.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// A counter's value on a Prometheus text page.
async fn metric(url: &str, name: &str) -> anyhow::Result<u64> {
    let page = reqwest::get(url).await?.text().await?;
    page.lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
        .with_context(|| format!("{name} not on {url}"))
}

async fn table_updates(pool: &sqlx::PgPool) -> anyhow::Result<i64> {
    Ok(
        sqlx::query_scalar(
            "SELECT n_tup_upd FROM pg_stat_user_tables WHERE relname = 'task_check'",
        )
        .fetch_one(pool)
        .await?,
    )
}

/// utime + stime of a process, in clock ticks.
fn cpu_ticks(pid: Option<u32>) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", pid?)).ok()?;
    let after = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}

fn ticks_per_second() -> f64 {
    100.0 // USER_HZ on Linux
}

// ---------------------------------------------------------------- scanner

async fn scan(args: &Args) -> anyhow::Result<String> {
    let env = TestEnv::create(EnvOptions::default()).await?;
    let result = scan_on(&env, args).await;
    env.cleanup().await?;
    result
}

async fn scan_on(env: &TestEnv, args: &Args) -> anyhow::Result<String> {
    let token = CancellationToken::new();
    let store = Store::connect(&env.database_url, 4, &token).await?;
    let pool = store.pg_pool().unwrap();
    eprintln!("loading {} rows into task_check", args.scan_rows);
    let t0 = Instant::now();
    let chunk = 1_000_000u64;
    let mut from = 1u64;
    while from <= args.scan_rows {
        let to = (from + chunk - 1).min(args.scan_rows);
        sqlx::query(
            "INSERT INTO task_check (task_id, attempt, workflow_id, run_id, task_name, task_ref,
                 worker_id, reply_to, status, input_bytes, output_bytes, timeout_seconds,
                 started_at, created_at, updated_at, last_heartbeat_at, expires_at)
             SELECT gen_random_uuid(), 1, 'wf-' || g, gen_random_uuid(), 'work', 'work_ref',
                 'worker-' || (g % 50), 'shard.' || (g % 16),
                 CASE WHEN g % 100 = 0 THEN 'RUNNING' ELSE 'COMPLETED' END, 100,
                 CASE WHEN g % 100 = 0 THEN NULL ELSE 80 END, 3600,
                 now() - interval '1 hour', now() - interval '1 hour',
                 now() - make_interval(secs => (g % 3600)), now() - interval '1 minute',
                 CASE WHEN g % 100 = 0 THEN now() + interval '1 hour' END
             FROM generate_series($1::bigint, $2::bigint) AS g",
        )
        .bind(from as i64)
        .bind(to as i64)
        .execute(pool)
        .await?;
        eprintln!("  {to} rows ({:.0?})", t0.elapsed());
        from = to + 1;
    }
    sqlx::query("VACUUM ANALYZE task_check")
        .execute(pool)
        .await?;
    let load = t0.elapsed();
    let size: String =
        sqlx::query_scalar("SELECT pg_size_pretty(pg_total_relation_size('task_check'))")
            .fetch_one(pool)
            .await?;

    let bus = Bus::connect(&env.amqp_url, env.names(), token.clone()).await?;
    let cache = Cache::new(&redis_url(), &env.namespace)?;
    let registry = Registry::new(store.clone(), Some(cache), Duration::from_secs(60));
    let none_plan = explain(pool).await?;
    let none_times = time_scans(&registry, &bus, 200).await?;

    // 1,000 attempts expired (Redis knows none of them; their deadlines passed long ago).
    sqlx::query(
        "UPDATE task_check SET expires_at = now() - interval '1 hour',
             last_heartbeat_at = now() - interval '2 hours'
         WHERE (task_id, attempt) IN (SELECT task_id, attempt FROM task_check
                                      WHERE status = 'RUNNING' LIMIT 1000)",
    )
    .execute(pool)
    .await?;
    let some_plan = explain(pool).await?;
    let t = Instant::now();
    let mut timed_out = 0;
    loop {
        let r = registry.scan(&bus, 500).await?;
        timed_out += r.timed_out;
        if r.candidates < 500 {
            break;
        }
    }
    let expired_time = t.elapsed();
    token.cancel();

    Ok(format!(
        "\n| scanner measure | result |\n\
         |---|---|\n\
         | table | {rows} rows in `task_check` ({size} with indexes; {running} RUNNING, \
         none expired), loaded in {load:.0?} |\n\
         | scanner query, nothing expired (EXPLAIN ANALYZE) | **{none_exec}** execution \
         ({none_plan_first}) |\n\
         | `Registry::scan`, nothing expired, 200 calls | p50 {p50:.2} ms, p99 {p99:.2} ms \
         (target < 10 ms) |\n\
         | scanner query with 1,000 expired (EXPLAIN ANALYZE, first batch of 500) | {some_exec} |\n\
         | timing out those 1,000 (2 scans: lock, mark, outbox, publish) | {expired_time:.1?}, \
         {timed_out} timed out |\n\n\
         Plan, nothing expired:\n\n```\n{none_plan}\n```\n",
        rows = args.scan_rows,
        running = args.scan_rows / 100,
        none_exec = execution_time(&none_plan),
        none_plan_first = none_plan
            .lines()
            .find(|l| l.contains("Index"))
            .unwrap_or("")
            .trim(),
        p50 = none_times.0,
        p99 = none_times.1,
        some_exec = execution_time(&some_plan),
    ))
}

/// EXPLAIN (ANALYZE, BUFFERS) of the scanner's query, in a transaction rolled back.
async fn explain(pool: &sqlx::PgPool) -> anyhow::Result<String> {
    let mut tx = pool.begin().await?;
    let lines: Vec<String> = sqlx::query_scalar(&format!("EXPLAIN (ANALYZE, BUFFERS) {SCAN_SQL}"))
        .bind(500_i64)
        .bind(60.0_f64)
        .fetch_all(&mut *tx)
        .await?;
    tx.rollback().await?;
    Ok(lines.join("\n"))
}

fn execution_time(plan: &str) -> String {
    plan.lines()
        .find(|l| l.contains("Execution Time"))
        .map(|l| l.trim().trim_start_matches("Execution Time: ").to_owned())
        .unwrap_or_else(|| "?".into())
}

/// p50 and p99 (ms) of `n` scans.
async fn time_scans(registry: &Registry, bus: &Bus, n: usize) -> anyhow::Result<(f64, f64)> {
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let r = registry.scan(bus, 500).await?;
        anyhow::ensure!(r.candidates == 0, "nothing should be expired: {r:?}");
        times.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    times.sort_by(f64::total_cmp);
    let at = |p: f64| times[(((p / 100.0) * n as f64).ceil() as usize).clamp(1, n) - 1];
    Ok((at(50.0), at(99.0)))
}

fn redis_url() -> String {
    std::env::var("WEFT_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{cores} cores, {cpu}; PostgreSQL, Redis and RabbitMQ on the same machine")
}
