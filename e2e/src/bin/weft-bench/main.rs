//! `weft-bench` — benchmark W1: the `greet` workflow (three SIMPLE activities on the
//! example worker) against the real services, spawned as processes in a fresh
//! database and namespace. Build in release first (`scripts/bench` does).
//!
//! 1. Throughput: `--runs` starts (default 2,000) issued with `--concurrency` requests
//!    in flight (default 64), from the first start to the last COMPLETED run.
//! 2. Latency: `--latency-runs` (default 200) sequential runs, start → COMPLETED as a
//!    client polling the run every millisecond sees it, and as the engine stamped it;
//!    then as many sequential synchronous executions (`POST /api/workflow/execute`,
//!    answered when the run has completed: a client's view without polling).
//!
//! With the throughput: the CPU time each process spent per run in that phase (`cpu`),
//! the steadier measure for an A/B of a hot-path change.
//!
//! Completion is observed in the database (`runs.status`), which costs the services
//! nothing. Prints a markdown block with the figures, the machine and the command.
//!
//! `--events`: the decider publishes every lifecycle event (`WEFT_EVENTS=#`) and a
//! listener queue bound to `#` consumes them all (the second row of BENCHMARKS.md). A
//! run's last events are published after the commit that completes it, so the
//! throughput phase then lasts until the listener has every event (`delivered`): the
//! report adds the throughput to that point, and the CPU and messages a run cover it.
//! `--events-together`: the same, with `WEFT_EVENTS_TOGETHER=true` (events of one routing
//! key that meet at the decider go as one message; the listener counts the events in it).
//!
//! `--starts-together`: with any row, the gateway sends the starts for one shard that
//! meet as one message (`WEFT_STARTS_TOGETHER=true`).
//!
//! `--dev`: the same workload on `weft dev --example` (one process: SQLite, the
//! in-process bus, the example worker inside; the third row of BENCHMARKS.md); runs are
//! watched in its database file, opened read-only.
//!
//! `--http-workers`: no example worker; greet's activities are served by HTTP pollers in
//! this process (`http_workers`: 4 per activity, batches of up to 16), as Conductor's
//! SDKs serve tasks — each result waits for the decider's verdict.
//!
//! `--rabbit-nodes K` (K ≥ 2): the broker is a cluster of K RabbitMQ nodes of the
//! benchmark's own (started and clustered under a temporary directory), the namespace's
//! queues are quorum queues (`WEFT_QUEUE_TYPE=quorum`, the production setting on a
//! cluster) and every process is given every node's URL; PostgreSQL and Redis stay the
//! local ones.

mod cpu;
mod decider;
mod delivered;
mod http_workers;
mod messages;
mod runs;
mod scrape;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures_util::StreamExt as _;
use tokio_util::sync::CancellationToken;
use weft::bus::{Bus, ConsumeOptions, Disposition};
use weft::topology::QueueType;
use weft_e2e::infra::RabbitNode;
use weft_e2e::{greet, Client, EnvOptions, Service, Suite, TestEnv};

use runs::Runs;

#[derive(Debug)]
struct Args {
    runs: usize,
    concurrency: usize,
    latency_runs: usize,
    events: bool,
    /// With `events`: the decider sends them together (`WEFT_EVENTS_TOGETHER`).
    events_together: bool,
    /// The gateway sends starts for one shard together (`WEFT_STARTS_TOGETHER`).
    starts_together: bool,
    dev: bool,
    http_workers: bool,
    rabbit_nodes: usize,
}

/// `--http-workers`: pollers per activity, and the most tasks one poll takes.
const HTTP_POLLERS: (usize, usize) = (4, 16);

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args {
        runs: 2000,
        concurrency: 64,
        latency_runs: 200,
        events: false,
        events_together: false,
        starts_together: false,
        dev: false,
        http_workers: false,
        rabbit_nodes: 1,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--events" => {
                args.events = true;
                continue;
            }
            "--events-together" => {
                (args.events, args.events_together) = (true, true);
                continue;
            }
            "--starts-together" => {
                args.starts_together = true;
                continue;
            }
            "--dev" => {
                args.dev = true;
                continue;
            }
            "--http-workers" => {
                args.http_workers = true;
                continue;
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            _ => {}
        }
        let mut value = |name: &str| -> anyhow::Result<usize> {
            it.next()
                .with_context(|| format!("{name} needs a value"))?
                .parse()
                .with_context(|| format!("{name} wants a number"))
        };
        match flag.as_str() {
            "--runs" => args.runs = value("--runs")?,
            "--concurrency" => args.concurrency = value("--concurrency")?.max(1),
            "--latency-runs" => args.latency_runs = value("--latency-runs")?,
            "--rabbit-nodes" => args.rabbit_nodes = value("--rabbit-nodes")?.max(1),
            _ => anyhow::bail!("unknown argument {flag:?}; {USAGE}"),
        }
    }
    Ok(args)
}

