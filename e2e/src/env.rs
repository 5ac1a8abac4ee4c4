//! One isolated environment: a PostgreSQL database, a RabbitMQ namespace and the
//! settings every process of a suite is started with.
//!
//! A test environment ([`TestEnv::new`]) is private to one test: a fresh database
//! `e2e_<random>` and a random namespace, both removed on cleanup (also when the test
//! panics). A persistent one ([`TestEnv::persistent`], used by the demo) is left as is.

use std::io::Write as _;
use std::time::Duration;

use anyhow::Context as _;
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::Connection as _;
use tokio_util::sync::CancellationToken;

/// The PostgreSQL server's maintenance database, where test databases are created.
pub const DEFAULT_MAINTENANCE_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";
/// RabbitMQ, unless `WEFT_AMQP_URL` says otherwise.
pub const DEFAULT_AMQP_URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

/// Knobs of a test environment.
#[derive(Debug, Clone)]
pub struct EnvOptions {
    /// Number of command shards (`WEFT_SHARDS`).
    pub shards: u16,
    /// History's outbox re-publish age (`WEFT_OUTBOX_SWEEP_AFTER_MS`); `None` keeps
    /// the service default.
    pub outbox_sweep_after_ms: Option<u64>,
    /// Extra environment variables for every process.
    pub extra_env: Vec<(String, String)>,
    /// The type of the namespace's queues (`WEFT_QUEUE_TYPE` of every process).
    pub queue_type: weft::topology::QueueType,
}

impl Default for EnvOptions {
    fn default() -> Self {
        Self {
            shards: 16,
            // Short, so a run whose publish was lost in a crash resumes quickly.
            outbox_sweep_after_ms: Some(500),
            extra_env: Vec::new(),
            queue_type: weft::topology::QueueType::Classic,
        }
    }
}

/// A database, a namespace and the settings of every process started in them.
#[derive(Debug)]
pub struct TestEnv {
    /// Prefix of every exchange and queue (`WEFT_NAMESPACE`).
    pub namespace: String,
    /// The environment's database (`WEFT_DATABASE_URL`).
    pub database_url: String,
    /// The broker (`WEFT_AMQP_URL`).
    pub amqp_url: String,
    /// Options the environment was made with.
    pub options: EnvOptions,
    /// Activity queues to delete on cleanup besides the core topology.
    pub activity_queues: Vec<String>,
    db_name: String,
    maintenance_url: String,
    pool: PgPool,
    /// Whether cleanup drops the database and the namespace's queues.
    owned: bool,
    cleaned: bool,
}

impl TestEnv {
    /// A fresh database and namespace with default options.
    pub async fn new() -> anyhow::Result<Self> {
        Self::create(EnvOptions::default()).await
    }

    /// A fresh database `e2e_<random>` and a random namespace.
    pub async fn create(options: EnvOptions) -> anyhow::Result<Self> {
        let maintenance_url =
            std::env::var("WEFT_E2E_PG_URL").unwrap_or_else(|_| DEFAULT_MAINTENANCE_URL.to_owned());
        let amqp_url = std::env::var("WEFT_AMQP_URL").unwrap_or_else(|_| DEFAULT_AMQP_URL.into());
        Self::create_on(options, &maintenance_url, &amqp_url).await
    }

    /// [`TestEnv::create`] on the broker(s) at `amqp_url` (e.g. a cluster a test started),
    /// the database on the usual server.
    pub async fn create_with_broker(options: EnvOptions, amqp_url: &str) -> anyhow::Result<Self> {
        let maintenance_url =
            std::env::var("WEFT_E2E_PG_URL").unwrap_or_else(|_| DEFAULT_MAINTENANCE_URL.to_owned());
        Self::create_on(options, &maintenance_url, amqp_url).await
    }

    /// A fresh database `e2e_<random>` on the server of `maintenance_url` and a random
    /// namespace on the broker at `amqp_url` (e.g. servers a program started itself).
    pub async fn create_on(
        options: EnvOptions,
        maintenance_url: &str,
        amqp_url: &str,
    ) -> anyhow::Result<Self> {
        let maintenance_url = maintenance_url.to_owned();
        let suffix = uuid::Uuid::new_v4().simple().to_string()[..12].to_owned();
        let db_name = format!("e2e_{suffix}");
        let namespace = format!("e2e_{suffix}");
        let mut admin = sqlx::PgConnection::connect(&maintenance_url)
            .await
            .with_context(|| format!("connecting to PostgreSQL at {maintenance_url}"))?;
        sqlx::query(&format!("CREATE DATABASE {db_name}"))
            .execute(&mut admin)
            .await
            .with_context(|| format!("CREATE DATABASE {db_name}"))?;
        let _ = admin.close().await;
        let database_url = with_database(&maintenance_url, &db_name);
        let mut env = Self::assemble(
            namespace,
            database_url,
            db_name,
            maintenance_url,
            options,
            true,
        )
        .await?;
        env.amqp_url = amqp_url.to_owned();
        Ok(env)
    }

