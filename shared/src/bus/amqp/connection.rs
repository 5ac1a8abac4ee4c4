//! The live AMQP connection and its replacement when it dies.
//!
//! The client recovers nothing by itself: recovery here is explicit so that every
//! reconnection also re-declares the topology and consumers restart through the same
//! code path as a first start.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

use amqprs::connection::{Connection, OpenConnectionArguments};
use tokio_util::sync::CancellationToken;

use super::client::{self, Chan, Numbers};
use super::declare;
use super::publish::Pool;
use crate::bus::backoff::Backoff;
use crate::topology::Names;
use crate::{Error, Result};

/// One connection attempt's declarations may take this long (and each broker of the
/// list [`PER_BROKER_TIMEOUT`] to answer before them).
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(15);

/// How long one broker of the list gets to accept the connection (TCP and handshake)
/// before the next is tried: a node that is down refuses at once, one cut off by the
/// network does not answer at all.
const PER_BROKER_TIMEOUT: Duration = Duration::from_secs(5);

/// Callers arriving within this long of a failed attempt share its failure instead of
/// each hammering a broker that is down.
const FAILURE_MEMORY: Duration = Duration::from_millis(50);

/// The heartbeat asked of the broker (seconds) unless the URL's `heartbeat` says
/// otherwise.
const DEFAULT_HEARTBEAT: u16 = 60;

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
    /// Its channel numbers in use (see `client`).
    numbers: Arc<Numbers>,
}

impl Session {
    fn new(conn: Connection) -> Self {
        Self {
            numbers: Arc::new(Numbers::new(conn.channel_max())),
            conn,
            pool: Pool::new(),
        }
    }

    /// Open, and with channel numbers left to open channels with.
    pub(crate) fn is_up(&self) -> bool {
        self.conn.is_open() && !self.numbers.running_out()
    }

    /// Opens a channel on this connection.
    pub(crate) async fn channel(&self) -> Result<Chan, client::AmqpError> {
        Chan::open(&self.conn, &self.numbers).await
    }
}

/// Shared state behind every clone of a `Bus`.
pub(crate) struct Link {
    pub(crate) names: Names,
    pub(crate) connection_name: String,
    pub(crate) role: Role,
    /// The brokers to try, in order (`WEFT_AMQP_URL`: one URL, or several separated by
    /// commas — the nodes of a cluster).
    urls: Vec<String>,
    /// The broker of the last connection: tried first next time.
    preferred: std::sync::atomic::AtomicUsize,
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
            urls: broker_urls(url),
            preferred: std::sync::atomic::AtomicUsize::new(0),
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

