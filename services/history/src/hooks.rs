//! The hook dispatcher (docs/hooks.md): sends the deliveries the decider committed to
//! `hook_deliveries`, signed, retried with exponential back-off, dead-lettered when
//! attempts run out, each attempt recorded with its status code.
//!
//! Each round claims up to [`HookConfig::concurrency`] due deliveries (a lease of the
//! request timeout plus a margin: see `weft::store::hooks`), POSTs them at once and
//! settles each; settling a reset's rollback hooks may write the `RollbackHooksDone`
//! command for the waiting run, published here right after the commit (the outbox
//! sweeper publishes it should this process die first). Between rounds the dispatcher
//! sleeps until the next delivery is due, at most [`POLL_INTERVAL`]: a delivery the
//! decider just inserted is picked up that late at worst. Any number of history
//! replicas may dispatch; `SKIP LOCKED` and the lease keep them apart.
//!
//! Every call goes through the outbound guard ([`weft::outbound`], docs/outbound.md). A
//! refused call is recorded as the attempt's error (`outbound call refused: ...`) and
//! dead-letters the delivery at once: the same call would be refused again.

use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;
use reqwest::{Client, Url};
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;
use weft::admin::Metrics;
use weft::bus::Bus;
use weft::hooks::{self, Backoff};
use weft::outbound::{Guard, Refused};
use weft::store::hooks::{AttemptResult, Claimed};
use weft::store::Store;
use weft::{Error, Result};

/// Longest sleep between rounds.
pub const POLL_INTERVAL: Duration = Duration::from_millis(250);
/// Shortest sleep between rounds that found nothing due.
const MIN_WAIT: Duration = Duration::from_millis(20);
/// Pause after a failed round (database trouble).
const ERROR_BACKOFF: Duration = Duration::from_secs(1);
/// A claim outlives the request by this much, so a slow settle is not taken for a crash.
const LEASE_MARGIN: Duration = Duration::from_secs(10);
/// How much of a failed answer's body is kept as the attempt's error.
const ERROR_BODY_CHARS: usize = 200;

/// The dispatcher's settings (`WEFT_HOOK_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HookConfig {
    /// Retry schedule: `WEFT_HOOK_MAX_ATTEMPTS` (8), `WEFT_HOOK_RETRY_DELAY_MS` (1000),
    /// `WEFT_HOOK_MAX_RETRY_DELAY_MS` (300000).
    pub backoff: Backoff,
    /// One attempt's bound: `WEFT_HOOK_TIMEOUT_MS` (10000).
    pub timeout: Duration,
    /// Deliveries in flight at once: `WEFT_HOOK_CONCURRENCY` (32).
    pub concurrency: usize,
}

impl Default for HookConfig {
    fn default() -> Self {
        Self {
            backoff: Backoff::default(),
            timeout: Duration::from_secs(10),
            concurrency: 32,
        }
    }
}

impl HookConfig {
    /// Reads the process environment.
    pub fn from_env() -> Result<Self> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// Reads the settings through `get`; unset ones take their defaults.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let d = Self::default();
        let num = |key: &str| -> Result<Option<u64>> {
            match get(key) {
                None => Ok(None),
                Some(raw) => match raw.trim().parse::<u64>() {
                    Ok(n) if n > 0 => Ok(Some(n)),
                    _ => Err(Error::Config(format!(
                        "{key}={raw:?}: expected a whole number of at least 1"
                    ))),
                },
            }
        };
        let ms = |key: &str, default: Duration| -> Result<Duration> {
            Ok(num(key)?.map_or(default, Duration::from_millis))
        };
        Ok(Self {
            backoff: Backoff {
                initial: ms("WEFT_HOOK_RETRY_DELAY_MS", d.backoff.initial)?,
                max: ms("WEFT_HOOK_MAX_RETRY_DELAY_MS", d.backoff.max)?,
                max_attempts: num("WEFT_HOOK_MAX_ATTEMPTS")?.map_or(d.backoff.max_attempts, |n| {
                    u32::try_from(n).unwrap_or(u32::MAX)
                }),
            },
            timeout: ms("WEFT_HOOK_TIMEOUT_MS", d.timeout)?,
            concurrency: num("WEFT_HOOK_CONCURRENCY")?.map_or(d.concurrency, |n| {
                usize::try_from(n).unwrap_or(usize::MAX).min(1024)
            }),
        })
    }
}

