//! The live AMQP connection and its replacement when it dies.
//!
//! lapin's own auto-recovery is off: recovery here is explicit so that every
//! reconnection also re-declares the topology and consumers restart through the same
//! code path as a first start.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

use lapin::{Connection, ConnectionProperties};
use tokio_util::sync::CancellationToken;

use super::declare;
use super::publish::Pool;
use crate::bus::backoff::Backoff;
use crate::topology::Names;
use crate::{Error, Result};

/// One connection attempt (TCP, handshake, declarations) may take this long.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(15);

/// Callers arriving within this long of a failed attempt share its failure instead of
/// each hammering a broker that is down.
const FAILURE_MEMORY: Duration = Duration::from_millis(50);

/// AMQP reply code for a connection closed on purpose by an operator.
const CONNECTION_FORCED: u16 = 320;

/// Queues declared through a `Bus` beyond the core topology, with their bindings
/// `(exchange, routing key)`; re-declared after every reconnect.
pub(crate) type Declared = BTreeMap<String, Vec<(String, String)>>;

/// Whose connection this is; decides what it declares (docs/rabbitmq-users.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// A service: declares the whole core topology on every connection, so that
    /// whichever service starts first, no message is routed to nowhere.
    Service,
    /// A client of the services (a worker, an event listener): declares only its own
    /// queues, and waits for the services' exchanges instead of declaring them, so that
    /// it can run with credentials that reach no more than what it uses. A declaration of
    /// its own that the broker refuses for want of permission is left to the services.
    Client,
}

/// Why getting a connection failed.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The broker is unreachable or went away; trying again later can help.
    Transient(Error),
    /// The broker refused the topology (e.g. PRECONDITION_FAILED); retrying cannot help.
    Fatal(Error),
}

impl Failure {
    pub(crate) fn into_error(self) -> Error {
        match self {
            Failure::Transient(e) | Failure::Fatal(e) => e,
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Transient(e) | Failure::Fatal(e) => e.fmt(f),
        }
    }
}

/// A connection with the publisher channels opened on it.
pub(crate) struct Session {
    pub(crate) conn: Connection,
    pub(crate) pool: Pool,
}

impl Session {
    pub(crate) fn is_up(&self) -> bool {
        self.conn.status().connected()
    }
}

/// Shared state behind every clone of a `Bus`.
pub(crate) struct Link {
    pub(crate) names: Names,
    pub(crate) connection_name: String,
    pub(crate) role: Role,
    url: String,
    current: RwLock<Option<Arc<Session>>>,
    /// Held while (re)connecting so that concurrent callers make one attempt, not many.
    /// Guarded by the lock: when the last attempt failed, and why.
    reconnect: tokio::sync::Mutex<Option<(Instant, String)>>,
    declared: Mutex<Declared>,
    /// Exchanges declared beside the core topology (deleted by teardown).
    pub(crate) exchanges: Mutex<std::collections::BTreeSet<String>>,
    /// The request/reply channel of the current connection.
    pub(crate) replies: super::rpc::Replies,
}

impl fmt::Debug for Link {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Link")
            .field("names", &self.names)
            .field("connection_name", &self.connection_name)
            .field("connected", &self.is_connected())
            .finish_non_exhaustive()
    }
}

impl Link {
    pub(crate) fn new(url: &str, names: Names, role: Role) -> Self {
        let connection_name = format!(
            "weft/{}/{}",
            names.namespace(),
            uuid::Uuid::new_v4().simple()
        );
        Self {
            names,
            connection_name,
            role,
            url: url.to_owned(),
            current: RwLock::new(None),
            reconnect: tokio::sync::Mutex::new(None),
            declared: Mutex::new(Declared::new()),
            exchanges: Mutex::default(),
            replies: super::rpc::Replies::default(),
        }
    }

    fn current(&self) -> Option<Arc<Session>> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub(crate) fn declared(&self) -> MutexGuard<'_, Declared> {
        self.declared.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn is_connected(&self) -> bool {
        self.current().is_some_and(|s| s.is_up())
    }