    /// The brokers of `WEFT_AMQP_URL`, starting with the one of the last connection.
    pub(crate) fn urls_in_order(&self) -> Vec<String> {
        let first = self.preferred.load(std::sync::atomic::Ordering::Relaxed);
        let n = self.urls.len();
        (0..n).map(|i| self.urls[(first + i) % n].clone()).collect()
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
        let limit = ATTEMPT_TIMEOUT + PER_BROKER_TIMEOUT * self.urls.len() as u32;
        let opened = tokio::time::timeout(limit, self.open())
            .await
            .unwrap_or_else(|_| {
                Err(Failure::Transient(Error::Bus(format!(
                    "connecting to the broker took longer than {limit:?}"
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
        let broker = self.urls[self.preferred.load(std::sync::atomic::Ordering::Relaxed)].as_str();
        tracing::info!(connection = %self.connection_name, broker = %broker_of(broker), "connected to the broker");
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
        let session = Session::new(self.connect().await?);
        let declared = self.declared().clone();
        if let Err(e) = declare::core(&session, &self.names, self.role, &declared).await {
            let _ = client::disconnect(&session.conn).await;
            // NOT_FOUND while declaring is RabbitMQ's race between connections declaring
            // the same new durable queue at once ("home node … is down or inaccessible",
            // several services starting together): declaring again succeeds. For a
            // client it is also an exchange no service has declared yet: it will be.
            // Other refusals (a queue with other arguments) stay refusals.
            let raced = e.is(client::code::NOT_FOUND);
            let mut why = format!("declaring the topology: {e}");
            if raced && self.role == Role::Client {
                why.push_str(" (waiting for a service of the namespace to declare it)");
            }
            let err = Error::Bus(why);
            return Err(if e.is_soft() && !raced {
                Failure::Fatal(err)
            } else {
                Failure::Transient(err)
            });
        }
        Ok(session)
    }

    /// A connection to the first broker of the list that accepts one, starting with the
    /// one of the last connection; the list's failures, each named by its broker (never
    /// its credentials), when none does.
    async fn connect(&self) -> Result<Connection, Failure> {
        use std::sync::atomic::Ordering;
        let first = self.preferred.load(Ordering::Relaxed);
        let mut failures = Vec::new();
        for i in 0..self.urls.len() {
            let k = (first + i) % self.urls.len();
            let broker = broker_of(&self.urls[k]);
            let args = match connection_arguments(&self.urls[k], &self.connection_name) {
                Ok(args) => args,
                Err(e) => {
                    failures.push(format!("{broker}: {e}"));
                    continue;
                }
            };
            match tokio::time::timeout(PER_BROKER_TIMEOUT, client::connect(args)).await {
                Ok(Ok(conn)) => {
                    if k != first {
                        tracing::info!(%broker, "failing over to the next broker of WEFT_AMQP_URL");
                    }
                    self.preferred.store(k, Ordering::Relaxed);
                    return Ok(conn);
                }
                Ok(Err(e)) => failures.push(format!("{broker}: {e}")),
                Err(_) => {
                    failures.push(format!("{broker}: no answer within {PER_BROKER_TIMEOUT:?}"))
                }
            }
        }
        Err(Failure::Transient(Error::Bus(format!(
            "connect: {}",
            failures.join("; ")
        ))))
    }

    /// Closes the current connection; the next use reconnects.
    pub(crate) async fn force_disconnect(&self) {
        if let Some(session) = self.current() {
            if let Err(e) = client::disconnect(&session.conn).await {
                tracing::debug!(error = %e, "closing the connection on request failed");
            }
        }
    }
}

/// The brokers of `WEFT_AMQP_URL`: one URL, or several separated by commas (the nodes of
/// a cluster; a comma inside a URL is written `%2C`). Blank entries are left out.
pub(crate) fn broker_urls(url: &str) -> Vec<String> {
    let urls: Vec<String> = url
        .split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .map(str::to_owned)
        .collect();
    match urls.is_empty() {
        true => vec![url.to_owned()],
        false => urls,
    }
}

/// A broker URL's parts: `amqp://user:password@host:port/vhost?heartbeat=N`, the
/// user, password and vhost percent-decoded (`%2f` is the vhost `/`). Defaults: guest,
/// guest, port 5672, vhost `/`, heartbeat 60 s.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BrokerUrl {
    pub(crate) user: String,
    pub(crate) password: String,
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) vhost: String,
    pub(crate) heartbeat: u16,
}

impl std::str::FromStr for BrokerUrl {
    type Err = String;

    fn from_str(url: &str) -> Result<Self, String> {
        let rest = match url.split_once("://") {
            Some(("amqp", rest)) => rest,
            Some(("amqps", _)) => {
                return Err("amqps (TLS) is not supported: use amqp:// (a TLS proxy beside the broker, or a private network)".into())
            }
            _ => return Err("not an amqp:// URL".into()),
        };
        let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let (userinfo, hostport) = match authority.rsplit_once('@') {
            Some((userinfo, hostport)) => (Some(userinfo), hostport),
            None => (None, authority),
        };
        let (user, password) = match userinfo {
            Some(info) => {
                let (user, password) = info.split_once(':').unwrap_or((info, ""));
                (percent_decode(user)?, percent_decode(password)?)
            }
            None => ("guest".to_owned(), "guest".to_owned()),
        };
        let (host, port) = match hostport.strip_prefix('[') {
            // An IPv6 address: `[::1]:5672`.
            Some(v6) => {
                let (host, after) = v6.split_once(']').ok_or("an unclosed [ in the host")?;
                (host, after.strip_prefix(':'))
            }
            None => match hostport.rsplit_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (hostport, None),
            },
        };
        if host.is_empty() {
            return Err("no host".into());
        }
        let port = match port {
            Some(port) => port
                .parse()
                .map_err(|_| format!("port {port:?} is not a port number"))?,
            None => 5672,
        };
        let vhost = match path {
            "" => "/".to_owned(),
            path => percent_decode(path)?,
        };
        let mut heartbeat = DEFAULT_HEARTBEAT;
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            if let Some(("heartbeat", value)) = pair.split_once('=') {
                heartbeat = match value.parse() {
                    Ok(0) | Err(_) => {
                        return Err(format!(
                            "heartbeat={value}: a number of seconds from 1 to 65535 is expected"
                        ))
                    }
                    Ok(seconds) => seconds,
                };
            }
        }
        Ok(Self {
            user,
            password,
            host: host.to_owned(),
            port,
            vhost,
            heartbeat,
        })
    }
}

fn percent_decode(s: &str) -> Result<String, String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3).unwrap_or_default();
            let byte = u8::from_str_radix(hex, 16)
                .map_err(|_| format!("a bad percent escape in {s:?}"))?;
            out.push(byte);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| format!("{s:?} does not decode to UTF-8"))
}

