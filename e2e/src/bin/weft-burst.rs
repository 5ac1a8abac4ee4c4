//! `weft-burst [--starts N] [--concurrency C] [--replicas R]`: the overload figure of
//! RELIABILITY.md. Starts one gateway and `R` (default 1) replicas of every other service
//! and worker as processes (release binaries next to this one) on the local PostgreSQL,
//! RabbitMQ and Redis, in a fresh database and namespace; sends `N` (default 50,000)
//! `greet` starts with `C` (default 2,048: more than the gateway's 1,024 start permits)
//! requests in flight, each sent again after a 429 until accepted, as a client honouring
//! `Retry-After` does; then waits for every accepted run to complete. Throughout, it samples every process's resident memory.
//!
//! It checks what the overload contract promises: every answer is 200 or 429 (never a
//! 5xx, never a dropped connection), every accepted start exists and completes, and
//! nothing else was started. Exits 1 otherwise.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures_util::StreamExt as _;
use serde_json::json;
use weft_e2e::infra::cluster_shape;
use weft_e2e::{greet, Suite, TestEnv};

const USAGE: &str = "usage: weft-burst [--starts N] [--concurrency C] [--replicas R]";
/// How long the accepted runs may take to complete after the last answer.
const DRAIN_LIMIT: Duration = Duration::from_secs(1800);

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let (mut starts, mut concurrency, mut replicas) = (50_000usize, 2_048usize, 1usize);
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut number = |name: &str| -> anyhow::Result<usize> {
            args.next()
                .with_context(|| format!("{name} needs a value; {USAGE}"))?
                .parse::<usize>()
                .with_context(|| format!("{name} takes a number"))
        };
        match arg.as_str() {
            "--starts" => starts = number("--starts")?.max(1),
            "--concurrency" => concurrency = number("--concurrency")?.max(1),
            "--replicas" => replicas = number("--replicas")?.max(1),
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(());
            }
            other => anyhow::bail!("unknown argument {other:?}; {USAGE}"),
        }
    }

    let mut suite = Suite::new(TestEnv::new().await?)?;
    let procs = suite.spawn_all(&cluster_shape(replicas)).await?;
    let client = suite.client().clone();
    client.register_overwrite(&greet::definition()).await?;
    let pids: Vec<(String, u32)> = procs
        .iter()
        .filter_map(|id| {
            let p = suite.proc(*id);
            p.pid().map(|pid| (p.service.name().to_owned(), pid))
        })
        .collect();

    // Peak resident memory by service (the largest replica), sampled every 100 ms.
    let idle = rss_by_service(&pids);
    let peaks: Arc<Mutex<BTreeMap<String, u64>>> = Arc::new(Mutex::new(idle.clone()));
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = {
        let (peaks, sampling, pids) = (peaks.clone(), sampling.clone(), pids.clone());
        tokio::spawn(async move {
            while sampling.load(Ordering::Relaxed) {
                for (service, kib) in rss_by_service(&pids) {
                    let mut peaks = peaks.lock().expect("peaks lock");
                    let peak = peaks.entry(service).or_default();
                    *peak = (*peak).max(kib);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };

    eprintln!("burst: {starts} starts, {concurrency} in flight");
    let started = Instant::now();
    // Each start is sent until it is accepted, as a client honouring `Retry-After` (1 s)
    // does; every answer is counted.
    let answers: Vec<Vec<Result<u16, String>>> = futures_util::stream::iter(0..starts)
        .map(|i| {
            let client = client.clone();
            async move {
                let request = json!({"name": "greet", "input": greet::input(&format!("B{i}"), 1)});
                let mut answers = Vec::new();
                loop {
                    let answer = client
                        .post_json("/api/workflow", &request)
                        .await
                        .map(|r| r.status)
                        .map_err(|e| format!("{e:#}"));
                    let again = answer == Ok(429);
                    answers.push(answer);
                    if !again {
                        return answers;
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    let answered = started.elapsed();
    let mut by_status: BTreeMap<u16, usize> = BTreeMap::new();
    let mut accepted = 0i64;
    let mut errors = Vec::new();
    for answer in answers.iter().flatten() {
        match answer {
            Ok(status) => {
                *by_status.entry(*status).or_default() += 1;
                accepted += i64::from(*status == 200);
            }
            Err(e) => errors.push(e.clone()),
        }
    }
    eprintln!(
        "burst: answered in {answered:.1?}: {by_status:?}, {} errors",
        errors.len()
    );

    let pool = suite.env().pool().clone();
    let drained_by = Instant::now() + DRAIN_LIMIT;
    let (completed, failed) = loop {
        let (completed, failed): (i64, i64) = sqlx::query_as(
            "SELECT count(*) FILTER (WHERE status = 'COMPLETED'),
                    count(*) FILTER (WHERE status NOT IN ('COMPLETED', 'RUNNING'))
             FROM runs",
        )
        .fetch_one(&pool)
        .await?;
        if completed + failed >= accepted || Instant::now() > drained_by {
            break (completed, failed);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let drained = started.elapsed();
    let recorded: i64 = sqlx::query_scalar("SELECT count(*) FROM workflow_starts")
        .fetch_one(&pool)
        .await?;
    sampling.store(false, Ordering::Relaxed);
    let _ = sampler.await;
    let last_end: Option<chrono::DateTime<chrono::Utc>> =
        sqlx::query_scalar("SELECT max(end_time) FROM runs")
            .fetch_one(&pool)
            .await?;

    let mut problems = Vec::new();
    let server_errors: usize = by_status
        .iter()
        .filter(|(s, _)| **s >= 500)
        .map(|(_, n)| n)
        .sum();
    let other: usize = by_status
        .iter()
        .filter(|(s, _)| !matches!(**s, 200 | 429) && **s < 500)
        .map(|(_, n)| n)
        .sum();
    if server_errors > 0 {
        problems.push(format!("{server_errors} answers were 5xx"));
    }
    if other > 0 {
        problems.push(format!("{other} answers were neither 200 nor 429"));
    }
    if !errors.is_empty() {
        problems.push(format!(
            "{} requests got no answer (first: {})",
            errors.len(),
            errors[0]
        ));
    }
    if recorded != accepted {
        problems.push(format!(
            "{accepted} starts accepted but {recorded} recorded"
        ));
    }
    if completed != accepted || failed > 0 {
        problems.push(format!(
            "{accepted} accepted, {completed} completed, {failed} ended otherwise"
        ));
    }

    let mib = |kib: u64| format!("{:.0} MiB", kib as f64 / 1024.0);
    let mut report = format!(
        "### Burst {date}: {starts} starts, {concurrency} in flight, {replicas} replica(s)\n\n\
         Command: `scripts/burst{argv}`\n\n\
         | measure | result |\n|---|---|\n\
         | answers | {by_status:?}; {errors} without an answer |\n\
         | every start accepted after | {answered:.1?} |\n\
         | accepted runs completed after | {drained:.1?} (last end {last_end}) |\n\
         | accepted / recorded / completed / ended otherwise | {accepted} / {recorded} / {completed} / {failed} |\n\n\
         | service | resident memory idle | peak during the burst |\n|---|---|---|\n",
        date = chrono::Utc::now().format("%Y-%m-%d %H:%M UTC"),
        argv = std::env::args().skip(1).map(|a| format!(" {a}")).collect::<String>(),
        errors = errors.len(),
        last_end = last_end.map(|t| t.to_rfc3339()).unwrap_or_default(),
    );
    for (service, peak) in peaks.lock().expect("peaks lock").iter() {
        let before = idle.get(service).copied().unwrap_or_default();
        report.push_str(&format!(
            "| {service} | {} | {} |\n",
            mib(before),
            mib(*peak)
        ));
    }
    report.push_str(&format!("\nProblems: **{}**\n", problems.len()));
    for p in &problems {
        report.push_str(&format!("- {p}\n"));
    }
    println!("{report}");
    let _ = suite.stop_all().await;
    drop(suite);
    if !problems.is_empty() {
        std::process::exit(1);
    }
    Ok(())
}

/// The resident memory of each service in KiB: its largest running replica's.
fn rss_by_service(pids: &[(String, u32)]) -> BTreeMap<String, u64> {
    let mut by_service = BTreeMap::new();
    for (service, pid) in pids {
        if let Some(kib) = rss_kib(*pid) {
            let max: &mut u64 = by_service.entry(service.clone()).or_default();
            *max = (*max).max(kib);
        }
    }
    by_service
}

/// The resident memory of process `pid` in KiB (`VmRSS` of /proc), if it runs.
fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}
