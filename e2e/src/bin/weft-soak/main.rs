//! `weft-soak`: the chaos soak (RELIABILITY.md). Runs a mixed workload — sequences,
//! forks, loops, child workflows, WAIT with signals and timers, HTTP tasks, retries
//! with back-off, heartbeating activities, operator terminates — against the cluster
//! shape (replicas of every service but the gateway, as processes) for a given time,
//! while injecting faults at random: SIGKILL of any replica, the broker killed,
//! PostgreSQL crashed, Redis down, a worker paused past its heartbeat timeout. At the
//! end every run is checked: it ended as its inputs dictate, each attempt ended once in
//! history, its effects happened, nothing is stuck.
//!
//! PostgreSQL, Redis and RabbitMQ are the soak's own (started from the installed
//! servers on ports and directories of their own, see `weft_e2e::infra`), so its faults
//! never touch the machine's shared servers.
//!
//! `weft-soak [--minutes M] [--in-flight N] [--replicas R] [--rabbit-nodes K]
//! [--read-replica] [--fault-gap S] [--seed X] [--no-faults] [--report FILE]`; exits 1
//! when an invariant is broken. With `--rabbit-nodes` above 1 the broker is a cluster of
//! K nodes, every queue a quorum queue, every process given the K URLs, and the broker
//! fault kills one node at a time. With `--read-replica` the gateways read what may lag
//! (search, statistics, history pages: the soak checks every run's history) from a
//! streaming replica of the soak's PostgreSQL, which the database fault leaves running.

mod checks;
mod effects;
mod events;
mod faults;
mod workload;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures_util::StreamExt as _;
use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng as _};
use serde_json::json;
use tokio::sync::Mutex;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use weft_e2e::infra::{cluster_shape, Servers};
use weft_e2e::{greet, Client, EnvOptions, Suite};

use crate::effects::Effects;
use crate::faults::{Completions, Fault, Injected};
use crate::workload::{Interaction, Kind};

const USAGE: &str = "usage: weft-soak [--minutes M] [--in-flight N] [--replicas R] \
    [--rabbit-nodes K] [--read-replica] [--fault-gap SECONDS] [--seed X] [--no-faults] \
    [--report FILE]";

/// How long runs may take to end once the soak stops starting them.
const DRAIN: Duration = Duration::from_secs(180);
/// How long a start is retried (a gateway being restarted refuses starts meanwhile).
const START_TIMEOUT: Duration = Duration::from_secs(120);

#[derive(Debug, Clone)]
struct Args {
    minutes: f64,
    in_flight: usize,
    replicas: usize,
    /// RabbitMQ nodes: 1, or a cluster of K on quorum queues.
    rabbit_nodes: usize,
    /// The lagging reads on a streaming replica of the soak's PostgreSQL.
    read_replica: bool,
    fault_gap: f64,
    seed: u64,
    faults: bool,
    report: Option<std::path::PathBuf>,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args {
        minutes: 2.0,
        in_flight: 24,
        replicas: 2,
        rabbit_nodes: 1,
        read_replica: false,
        fault_gap: 10.0,
        seed: rand::random(),
        faults: true,
        report: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .with_context(|| format!("{name} needs a value; {USAGE}"))
        };
        match arg.as_str() {
            "--minutes" => args.minutes = value("--minutes")?.parse()?,
            "--in-flight" => args.in_flight = value("--in-flight")?.parse::<usize>()?.max(1),
            "--replicas" => args.replicas = value("--replicas")?.parse::<usize>()?.max(1),
            "--rabbit-nodes" => {
                args.rabbit_nodes = value("--rabbit-nodes")?.parse::<usize>()?.max(1)
            }
            "--fault-gap" => args.fault_gap = value("--fault-gap")?.parse()?,
            "--seed" => args.seed = value("--seed")?.parse()?,
            "--no-faults" => args.faults = false,
            "--read-replica" => args.read_replica = true,
            "--report" => args.report = Some(value("--report")?.into()),
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => anyhow::bail!("unknown argument {other:?}; {USAGE}"),
        }
    }
    Ok(args)
}

