//! `weft dev`: the whole suite in this one process, with nothing installed.
//!
//! The gateway, the decider, the history service, the heartbeat service and the HTTP
//! worker run here as they do in their own binaries, on a [`Backing::Provided`]: the
//! SQLite store (a file under the data directory, or in memory), the in-process bus
//! (journaled in the same file, so an unacknowledged message survives a restart) and the
//! in-memory caches. No service knows it runs in dev mode (docs/dev-mode.md); the one
//! setting dev mode changes is the outbound allow-list, which allows this machine
//! (`127.0.0.0/8,::1,localhost`) when `WEFT_OUTBOUND_ALLOW` is unset.

mod examples;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use weft::bus::Bus;
use weft::registry::Cache;
use weft::runtime::{Backing, Provided};
use weft::store::graph_cache::GraphCache;
use weft::store::sqlite::SqliteStore;
use weft::store::Store;
use weft::Config;

/// How long the gateway may take to answer `/readyz` after start.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// Where `weft dev` keeps its data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Database {
    /// A SQLite file, kept across restarts.
    File(PathBuf),
    /// In memory: gone when the process ends.
    Memory,
}

impl Database {
    /// From `--db` (a path, or `:memory:`) and `--data-dir` (where the default file,
    /// `weft.db`, lives).
    pub fn from_args(db: Option<&str>, data_dir: &Path) -> Self {
        match db {
            Some(":memory:") => Database::Memory,
            Some(path) => Database::File(PathBuf::from(path)),
            None => Database::File(data_dir.join("weft.db")),
        }
    }

    fn url(&self) -> String {
        match self {
            Database::File(path) => format!("sqlite://{}", path.display()),
            Database::Memory => "sqlite::memory:".to_owned(),
        }
    }

