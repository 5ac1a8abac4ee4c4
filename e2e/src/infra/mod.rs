//! Private instances of PostgreSQL, Redis and RabbitMQ, each on its own port and data
//! directory, owned by the program that starts them: what the chaos soak restarts and
//! kills without touching the machine's shared servers (which other tests use).
//!
//! Each is started from the machine's installed binaries. Running as root, PostgreSQL
//! (which refuses root) is run as the `postgres` user through `runuser`.

mod postgres;
mod rabbitmq;
mod redis;

use std::path::Path;
use std::time::{Duration, Instant};

pub use postgres::PgServer;
pub use rabbitmq::RabbitNode;
pub use redis::RedisServer;

/// PostgreSQL, Redis and RabbitMQ of a program's own, under one directory.
pub struct Servers {
    pub pg: PgServer,
    pub redis: RedisServer,
    /// One RabbitMQ node, or the nodes of a cluster (the first is the one the others
    /// joined).
    pub rabbits: Vec<RabbitNode>,
}

impl Servers {
    /// Starts the three (at once) under `root`; the RabbitMQ node is named
    /// `<node>@localhost`.
    pub async fn start(root: &Path, node: &str) -> anyhow::Result<Self> {
        Self::start_with(root, node, 1).await
    }

    /// [`Servers::start`] with `rabbit_nodes` RabbitMQ nodes (`<node>-<i>@localhost`,
    /// one cookie) clustered when more than one: the second and later join the first.
    pub async fn start_with(root: &Path, node: &str, rabbit_nodes: usize) -> anyhow::Result<Self> {
        let (pg_dir, redis_dir) = (root.join("postgres"), root.join("redis"));
        let (pg, redis, rabbits) = tokio::try_join!(
            PgServer::start(&pg_dir),
            RedisServer::start(&redis_dir),
            RabbitNode::cluster(root, node, rabbit_nodes),
        )?;
        Ok(Self { pg, redis, rabbits })
    }

    /// The AMQP URLs of every RabbitMQ node, comma-separated (`WEFT_AMQP_URL`'s list).
    pub fn amqp_urls(&self) -> String {
        self.rabbits
            .iter()
            .map(RabbitNode::url)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Starts a streaming replica of the PostgreSQL server under `dir` and points the
    /// gateways of `env` at it for the reads that may lag (`WEFT_DATABASE_READ_URL`);
    /// keep it as long as the processes run.
    pub async fn read_replica_for(
        &self,
        dir: &Path,
        env: &mut crate::TestEnv,
    ) -> anyhow::Result<PgServer> {
        let replica = PgServer::quiet_replica_of(&self.pg, dir).await?;
        let db = env.database_url.rsplit('/').next().unwrap_or_default();
        let url = replica.url(db);
        env.options
            .extra_env
            .push(("WEFT_DATABASE_READ_URL".into(), url));
        Ok(replica)
    }

    /// A test environment on them: a fresh database and namespace, every process told
    /// where Redis is and every RabbitMQ node (and `extra_env` besides).
    pub async fn env(&self, mut options: crate::EnvOptions) -> anyhow::Result<crate::TestEnv> {
        options
            .extra_env
            .push(("WEFT_REDIS_URL".into(), self.redis.url()));
        crate::TestEnv::create_on(options, &self.pg.url("postgres"), &self.amqp_urls()).await
    }
}

/// The cluster shape: `replicas` each of the gateway (each on its own address, as
/// behind a load balancer), the decider, history, heartbeat, example worker and HTTP
/// worker.
pub fn cluster_shape(replicas: usize) -> Vec<crate::Service> {
    crate::Service::ALL
        .iter()
        .flat_map(|&service| std::iter::repeat_n(service, replicas))
        .collect()
}

/// A port free on 127.0.0.1 at the moment of asking.
fn free_port() -> anyhow::Result<u16> {
    Ok(crate::suite::free_port()?.port())
}

/// Whether 127.0.0.1:`port` accepts a connection within 200 ms.
async fn accepts(port: u16) -> bool {
    let connect = tokio::net::TcpStream::connect(("127.0.0.1", port));
    matches!(
        tokio::time::timeout(Duration::from_millis(200), connect).await,
        Ok(Ok(_))
    )
}

/// Waits until 127.0.0.1:`port` accepts connections, for at most `timeout`.
async fn wait_for_port(port: u16, timeout: Duration, what: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    while !accepts(port).await {
        anyhow::ensure!(
            Instant::now() < deadline,
            "{what} did not listen on port {port} within {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// Waits until nothing listens on 127.0.0.1:`port` any more, for at most `timeout`.
async fn wait_for_port_closed(port: u16, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline && accepts(port).await {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Runs `program` with `args` to completion; fails with its output when it fails.
async fn run(program: &str, args: &[&str], log: &Path) -> anyhow::Result<()> {
    let out = tokio::process::Command::new(program)
        .args(args)
        .output()
        .await
        .map_err(|e| anyhow::anyhow!("running {program}: {e}"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::write(log, &text);
    anyhow::ensure!(
        out.status.success(),
        "{program} {} failed ({}): {}",
        args.join(" "),
        out.status,
        text.trim()
    );
    Ok(())
}

/// Spawns `cmd` with its output appended to `log`, killed if its handle is dropped.
fn spawn_logged(
    cmd: &mut tokio::process::Command,
    log: &Path,
) -> anyhow::Result<tokio::process::Child> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(|e| anyhow::anyhow!("opening {}: {e}", log.display()))?;
    cmd.stdin(std::process::Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .kill_on_drop(true);
    cmd.spawn()
        .map_err(|e| anyhow::anyhow!("spawning {:?}: {e}", cmd.as_std().get_program()))
}

/// Whether this process runs as root (`id -u` is 0).
fn is_root() -> bool {
    std::process::Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// Sends `signal` (e.g. `-KILL`, `-TERM`, `-STOP`, `-CONT`) to process `pid`.
pub fn signal(pid: u32, signal: &str) -> anyhow::Result<()> {
    let status = std::process::Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()?;
    anyhow::ensure!(status.success(), "kill {signal} {pid} failed");
    Ok(())
}
