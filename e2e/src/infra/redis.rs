//! A private Redis: `redis-server` on a port of its own, keeping nothing on disk (as the
//! machine's does), stopped and started again at will.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use tokio::process::{Child, Command};

use super::{free_port, spawn_logged, wait_for_port};

/// A `redis-server` child process on 127.0.0.1:`port`.
#[derive(Debug)]
pub struct RedisServer {
    port: u16,
    log: PathBuf,
    child: Option<Child>,
}

impl RedisServer {
    /// Starts one on a free port, its output in `dir/redis.log`.
    pub async fn start(dir: &Path) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let mut server = Self {
            port: free_port()?,
            log: dir.join("redis.log"),
            child: None,
        };
        server.up().await?;
        Ok(server)
    }

    /// Its URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Starts it again (empty: it keeps nothing) if it is down.
    pub async fn up(&mut self) -> anyhow::Result<()> {
        if self.child.is_some() {
            return Ok(());
        }
        let mut cmd = Command::new("redis-server");
        cmd.args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"]);
        let child = spawn_logged(&mut cmd, &self.log).context("starting redis-server")?;
        self.child = Some(child);
        wait_for_port(self.port, Duration::from_secs(20), "Redis").await
    }

    /// Kills it (SIGKILL) and reaps it.
    pub async fn down(&mut self) -> anyhow::Result<()> {
        if let Some(mut child) = self.child.take() {
            child.kill().await?;
        }
        Ok(())
    }
}
