//! `weft-demo [--keep-running | --teardown]`: the README's "run it". Starts the four services and
//! the example worker as processes (binaries next to this one, or `WEFT_BIN_DIR`)
//! against the local PostgreSQL and RabbitMQ, registers `greet`, runs it with
//! `{"first": "Ada", "n": 3}` and prints the output. With `--keep-running` the suite
//! stays up until Ctrl-C; otherwise everything is stopped with SIGTERM. `--teardown`
//! deletes the namespace's exchanges and queues instead (the database is kept).
//!
//! Environment: `WEFT_DATABASE_URL` (default `postgres://postgres@127.0.0.1:5432/weft`,
//! created if missing), `WEFT_NAMESPACE` (default `weft`), `WEFT_HTTP_ADDR` (default
//! `127.0.0.1:8080`), `WEFT_AMQP_URL`, `RUST_LOG`.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context as _;
use serde_json::Value;
use weft_e2e::{greet, EnvOptions, Service, Suite, TestEnv};

const DEFAULT_DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432/weft";
const USAGE: &str = "usage: weft-demo [--keep-running | --teardown]";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let (mut keep_running, mut teardown) = (false, false);
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--keep-running" => keep_running = true,
            "--teardown" => teardown = true,
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(());
            }
            other => anyhow::bail!("unknown argument {other:?}; {USAGE}"),
        }
    }

    let database_url =
        std::env::var("WEFT_DATABASE_URL").unwrap_or_else(|_| DEFAULT_DATABASE_URL.into());
    let namespace = std::env::var("WEFT_NAMESPACE").unwrap_or_else(|_| "weft".into());
    let http_addr: SocketAddr = std::env::var("WEFT_HTTP_ADDR")
        .unwrap_or_else(|_| "127.0.0.1:8080".into())
        .parse()
        .context("WEFT_HTTP_ADDR")?;
    let options = EnvOptions {
        shards: match std::env::var("WEFT_SHARDS") {
            Ok(s) => s.parse().context("WEFT_SHARDS")?,
            Err(_) => 16,
        },
        outbox_sweep_after_ms: None,
        extra_env: Vec::new(),
        ..EnvOptions::default()
    };

    if teardown {
        return teardown_namespace(&namespace, options.shards).await;
    }

    println!("weft demo: database {database_url}, namespace {namespace}");
    let env = TestEnv::persistent(&database_url, &namespace, options).await?;
    let mut suite = Suite::with_gateway_addr(env, http_addr)?;
    println!(
        "starting the services (logs in {})",
        suite.log_dir().display()
    );
    for service in Service::ALL {
        suite.spawn(service).await?;
        println!("  {} is up", service.name());
    }

    let result = run_greet(&suite).await;
    if let Err(e) = &result {
        eprintln!(
            "the demo run failed: {e:#}\nprocesses:\n{}",
            suite.describe()
        );
    } else if keep_running {
        println!(
            "\nthe suite is up; gateway at {} (e.g. curl {}/api/workflow/<id>?includeTasks=true)",
            suite.gateway_url(),
            suite.gateway_url()
        );
        println!("press Ctrl-C to stop");
        tokio::signal::ctrl_c().await?;
        println!();
    }

    println!("stopping the services (SIGTERM)");
    for line in suite.stop_all().await? {
        println!("  {line}");
    }
    result
}

/// Deletes the namespace's exchanges and queues (with the example worker's activity queues).
async fn teardown_namespace(namespace: &str, shards: u16) -> anyhow::Result<()> {
    let amqp_url =
        std::env::var("WEFT_AMQP_URL").unwrap_or_else(|_| weft_e2e::env::DEFAULT_AMQP_URL.into());
    let names = weft::topology::Names::new(namespace, shards);
    let queues: Vec<String> = weft_worker_example::TASK_NAMES
        .iter()
        .map(|t| names.activity_queue(t))
        .collect();
    let token = tokio_util::sync::CancellationToken::new();
    let bus = tokio::time::timeout(
        Duration::from_secs(20),
        weft::bus::Bus::connect(&amqp_url, names, token.clone()),
    )
    .await
    .with_context(|| format!("connecting to {amqp_url}: timed out"))??;
    bus.teardown(&queues).await?;
    token.cancel();
    println!("deleted the exchanges and queues of namespace {namespace}");
    Ok(())
}

async fn run_greet(suite: &Suite) -> anyhow::Result<()> {
    let client = suite.client();
    client.register_overwrite(&greet::definition()).await?;
    println!("registered the `greet` definition");
    let input = greet::input("Ada", 3);
    let id = client.start("greet", input.clone()).await?;
    println!("started greet {input} as workflow {id}");

    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut shown = String::new();
    let wf = loop {
        let wf = client.try_get(&id).await?.unwrap_or(Value::Null);
        let line = progress(&wf);
        if line != shown {
            println!("  {line}");
            shown = line;
        }
        match wf["status"].as_str() {
            Some("COMPLETED") => break wf,
            Some(s @ ("FAILED" | "TIMED_OUT" | "TERMINATED")) => {
                anyhow::bail!("workflow {id} ended {s}: {}", wf["reasonForIncompletion"])
            }
            _ => {}
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "workflow {id} did not complete within 60 s; last: {shown}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    println!("output:\n{}", serde_json::to_string_pretty(&wf["output"])?);
    Ok(())
}

/// `RUNNING (RUNNING): n=COMPLETED s=IN_PROGRESS`.
fn progress(wf: &Value) -> String {
    if wf.is_null() {
        return "accepted, not started yet".into();
    }
    let tasks: Vec<String> = wf["tasks"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| {
            format!(
                "{}={}",
                t["referenceTaskName"].as_str().unwrap_or("?"),
                t["status"].as_str().unwrap_or("?")
            )
        })
        .collect();
    format!(
        "{} ({}): {}",
        wf["status"].as_str().unwrap_or("?"),
        wf["subStatus"].as_str().unwrap_or("?"),
        tasks.join(" ")
    )
}
