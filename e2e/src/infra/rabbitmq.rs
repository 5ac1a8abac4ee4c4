//! A private RabbitMQ node: its own node name, ports, data and cookie, started from the
//! machine's installed server (as this user, not through the packaged wrapper that
//! switches to the `rabbitmq` user). Its data directory outlives a kill, so durable
//! queues and persistent messages survive a restart, as on a real broker.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use tokio::process::{Child, Command};

use super::{free_port, signal, spawn_logged, wait_for_port, wait_for_port_closed};

/// The server's start script, beside the packaged wrapper.
const SERVER: &str = "/usr/lib/rabbitmq/bin/rabbitmq-server";
/// Its control tool (clustering).
const CTL: &str = "/usr/lib/rabbitmq/bin/rabbitmqctl";
/// How long a start may take (a boot takes about 6 s on 2 cores).
const START_TIMEOUT: Duration = Duration::from_secs(90);

/// One RabbitMQ node of this program's on 127.0.0.1:`port`, user guest/guest.
#[derive(Debug)]
pub struct RabbitNode {
    name: String,
    dir: PathBuf,
    port: u16,
    dist_port: u16,
    child: Option<Child>,
}

impl RabbitNode {
    /// Starts a node named `name@localhost` with its data under `dir`.
    pub async fn start(dir: &Path, name: &str) -> anyhow::Result<Self> {
        Self::start_with_cookie(dir, name, &format!("WEFT{}", uuid::Uuid::new_v4().simple())).await
    }

    /// Starts a node with the Erlang `cookie` given: nodes that share one can form a
    /// cluster ([`RabbitNode::join`]).
    pub async fn start_with_cookie(dir: &Path, name: &str, cookie: &str) -> anyhow::Result<Self> {
        anyhow::ensure!(
            Path::new(SERVER).exists(),
            "{SERVER} not found (is RabbitMQ installed?)"
        );
        let home = dir.join("home");
        std::fs::create_dir_all(&home)?;
        let cookie_file = home.join(".erlang.cookie");
        if !cookie_file.exists() {
            std::fs::write(&cookie_file, cookie)?;
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&cookie_file, std::fs::Permissions::from_mode(0o400))?;
        }
        std::fs::write(dir.join("enabled_plugins"), "[].")?;
        let mut node = Self {
            name: format!("{name}@localhost"),
            dir: dir.to_owned(),
            port: free_port()?,
            dist_port: free_port()?,
            child: None,
        };
        node.up().await?;
        Ok(node)
    }

    /// Starts `nodes` nodes under `root` (`<root>/rabbitmq-<i>`, named
    /// `<name>-<i>@localhost`, one cookie) and clusters them: the second and later join
    /// the first. One node is started as it is, under `<root>/rabbitmq`, named
    /// `<name>@localhost`.
    pub async fn cluster(root: &Path, name: &str, nodes: usize) -> anyhow::Result<Vec<Self>> {
        if nodes <= 1 {
            return Ok(vec![Self::start(&root.join("rabbitmq"), name).await?]);
        }
        let cookie = format!("WEFT{}", uuid::Uuid::new_v4().simple());
        let starts = (0..nodes).map(|i| {
            let (dir, name) = (root.join(format!("rabbitmq-{i}")), format!("{name}-{i}"));
            let cookie = cookie.clone();
            async move { Self::start_with_cookie(&dir, &name, &cookie).await }
        });
        let started = futures_util::future::try_join_all(starts).await?;
        for joining in &started[1..] {
            joining.join(&started[0]).await?;
        }
        Ok(started)
    }

    /// Makes this node a member of `seed`'s cluster (`stop_app`, `join_cluster`,
    /// `start_app`); both must share their cookie. Its own queues and messages are reset.
    pub async fn join(&self, seed: &RabbitNode) -> anyhow::Result<()> {
        for args in [
            vec!["stop_app"],
            vec!["join_cluster", seed.name.as_str()],
            vec!["start_app"],
        ] {
            self.ctl(&args).await?;
        }
        wait_for_port(self.port, START_TIMEOUT, "RabbitMQ").await
    }

    /// Runs `rabbitmqctl -n <node> args` as this node's user (its cookie).
    async fn ctl(&self, args: &[&str]) -> anyhow::Result<()> {
        let output = Command::new(CTL)
            .env("HOME", self.dir.join("home"))
            .arg("-n")
            .arg(&self.name)
            .args(args)
            .output()
            .await
            .context("running rabbitmqctl")?;
        anyhow::ensure!(
            output.status.success(),
            "rabbitmqctl {args:?} on {}: {}{}",
            self.name,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        Ok(())
    }

    /// Its AMQP URL (default vhost).
    pub fn url(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}/%2f", self.port)
    }

    /// Starts it (again) and waits until it accepts AMQP connections.
    pub async fn up(&mut self) -> anyhow::Result<()> {
        if self.child.is_some() {
            return Ok(());
        }
        let d = |p: &str| self.dir.join(p).display().to_string();
        let mut cmd = Command::new(SERVER);
        cmd.env("HOME", d("home"))
            .env("RABBITMQ_NODENAME", &self.name)
            .env("RABBITMQ_NODE_IP_ADDRESS", "127.0.0.1")
            .env("RABBITMQ_NODE_PORT", self.port.to_string())
            .env("RABBITMQ_DIST_PORT", self.dist_port.to_string())
            .env("RABBITMQ_MNESIA_BASE", d("mnesia"))
            .env("RABBITMQ_LOG_BASE", d("log"))
            .env("RABBITMQ_FEATURE_FLAGS_FILE", d("feature_flags"))
            .env("RABBITMQ_ENABLED_PLUGINS_FILE", d("enabled_plugins"))
            .env("RABBITMQ_CONFIG_FILE", d("rabbitmq"))
            .env("RABBITMQ_ADVANCED_CONFIG_FILE", d("advanced.config"))
            .env("RABBITMQ_PID_FILE", d("pid"));
        let child = spawn_logged(&mut cmd, &self.dir.join("rabbitmq.log"))
            .context("starting rabbitmq-server")?;
        self.child = Some(child);
        wait_for_port(self.port, START_TIMEOUT, "RabbitMQ").await
    }

    /// Kills the node (SIGKILL of its Erlang VM, as a crash) and waits until its port
    /// is closed.
    pub async fn kill(&mut self) -> anyhow::Result<()> {
        if let Some(pid) = self.vm_pid() {
            let _ = signal(pid, "-KILL");
            // A stale pid must never be signalled later: it may be another process's.
            let _ = std::fs::remove_file(self.dir.join("pid"));
        }
        if let Some(mut child) = self.child.take() {
            let _ = child.kill().await;
        }
        wait_for_port_closed(self.port, Duration::from_secs(20)).await;
        Ok(())
    }

    /// The Erlang VM's process id, from the node's pid file.
    fn vm_pid(&self) -> Option<u32> {
        std::fs::read_to_string(self.dir.join("pid"))
            .ok()?
            .trim()
            .parse()
            .ok()
    }
}

impl Drop for RabbitNode {
    fn drop(&mut self) {
        if let Some(pid) = self.vm_pid() {
            let _ = signal(pid, "-KILL");
        }
    }
}
