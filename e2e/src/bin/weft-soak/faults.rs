//! The faults the soak injects, one at a time at random moments, and how long the
//! engine took to get its throughput back after each.

use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::Rng as _;
use tokio::sync::Mutex;
use weft_e2e::infra::{signal, Servers};
use weft_e2e::{Service, Suite};

/// One kind of fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fault {
    /// SIGKILL of one replica of a service, restarted after a pause.
    Kill(Service),
    /// The broker killed (SIGKILL of its VM) and started again; on a cluster, one node
    /// of it.
    BrokerDown,
    /// PostgreSQL stopped as a crash (immediate) and started again (crash recovery).
    DatabaseCrash,
    /// Redis down for a while, then back empty.
    RedisDown,
    /// One example worker paused (SIGSTOP) past its activities' heartbeat timeout, then
    /// resumed: its attempts time out and run elsewhere; its late results are ignored.
    WorkerPaused,
}

impl Fault {
    /// A name for the report.
    pub fn name(self) -> String {
        match self {
            Fault::Kill(s) => format!("SIGKILL {}", s.name()),
            Fault::BrokerDown => "RabbitMQ killed and restarted".into(),
            Fault::DatabaseCrash => "PostgreSQL crashed and restarted".into(),
            Fault::RedisDown => "Redis down".into(),
            Fault::WorkerPaused => "worker paused (SIGSTOP)".into(),
        }
    }

    /// Every kind of fault once (a kill of each killable service), shuffled: the soak
    /// deals faults from such decks, so that a short soak meets every kind.
    pub fn deck(rng: &mut StdRng) -> Vec<Fault> {
        use rand::seq::SliceRandom as _;
        let mut deck: Vec<Fault> = [
            Service::Decider,
            Service::History,
            Service::Heartbeat,
            Service::Gateway,
            Service::Worker,
            Service::HttpWorker,
        ]
        .into_iter()
        .map(Fault::Kill)
        .chain([
            Fault::BrokerDown,
            Fault::DatabaseCrash,
            Fault::RedisDown,
            Fault::WorkerPaused,
        ])
        .collect();
        deck.shuffle(rng);
        deck
    }
}

/// What the soak saw of one fault.
#[derive(Debug, Clone)]
pub struct Injected {
    pub fault: Fault,
    /// Since the soak's start.
    pub at: Duration,
    /// From the fault to its end (the process restarted and ready, the server back).
    pub lasted: Duration,
    /// From the fault's end until completions ran at three quarters of the rate of
    /// before the fault again (over two seconds); `None`: not within
    /// [`RECOVERY_LIMIT`], or [`Injected::cut`].
    pub recovered_in: Option<Duration>,
    /// The soak ended before throughput was measured back.
    pub cut: bool,
    /// The injection itself failed (e.g. a restart that never became ready).
    pub error: Option<String>,
}

/// How long the soak waits for throughput to come back after a fault.
pub const RECOVERY_LIMIT: Duration = Duration::from_secs(60);
/// How long Redis stays down.
pub const REDIS_DOWN: Duration = Duration::from_secs(20);
/// How long a worker stays paused (its activities' heartbeat timeout is 5 s).
pub const WORKER_PAUSE: Duration = Duration::from_secs(8);

/// When runs completed (shared with the runs' drivers).
pub type Completions = Arc<StdMutex<Vec<Instant>>>;

/// Injects `fault` and waits for its end.
pub async fn inject(
    fault: Fault,
    suite: &Mutex<Suite>,
    infra: &Mutex<Servers>,
    rng: &mut StdRng,
) -> anyhow::Result<()> {
    let pause = Duration::from_millis(rng.random_range(500..3000));
    match fault {
        Fault::Kill(service) => {
            let mut suite = suite.lock().await;
            let replicas = suite.procs(service);
            let id = replicas[rng.random_range(0..replicas.len())];
            suite.kill(id).await?;
            tokio::time::sleep(pause).await;
            suite.restart(id).await?;
        }
        Fault::BrokerDown => {
            // One node of a cluster (any: the clients of the others stay put, its own
            // reconnect to another node of their list), or the only one.
            let mut infra = infra.lock().await;
            let i = rng.random_range(0..infra.rabbits.len());
            infra.rabbits[i].kill().await?;
            tokio::time::sleep(pause).await;
            infra.rabbits[i].up().await?;
        }
        Fault::DatabaseCrash => {
            let infra = infra.lock().await;
            infra.pg.crash().await?;
            tokio::time::sleep(pause).await;
            infra.pg.up().await?;
        }
        Fault::RedisDown => {
            let mut infra = infra.lock().await;
            infra.redis.down().await?;
            tokio::time::sleep(REDIS_DOWN).await;
            infra.redis.up().await?;
        }
        Fault::WorkerPaused => {
            let pid = {
                let suite = suite.lock().await;
                let replicas = suite.procs(Service::Worker);
                let id = replicas[rng.random_range(0..replicas.len())];
                suite.proc(id).pid()
            };
            if let Some(pid) = pid {
                signal(pid, "-STOP")?;
                tokio::time::sleep(WORKER_PAUSE).await;
                signal(pid, "-CONT")?;
            }
        }
    }
    Ok(())
}

/// Completions a second in the `window` before `at`.
fn rate_before(completions: &Completions, at: Instant, window: Duration) -> f64 {
    let from = at.checked_sub(window).unwrap_or(at);
    let times = completions.lock().expect("completions lock");
    let n = times.iter().filter(|t| **t >= from && **t < at).count();
    n as f64 / window.as_secs_f64()
}

/// Waits until runs complete at three quarters of `before` (a rate a second) or better
/// over the last two seconds, measured from `ended`; `None` after [`RECOVERY_LIMIT`].
pub async fn recovery(completions: &Completions, before: f64, ended: Instant) -> Option<Duration> {
    loop {
        let now = Instant::now();
        let window = Duration::from_secs(2);
        let recent = rate_before(completions, now, window);
        let since_end = now.duration_since(ended);
        // The window must lie after the fault's end: completions of before do not count.
        if since_end >= window && recent >= (before * 0.75).max(0.5) {
            return Some(since_end.saturating_sub(window));
        }
        if since_end > RECOVERY_LIMIT {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The completion rate over the 10 s before `at`.
pub fn rate_at(completions: &Completions, at: Instant) -> f64 {
    rate_before(completions, at, Duration::from_secs(10))
}