/// Sends hook deliveries until shutdown.
pub struct Dispatcher {
    store: Store,
    bus: Bus,
    guard: Guard,
    http: Client,
    config: HookConfig,
    delivered: Counter,
    failed: Counter,
    dead: Counter,
}

impl Dispatcher {
    /// A dispatcher on `store`, telling waiting runs through `bus`, calling only what
    /// `guard` allows.
    pub fn new(
        store: Store,
        bus: Bus,
        metrics: &Metrics,
        config: HookConfig,
        guard: Guard,
    ) -> Result<Self> {
        // A hook is one call to the URL declared; a redirect elsewhere is not followed
        // (no redirects: the 3xx is the answer, a failed attempt).
        let http = guard
            .client_builder(0)
            .timeout(config.timeout)
            .build()
            .map_err(|e| Error::Config(format!("hook HTTP client: {e}")))?;
        tracing::info!(outbound_allow = %guard.allow_list(), "hook dispatcher ready");
        Ok(Self {
            store,
            bus,
            guard,
            http,
            config,
            delivered: metrics.counter("weft_hook_deliveries", "Hook deliveries that succeeded"),
            failed: metrics.counter("weft_hook_attempts_failed", "Hook attempts that failed"),
            dead: metrics.counter(
                "weft_hook_dead_letters",
                "Hook deliveries dead-lettered after their last attempt",
            ),
        })
    }