/// What `--help` prints, and an unknown argument's error.
const USAGE: &str = "usage: weft-bench [--runs N] [--concurrency C] [--latency-runs M] \
    [--events | --events-together | --dev | --http-workers] [--starts-together] [--rabbit-nodes K] (W1, the greet benchmark; BENCHMARKS.md)";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    let mut extra_env = match (args.events, args.events_together) {
        (false, _) => Vec::new(),
        (true, false) => vec![("WEFT_EVENTS".to_owned(), "#".to_owned())],
        (true, true) => vec![
            ("WEFT_EVENTS".to_owned(), "#".to_owned()),
            ("WEFT_EVENTS_TOGETHER".to_owned(), "true".to_owned()),
        ],
    };
    if args.starts_together {
        extra_env.push(("WEFT_STARTS_TOGETHER".to_owned(), "true".to_owned()));
    }
    let options = EnvOptions {
        extra_env,
        // The services' own default (5 s), as deployed: the suite's 500 ms (short, for
        // crash tests) re-publishes rows whose publish is merely slow under load.
        outbox_sweep_after_ms: None,
        queue_type: match args.rabbit_nodes {
            1 => QueueType::Classic,
            _ => QueueType::Quorum,
        },
        ..EnvOptions::default()
    };
    anyhow::ensure!(
        !(args.events && args.dev),
        "--events listens on RabbitMQ; weft dev has no broker to listen on"
    );
    anyhow::ensure!(
        !(args.dev && args.http_workers),
        "--http-workers replaces the example worker, which weft dev --example runs inside"
    );
    anyhow::ensure!(
        !(args.dev && args.rabbit_nodes > 1),
        "--rabbit-nodes runs the services on a cluster; weft dev has no broker"
    );
    let root = std::env::temp_dir().join(format!("weft-bench-{}", std::process::id()));
    let rabbits = match args.rabbit_nodes {
        1 => Vec::new(),
        k => {
            eprintln!(
                "starting a cluster of {k} RabbitMQ nodes under {}",
                root.display()
            );
            let node = format!("weftbench{}", std::process::id());
            RabbitNode::cluster(&root, &node, k).await?
        }
    };
    let env = match rabbits.is_empty() {
        true => TestEnv::create(options).await?,
        false => {
            let urls: Vec<String> = rabbits.iter().map(RabbitNode::url).collect();
            TestEnv::create_with_broker(options, &urls.join(",")).await?
        }
    };
    let (mut suite, runs) = if args.dev {
        let mut suite = Suite::new(env)?;
        suite.spawn(Service::Dev).await?;
        let db = suite.log_dir().join("data").join("weft.db");
        let runs = Runs::sqlite(&db).await?;
        (suite, runs)
    } else {
        // HTTP pollers serve the activities instead of the example worker.
        let suite = match args.http_workers {
            true => Suite::start_with(env, &Service::CORE).await?,
            false => Suite::start(env).await?,
        };
        let runs = Runs::Postgres(suite.env().pool().clone());
        (suite, runs)
    };
    eprintln!("suite up (logs in {})", suite.log_dir().display());
    let listening = CancellationToken::new();
    let events = if args.events {
        Some(listen_to_everything(&suite, &listening).await?)
    } else {
        None
    };
    let pollers = args.http_workers.then(|| {
        let (per_task, batch) = HTTP_POLLERS;
        http_workers::HttpWorkers::spawn(suite.client(), per_task, batch)
    });
    let listener = events
        .as_ref()
        .map(|(bus, queue, seen)| delivered::Listener { bus, queue, seen });
    let result = bench(&suite, &runs, &args, listener.as_ref()).await;
    if let Some(pollers) = pollers {
        let answered = pollers.answered.clone();
        pollers.stop().await?;
        eprintln!(
            "the HTTP pollers answered {} tasks",
            answered.load(Ordering::Relaxed)
        );
    }
    listening.cancel();
    if let Err(e) = &result {
        eprintln!("benchmark failed: {e:#}\nprocesses:\n{}", suite.describe());
    }
    suite.stop_all().await?;
    if let Some((bus, queue, seen)) = events {
        // This process's own consumer is the listener: its acknowledgements, as counted
        // by the bus.
        let metrics = weft::admin::Metrics::new();
        bus.count_publishes(&metrics);
        let text = metrics.render();
        eprintln!(
            "the listener got {} events, acknowledged in {} frames",
            seen.load(Ordering::Relaxed),
            weft_e2e::metrics::counter(&text, "weft_bus_ack_frames"),
        );
        // The services are stopped: the namespace's topology and the listener's queue go.
        let _ = bus.teardown(&[queue]).await;
    }
    // The namespace is torn down on the nodes before they go.
    drop(suite);
    drop(rabbits);
    let _ = std::fs::remove_dir_all(&root);
    let report = result?;
    println!("{report}");
    Ok(())
}

