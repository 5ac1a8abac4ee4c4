//! A running suite: the service binaries as separate processes in one [`TestEnv`],
//! with the controls a test needs (replicas, SIGKILL, SIGTERM, restart) — or, on the
//! [`Backend::Dev`] back-end, `weft dev` (every service in one runtime, on SQLite and the
//! in-process bus) inside the test process, so that a scenario written once runs on both.

use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::Duration;

use anyhow::Context as _;

use crate::client::Client;
use crate::env::TestEnv;
use crate::process::{bin_dir, binary_path, Proc, Service};

/// How long a process may take to become ready (debug builds, migrations, a busy box).
const READY_TIMEOUT: Duration = Duration::from_secs(90);
/// How long a process may take to exit after SIGTERM.
const TERM_GRACE: Duration = Duration::from_secs(20);
/// The task name (and activity queue) `weft-http-worker` serves; the decider publishes
/// every `HTTP` task there.
const HTTP_TASK_NAME: &str = "HTTP";

/// What a suite runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// The service binaries as processes, on PostgreSQL, RabbitMQ and Redis.
    Services,
    /// `weft dev` in this process: SQLite in memory, the in-process bus, in-memory caches.
    Dev,
}

/// `weft dev` running inside the test process.
#[derive(Debug)]
struct InProcessDev {
    bus: weft::bus::Bus,
    /// The pool of its SQLite database (in memory).
    pool: sqlx::SqlitePool,
    shutdown: tokio_util::sync::CancellationToken,
    stopped: tokio::task::JoinHandle<Result<(), weft_cli::dev::DevError>>,
}

/// Identifies one process of a [`Suite`]; stays valid across [`Suite::restart`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProcId(usize);

/// The service binaries running in one environment. Dropping it SIGKILLs every
/// child, then cleans up the environment (database and queues).
#[derive(Debug)]
pub struct Suite {
    procs: Vec<Proc>,
    spawned: HashMap<Service, usize>,
    /// Variables for one program only, on top of the environment's.
    service_env: HashMap<Service, Vec<(String, String)>>,
    bin_dir: PathBuf,
    log_dir: PathBuf,
    gateway_addr: SocketAddr,
    client: Client,
    http: reqwest::Client,
    dev: Option<InProcessDev>,
    // Last, so children die before the database is dropped.
    env: TestEnv,
}

impl Suite {
    /// A suite with nothing running yet; the gateway will listen on a free port.
    pub fn new(env: TestEnv) -> anyhow::Result<Self> {
        Self::with_gateway_addr(env, free_port()?)
    }

    /// A suite with nothing running yet whose gateway will listen on `gateway_addr`.
    pub fn with_gateway_addr(env: TestEnv, gateway_addr: SocketAddr) -> anyhow::Result<Self> {
        let bin_dir = bin_dir()?;
        let log_dir = bin_dir
            .parent()
            .unwrap_or(&bin_dir)
            .join("e2e-logs")
            .join(&env.namespace);
        std::fs::create_dir_all(&log_dir)
            .with_context(|| format!("creating {}", log_dir.display()))?;
        Ok(Self {
            procs: Vec::new(),
            spawned: HashMap::new(),
            service_env: HashMap::new(),
            bin_dir,
            log_dir,
            gateway_addr,
            client: Client::new(&format!("http://{gateway_addr}")),
            http: reqwest::Client::new(),
            dev: None,
            env,
        })
    }

    /// The four services, the example worker and the HTTP worker, each ready.
    pub async fn start(env: TestEnv) -> anyhow::Result<Self> {
        Self::start_with(env, &Service::ALL).await
    }

    /// The whole suite (both workers included) on `backend`, ready.
    pub async fn start_on(backend: Backend) -> anyhow::Result<Self> {
        Self::start_on_with(backend, crate::env::EnvOptions::default()).await
    }

    /// [`Suite::start_on`] with `options` (their `extra_env` applies to `weft dev` too).
    pub async fn start_on_with(
        backend: Backend,
        options: crate::env::EnvOptions,
    ) -> anyhow::Result<Self> {
        let env = TestEnv::create(options).await?;
        match backend {
            Backend::Services => Self::start(env).await,
            Backend::Dev => Self::start_dev(env).await,
        }
    }