/// What became of one run.
#[derive(Debug)]
struct RunRecord {
    kind: Kind,
    n: u64,
    workflow_id: Option<String>,
    /// Its last status seen; terminal unless it got stuck.
    status: Option<String>,
    problem: Option<String>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    let root = std::env::temp_dir().join(format!("weft-soak-{}", std::process::id()));
    eprintln!("soak: seed {}, data under {}", args.seed, root.display());
    eprintln!(
        "soak: starting PostgreSQL, Redis and RabbitMQ ({} node{}) of its own",
        args.rabbit_nodes,
        if args.rabbit_nodes == 1 {
            ""
        } else {
            "s, clustered"
        }
    );
    let node = format!("weftsoak{}", std::process::id());
    let servers = Servers::start_with(&root, &node, args.rabbit_nodes).await?;
    let options = EnvOptions {
        // Every lifecycle event, which the soak listens to and checks.
        extra_env: vec![("WEFT_EVENTS".into(), "#".into())],
        // On a cluster, the production setting: queues replicated over the nodes
        // (docs/bus.md, "Quorum queues"), so that a node's loss loses no message.
        queue_type: match args.rabbit_nodes {
            1 => weft::topology::QueueType::Classic,
            _ => weft::topology::QueueType::Quorum,
        },
        ..EnvOptions::default()
    };
    let mut env = servers.env(options).await?;
    // Kept until the soak ends: the gateways read search, statistics and history pages
    // from it (`WEFT_DATABASE_READ_URL`).
    let _replica = match args.read_replica {
        true => {
            let replica = servers
                .read_replica_for(&root.join("replica"), &mut env)
                .await?;
            eprintln!("soak: lagging reads on a streaming replica");
            Some(replica)
        }
        false => None,
    };
    let mut suite = Suite::new(env)?;
    let shape = cluster_shape(args.replicas);
    suite.spawn_all(&shape).await?;
    eprintln!(
        "soak: {} replicas of every service, logs in {}",
        args.replicas,
        suite.log_dir().display()
    );
    // The soak's own process (its event listener, its workers' bus) logs beside the
    // services': a post-mortem needs what the listener saw across a broker restart.
    let own_log = std::fs::File::create(suite.log_dir().join("soak.log"))?;
    tracing_subscriber::fmt()
        .with_writer(std::sync::Mutex::new(own_log))
        .with_ansi(false)
        .with_env_filter(tracing_subscriber::EnvFilter::new("info"))
        .init();

    let shutdown = CancellationToken::new();
    let effects = Effects::default();
    let http_addr = effects.serve_http(shutdown.clone()).await?;
    let client = suite.client().clone();
    let gateways = Gateways::new(&suite.gateway_urls());
    client
        .register_taskdefs(&workload::task_definitions())
        .await?;
    client.register_overwrite(&greet::definition()).await?;
    for definition in workload::definitions(http_addr) {
        client.register_overwrite(&definition).await?;
    }
    let worker = suite.run_worker(effects.worker(&suite.worker_config()), &shutdown);
    let events = events::Received::default();
    let listener = {
        let (config, events, shutdown) = (suite.worker_config(), events.clone(), shutdown.clone());
        tokio::spawn(async move { weft::listener::run(&config, "soak", events, shutdown).await })
    };
    // Events published before the listener's queue is bound are not routed to it: the
    // soak starts once a run's events all arrive.
    for attempt in 1.. {
        let id = client.start("greet", greet::input("Warm", 1)).await?;
        client
            .wait_for_status(&id, &["COMPLETED"], Duration::from_secs(60))
            .await?;
        tokio::time::sleep(Duration::from_millis(300)).await;
        if events.missing(&id, &client.history(&id).await?).is_empty() {
            break;
        }
        anyhow::ensure!(
            attempt < 30,
            "the soak's event listener never received a run's events"
        );
    }

    let suite = Arc::new(Mutex::new(suite));
    let infra = Arc::new(Mutex::new(servers));
    let completions: Completions = Arc::new(StdMutex::new(Vec::new()));
    let started = Instant::now();
    let duration = Duration::from_secs_f64(args.minutes * 60.0);
    let deadline = started + duration;
    let give_up = deadline + DRAIN;
    let stop_faults = CancellationToken::new();
    let injector = tokio::spawn(inject_faults(
        args.clone(),
        suite.clone(),
        infra.clone(),
        completions.clone(),
        started,
        stop_faults.clone(),
    ));