    /// Dispatches until `shutdown`; a round in progress finishes first (its calls are
    /// bounded by the request timeout).
    pub async fn run(&self, shutdown: CancellationToken) {
        while !shutdown.is_cancelled() {
            let wait = self.round().await;
            if wait.is_zero() {
                continue;
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// One round: claim what is due, send it, settle it; then how long to sleep.
    async fn round(&self) -> Duration {
        let limit = i64::try_from(self.config.concurrency).unwrap_or(i64::MAX);
        let claimed = match self
            .store
            .claim_hook_deliveries(limit, self.config.timeout + LEASE_MARGIN)
            .await
        {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "claiming hook deliveries failed");
                return ERROR_BACKOFF;
            }
        };
        let full = claimed.len() >= self.config.concurrency;
        let settled = futures_util::future::join_all(claimed.iter().map(|c| self.deliver(c))).await;
        if settled.iter().any(Result::is_err) {
            return ERROR_BACKOFF;
        }
        if full || !claimed.is_empty() {
            return Duration::ZERO;
        }
        match self.store.next_hook_delivery_in().await {
            Ok(Some(next)) => next.clamp(MIN_WAIT, POLL_INTERVAL),
            Ok(None) => POLL_INTERVAL,
            Err(e) => {
                tracing::warn!(error = %e, "reading the next hook delivery failed");
                ERROR_BACKOFF
            }
        }
    }

    /// One attempt of `claimed`, recorded and settled; a waiting run is told.
    async fn deliver(&self, claimed: &Claimed) -> Result<()> {
        let span = tracing::info_span!(
            "history.hook_delivery",
            delivery_id = %claimed.id,
            hook = %claimed.hook,
            attempt = claimed.attempt
        );
        weft::telemetry::set_parent(&span, claimed.traceparent.as_deref());
        let result = self.send(claimed).instrument(span.clone()).await;
        if result.succeeded() {
            self.delivered.inc();
        } else {
            self.failed.inc();
            let last = result.permanent
                || self
                    .config
                    .backoff
                    .after(u32::try_from(claimed.attempt).unwrap_or(u32::MAX))
                    .is_none();
            if last {
                self.dead.inc();
            }
            span.in_scope(|| {
                tracing::warn!(
                    workflow_id = %claimed.workflow_id,
                    url = %redacted(&claimed.url),
                    error = result.error.as_deref().unwrap_or_default(),
                    dead = last,
                    "hook attempt failed"
                );
            });
        }
        let outbox = self
            .store
            .settle_hook_attempt(self.bus.names(), claimed, &result, &self.config.backoff)
            .await
            .inspect_err(|e| tracing::warn!(error = %e, delivery_id = %claimed.id, "recording a hook attempt failed; it is retried when its lease ends"))?;
        if !outbox.is_empty() {
            if let Err(e) = self.store.publish_outbox(&self.bus, &outbox).await {
                tracing::warn!(error = %e, "publishing RollbackHooksDone failed; left for the sweeper");
            }
        }
        Ok(())
    }

    /// The HTTP call.
    async fn send(&self, claimed: &Claimed) -> AttemptResult {
        let started = Instant::now();
        // A URL naming an address is connected to without resolution, so the guard's
        // resolver never sees it: it is checked here. (A URL that does not parse fails
        // in the client, as before.)
        if let Some(refused) = Url::parse(&claimed.url)
            .ok()
            .and_then(|url| self.guard.check_url(&url).err())
        {
            return AttemptResult {
                status_code: None,
                error: Some(refused.to_string()),
                duration: started.elapsed(),
                permanent: true,
            };
        }
        let mut request = self
            .http
            .post(&claimed.url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(hooks::DELIVERY_HEADER, claimed.id.to_string())
            .header(hooks::HOOK_HEADER, &claimed.hook)
            .header(hooks::EVENT_HEADER, &claimed.event)
            .header(hooks::ATTEMPT_HEADER, claimed.attempt.to_string());
        if let Some(headers) = claimed.headers.as_object() {
            for (name, value) in headers {
                if let Some(value) = value.as_str() {
                    request = request.header(name.as_str(), value);
                }
            }
        }
        if let Some(signature) = &claimed.signature {
            request = request.header(hooks::SIGNATURE_HEADER, signature);
        }
        // The receiver may join the run's trace (this runs inside the delivery's span).
        if let Some(traceparent) = weft::telemetry::current_traceparent() {
            request = request.header("traceparent", traceparent);
        }
        let answer = request.body(claimed.body.clone()).send().await;
        let (status_code, error) = match answer {
            Ok(response) => {
                let status = response.status();
                if status.is_success() {
                    (Some(status.as_u16()), None)
                } else {
                    let text = response.text().await.unwrap_or_default();
                    let snippet: String = text.chars().take(ERROR_BODY_CHARS).collect();
                    (
                        Some(status.as_u16()),
                        Some(
                            format!("HTTP {}: {snippet}", status.as_u16())
                                .trim_end_matches(": ")
                                .to_owned(),
                        ),
                    )
                }
            }
            Err(e) => match Refused::find(&e) {
                // A name resolving to a refused address: the guard's reason alone.
                Some(refused) => {
                    return AttemptResult {
                        status_code: None,
                        error: Some(refused.to_string()),
                        duration: started.elapsed(),
                        permanent: true,
                    }
                }
                None => (None, Some(describe(&e))),
            },
        };
        AttemptResult {
            status_code,
            error,
            duration: started.elapsed(),
            permanent: false,
        }
    }
}

/// The URL without credentials and query (they may hold secrets), for logs.
fn redacted(url: &str) -> String {
    match Url::parse(url) {
        Ok(u) => format!("{}{}", u.origin().ascii_serialization(), u.path()),
        Err(_) => "(not a valid URL)".to_owned(),
    }
}

/// A transport error with its causes (reqwest's own message rarely says which).
fn describe(e: &reqwest::Error) -> String {
    let mut text = if e.is_timeout() {
        "timed out".to_owned()
    } else {
        e.to_string()
    };
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn with(pairs: &[(&str, &str)]) -> Result<HookConfig> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        HookConfig::from_lookup(|k| map.get(k).cloned())
    }

    #[test]
    fn logged_urls_lose_credentials_and_query() {
        assert_eq!(
            redacted("https://user:pw@hooks.example:8443/a/b?token=t"),
            "https://hooks.example:8443/a/b"
        );
        assert_eq!(redacted("not a url"), "(not a valid URL)");
    }

    #[test]
    fn settings_come_from_the_environment_and_bad_ones_name_the_variable() {
        assert_eq!(with(&[]).unwrap(), HookConfig::default());
        let c = with(&[
            ("WEFT_HOOK_MAX_ATTEMPTS", "3"),
            ("WEFT_HOOK_RETRY_DELAY_MS", "50"),
            ("WEFT_HOOK_TIMEOUT_MS", "2000"),
        ])
        .unwrap();
        assert_eq!(c.backoff.max_attempts, 3);
        assert_eq!(c.backoff.initial, Duration::from_millis(50));
        assert_eq!(c.timeout, Duration::from_secs(2));
        let e = with(&[("WEFT_HOOK_MAX_ATTEMPTS", "0")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("WEFT_HOOK_MAX_ATTEMPTS"), "{e}");
        let e = with(&[("WEFT_HOOK_TIMEOUT_MS", "soon")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("WEFT_HOOK_TIMEOUT_MS"), "{e}");
    }
}