/// The client's arguments for connecting to `url` as `name`.
pub(super) fn connection_arguments(
    url: &str,
    name: &str,
) -> Result<OpenConnectionArguments, String> {
    let url: BrokerUrl = url.parse()?;
    Ok(
        OpenConnectionArguments::new(&url.host, url.port, &url.user, &url.password)
            .virtual_host(&url.vhost)
            .heartbeat(url.heartbeat)
            .connection_name(name)
            .finish(),
    )
}

/// `host:port` of a broker URL, for logs and errors: never its user or password.
pub(crate) fn broker_of(url: &str) -> String {
    match url.parse::<BrokerUrl>() {
        Ok(url) => format!("{}:{}", url.host, url.port),
        Err(_) => "an unparsable AMQP URL".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_of_brokers_is_split_on_commas_and_named_without_credentials() {
        let urls = broker_urls("amqp://u:secret@a:5672/%2f, amqp://u:secret@b:5673/%2f,");
        assert_eq!(
            urls,
            ["amqp://u:secret@a:5672/%2f", "amqp://u:secret@b:5673/%2f"]
        );
        assert_eq!(broker_of(&urls[1]), "b:5673");
        assert_eq!(broker_urls("amqp://a"), ["amqp://a"]);
        assert!(!broker_of("amqp://u:secret@a:5672/%2f").contains("secret"));
        assert_eq!(broker_of("not a url"), "an unparsable AMQP URL");
    }

    #[test]
    fn a_broker_url_is_read_with_its_defaults_and_percent_escapes() {
        let url: BrokerUrl = "amqp://u%40x:p%3Aw@h:5673/%2f?heartbeat=10"
            .parse()
            .unwrap();
        assert_eq!(
            url,
            BrokerUrl {
                user: "u@x".into(),
                password: "p:w".into(),
                host: "h".into(),
                port: 5673,
                vhost: "/".into(),
                heartbeat: 10,
            }
        );
        let bare: BrokerUrl = "amqp://127.0.0.1".parse().unwrap();
        assert_eq!(
            (bare.user.as_str(), bare.port, bare.vhost.as_str()),
            ("guest", 5672, "/")
        );
        assert_eq!(bare.heartbeat, DEFAULT_HEARTBEAT);
        let v6: BrokerUrl = "amqp://[::1]:5672/weft-test".parse().unwrap();
        assert_eq!((v6.host.as_str(), v6.vhost.as_str()), ("::1", "weft-test"));
        for bad in [
            "amqp://h:port",
            "amqp://h?heartbeat=0",
            "http://h",
            "amqps://h",
            "amqp://h/%zz",
        ] {
            assert!(bad.parse::<BrokerUrl>().is_err(), "{bad}");
        }
    }
}