    /// The live session, or one attempt to open a new one.
    pub(crate) async fn session(&self) -> Result<Arc<Session>, Failure> {
        if let Some(s) = self.current().filter(|s| s.is_up()) {
            return Ok(s);
        }
        let mut last_failure = self.reconnect.lock().await;
        // Someone else may have reconnected while we waited for the lock.
        if let Some(s) = self.current().filter(|s| s.is_up()) {
            return Ok(s);
        }
        if let Some((at, why)) = last_failure.as_ref() {
            if at.elapsed() < FAILURE_MEMORY {
                return Err(Failure::Transient(Error::Bus(why.clone())));
            }
        }
        let opened = tokio::time::timeout(ATTEMPT_TIMEOUT, self.open())
            .await
            .unwrap_or_else(|_| {
                Err(Failure::Transient(Error::Bus(format!(
                    "connecting to the broker took longer than {ATTEMPT_TIMEOUT:?}"
                ))))
            });
        let session = match opened {
            Ok(session) => Arc::new(session),
            Err(failure) => {
                *last_failure = Some((Instant::now(), failure.to_string()));
                return Err(failure);
            }
        };
        *last_failure = None;
        let old = self
            .current
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .replace(session.clone());
        drop(old);
        tracing::info!(connection = %self.connection_name, "connected to the broker");
        Ok(session)
    }

    /// Waits for a live session, retrying with back-off; every failed attempt is logged.
    ///
    /// With `give_up_on_fatal`, a refused topology is returned at once; otherwise it is
    /// retried like any other failure (consumers must not die from it).
    pub(crate) async fn session_wait_with(
        &self,
        shutdown: &CancellationToken,
        give_up_on_fatal: bool,
    ) -> Result<Arc<Session>> {
        let mut backoff = Backoff::new();
        let mut attempt = 0u32;
        loop {
            if shutdown.is_cancelled() {
                return Err(Error::ShuttingDown);
            }
            attempt += 1;
            let outcome = tokio::select! {
                _ = shutdown.cancelled() => return Err(Error::ShuttingDown),
                outcome = self.session() => outcome,
            };
            match outcome {
                Ok(session) => return Ok(session),
                Err(Failure::Fatal(e)) if give_up_on_fatal => return Err(e),
                Err(failure) => {
                    tracing::warn!(attempt, error = %failure, "broker connection attempt failed");
                    if !backoff.sleep(shutdown).await {
                        return Err(Error::ShuttingDown);
                    }
                }
            }
        }
    }

    /// [`Link::session_wait_with`] giving up on a refused topology (start-up).
    pub(crate) async fn session_wait(&self, shutdown: &CancellationToken) -> Result<Arc<Session>> {
        self.session_wait_with(shutdown, true).await
    }

    /// Connects and declares the core topology (a client: finds the core exchanges)
    /// plus every queue declared so far.
    async fn open(&self) -> Result<Session, Failure> {
        let props = ConnectionProperties::default()
            .with_connection_name(self.connection_name.clone().into());
        let conn = Connection::connect(&self.url, props)
            .await
            .map_err(|e| Failure::Transient(Error::Bus(format!("connect: {e}"))))?;
        let declared = self.declared().clone();
        if let Err(e) = declare::core(&conn, &self.names, self.role, &declared).await {
            let _ = conn.close(200, "declaration failed".into()).await;
            // NOT_FOUND while declaring is RabbitMQ's race between connections declaring
            // the same new durable queue at once ("home node … is down or inaccessible",
            // several services starting together): declaring again succeeds. For a
            // client it is also an exchange no service has declared yet: it will be.
            // Other refusals (a queue with other arguments) stay refusals.
            let raced = e.to_string().contains("NOT_FOUND");
            let mut why = format!("declaring the topology: {e}");
            if raced && self.role == Role::Client {
                why.push_str(" (waiting for a service of the namespace to declare it)");
            }
            let err = Error::Bus(why);
            return Err(if e.is_amqp_soft_error() && !raced {
                Failure::Fatal(err)
            } else {
                Failure::Transient(err)
            });
        }
        Ok(Session {
            conn,
            pool: Pool::new(),
        })
    }

    /// Closes the current connection; the next use reconnects.
    pub(crate) async fn force_disconnect(&self) {
        if let Some(session) = self.current() {
            if let Err(e) = session
                .conn
                .close(CONNECTION_FORCED, "forced disconnect".into())
                .await
            {
                tracing::debug!(error = %e, "closing the connection on request failed");
            }
        }
    }
}