    /// `weft dev` in this process, its database in memory, with the example worker
    /// embedded on its bus (as a user's worker in the same binary would be); `env` gives
    /// the namespace and the shard count (its database and broker stay unused).
    pub async fn start_dev(env: TestEnv) -> anyhow::Result<Self> {
        let mut suite = Self::new(env)?;
        let extra = suite.env.options.extra_env.clone();
        let given = weft::Config::from_lookup(|key| {
            extra.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone())
        })?;
        let config = weft::Config {
            namespace: suite.env.namespace.clone(),
            shards: suite.env.options.shards,
            ..given
        };
        let options = weft_cli::dev::Options {
            database: weft_cli::dev::Database::Memory,
            addr: suite.gateway_addr,
            examples: false,
            config: config.clone(),
        };
        let shutdown = tokio_util::sync::CancellationToken::new();
        let dev = weft_cli::dev::Dev::start(options, shutdown.clone())
            .await
            .context("starting weft dev in the test process")?;
        let bus = dev.bus().clone();
        let pool = dev.store().pool().clone();
        let worker = weft_worker_example::register(weft::worker::Worker::builder(&config)).build();
        tokio::spawn(worker.run_on(bus.clone(), shutdown.clone()));
        suite.dev = Some(InProcessDev {
            bus,
            pool,
            shutdown,
            stopped: tokio::spawn(dev.wait()),
        });
        Ok(suite)
    }

    /// Sets `key` to `value` for every process of `service` started from now on, over
    /// what the environment gives every process: e.g. a `WEFT_AMQP_URL` with the
    /// service's own broker credentials.
    pub fn set_service_env(&mut self, service: Service, key: &str, value: &str) {
        let vars = self.service_env.entry(service).or_default();
        vars.retain(|(k, _)| k != key);
        vars.push((key.to_owned(), value.to_owned()));
    }

    /// Deletes `task_name`'s activity queue with the environment: a queue the test has
    /// the services declare (an HTTP poll of a task no worker serves), beyond the example
    /// worker's.
    pub fn delete_queue_on_cleanup(&mut self, task_name: &str) {
        let queue = self.env.names().activity_queue(task_name);
        if !self.env.activity_queues.contains(&queue) {
            self.env.activity_queues.push(queue);
        }
    }

    /// The back-end this suite runs on.
    pub fn backend(&self) -> Backend {
        match self.dev {
            Some(_) => Backend::Dev,
            None => Backend::Services,
        }
    }

    /// On [`Backend::Dev`], the in-process bus a worker of the test process takes its
    /// activities from ([`weft::worker::Worker::run_on`]); `None` on the services, where
    /// workers connect to RabbitMQ.
    pub fn dev_bus(&self) -> Option<&weft::bus::Bus> {
        self.dev.as_ref().map(|d| &d.bus)
    }

    /// On [`Backend::Dev`], the pool of `weft dev`'s SQLite database (what
    /// [`TestEnv::pool`] is on the services).
    pub fn dev_pool(&self) -> Option<&sqlx::SqlitePool> {
        self.dev.as_ref().map(|d| &d.pool)
    }

    /// The configuration a worker of the test process uses to reach this suite.
    pub fn worker_config(&self) -> weft::Config {
        weft::Config {
            amqp_url: self.env.amqp_url.clone(),
            namespace: self.env.namespace.clone(),
            shards: self.env.options.shards,
            database_url: self.env.database_url.clone(),
            // Declared as the services declare them: a worker of another queue type
            // would find the queues refusing its declarations.
            queue_type: self.env.options.queue_type,
            ..weft::Config::default()
        }
    }

    /// Runs `worker` in the test process until `shutdown`: on RabbitMQ for the services,
    /// on the in-process bus for `weft dev`.
    pub fn run_worker(
        &self,
        worker: weft::worker::Worker,
        shutdown: &tokio_util::sync::CancellationToken,
    ) -> tokio::task::JoinHandle<weft::Result<()>> {
        let dev_bus = self.dev_bus().cloned();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            match dev_bus {
                Some(bus) => worker.run_on(bus, shutdown).await,
                None => worker.run(shutdown).await,
            }
        })
    }

    /// Stops `weft dev` (a graceful shutdown, as on SIGTERM) and returns how it ended.
    pub async fn stop_dev(&mut self) -> anyhow::Result<()> {
        let Some(dev) = self.dev.take() else {
            anyhow::bail!("this suite does not run weft dev");
        };
        dev.shutdown.cancel();
        let ended = tokio::time::timeout(TERM_GRACE, dev.stopped)
            .await
            .context("weft dev did not stop within the grace period")?;
        Ok(ended??)
    }

    /// The given programs (one process each), each ready.
    pub async fn start_with(env: TestEnv, services: &[Service]) -> anyhow::Result<Self> {
        let mut suite = Self::new(env)?;
        suite.spawn_all(services).await?;
        Ok(suite)
    }

    /// Starts one process per entry of `services` at once, then waits for all of them.
    pub async fn spawn_all(&mut self, services: &[Service]) -> anyhow::Result<Vec<ProcId>> {
        let mut ids = Vec::with_capacity(services.len());
        for &service in services {
            let proc = self.launch(service)?;
            self.procs.push(proc);
            ids.push(ProcId(self.procs.len() - 1));
        }
        for &id in &ids {
            self.wait_ready(id).await?;
        }
        Ok(ids)
    }

    /// Starts one more process of `service` (e.g. a second decider) and waits until it
    /// is ready.
    pub async fn spawn(&mut self, service: Service) -> anyhow::Result<ProcId> {
        Ok(self.spawn_all(&[service]).await?[0])
    }

    /// SIGKILLs the process and reaps it.
    pub async fn kill(&mut self, id: ProcId) -> anyhow::Result<ExitStatus> {
        self.procs[id.0].kill().await
    }

    /// SIGTERMs the process and waits for its exit (bounded; SIGKILL and an error after).
    pub async fn terminate(&mut self, id: ProcId) -> anyhow::Result<ExitStatus> {
        self.procs[id.0].terminate(TERM_GRACE).await
    }

    /// Starts the process again (SIGKILLing it first if it still runs) and waits until
    /// it is ready. The gateway keeps its address; other services get a new admin port.
    pub async fn restart(&mut self, id: ProcId) -> anyhow::Result<()> {
        self.procs[id.0].kill().await?;
        let (service, addr) = (self.procs[id.0].service, self.procs[id.0].addr);
        self.procs[id.0] = self.launch_at(service, Some(addr))?;
        self.wait_ready(id).await
    }

    /// Waits until the process is ready; one whose admin port was taken in the moment
    /// between choosing and binding it is started again on another port.
    async fn wait_ready(&mut self, id: ProcId) -> anyhow::Result<()> {
        let mut relaunches = 0;
        loop {
            let result = self.procs[id.0].wait_ready(&self.http, READY_TIMEOUT).await;
            let proc = &self.procs[id.0];
            let movable = !matches!(proc.service, Service::Gateway | Service::Dev);
            match result {
                Err(_) if movable && relaunches < 3 && lost_its_port(proc) => {
                    relaunches += 1;
                    let service = proc.service;
                    self.procs[id.0] = self.launch(service)?;
                }
                other => return other,
            }
        }
    }

    /// SIGTERMs every running process, last started first, and waits for each exit.
    /// Returns one line per process; fails if any had to be SIGKILLed.
    pub async fn stop_all(&mut self) -> anyhow::Result<Vec<String>> {
        let mut report = Vec::new();
        let mut errors = Vec::new();
        for proc in self.procs.iter_mut().rev() {
            if let Some(status) = proc.exit_status() {
                report.push(format!("{} had exited ({status})", proc.service.name()));
                continue;
            }
            match proc.terminate(TERM_GRACE).await {
                Ok(status) => report.push(format!("{} stopped ({status})", proc.service.name())),
                Err(e) => errors.push(format!("{e:#}")),
            }
        }
        match errors.is_empty() {
            true => Ok(report),
            false => Err(anyhow::anyhow!(errors.join("\n"))),
        }
    }

    /// A bus to publish and consume on as a client of this suite would: `weft dev`'s own
    /// (in process), or a new connection to the suite's broker and namespace, which the
    /// returned token closes.
    pub async fn client_bus(
        &self,
    ) -> anyhow::Result<(weft::bus::Bus, tokio_util::sync::CancellationToken)> {
        let stop = tokio_util::sync::CancellationToken::new();
        let bus = match self.dev_bus() {
            Some(bus) => bus.clone(),
            None => {
                weft::bus::Bus::connect(&self.env.amqp_url, self.env.names(), stop.clone()).await?
            }
        };
        Ok((bus, stop))
    }

    /// The processes of `service`, in start order (running or not).
    pub fn procs(&self, service: Service) -> Vec<ProcId> {
        (0..self.procs.len())
            .filter(|&i| self.procs[i].service == service)
            .map(ProcId)
            .collect()
    }

    /// The first process of `service`.
    pub fn first(&self, service: Service) -> ProcId {
        self.procs(service)
            .into_iter()
            .next()
            .unwrap_or_else(|| panic!("no {} in this suite", service.name()))
    }

    /// The process behind `id`.
    pub fn proc(&self, id: ProcId) -> &Proc {
        &self.procs[id.0]
    }

    /// The `/metrics` text of each process of `service`, in start order.
    pub async fn metrics_of(&self, service: Service) -> anyhow::Result<Vec<String>> {
        let http = reqwest::Client::new();
        let mut texts = Vec::new();
        for id in self.procs(service) {
            let url = format!("http://{}/metrics", self.proc(id).addr);
            let text = http
                .get(&url)
                .send()
                .await
                .and_then(|r| r.error_for_status())
                .with_context(|| format!("GET {url}"))?
                .text()
                .await
                .with_context(|| format!("GET {url}"))?;
            texts.push(text);
        }
        Ok(texts)
    }

    /// A REST client on the gateway.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The base URL of every gateway of the suite, the first one's first (a suite may run
    /// several replicas, as behind a load balancer).
    pub fn gateway_urls(&self) -> Vec<String> {
        self.procs
            .iter()
            .filter(|p| p.service == Service::Gateway)
            .map(|p| format!("http://{}", p.addr))
            .collect()
    }

    /// The gateway's base URL, e.g. `http://127.0.0.1:40123`.
    pub fn gateway_url(&self) -> String {
        format!("http://{}", self.gateway_addr)
    }

    /// The environment the suite runs in.
    pub fn env(&self) -> &TestEnv {
        &self.env
    }

    /// Where the processes' logs are written.
    pub fn log_dir(&self) -> &Path {
        &self.log_dir
    }

    /// One line per process: name, pid and log path.
    pub fn describe(&self) -> String {
        self.procs
            .iter()
            .map(|p| {
                format!(
                    "  {:<9} pid {:<7} {} (log {})",
                    p.service.name(),
                    p.pid().map_or("-".into(), |p| p.to_string()),
                    p.addr,
                    p.log_path.display()
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn launch(&mut self, service: Service) -> anyhow::Result<Proc> {
        self.launch_at(service, None)
    }

    /// Starts `service`; a gateway restarted (`addr`: its address before) keeps it.
    fn launch_at(&mut self, service: Service, addr: Option<SocketAddr>) -> anyhow::Result<Proc> {
        let n = self.spawned.entry(service).or_insert(0);
        *n += 1;
        let log_path = self.log_dir.join(format!("{}-{n}.log", service.name()));
        let first_gateway = !self
            .procs
            .iter()
            .any(|p| p.service == service && p.addr == self.gateway_addr);
        let addr = match (service, addr) {
            (Service::Gateway | Service::Dev, Some(addr)) => addr,
            // The first gateway listens on the suite's address; more get their own.
            (Service::Gateway | Service::Dev, None) if first_gateway => self.gateway_addr,
            _ => free_port()?,
        };
        let binary = binary_path(&self.bin_dir, service)?;
        if service == Service::HttpWorker {
            // Its activity queue is deleted with the environment's other queues.
            let queue = self.env.names().activity_queue(HTTP_TASK_NAME);
            if !self.env.activity_queues.contains(&queue) {
                self.env.activity_queues.push(queue);
            }
        }
        // The same data directory on every start: a restarted `weft dev` finds its runs.
        let args: Vec<String> = match service {
            Service::Dev => vec![
                "dev".into(),
                "--example".into(),
                "--data-dir".into(),
                self.log_dir.join("data").display().to_string(),
                "--addr".into(),
                addr.to_string(),
            ],
            _ => Vec::new(),
        };
        Proc::spawn_with_args(
            service,
            &binary,
            &args,
            &self.process_env(service, addr),
            addr,
            log_path,
        )
    }

    fn process_env(&self, service: Service, addr: SocketAddr) -> Vec<(String, String)> {
        let env = &self.env;
        let mut vars = vec![
            ("WEFT_DATABASE_URL".to_owned(), env.database_url.clone()),
            ("WEFT_AMQP_URL".to_owned(), env.amqp_url.clone()),
            ("WEFT_NAMESPACE".to_owned(), env.namespace.clone()),
            ("WEFT_SHARDS".to_owned(), env.options.shards.to_string()),
            (
                "WEFT_HTTP_ADDR".to_owned(),
                match service {
                    Service::Gateway | Service::Dev => addr.to_string(),
                    _ => self.gateway_addr.to_string(),
                },
            ),
            (
                "RUST_LOG".to_owned(),
                std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()),
            ),
        ];
        if !matches!(service, Service::Gateway | Service::Dev) {
            vars.push(("WEFT_ADMIN_ADDR".to_owned(), addr.to_string()));
        }
        // The tests' HTTP servers and hook receivers listen on this machine, which the
        // outbound guard refuses by default. `weft dev` allows it on its own (and is
        // left to, so its default is what the tests exercise); `extra_env` may override.
        if service != Service::Dev {
            vars.push((
                weft::outbound::allow::ENV.to_owned(),
                "127.0.0.0/8,::1,localhost".to_owned(),
            ));
        }
        if let Some(ms) = env.options.outbox_sweep_after_ms {
            vars.push(("WEFT_OUTBOX_SWEEP_AFTER_MS".to_owned(), ms.to_string()));
        }
        if env.options.queue_type == weft::topology::QueueType::Quorum {
            vars.push(("WEFT_QUEUE_TYPE".to_owned(), "quorum".to_owned()));
        }
        vars.extend(env.options.extra_env.iter().cloned());
        // Last: a later value of a variable wins.
        if let Some(own) = self.service_env.get(&service) {
            vars.extend(own.iter().cloned());
        }
        vars
    }
}

impl Drop for Suite {
    fn drop(&mut self) {
        if let Some(dev) = &self.dev {
            dev.shutdown.cancel();
        }
        for proc in &mut self.procs {
            proc.start_kill();
        }
        if std::thread::panicking() {
            eprintln!(
                "e2e: namespace {}, database {}; process logs in {}:\n{}",
                self.env.namespace,
                self.env.database_name(),
                self.log_dir.display(),
                self.describe()
            );
        }
    }
}

/// A loopback address with a port that was free a moment ago.
///
/// The port comes from outside the kernel's ephemeral range: a port taken from that
/// range (bind port 0, read, drop) can be handed to some outgoing connection of the
/// many tests running at once before the child binds it, and the child then fails with
/// "Address already in use". Each test process walks the range from its own starting
/// point, so two binaries rarely try the same port; the bind check skips taken ones.
pub fn free_port() -> anyhow::Result<SocketAddr> {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    let (low, high) = non_ephemeral_ports();
    let span = u32::from(high - low) + 1;
    if NEXT.load(Ordering::Relaxed) == u32::MAX {
        let start = rand::random::<u32>() % span;
        let _ = NEXT.compare_exchange(u32::MAX, start, Ordering::Relaxed, Ordering::Relaxed);
    }
    for _ in 0..span {
        let offset = NEXT.fetch_add(1, Ordering::Relaxed) % span;
        let port = low + offset as u16;
        if let Ok(listener) = TcpListener::bind(("127.0.0.1", port)) {
            return Ok(listener.local_addr()?);
        }
    }
    let listener = TcpListener::bind("127.0.0.1:0").context("binding 127.0.0.1:0")?;
    Ok(listener.local_addr()?)
}

/// A range of ports that the kernel never picks for outgoing connections: below its
/// ephemeral range when there is room there, otherwise above it.
fn non_ephemeral_ports() -> (u16, u16) {
    let ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| {
            let mut parts = text.split_whitespace().map(str::parse::<u16>);
            Some((parts.next()?.ok()?, parts.next()?.ok()?))
        })
        .unwrap_or((32768, 60999));
    match ephemeral {
        (low, _) if low >= 15_000 => (10_000, low - 1),
        (_, high) if high <= 60_000 => (high + 1, 65_535),
        _ => (10_000, 65_535),
    }
}

/// Whether a process failed because its address was taken after [`free_port`] chose it.
fn lost_its_port(proc: &Proc) -> bool {
    crate::process::tail(&proc.log_path, 5).contains("Address already in use")
}