    eprintln!(
        "soak: running for {duration:?}, {} runs in flight",
        args.in_flight
    );
    let prefix = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
    let mut running = JoinSet::new();
    let mut records = Vec::new();
    let mut n: u64 = 0;
    while Instant::now() < deadline {
        while running.len() < args.in_flight {
            n += 1;
            let kind = Kind::ALL[(n % Kind::ALL.len() as u64) as usize];
            let key = format!("soak-{prefix}-{n}");
            running.spawn(drive(
                gateways.clone(),
                kind,
                n,
                key,
                completions.clone(),
                give_up,
            ));
        }
        tokio::select! {
            done = running.join_next() => {
                if let Some(record) = done {
                    records.push(record?);
                }
            }
            _ = tokio::time::sleep_until(deadline.into()) => {}
        }
    }
    stop_faults.cancel();
    let injected = injector.await?;
    eprintln!(
        "soak: {n} runs started, {} faults injected; draining the runs in flight",
        injected.len()
    );
    while let Some(record) = running.join_next().await {
        records.push(record?);
    }
    let elapsed = started.elapsed();

    eprintln!("soak: checking {} runs", records.len());
    // The last runs' events are published after their commits: give them a moment.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let problems = check_all(&client, &effects, &events, &records).await;
    let report = report(
        &args,
        elapsed,
        &records,
        &injected,
        &problems,
        &effects.hooks_checked(),
    );
    println!("{report}");
    if let Some(path) = &args.report {
        use std::io::Write as _;
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .with_context(|| format!("opening {}", path.display()))?;
        writeln!(file, "{report}")?;
    }

    let failed = !problems.is_empty() || injected.iter().any(|i| i.error.is_some());
    if failed {
        // Kept for a post-mortem: the database (in the soak's own PostgreSQL, whose data
        // directory stays under `root`) and the logs.
        std::env::set_var("WEFT_E2E_KEEP", "1");
    }
    shutdown.cancel();
    let _ = worker.await;
    let _ = listener.await;
    let mut suite = Arc::try_unwrap(suite)
        .map_err(|_| anyhow::anyhow!("the suite is still shared"))?
        .into_inner();
    let stopped = suite.stop_all().await;
    drop(suite);
    drop(infra);
    if let Err(e) = stopped {
        eprintln!("soak: a process had to be killed at the end: {e:#}");
    }
    if failed {
        eprintln!(
            "soak: FAILED; data kept under {} (start its PostgreSQL with `pg_ctl -D {}/postgres/data \
             -o '-p PORT' start` as the postgres user)",
            root.display(),
            root.display()
        );
        std::process::exit(1);
    }
    let _ = std::fs::remove_dir_all(&root);
    Ok(())
}