    /// For the banner.
    pub fn describe(&self) -> String {
        match self {
            Database::File(path) => format!("{} (SQLite, kept across restarts)", path.display()),
            Database::Memory => "in memory (SQLite, gone at exit)".to_owned(),
        }
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// The store.
    pub database: Database,
    /// Where the gateway (REST API, web UI, health, metrics) listens.
    pub addr: SocketAddr,
    /// Also register the example workflows and run their worker here.
    pub examples: bool,
    /// The rest of the configuration (`WEFT_*` from the environment, defaults otherwise).
    pub config: Config,
}

/// Why `weft dev` could not start or ended badly.
#[derive(Debug, thiserror::Error)]
pub enum DevError {
    /// The data directory cannot be created.
    #[error("cannot create the data directory {path}: {source}")]
    DataDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The store, the bus or a service failed.
    #[error("{0}")]
    Weft(#[from] weft::Error),
    /// The gateway failed (e.g. its address is in use).
    #[error("{0}")]
    Gateway(#[from] weft_gateway::Error),
    /// The gateway did not become ready.
    #[error("the gateway at {addr} did not become ready within {timeout:?}")]
    NotReady {
        /// Its address.
        addr: SocketAddr,
        /// How long it was given.
        timeout: Duration,
    },
    /// A service ended on its own (or panicked).
    #[error("{name}: {reason}")]
    Service {
        /// Which.
        name: &'static str,
        /// How it ended.
        reason: String,
    },
    /// Registering an example workflow failed.
    #[error("registering the example workflow {name}: {reason}")]
    Example {
        /// The workflow.
        name: String,
        /// Why.
        reason: String,
    },
}

/// A running `weft dev`.
#[derive(Debug)]
pub struct Dev {
    services: JoinSet<(&'static str, Result<(), DevError>)>,
    store: SqliteStore,
    bus: Bus,
    shutdown: CancellationToken,
    /// The gateway's base URL.
    pub url: String,
}

impl Dev {
    /// Opens the store and the bus, starts every service (and the examples), and waits
    /// until the gateway is ready. Everything stops when `shutdown` is cancelled.
    pub async fn start(options: Options, shutdown: CancellationToken) -> Result<Self, DevError> {
        let mut config = options.config;
        // A local tool calls local services: unless WEFT_OUTBOUND_ALLOW says otherwise,
        // HTTP tasks and hooks may reach this machine (docs/outbound.md).
        config
            .outbound_allow
            .get_or_insert_with(weft::outbound::AllowList::loopback);
        config.http_addr = options.addr;
        config.database_url = options.database.url();
        if let Database::File(path) = &options.database {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).map_err(|source| DevError::DataDir {
                    path: dir.to_owned(),
                    source,
                })?;
            }
        }
        let sqlite = SqliteStore::open(&config.database_url).await?;
        let names = config.names();
        // A database in memory dies with the process: journaling the bus there would
        // only cost writes.
        let journal = match options.database {
            Database::File(_) => Some(sqlite.writer().clone()),
            Database::Memory => None,
        };
        let bus = Bus::in_process(names, journal).await?;
        let store = Store::new(sqlite.clone());
        if options.examples {
            examples::register(&store).await?;
        }
        let backing = Backing::Provided(Provided {
            store,
            bus: bus.clone(),
            cache: Cache::in_memory(),
            graphs: GraphCache::in_memory(),
            metrics: weft::admin::Metrics::new(),
        });

        let mut services = JoinSet::new();
        let run = |name: &'static str| (name, backing.clone(), config.clone(), shutdown.clone());
        let (n, b, c, s) = run("gateway");
        services.spawn(async move { (n, weft_gateway::run_on(b, c, s).await.map_err(Into::into)) });
        let (n, b, c, s) = run("decider");
        services.spawn(async move { (n, weft_decider::run_on(b, c, s).await.map_err(Into::into)) });
        let (n, b, c, s) = run("history");
        services.spawn(async move { (n, weft_history::run_on(b, c, s).await.map_err(Into::into)) });
        let (n, b, c, s) = run("heartbeat");
        services
            .spawn(async move { (n, weft_heartbeat::run_on(b, c, s).await.map_err(Into::into)) });
        let (n, b, c, s) = run("http-worker");
        services.spawn(async move {
            (
                n,
                weft_http_worker::run_on(b, c, s).await.map_err(Into::into),
            )
        });
        if options.examples {
            let worker = examples::worker(&config);
            let (bus, stop) = (bus.clone(), shutdown.clone());
            services.spawn(async move {
                (
                    "example worker",
                    worker.run_on(bus, stop).await.map_err(Into::into),
                )
            });
        }

        let url = format!("http://{}", options.addr);
        let mut dev = Self {
            services,
            store: sqlite,
            bus,
            shutdown,
            url,
        };
        dev.wait_ready(options.addr).await?;
        Ok(dev)
    }

    /// The in-process bus: a worker embedded in this process takes its activities
    /// from it ([`weft::worker::Worker::run_on`]).
    pub fn bus(&self) -> &Bus {
        &self.bus
    }

    /// The SQLite store every service of this process writes: an embedding program (or
    /// a test) may read it, and inspect it with SQL through its pool.
    pub fn store(&self) -> &SqliteStore {
        &self.store
    }

    /// Polls `/readyz` until the gateway answers 200; fails at once when a service ends.
    async fn wait_ready(&mut self, addr: SocketAddr) -> Result<(), DevError> {
        let http = reqwest::Client::new();
        let url = format!("{}/readyz", self.url);
        let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(ended) = self.services.try_join_next() {
                self.shutdown.cancel();
                return Err(ended_early(ended));
            }
            // Bounded: whatever holds the address may accept and never answer.
            let ready = http.get(&url).timeout(Duration::from_secs(1)).send().await;
            if matches!(&ready, Ok(r) if r.status().is_success()) {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                self.shutdown.cancel();
                return Err(DevError::NotReady {
                    addr,
                    timeout: READY_TIMEOUT,
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Runs until shutdown: every service finishes its in-flight work, then the
    /// database is closed (checkpointing its write-ahead log). The first service
    /// failure, if any, is the result; a service that fails stops the others.
    pub async fn wait(mut self) -> Result<(), DevError> {
        let mut first_error = None;
        while let Some(ended) = self.services.join_next().await {
            let failure = match ended {
                Ok((_, Ok(()))) => None,
                Ok((name, Err(e))) => Some(DevError::Service {
                    name,
                    reason: e.to_string(),
                }),
                Err(join) => Some(DevError::Service {
                    name: "a service",
                    reason: format!("panicked or was aborted: {join}"),
                }),
            };
            if let Some(failure) = failure {
                tracing::error!(error = %failure, "weft dev: a service ended; stopping the others");
                self.shutdown.cancel();
                first_error.get_or_insert(failure);
            }
        }
        // Acknowledgements reach the journal in the background: write the last ones, so
        // that a clean stop redelivers nothing at the next start.
        if let Err(e) = self.bus.flush().await {
            tracing::warn!(error = %e, "the bus journal could not be flushed; some handled messages will be delivered again at the next start");
        }
        self.store.close().await;
        match first_error {
            None => Ok(()),
            Some(e) => Err(e),
        }
    }
}

fn ended_early(
    ended: Result<(&'static str, Result<(), DevError>), tokio::task::JoinError>,
) -> DevError {
    match ended {
        Ok((_, Err(e))) => e,
        Ok((name, Ok(()))) => DevError::Service {
            name,
            reason: "stopped during start-up".into(),
        },
        Err(join) => DevError::Service {
            name: "a service",
            reason: format!("panicked during start-up: {join}"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_database_is_a_file_in_the_data_dir_unless_db_says_otherwise() {
        let dir = Path::new("/tmp/w");
        assert_eq!(
            Database::from_args(None, dir),
            Database::File(PathBuf::from("/tmp/w/weft.db"))
        );
        assert_eq!(
            Database::from_args(Some("other.db"), dir),
            Database::File(PathBuf::from("other.db"))
        );
        assert_eq!(Database::from_args(Some(":memory:"), dir), Database::Memory);
        assert_eq!(Database::Memory.url(), "sqlite::memory:");
        assert_eq!(
            Database::File(PathBuf::from("/tmp/w/weft.db")).url(),
            "sqlite:///tmp/w/weft.db"
        );
    }
}