/// A listener queue bound to `#` on the events exchange, consuming and counting every
/// event.
async fn listen_to_everything(
    suite: &Suite,
    stop: &CancellationToken,
) -> anyhow::Result<(Bus, String, Arc<AtomicU64>)> {
    let env = suite.env();
    let bus = Bus::connect(&env.amqp_url, env.names(), stop.clone()).await?;
    let queue = format!("{}.bench-listener", env.namespace);
    bus.declare_queue(&queue, &[(&env.names().events_exchange(), "#")])
        .await?;
    let seen = Arc::new(AtomicU64::new(0));
    let count = seen.clone();
    let opts = ConsumeOptions {
        prefetch: 256,
        concurrency: 8,
    };
    bus.consume(
        &queue,
        opts,
        move |delivery| {
            // A message of events sent together counts each of them.
            let events = match weft::event_batch::events_of(&delivery.envelope) {
                Ok(events) => events.len() as u64,
                Err(_) => 1,
            };
            count.fetch_add(events, Ordering::Relaxed);
            async { Disposition::Ack }
        },
        stop.clone(),
    );
    Ok((bus, queue, seen))
}

async fn bench(
    suite: &Suite,
    runs: &Runs,
    args: &Args,
    listener: Option<&delivered::Listener<'_>>,
) -> anyhow::Result<String> {
    let client = suite.client();
    // `weft dev --example` has registered it already.
    client.register_overwrite(&greet::definition()).await?;

    eprintln!("warm-up: 20 runs");
    let warm = start_many(client, 20, args.concurrency).await?;
    wait_completed(runs, warm.len() as i64, Duration::from_secs(120)).await?;

    eprintln!(
        "throughput: {} runs, {} in flight",
        args.runs, args.concurrency
    );
    let before = runs.count("COMPLETED").await?;
    let cpu_before = cpu::CpuSample::take(suite);
    let published_before = messages::Published::take(suite).await;
    let t0 = Instant::now();
    let t0_wall = chrono::Utc::now();
    let starts = start_many(client, args.runs, args.concurrency).await?;
    let accepted = t0.elapsed();
    wait_completed(runs, before + starts.len() as i64, Duration::from_secs(600)).await?;
    // With events, the phase lasts until the listener has them all: the CPU and the
    // messages of publishing and delivering them count too.
    let delivered = match (listener, runs) {
        (Some(listener), Runs::Postgres(pool)) => Some(
            listener
                .all_delivered(pool, Duration::from_secs(600))
                .await?
                .duration_since(t0),
        ),
        _ => None,
    };
    let cpu_rows = cpu_before.rows_until(&cpu::CpuSample::take(suite), args.runs);
    let message_row =
        published_before.row_until(&messages::Published::take(suite).await, args.runs);
    // The last run's end as the decider stamped it (same machine, same clock): exact,
    // whatever the polling interval.
    let last_end = runs.last_end().await?;
    let total = (last_end - t0_wall)
        .to_std()
        .unwrap_or_else(|_| t0.elapsed());
    let per_sec = args.runs as f64 / total.as_secs_f64();
    let delivered_row = delivered.map_or_else(String::new, |d| {
        format!(
            "| throughput, every lifecycle event at the listener | {:.1} workflows/s \
             ({d:.2?} first start to the last event received) |\n",
            args.runs as f64 / d.as_secs_f64()
        )
    });
    let sample = client.get(&starts[starts.len() / 2]).await?;
    greet::check_run(&sample, "B", 3).map_err(anyhow::Error::msg)?;

    eprintln!("latency: {} sequential runs", args.latency_runs);
    let mut latencies = Vec::with_capacity(args.latency_runs);
    let mut latency_ids = Vec::with_capacity(args.latency_runs);
    // The wall clock too (the engine's stamps are on this machine's clock): what the
    // client's view adds to the engine's, before the start is accepted and after the run
    // has ended.
    let mut sent_and_seen = Vec::with_capacity(args.latency_runs);
    let decider_before = decider::DeciderTimes::take(suite).await;
    for i in 0..args.latency_runs {
        let (t, sent) = (Instant::now(), chrono::Utc::now());
        let id = client.start("greet", greet::input("B", 3)).await?;
        latency_ids.push(id.clone());
        wait_one(runs, &id, Duration::from_secs(60))
            .await
            .with_context(|| format!("latency run {i}"))?;
        latencies.push(t.elapsed());
        sent_and_seen.push((sent, chrono::Utc::now()));
    }
    let decider_row =
        decider_before.row_until(&decider::DeciderTimes::take(suite).await, "sequential runs");
    latencies.sort_unstable();
    // The same runs as the engine saw them: from the gateway accepting the start to the
    // decider deciding WorkflowCompleted (the run's `end_time`, stamped before the commit
    // that makes it visible; no client polling in the measure).
    let mut engine = Vec::with_capacity(latency_ids.len());
    let (mut before_accept, mut after_end) = (Vec::new(), Vec::new());
    for (id, (sent, seen)) in latency_ids.iter().zip(&sent_and_seen) {
        let (accepted, ended) = runs.accepted_and_ended(id).await?;
        engine.push((ended - accepted).to_std().unwrap_or_default());
        before_accept.push((accepted - *sent).to_std().unwrap_or_default());
        after_end.push((*seen - ended).to_std().unwrap_or_default());
    }
    engine.sort_unstable();
    before_accept.sort_unstable();
    after_end.sort_unstable();
    // Where a sequential run's milliseconds go: each phase's median over the runs.
    let mut phases: Vec<(&str, Vec<f64>)> = Vec::new();
    for id in &latency_ids {
        for (i, (name, ms)) in runs.timeline(id).await?.phases().into_iter().enumerate() {
            if phases.len() <= i {
                phases.push((name, Vec::new()));
            }
            phases[i].1.push(ms);
        }
    }
    let phase_rows: String = phases
        .iter_mut()
        .map(|(name, values)| {
            values.sort_by(f64::total_cmp);
            let median = values.get(values.len() / 2).copied().unwrap_or_default();
            format!("| &nbsp;&nbsp;{name}, median | {median:.2}ms |\n")
        })
        .collect();
    // The same measure as a client that waits without polling: Conductor's synchronous
    // execution answers once the run has completed (docs/execute.md).
    eprintln!(
        "latency: {} sequential synchronous executions",
        args.latency_runs
    );
    let version = greet::definition()["version"].as_i64().unwrap_or(1);
    let path = format!("/api/workflow/execute/greet/{version}?waitForSeconds=60");
    let body = serde_json::json!({ "input": greet::input("B", 3) });
    let mut executed = Vec::with_capacity(args.latency_runs);
    for i in 0..args.latency_runs {
        let t = Instant::now();
        let answer = client.post_json(&path, &body).await?;
        executed.push(t.elapsed());
        let completed = answer
            .json
            .as_ref()
            .is_some_and(|run| run["status"] == "COMPLETED");
        anyhow::ensure!(
            answer.status == 200 && completed,
            "synchronous execution {i} answered {}: {}",
            answer.status,
            answer.text
        );
    }
    executed.sort_unstable();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let (engine_p50, engine_p99) = (ms(percentile(&engine, 50.0)), ms(percentile(&engine, 99.0)));

    let argv: Vec<String> = std::env::args().skip(1).collect();
    Ok(format!(
        "### W1: greet (3 SIMPLE activities, {served}), {shape}{events}\n\n\
         | measure | result |\n\
         |---|---|\n\
         | throughput ({runs} runs, {conc} starts in flight) | {per_sec:.1} workflows/s \
         ({total:.2?} first start to last COMPLETED; starts accepted in {accepted:.2?}) |\n\
         {delivered_row}\
         {cpu_rows}\
         {message_row}\
         | latency ({lat} sequential runs, start to COMPLETED) | p50 {p50:.1?}, \
         p99 {p99:.1?}, max {max:.1?} |\n\
         | engine latency (same runs, start accepted to the decider deciding WorkflowCompleted; its commit follows) | \
         p50 {engine_p50:.1}ms, p99 {engine_p99:.1}ms |\n\
         | &nbsp;&nbsp;start request sent → start accepted, median | {before:.2?} |\n\
         | &nbsp;&nbsp;run ended → the polling client saw it, median | {after:.2?} |\n\
         | latency ({lat} sequential synchronous executions, request to the COMPLETED \
         run's answer, no polling) | p50 {x50:.1?}, p99 {x99:.1?}, max {xmax:.1?} |\n\
         {phase_rows}\
         {decider_row}\
         | machine | {machine} |\n\
         | command | `scripts/bench{argv}` |\n",
        runs = args.runs,
        conc = args.concurrency,
        lat = latencies.len(),
        p50 = percentile(&latencies, 50.0),
        p99 = percentile(&latencies, 99.0),
        max = latencies.last().copied().unwrap_or_default(),
        before = percentile(&before_accept, 50.0),
        after = percentile(&after_end, 50.0),
        x50 = percentile(&executed, 50.0),
        x99 = percentile(&executed, 99.0),
        xmax = executed.last().copied().unwrap_or_default(),
        machine = machine(),
        served = match args.http_workers {
            true => format!(
                "HTTP pollers: {} per activity, batches of up to {}",
                HTTP_POLLERS.0, HTTP_POLLERS.1
            ),
            false => "example worker".to_owned(),
        },
        shape = match (args.dev, args.rabbit_nodes) {
            (true, _) => "weft dev (one process: SQLite, in-process bus)".to_owned(),
            (false, 1) => "services as processes".to_owned(),
            (false, k) =>
                format!("services as processes, a {k}-node RabbitMQ cluster on quorum queues"),
        },
        events = match (args.events, args.events_together) {
            (false, _) => "",
            (true, false) => ", every lifecycle event published and consumed",
            (true, true) => {
                ", every lifecycle event published (events of one key together) and consumed"
            }
        }
        .to_owned()
            + if args.starts_together {
                ", starts sent together"
            } else {
                ""
            },
        argv = argv.iter().map(|a| format!(" {a}")).collect::<String>(),
    ))
}