/// Starts run `n` of `kind` (idempotently, retried while the gateway refuses), acts on
/// it as its kind says, and follows it until it ends or `give_up`.
async fn drive(
    gateways: Gateways,
    kind: Kind,
    n: u64,
    key: String,
    completions: Completions,
    give_up: Instant,
) -> RunRecord {
    let mut record = RunRecord {
        kind,
        n,
        workflow_id: None,
        status: None,
        problem: None,
    };
    let request = json!({"name": kind.workflow(), "input": kind.input(n), "idempotencyKey": key});
    let start_by = Instant::now() + START_TIMEOUT;
    let id = loop {
        match gateways.pick().post_json("/api/workflow", &request).await {
            Ok(resp) if resp.status == 200 => break resp.text.trim().trim_matches('"').to_owned(),
            Ok(resp) if resp.status < 500 && resp.status != 429 => {
                record.problem = Some(format!("start refused {}: {}", resp.status, resp.text));
                return record;
            }
            _ if Instant::now() > start_by => {
                record.problem = Some(format!("start not accepted within {START_TIMEOUT:?}"));
                return record;
            }
            _ => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    };
    record.workflow_id = Some(id.clone());
    for (after, interaction) in kind.interactions() {
        tokio::time::sleep(after).await;
        if let Err(problem) = interact(&gateways, &id, interaction, give_up).await {
            record.problem = Some(problem);
            return record;
        }
    }
    loop {
        if let Ok(Some(wf)) = gateways.pick().try_get(&id).await {
            let status = wf["status"].as_str().unwrap_or_default().to_owned();
            let ended = !matches!(status.as_str(), "RUNNING" | "PAUSED");
            record.status = Some(status);
            if ended {
                completions
                    .lock()
                    .expect("completions lock")
                    .push(Instant::now());
                return record;
            }
        }
        if Instant::now() > give_up {
            record.problem = Some(format!("stuck: still {:?} at the end", record.status));
            return record;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Sends `interaction` for run `id`, retried while the gateway is down or overloaded; a
/// reset waits until the task it goes back to has completed (a reset to a task still
/// running would roll back nothing).
async fn interact(
    gateways: &Gateways,
    id: &str,
    interaction: Interaction,
    give_up: Instant,
) -> Result<(), String> {
    let (method, path, body) = match interaction {
        Interaction::Signal => (
            reqwest::Method::POST,
            format!("/api/workflow/{id}/signal/go"),
            Some(json!({"approved": true})),
        ),
        Interaction::Terminate => (
            reqwest::Method::DELETE,
            format!("/api/workflow/{id}?reason=soak"),
            None,
        ),
        Interaction::Reset => (
            reqwest::Method::POST,
            format!("/api/workflow/{id}/reset"),
            Some(json!({"taskRef": "n1", "reason": "soak"})),
        ),
        Interaction::Skip => (
            reqwest::Method::PUT,
            format!("/api/workflow/{id}/skiptask/go"),
            Some(json!({"taskOutput": {"approved": "skipped"}})),
        ),
    };
    if interaction == Interaction::Reset {
        loop {
            let done = gateways
                .pick()
                .try_get(id)
                .await
                .ok()
                .flatten()
                .is_some_and(|wf| {
                    wf["tasks"].as_array().is_some_and(|tasks| {
                        tasks
                            .iter()
                            .any(|t| t["referenceTaskName"] == "n1" && t["status"] == "COMPLETED")
                    })
                });
            if done {
                break;
            }
            if Instant::now() > give_up {
                return Err("the task to reset to never completed".into());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let mut sent = 0;
    loop {
        if sent > 0 && took_effect(gateways, id, interaction).await {
            // The earlier request was applied; only its answer was lost.
            return Ok(());
        }
        sent += 1;
        let body = body
            .as_ref()
            .map(|b| ("application/json", b.to_string().into_bytes()));
        match gateways.pick().raw(method.clone(), &path, body).await {
            Ok(resp) if (200..300).contains(&resp.status) => return Ok(()),
            // A resend refused because the earlier request, whose answer was lost, was
            // applied in the meantime (a signal to a run it completed): not a refusal.
            Ok(resp)
                if resp.status < 500
                    && resp.status != 429
                    && sent > 1
                    && took_effect(gateways, id, interaction).await =>
            {
                return Ok(())
            }
            Ok(resp) if resp.status < 500 && resp.status != 429 => {
                return Err(format!(
                    "{interaction:?} refused {}: {}",
                    resp.status, resp.text
                ))
            }
            _ if Instant::now() > give_up => return Err(format!("{interaction:?} never accepted")),
            _ => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

/// The suite's gateways as a client behind a load balancer sees them: each request goes
/// to the next one, so one that fails is retried on another.
#[derive(Clone)]
struct Gateways {
    clients: Arc<Vec<Client>>,
    next: Arc<std::sync::atomic::AtomicUsize>,
}

impl Gateways {
    fn new(urls: &[String]) -> Self {
        Self {
            clients: Arc::new(urls.iter().map(|u| Client::new(u)).collect()),
            next: Arc::default(),
        }
    }

    /// The gateway for the next request.
    fn pick(&self) -> &Client {
        let i = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        &self.clients[i % self.clients.len()]
    }
}

/// [`already_done`], asked of each gateway in turn until one answers yes (at most four
/// asks, 250 ms apart): the gateway asked first may be the one a fault just killed, whose
/// refused connection says nothing about the run.
async fn took_effect(gateways: &Gateways, id: &str, interaction: Interaction) -> bool {
    for ask in 0..4 {
        if ask > 0 {
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        if already_done(gateways.pick(), id, interaction).await {
            return true;
        }
    }
    false
}

/// Whether an interaction with run `id` sent before took effect (its answer lost): the
/// run's chain holds a successor (reset), its WAIT is SKIPPED (skip) or COMPLETED
/// (signal), or it is TERMINATED. Sending it again would reset twice, or be refused as a
/// skip of a finished task or a signal to a finished run.
async fn already_done(client: &Client, id: &str, interaction: Interaction) -> bool {
    match interaction {
        Interaction::Reset => {
            let path = format!("/api/workflow/{id}/runs");
            match client.raw(reqwest::Method::GET, &path, None).await {
                Ok(resp) if resp.status == 200 => {
                    serde_json::from_str::<serde_json::Value>(&resp.text)
                        .ok()
                        .and_then(|runs| runs.as_array().map(Vec::len))
                        .is_some_and(|n| n >= 2)
                }
                _ => false,
            }
        }
        Interaction::Skip => client.try_get(id).await.ok().flatten().is_some_and(|wf| {
            wf["tasks"].as_array().is_some_and(|tasks| {
                tasks
                    .iter()
                    .any(|t| t["referenceTaskName"] == "go" && t["status"] == "SKIPPED")
            })
        }),
        Interaction::Signal => client.try_get(id).await.ok().flatten().is_some_and(|wf| {
            wf["tasks"].as_array().is_some_and(|tasks| {
                tasks
                    .iter()
                    .any(|t| t["referenceTaskName"] == "go" && t["status"] == "COMPLETED")
            })
        }),
        Interaction::Terminate => client
            .try_get(id)
            .await
            .ok()
            .flatten()
            .is_some_and(|wf| wf["status"] == "TERMINATED"),
    }
}

/// Injects a fault every `fault_gap` seconds or so until `stop`, measuring recovery.
async fn inject_faults(
    args: Args,
    suite: Arc<Mutex<Suite>>,
    infra: Arc<Mutex<Servers>>,
    completions: Completions,
    started: Instant,
    stop: CancellationToken,
) -> Vec<Injected> {
    let mut injected = Vec::new();
    if !args.faults {
        return injected;
    }
    let mut rng = StdRng::seed_from_u64(args.seed);
    let mut deck = Vec::new();
    loop {
        let gap = Duration::from_secs_f64(args.fault_gap * rng.random_range(0.5..1.5));
        tokio::select! {
            _ = tokio::time::sleep(gap) => {}
            _ = stop.cancelled() => return injected,
        }
        if deck.is_empty() {
            deck = Fault::deck(&mut rng);
        }
        let fault = deck.pop().expect("a full deck");
        let at = Instant::now();
        let before = faults::rate_at(&completions, at);
        eprintln!(
            "soak: {:>6.1?} {}",
            at.duration_since(started),
            fault.name()
        );
        let error = faults::inject(fault, &suite, &infra, &mut rng)
            .await
            .err()
            .map(|e| format!("{e:#}"));
        if let Some(e) = &error {
            eprintln!("soak: injecting {} failed: {e}", fault.name());
        }
        let ended = Instant::now();
        let (recovered_in, cut) = tokio::select! {
            r = faults::recovery(&completions, before, ended) => (r, false),
            _ = stop.cancelled() => (None, true),
        };
        injected.push(Injected {
            fault,
            at: at.duration_since(started),
            lasted: ended.duration_since(at),
            recovered_in,
            cut,
            error,
        });
        if stop.is_cancelled() {
            return injected;
        }
    }
}

/// How long after the runs' end the checks wait for hook calls still being delivered:
/// longer than the dispatcher's back-off after a few failed attempts (1, 2, 4, 8 s …).
const HOOKS_GRACE: Duration = Duration::from_secs(60);

/// Checks every run; returns every broken invariant.
async fn check_all(
    client: &Client,
    effects: &Effects,
    events: &events::Received,
    records: &[RunRecord],
) -> Vec<String> {
    let mut problems: Vec<String> = records
        .iter()
        .filter_map(|r| {
            r.problem
                .as_ref()
                .map(|p| format!("{:?} run {} ({:?}): {p}", r.kind, r.n, r.workflow_id))
        })
        .collect();
    // Hooks not awaited by their run may still be on their way (a retry after a fault
    // waits seconds): every check waits for them until this one deadline.
    let hooks_deadline = tokio::time::Instant::now() + HOOKS_GRACE;
    let checked: Vec<Vec<String>> = futures_util::stream::iter(
        records
            .iter()
            .filter(|r| r.problem.is_none())
            .filter_map(|r| r.workflow_id.as_ref().map(|id| (r, id))),
    )
    .map(|(r, id)| checks::check_run(client, effects, events, (r.kind, r.n, id), hooks_deadline))
    .buffer_unordered(8)
    .collect()
    .await;
    problems.extend(checked.into_iter().flatten());
    problems
}

/// The soak's report, as Markdown.
fn report(
    args: &Args,
    elapsed: Duration,
    records: &[RunRecord],
    injected: &[Injected],
    problems: &[String],
    hooks_checked: &BTreeMap<&'static str, u64>,
) -> String {
    let mut by_kind: BTreeMap<Kind, (usize, usize)> = BTreeMap::new();
    for r in records {
        let entry = by_kind.entry(r.kind).or_default();
        entry.0 += 1;
        if r.status.as_deref() == Some(r.kind.expected_status()) {
            entry.1 += 1;
        }
    }
    let mut faults: BTreeMap<String, Vec<&Injected>> = BTreeMap::new();
    for i in injected {
        faults.entry(i.fault.name()).or_default().push(i);
    }
    let mut out = format!(
        "### Soak {date}: {minutes} min, {replicas} replicas, {broker}, {in_flight} runs in flight, seed {seed}\n\n\
         Command: `scripts/soak{argv}`; {elapsed:.0?} in all (draining included).\n\n\
         | runs | started | ended as expected |\n|---|---|---|\n",
        date = chrono::Utc::now().format("%Y-%m-%d %H:%M UTC"),
        minutes = args.minutes,
        replicas = args.replicas,
        broker = match (args.rabbit_nodes, args.read_replica) {
            (1, false) => "one RabbitMQ node".to_owned(),
            (1, true) => "one RabbitMQ node, lagging reads on a PostgreSQL replica".to_owned(),
            (k, replica) => format!(
                "a {k}-node RabbitMQ cluster on quorum queues{}",
                if replica { ", lagging reads on a PostgreSQL replica" } else { "" }
            ),
        },
        in_flight = args.in_flight,
        seed = args.seed,
        argv = std::env::args()
            .skip(1)
            .map(|a| format!(" {a}"))
            .collect::<String>(),
    );
    for (kind, (started, ok)) in &by_kind {
        out.push_str(&format!("| {kind:?} | {started} | {ok} |\n"));
    }
    let total_ok: usize = by_kind.values().map(|v| v.1).sum();
    out.push_str(&format!(
        "| **all** | **{}** | **{total_ok}** |\n\n",
        records.len()
    ));
    out.push_str(
        "| fault | injected | down for (p50) | recovery p50 | recovery max | \
         not recovered in 60 s | cut by the soak's end | injection failed |\n\
         |---|---|---|---|---|---|---|---|\n",
    );
    let show = |d: Option<&Duration>| d.map(|d| format!("{d:.1?}")).unwrap_or("–".into());
    for (name, list) in &faults {
        let mut times: Vec<Duration> = list.iter().filter_map(|i| i.recovered_in).collect();
        times.sort_unstable();
        let mut down: Vec<Duration> = list.iter().map(|i| i.lasted).collect();
        down.sort_unstable();
        let missed = list
            .iter()
            .filter(|i| i.recovered_in.is_none() && !i.cut)
            .count();
        let cut = list.iter().filter(|i| i.cut).count();
        let failed = list.iter().filter(|i| i.error.is_some()).count();
        out.push_str(&format!(
            "| {name} | {} | {} | {} | {} | {missed} | {cut} | {failed} |\n",
            list.len(),
            show(down.get(down.len() / 2)),
            show(times.get(times.len() / 2)),
            show(times.last()),
        ));
    }
    out.push_str("\nFaults in order: ");
    let timeline: Vec<String> = injected
        .iter()
        .map(|i| format!("{:.0?} {}", i.at, i.fault.name()))
        .collect();
    out.push_str(&timeline.join("; "));
    out.push('\n');
    for i in injected.iter().filter(|i| i.error.is_some()) {
        out.push_str(&format!(
            "- injecting {} at {:.0?} failed: {}\n",
            i.fault.name(),
            i.at,
            i.error.as_deref().unwrap_or_default()
        ));
    }
    let hooks: Vec<String> = hooks_checked
        .iter()
        .map(|(hook, n)| format!("{hook} {n}"))
        .collect();
    out.push_str(&format!(
        "\nHook calls checked (each expected at the soak's server): {}\n",
        match hooks.is_empty() {
            true => "none".to_owned(),
            false => hooks.join(", "),
        }
    ));
    out.push_str(&format!("\nInvariant violations: **{}**\n", problems.len()));
    for p in problems.iter().take(30) {
        out.push_str(&format!("- {p}\n"));
    }
    if problems.len() > 30 {
        out.push_str(&format!("- … and {} more\n", problems.len() - 30));
    }
    out
}
