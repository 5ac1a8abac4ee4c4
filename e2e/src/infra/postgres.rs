//! A private PostgreSQL cluster: `initdb` into a directory of its own, `pg_ctl` to
//! start, crash (immediate stop) and restart it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;

use super::{free_port, is_root, run, wait_for_port};

/// How long a start may take (crash recovery included).
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// A PostgreSQL cluster of this program's, on 127.0.0.1:`port`, trust authentication.
#[derive(Debug)]
pub struct PgServer {
    bin: PathBuf,
    data: PathBuf,
    dir: PathBuf,
    port: u16,
    as_postgres: bool,
    /// Settings beyond the common ones (`-c name=value …`).
    settings: &'static str,
}

impl PgServer {
    /// Makes a cluster under `dir` (created) and starts it on a free port.
    pub async fn start(dir: &Path) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let bin = bin_dir().await?;
        let as_postgres = is_root();
        give_to_postgres(dir, as_postgres).await?;
        let server = Self {
            bin,
            data: dir.join("data"),
            dir: dir.to_owned(),
            port: free_port()?,
            as_postgres,
            settings: "",
        };
        let data = server.data.display().to_string();
        server
            .pg(
                "initdb",
                &[
                    "-D",
                    &data,
                    "-A",
                    "trust",
                    "-U",
                    "postgres",
                    "-E",
                    "UTF8",
                    "--no-sync",
                ],
                "initdb.log",
            )
            .await?;
        server.up().await?;
        Ok(server)
    }

    /// A streaming replica of `primary` under `dir` (created), on a free port: a base
    /// backup of it (`pg_basebackup -R`, which also writes the standby's connection to
    /// the primary) started as a hot standby that logs every statement.
    pub async fn replica_of(primary: &PgServer, dir: &Path) -> anyhow::Result<Self> {
        // Every statement in its log: what a test reads to tell which reads went to it.
        Self::replica_with(primary, dir, "-c log_statement=all").await
    }

    /// [`PgServer::replica_of`] logging as the primary does (for long runs).
    pub async fn quiet_replica_of(primary: &PgServer, dir: &Path) -> anyhow::Result<Self> {
        Self::replica_with(primary, dir, "").await
    }

    async fn replica_with(
        primary: &PgServer,
        dir: &Path,
        settings: &'static str,
    ) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        give_to_postgres(dir, primary.as_postgres).await?;
        let replica = Self {
            bin: primary.bin.clone(),
            data: dir.join("data"),
            dir: dir.to_owned(),
            port: free_port()?,
            as_postgres: primary.as_postgres,
            settings,
        };
        let (data, port) = (replica.data.display().to_string(), primary.port.to_string());
        replica
            .pg(
                "pg_basebackup",
                &[
                    "-h",
                    "127.0.0.1",
                    "-p",
                    &port,
                    "-U",
                    "postgres",
                    "-D",
                    &data,
                    "-R",
                    "-X",
                    "stream",
                    "--no-sync",
                ],
                "basebackup.log",
            )
            .await?;
        replica.up().await?;
        Ok(replica)
    }

    /// The server's log so far (a replica's logs every statement).
    pub fn log(&self) -> anyhow::Result<String> {
        let path = self.dir.join("postgres.log");
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))
    }

    /// The URL of `database` on this server.
    pub fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    /// Stops it as a crash would (`pg_ctl stop -m immediate`: no checkpoint, recovery
    /// at the next start).
    pub async fn crash(&self) -> anyhow::Result<()> {
        let data = self.data.display().to_string();
        self.pg(
            "pg_ctl",
            &["-D", &data, "-m", "immediate", "stop"],
            "stop.log",
        )
        .await
    }

    /// Stops it cleanly (`pg_ctl stop -m fast`).
    pub async fn stop(&self) -> anyhow::Result<()> {
        let data = self.data.display().to_string();
        self.pg("pg_ctl", &["-D", &data, "-m", "fast", "stop"], "stop.log")
            .await
    }

    /// Starts it (again) on its port and waits until it accepts connections.
    pub async fn up(&self) -> anyhow::Result<()> {
        let data = self.data.display().to_string();
        let log = self.dir.join("postgres.log").display().to_string();
        let options = format!(
            "-p {} -c listen_addresses=127.0.0.1 -c unix_socket_directories='' \
             -c max_connections=400 -c shared_buffers=128MB {}",
            self.port, self.settings
        );
        let timeout = START_TIMEOUT.as_secs().to_string();
        self.pg(
            "pg_ctl",
            &[
                "-D", &data, "-l", &log, "-w", "-t", &timeout, "-o", &options, "start",
            ],
            "start.log",
        )
        .await?;
        wait_for_port(self.port, START_TIMEOUT, "PostgreSQL").await
    }

    /// Runs one of PostgreSQL's programs, as its user when this process is root.
    async fn pg(&self, program: &str, args: &[&str], log: &str) -> anyhow::Result<()> {
        let path = self.bin.join(program).display().to_string();
        let log = self.dir.join(log);
        match self.as_postgres {
            true => {
                let mut all = vec!["-u", "postgres", "--", path.as_str()];
                all.extend_from_slice(args);
                run("runuser", &all, &log).await
            }
            false => run(&path, args, &log).await,
        }
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        // Nothing may outlive the program: an immediate stop, without waiting on it.
        let data = self.data.display().to_string();
        let pg_ctl = self.bin.join("pg_ctl").display().to_string();
        let mut cmd = match self.as_postgres {
            true => {
                let mut c = std::process::Command::new("runuser");
                c.args(["-u", "postgres", "--", &pg_ctl]);
                c
            }
            false => std::process::Command::new(&pg_ctl),
        };
        let _ = cmd
            .args(["-D", &data, "-m", "immediate", "stop"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
    }
}

/// Makes `dir` the `postgres` user's when the server runs as that user: PostgreSQL
/// refuses to run as root, and its directory must be its user's.
async fn give_to_postgres(dir: &Path, as_postgres: bool) -> anyhow::Result<()> {
    if !as_postgres {
        return Ok(());
    }
    run(
        "chown",
        &["postgres:", &dir.display().to_string()],
        &dir.join("chown.log"),
    )
    .await
}

/// Where PostgreSQL's server programs are (`pg_config --bindir`).
async fn bin_dir() -> anyhow::Result<PathBuf> {
    let out = tokio::process::Command::new("pg_config")
        .arg("--bindir")
        .output()
        .await
        .context("running pg_config (is PostgreSQL installed?)")?;
    let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    anyhow::ensure!(
        dir.join("initdb").exists(),
        "no initdb in {} (pg_config --bindir)",
        dir.display()
    );
    Ok(dir)
}