    /// The environment at `database_url` (created when missing, never dropped) under
    /// `namespace` (never torn down): what the demo runs in.
    pub async fn persistent(
        database_url: &str,
        namespace: &str,
        options: EnvOptions,
    ) -> anyhow::Result<Self> {
        let (maintenance_url, db_name) = split_database(database_url)?;
        let mut admin = sqlx::PgConnection::connect(&maintenance_url)
            .await
            .with_context(|| format!("connecting to PostgreSQL at {maintenance_url}"))?;
        let exists: Option<i32> =
            sqlx::query_scalar("SELECT 1 FROM pg_database WHERE datname = $1")
                .bind(&db_name)
                .fetch_optional(&mut admin)
                .await?;
        if exists.is_none() {
            sqlx::query(&format!(
                "CREATE DATABASE \"{}\"",
                db_name.replace('"', "\"\"")
            ))
            .execute(&mut admin)
            .await
            .with_context(|| format!("CREATE DATABASE {db_name}"))?;
        }
        let _ = admin.close().await;
        Self::assemble(
            namespace.to_owned(),
            database_url.to_owned(),
            db_name,
            maintenance_url,
            options,
            false,
        )
        .await
    }

    async fn assemble(
        namespace: String,
        database_url: String,
        db_name: String,
        maintenance_url: String,
        options: EnvOptions,
        owned: bool,
    ) -> anyhow::Result<Self> {
        let pool = PgPoolOptions::new()
            .max_connections(4)
            .connect(&database_url)
            .await
            .with_context(|| format!("connecting to {database_url}"))?;
        let names = weft::topology::Names::new(&namespace, options.shards)
            .with_queue_type(options.queue_type);
        // Every queue the example worker declares (`greet`'s and its test activity).
        let activity_queues = weft_worker_example::TASK_NAMES
            .iter()
            .map(|t| names.activity_queue(t))
            .collect();
        Ok(Self {
            namespace,
            database_url,
            amqp_url: std::env::var("WEFT_AMQP_URL").unwrap_or_else(|_| DEFAULT_AMQP_URL.into()),
            options,
            activity_queues,
            db_name,
            maintenance_url,
            pool,
            owned,
            cleaned: false,
        })
    }

    /// A small connection pool on the environment's database, for assertions in SQL.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The database's name.
    pub fn database_name(&self) -> &str {
        &self.db_name
    }

    /// The namespace's exchange and queue names.
    pub fn names(&self) -> weft::topology::Names {
        weft::topology::Names::new(&self.namespace, self.options.shards)
            .with_queue_type(self.options.queue_type)
    }

    /// Deletes the namespace's exchanges and queues and drops the database (a test
    /// environment only; a persistent one is left alone). Also done on drop.
    pub async fn cleanup(mut self) -> anyhow::Result<()> {
        self.cleaned = true;
        if !self.owned || keep_requested(&self.db_name) {
            return Ok(());
        }
        self.pool.close().await;
        let (names, amqp, queues) = self.teardown_args();
        teardown(&amqp, names, &queues, &self.maintenance_url, &self.db_name).await
    }

    fn teardown_args(&self) -> (weft::topology::Names, String, Vec<String>) {
        (
            self.names(),
            self.amqp_url.clone(),
            self.activity_queues.clone(),
        )
    }
}

impl Drop for TestEnv {
    fn drop(&mut self) {
        if self.cleaned || !self.owned || keep_requested(&self.db_name) {
            return;
        }
        // Drop cannot await: clean up on a thread with its own runtime, so this works
        // inside or outside a runtime, and while a failed test unwinds.
        let (names, amqp, queues) = self.teardown_args();
        let (maintenance, db) = (self.maintenance_url.clone(), self.db_name.clone());
        let worker = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(teardown(&amqp, names, &queues, &maintenance, &db))
        });
        // Straight to stderr: the test harness captures `eprintln!` of passing tests.
        let mut stderr = std::io::stderr();
        let _ = match worker.join() {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => writeln!(stderr, "e2e cleanup of {}: {e:#}", self.db_name),
            Err(_) => writeln!(stderr, "e2e cleanup of {} panicked", self.db_name),
        };
    }
}

