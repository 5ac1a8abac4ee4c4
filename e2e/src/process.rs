//! One service binary running as a child OS process: spawn with its environment and
//! log file, wait for readiness, SIGKILL, SIGTERM.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use anyhow::Context as _;
use tokio::process::{Child, Command};

/// The programs a suite is made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Service {
    /// `weft-gateway`: REST on `WEFT_HTTP_ADDR`.
    Gateway,
    /// `weft-decider`: the single writer of run state.
    Decider,
    /// `weft-history`: reads, timers, the outbox sweeper.
    History,
    /// `weft-heartbeat`: the registry of running activities.
    Heartbeat,
    /// `weft-worker-example`: `make_name`, `shout`, `count`.
    Worker,
    /// `weft-http-worker`: the built-in worker of Conductor `HTTP` tasks.
    HttpWorker,
    /// `weft dev --example`: every service and the example worker in one process, on
    /// SQLite (a file in the suite's log directory) and the in-process bus.
    Dev,
}

impl Service {
    /// The four services, in start order.
    pub const CORE: [Service; 4] = [
        Service::Gateway,
        Service::Decider,
        Service::History,
        Service::Heartbeat,
    ];

    /// Every program, in start order.
    pub const ALL: [Service; 6] = [
        Service::Gateway,
        Service::Decider,
        Service::History,
        Service::Heartbeat,
        Service::Worker,
        Service::HttpWorker,
    ];

    /// The binary's file name.
    pub fn binary(self) -> &'static str {
        match self {
            Service::Gateway => "weft-gateway",
            Service::Decider => "weft-decider",
            Service::History => "weft-history",
            Service::Heartbeat => "weft-heartbeat",
            Service::Worker => "weft-worker-example",
            Service::HttpWorker => "weft-http-worker",
            Service::Dev => "weft",
        }
    }

    /// Short name, used for log files.
    pub fn name(self) -> &'static str {
        match self {
            Service::Gateway => "gateway",
            Service::Decider => "decider",
            Service::History => "history",
            Service::Heartbeat => "heartbeat",
            Service::Worker => "worker",
            Service::HttpWorker => "http-worker",
            Service::Dev => "weft-dev",
        }
    }

    /// Whether the program answers `/readyz` (on `WEFT_HTTP_ADDR` for the gateway, on
    /// `WEFT_ADMIN_ADDR` for the other services). The workers (example and HTTP) do
    /// not: they are taken as started once they are running.
    pub fn has_readyz(self) -> bool {
        !matches!(self, Service::Worker | Service::HttpWorker)
    }
}

/// The directory holding the service binaries: `WEFT_BIN_DIR`, else the directory of
/// the running executable (`target/<profile>/deps/..` for a test binary).
pub fn bin_dir() -> anyhow::Result<PathBuf> {
    if let Some(dir) = std::env::var_os("WEFT_BIN_DIR") {
        return Ok(PathBuf::from(dir));
    }
    let exe = std::env::current_exe().context("locating the running executable")?;
    let mut dir = exe
        .parent()
        .context("the running executable has no directory")?
        .to_path_buf();
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir.pop();
    }
    Ok(dir)
}

/// The path of `service`'s binary in `dir`, or a clear error when it is missing.
pub fn binary_path(dir: &Path, service: Service) -> anyhow::Result<PathBuf> {
    let path = dir.join(service.binary());
    if !path.is_file() {
        anyhow::bail!(
            "{} not found; build the binaries first: cargo build --workspace --bins \
             (or point WEFT_BIN_DIR at them)",
            path.display()
        );
    }
    Ok(path)
}

/// A spawned child process and what is needed to talk about it.
#[derive(Debug)]
pub struct Proc {
    /// What it runs.
    pub service: Service,
    /// Its stdout and stderr.
    pub log_path: PathBuf,
    /// Where its `/readyz` answers, if anywhere.
    pub ready_url: Option<String>,
    /// The gateway's `WEFT_HTTP_ADDR` or another service's `WEFT_ADMIN_ADDR`.
    pub addr: SocketAddr,
    child: Child,
    pid: Option<u32>,
    exited: Option<ExitStatus>,
}

impl Proc {
    /// Spawns `binary` with `env` (on top of the inherited environment), stdout and
    /// stderr appended to `log_path`. The child is killed if the handle is dropped.
    pub fn spawn(
        service: Service,
        binary: &Path,
        env: &[(String, String)],
        addr: SocketAddr,
        log_path: PathBuf,
    ) -> anyhow::Result<Self> {
        Self::spawn_with_args(service, binary, &[], env, addr, log_path)
    }

