//! `weft-cluster [--replicas N] [--own-servers] [--rabbit-nodes K] [--read-replica]`: the
//! production shape on this machine, as
//! processes (binaries next to this one, or `WEFT_BIN_DIR`) — `N` (default 2) replicas
//! each of the gateway (each on its own address), the decider, history, heartbeat,
//! example worker and HTTP worker — in a fresh database and namespace, until Ctrl-C or SIGTERM; then every process
//! is stopped with SIGTERM and the database and namespace are removed.
//!
//! By default it runs on the local PostgreSQL, RabbitMQ and Redis (`WEFT_E2E_PG_URL`,
//! `WEFT_AMQP_URL`, `WEFT_REDIS_URL` or their local defaults); `--own-servers` starts
//! servers of its own, as the chaos soak does (RELIABILITY.md). With them, `--rabbit-nodes
//! K` makes the broker a cluster of K nodes with quorum queues (`WEFT_QUEUE_TYPE=quorum`,
//! every node's URL in `WEFT_AMQP_URL`), and `--read-replica` adds a streaming replica of
//! the database for the gateways' lagging reads (`WEFT_DATABASE_READ_URL`); either implies
//! `--own-servers`. The gateway listens on
//! `WEFT_HTTP_ADDR` (default 127.0.0.1:8080); `greet` is registered.

use std::net::SocketAddr;

use anyhow::Context as _;
use weft::topology::QueueType;
use weft_e2e::infra::{cluster_shape, Servers};
use weft_e2e::{greet, EnvOptions, Suite, TestEnv};

const USAGE: &str =
    "usage: weft-cluster [--replicas N] [--own-servers] [--rabbit-nodes K] [--read-replica]";

/// The number after `flag` (at least 1).
fn count(args: &mut impl Iterator<Item = String>, flag: &str) -> anyhow::Result<usize> {
    let value = args.next().context(USAGE)?;
    let n: usize = value
        .parse()
        .with_context(|| format!("{flag} takes a number"))?;
    Ok(n.max(1))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let (mut replicas, mut own_servers) = (2usize, false);
    let (mut rabbit_nodes, mut read_replica) = (1usize, false);
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--replicas" => replicas = count(&mut args, "--replicas")?,
            "--own-servers" => own_servers = true,
            "--rabbit-nodes" => {
                rabbit_nodes = count(&mut args, "--rabbit-nodes")?;
                own_servers = true;
            }
            "--read-replica" => {
                read_replica = true;
                own_servers = true;
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(());
            }
            other => anyhow::bail!("unknown argument {other:?}; {USAGE}"),
        }
    }
    let addr: SocketAddr = std::env::var("WEFT_HTTP_ADDR")
        .unwrap_or_else(|_| "127.0.0.1:8080".into())
        .parse()
        .context("WEFT_HTTP_ADDR is not an address")?;

    let root = std::env::temp_dir().join(format!("weft-cluster-{}", std::process::id()));
    let servers = match own_servers {
        true => {
            eprintln!(
                "cluster: starting PostgreSQL, Redis and RabbitMQ ({rabbit_nodes} node(s)) of its own"
            );
            let node = format!("weftcluster{}", std::process::id());
            Some(Servers::start_with(&root, &node, rabbit_nodes).await?)
        }
        false => None,
    };
    let options = EnvOptions {
        // A cluster's production setting: queues replicated over its nodes (docs/bus.md).
        queue_type: match rabbit_nodes {
            1 => QueueType::Classic,
            _ => QueueType::Quorum,
        },
        ..EnvOptions::default()
    };
    let mut env = match &servers {
        Some(servers) => servers.env(options).await?,
        None => TestEnv::create(options).await?,
    };
    // Kept until the cluster stops.
    let replica = match (&servers, read_replica) {
        (Some(servers), true) => {
            eprintln!("cluster: starting a streaming replica of its PostgreSQL");
            let replica = servers
                .read_replica_for(&root.join("replica"), &mut env)
                .await?;
            Some(replica)
        }
        _ => None,
    };
    let (database, namespace) = (env.database_url.clone(), env.namespace.clone());
    let mut suite = Suite::with_gateway_addr(env, addr)?;
    let procs = suite.spawn_all(&cluster_shape(replicas)).await?;
    suite
        .client()
        .register_overwrite(&greet::definition())
        .await?;

    println!("Weft cluster up: {}", suite.gateway_urls().join(", "));
    println!("  database  {database}");
    println!("  namespace {namespace}");
    if let Some(servers) = &servers {
        println!("  broker    {}", servers.amqp_urls());
    }
    if let Some(replica) = &replica {
        let db = database.rsplit('/').next().unwrap_or_default();
        println!("  replica   {}", replica.url(db));
    }
    for id in procs {
        let proc = suite.proc(id);
        println!(
            "  {:<12} pid {:<8} log {}",
            proc.service.name(),
            proc.pid().map(|p| p.to_string()).unwrap_or_default(),
            proc.log_path.display()
        );
    }
    println!(
        "Start a run: curl -s -X POST {}/api/workflow -H 'content-type: application/json' \
         -d '{{\"name\":\"greet\",\"input\":{{\"first\":\"Ada\",\"n\":3}}}}'",
        suite.gateway_url()
    );
    println!("Ctrl-C stops the cluster and removes its database and namespace.");

    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    eprintln!("cluster: stopping");
    let stopped = suite.stop_all().await;
    drop(suite);
    drop(replica);
    drop(servers);
    let _ = std::fs::remove_dir_all(&root);
    stopped.map(|_| ())
}