/// `WEFT_E2E_KEEP=1` keeps databases and queues for a post-mortem.
fn keep_requested(db: &str) -> bool {
    let keep = std::env::var_os("WEFT_E2E_KEEP").is_some_and(|v| !v.is_empty() && v != "0");
    if keep {
        eprintln!("e2e: WEFT_E2E_KEEP set, keeping database {db} and its namespace");
    }
    keep
}

async fn teardown(
    amqp_url: &str,
    names: weft::topology::Names,
    queues: &[String],
    maintenance_url: &str,
    db: &str,
) -> anyhow::Result<()> {
    let namespace = names.namespace().to_owned();
    // The activity queues the services declared for the tasks the test's runs scheduled
    // (tasks nobody serves, a definition's own task names): the bus's teardown knows only
    // the core topology and the queues the test named.
    let mut queues = queues.to_vec();
    for queue in scheduled_activity_queues(&names, &with_database(maintenance_url, db)).await {
        if !queues.contains(&queue) {
            queues.push(queue);
        }
    }
    let token = CancellationToken::new();
    let bus_result = tokio::time::timeout(Duration::from_secs(20), async {
        let bus = weft::bus::Bus::connect(amqp_url, names, token.clone()).await?;
        bus.teardown(&queues).await
    })
    .await;
    token.cancel();
    let mut admin = sqlx::PgConnection::connect(maintenance_url).await?;
    sqlx::query(&format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"))
        .execute(&mut admin)
        .await
        .with_context(|| format!("DROP DATABASE {db}"))?;
    let _ = admin.close().await;
    match bus_result {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(anyhow::anyhow!("tearing down namespace {namespace}: {e}")),
        Err(_) => Err(anyhow::anyhow!(
            "tearing down namespace {namespace}: timed out"
        )),
    }
}

/// The activity queue of each task (name and domain) that a run of the database at `url`
/// scheduled; none when it cannot be read (never migrated, a `weft dev` environment).
async fn scheduled_activity_queues(names: &weft::topology::Names, url: &str) -> Vec<String> {
    let Ok(mut conn) = sqlx::PgConnection::connect(url).await else {
        return Vec::new();
    };
    let tasks: Vec<(String, Option<String>)> =
        sqlx::query_as("SELECT DISTINCT task_name, domain FROM tasks")
            .fetch_all(&mut conn)
            .await
            .unwrap_or_default();
    let _ = conn.close().await;
    tasks
        .iter()
        .map(|(name, domain)| {
            names.activity_queue(&weft::topology::activity_key(name, domain.as_deref()))
        })
        .collect()
}

/// `url` with its database name replaced by `db`.
pub fn with_database(url: &str, db: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let root = match base.rfind('/') {
        Some(i) if base[..i].ends_with('/') => base, // `scheme://host` with no path
        Some(i) => &base[..i],
        None => base,
    };
    match query {
        Some(q) => format!("{root}/{db}?{q}"),
        None => format!("{root}/{db}"),
    }
}

/// Splits a database URL into (URL of the `postgres` maintenance database, db name).
fn split_database(url: &str) -> anyhow::Result<(String, String)> {
    let base = url.split_once('?').map_or(url, |(b, _)| b);
    let name = base
        .rsplit_once('/')
        .map(|(_, n)| n)
        .filter(|n| !n.is_empty() && !n.contains('@') && !n.contains(':'))
        .with_context(|| format!("no database name in {url}"))?;
    Ok((with_database(url, "postgres"), name.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_urls_swap_the_name_only() {
        assert_eq!(
            with_database("postgres://postgres@127.0.0.1:5432/postgres", "e2e_x"),
            "postgres://postgres@127.0.0.1:5432/e2e_x"
        );
        assert_eq!(
            with_database("postgres://u:p@h/db?sslmode=disable", "other"),
            "postgres://u:p@h/other?sslmode=disable"
        );
        let (admin, name) = split_database("postgres://postgres@127.0.0.1:5432/weft").unwrap();
        assert_eq!(admin, "postgres://postgres@127.0.0.1:5432/postgres");
        assert_eq!(name, "weft");
        assert!(split_database("postgres://postgres@127.0.0.1:5432").is_err());
    }
}