    /// [`Proc::spawn`] with command-line arguments.
    pub fn spawn_with_args(
        service: Service,
        binary: &Path,
        args: &[String],
        env: &[(String, String)],
        addr: SocketAddr,
        log_path: PathBuf,
    ) -> anyhow::Result<Self> {
        let log = std::fs::File::create(&log_path)
            .with_context(|| format!("creating {}", log_path.display()))?;
        let mut cmd = Command::new(binary);
        cmd.args(args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true);
        let child = cmd
            .spawn()
            .with_context(|| format!("spawning {}", binary.display()))?;
        let ready_url = service
            .has_readyz()
            .then(|| format!("http://{addr}/readyz"));
        Ok(Self {
            service,
            log_path,
            ready_url,
            addr,
            pid: child.id(),
            child,
            exited: None,
        })
    }

    /// The OS process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.exited.is_none().then_some(self.pid).flatten()
    }

    /// How the process ended, once it has.
    pub fn exit_status(&mut self) -> Option<ExitStatus> {
        self.is_running();
        self.exited
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        if self.exited.is_some() {
            return false;
        }
        match self.child.try_wait() {
            Ok(Some(status)) => {
                self.exited = Some(status);
                false
            }
            Ok(None) => true,
            Err(_) => false,
        }
    }

    /// Waits until `/readyz` answers 200 (or, for a program without one, checks that it
    /// is still running), within `timeout`. The error names the process and its log.
    pub async fn wait_ready(
        &mut self,
        http: &reqwest::Client,
        timeout: Duration,
    ) -> anyhow::Result<()> {
        let Some(url) = self.ready_url.clone() else {
            return match self.is_running() {
                true => Ok(()),
                false => Err(self.failure("exited right after start")),
            };
        };
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if !self.is_running() {
                return Err(self.failure("exited before it became ready"));
            }
            let last = match http.get(&url).timeout(Duration::from_secs(2)).send().await {
                Ok(r) if r.status().is_success() => return Ok(()),
                Ok(r) => format!("{} from {url}", r.status()),
                Err(e) => format!("{e} ({url})"),
            };
            if tokio::time::Instant::now() >= deadline {
                return Err(self.failure(&format!("not ready after {timeout:?}; last: {last}")));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// SIGKILL (`kill -9`), then reaps the process.
    pub async fn kill(&mut self) -> anyhow::Result<ExitStatus> {
        if let Some(status) = self.exited {
            return Ok(status);
        }
        let _ = self.child.start_kill();
        let status = tokio::time::timeout(Duration::from_secs(10), self.child.wait())
            .await
            .map_err(|_| self.failure("did not die within 10 s of SIGKILL"))??;
        self.exited = Some(status);
        Ok(status)
    }

    /// SIGTERM, then waits up to `grace` for the exit; SIGKILL after that (reported as
    /// an error naming the process).
    pub async fn terminate(&mut self, grace: Duration) -> anyhow::Result<ExitStatus> {
        if !self.is_running() {
            return self.exited.context("no exit status");
        }
        if let Some(pid) = self.pid {
            // `kill -TERM` rather than libc: the workspace forbids unsafe code.
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
        }
        match tokio::time::timeout(grace, self.child.wait()).await {
            Ok(status) => {
                let status = status?;
                self.exited = Some(status);
                Ok(status)
            }
            Err(_) => {
                self.kill().await?;
                Err(self.failure(&format!("ignored SIGTERM for {grace:?}; killed")))
            }
        }
    }

    /// SIGKILL without waiting (for `Drop`).
    pub fn start_kill(&mut self) {
        if self.exited.is_none() {
            let _ = self.child.start_kill();
        }
    }

    /// An error naming the process, its log file and the log's last lines.
    pub fn failure(&self, what: &str) -> anyhow::Error {
        let status = self.exited.map(|s| format!(" ({s})")).unwrap_or_default();
        anyhow::anyhow!(
            "{} (pid {}) {what}{status}; log: {}\n--- last lines of the log ---\n{}",
            self.service.binary(),
            self.pid.map_or("-".into(), |p| p.to_string()),
            self.log_path.display(),
            tail(&self.log_path, 30)
        )
    }
}

/// The last `n` lines of the file at `path` (or why it cannot be read).
pub fn tail(path: &Path, n: usize) -> String {
    match std::fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(n)..].join("\n")
        }
        Err(e) => format!("<cannot read {}: {e}>", path.display()),
    }
}