/// Starts `n` greet runs with at most `concurrency` requests in flight.
async fn start_many(client: &Client, n: usize, concurrency: usize) -> anyhow::Result<Vec<String>> {
    futures_util::stream::iter(0..n)
        .map(|_| client.start("greet", greet::input("B", 3)))
        .buffer_unordered(concurrency)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect()
}

/// Waits until `target` runs are COMPLETED; fails on a failed run or after `timeout`.
/// Polled every 50 ms: the benchmark's reads cost the store little, and the throughput's
/// end is read from the runs themselves.
async fn wait_completed(runs: &Runs, target: i64, timeout: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let done = runs.count("COMPLETED").await?;
        if done >= target {
            return Ok(());
        }
        let failed = runs.count("FAILED").await?;
        anyhow::ensure!(failed == 0, "{failed} runs FAILED");
        anyhow::ensure!(
            Instant::now() < deadline,
            "only {done} of {target} runs COMPLETED after {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls one run's status tightly until COMPLETED.
async fn wait_one(runs: &Runs, workflow_id: &str, timeout: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        match runs.status(workflow_id).await?.as_deref() {
            Some("COMPLETED") => return Ok(()),
            Some(s @ ("FAILED" | "TIMED_OUT" | "TERMINATED")) => {
                anyhow::bail!("run {workflow_id} ended {s}")
            }
            _ => {}
        }
        anyhow::ensure!(Instant::now() < deadline, "run {workflow_id} not COMPLETED");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// The `p`th percentile (nearest rank) of sorted `xs`.
fn percentile(xs: &[Duration], p: f64) -> Duration {
    if xs.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * xs.len() as f64).ceil() as usize;
    xs[rank.clamp(1, xs.len()) - 1]
}

/// `nproc N, M GiB RAM, <cpu model>` from /proc.
fn machine() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mem_kb: u64 = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0);
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    format!(
        "nproc {cpus}, {:.1} GiB RAM, {model}",
        mem_kb as f64 / 1024.0 / 1024.0
    )
}
