//! Configuration from `WEFT_*` environment variables (DESIGN.md §8).
//!
//! Every process of the suite reads the same variables; each takes what it needs.

use std::net::SocketAddr;
use std::time::Duration;

use crate::{Error, Result};

/// The suite's configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// PostgreSQL URL (`WEFT_DATABASE_URL`).
    pub database_url: String,
    /// A streaming replica's URL for the reads that may lag — search, statistics,
    /// history pages (`WEFT_DATABASE_READ_URL`; unset or empty: every read on the
    /// primary). PostgreSQL only.
    pub database_read_url: Option<String>,
    /// RabbitMQ URL (`WEFT_AMQP_URL`); several brokers separated by commas.
    pub amqp_url: String,
    /// The type of the namespace's queues (`WEFT_QUEUE_TYPE`: `classic`, the default, or
    /// `quorum`); the same for every process of a deployment.
    pub queue_type: crate::topology::QueueType,
    /// Redis URL (`WEFT_REDIS_URL`).
    pub redis_url: String,
    /// Prefix of every exchange, queue and Redis key (`WEFT_NAMESPACE`).
    pub namespace: String,
    /// Gateway listen address (`WEFT_HTTP_ADDR`).
    pub http_addr: SocketAddr,
    /// Health and metrics listen address of a non-gateway service (`WEFT_ADMIN_ADDR`);
    /// `None` lets each service use its own default port.
    pub admin_addr: Option<SocketAddr>,
    /// Number of command shards (`WEFT_SHARDS`); fixed per deployment.
    pub shards: u16,
    /// Messages a consumer may hold unacknowledged (`WEFT_PREFETCH`).
    pub prefetch: u16,
    /// Transactions a decider has in flight at once (`WEFT_DECIDER_WRITERS`); each
    /// joins the batches of every shard waiting for it (group commit).
    pub decider_writers: u8,
    /// Outbox rows older than this are re-published by the history sweeper
    /// (`WEFT_OUTBOX_SWEEP_AFTER_MS`).
    pub outbox_sweep_after: Duration,
    /// How long in-flight work may take to finish after SIGTERM (`WEFT_SHUTDOWN_GRACE_MS`).
    pub shutdown_grace: Duration,
    /// Largest request body the gateway accepts, in bytes (`WEFT_MAX_BODY_BYTES`).
    pub max_body_bytes: usize,
    /// The decider marks its activity tasks as taking their results together
    /// (`WEFT_RESULTS_TOGETHER`, default `true`; docs/worker-sdk.md, "Results sent
    /// together"). Set it to `false` on every decider while deciders older than the
    /// feature may still consume a shard (a rolling upgrade from such a version, a
    /// rollback to one): they dead-letter a message of results.
    pub results_together: bool,
    /// The gateway sends the starts it accepts for one command shard together when they
    /// meet behind a message in flight (`WEFT_STARTS_TOGETHER`, default `false`;
    /// docs/decider.md, "Starts sent together"). Switch it on only once no decider older
    /// than the feature can consume a shard (every decider upgraded, no rollback to such
    /// a version planned): those dead-letter a message of starts, and nothing tells a
    /// gateway which decider holds a shard.
    pub starts_together: bool,
    /// Iterations a DO_WHILE may run before it fails (`WEFT_MAX_LOOP_ITERATIONS`); the
    /// decider records the value in each run it starts, so replay uses the same cap.
    pub max_loop_iterations: u32,
    /// Branches one FORK_JOIN_DYNAMIC may open before it fails
    /// (`WEFT_MAX_FORK_BRANCHES`); recorded in each run it starts, as the loop cap.
    pub max_fork_branches: u32,
    /// Largest size of a run's variables, serialized as JSON, in kilobytes
    /// (`WEFT_MAX_VARIABLES_KB`, Conductor's `maxWorkflowVariablesPayloadSizeThreshold`): a
    /// SET_VARIABLE that would pass it fails for good and leaves them as they were; the
    /// decider records the value in each run it starts, as the loop cap.
    pub max_variables_kb: u32,
    /// The heartbeat registry writes an attempt's heartbeat to PostgreSQL at most once per
    /// this interval (`WEFT_HEARTBEAT_WRITE_INTERVAL_MS`); Redis holds the newer ones.
    pub heartbeat_write_interval: Duration,
    /// How often the heartbeat service looks for timed-out attempts
    /// (`WEFT_HEARTBEAT_SCAN_INTERVAL_MS`).
    pub heartbeat_scan_interval: Duration,
    /// How long ended attempts stay in the registry (`WEFT_TASK_CHECK_RETENTION_HOURS`).
    pub task_check_retention: Duration,
    /// Link from the web UI's run page to its trace (`WEFT_TRACE_URL`), with `{traceId}`
    /// where the trace id goes, e.g. Jaeger's `http://localhost:16686/trace/{traceId}`;
    /// unset: the trace id is shown without a link.
    pub trace_url: Option<String>,
    /// Lifecycle events the decider publishes, as topic patterns (`WEFT_EVENTS`, e.g.
    /// `#` or `workflow.*,task.failed`); none by default (docs/events.md).
    pub events: crate::events::EventKeys,
    /// Lifecycle events with the same routing key that meet at the decider go as one
    /// `LifecycleEvents` message (`WEFT_EVENTS_TOGETHER`, default `false`; docs/events.md,
    /// "Events sent together"). Switch it on only when every consumer of the events
    /// exchange reads such messages (the SDK's listener does): a plain consumer expecting
    /// one `LifecycleEvent` a message would not.
    pub events_together: bool,
    /// Start events a gateway starts at once from the `<ns>.starts` queue
    /// (`WEFT_START_EVENT_CONCURRENCY`); 0: this gateway takes none (docs/start-events.md).
    pub start_event_concurrency: usize,
    /// Starts over HTTP one gateway runs at once; one more is answered 429 with
    /// `Retry-After` (`WEFT_MAX_STARTS_IN_FLIGHT`).
    pub max_starts_in_flight: usize,
    /// How long audit rows are kept (`WEFT_AUDIT_RETENTION_DAYS`; `0`: for ever).
    pub audit_retention: Option<Duration>,
    /// Who may call the gateway (`WEFT_AUTH`, `WEFT_ADMIN_TOKEN`, `WEFT_METRICS_AUTH`).
    pub auth: crate::auth_settings::AuthSettings,
    /// What outbound calls made on behalf of a definition (HTTP tasks, hooks) may reach
    /// besides public addresses (`WEFT_OUTBOUND_ALLOW`, docs/outbound.md): CIDR blocks,
    /// addresses, host names and `*.domain`, comma-separated; `*` turns the guard off.
    /// `None` (unset): nothing beyond public addresses, except in `weft dev`, which
    /// allows this machine (`127.0.0.0/8,::1,localhost`).
    pub outbound_allow: Option<crate::outbound::AllowList>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            database_url: "postgres://postgres@127.0.0.1:5432/weft".into(),
            database_read_url: None,
            amqp_url: "amqp://guest:guest@127.0.0.1:5672/%2f".into(),
            queue_type: crate::topology::QueueType::Classic,
            redis_url: "redis://127.0.0.1:6379".into(),
            namespace: "weft".into(),
            http_addr: SocketAddr::from(([127, 0, 0, 1], 8080)),
            admin_addr: None,
            shards: 16,
            prefetch: 64,
            decider_writers: 1,
            outbox_sweep_after: Duration::from_secs(5),
            shutdown_grace: Duration::from_secs(10),
            max_body_bytes: 4 * 1024 * 1024,
            results_together: true,
            starts_together: false,
            max_loop_iterations: 100_000,
            max_fork_branches: 10_000,
            max_variables_kb: 256,
            heartbeat_write_interval: Duration::from_secs(60),
            heartbeat_scan_interval: Duration::from_secs(1),
            task_check_retention: Duration::from_secs(7 * 24 * 3600),
            trace_url: None,
            events: crate::events::EventKeys::none(),
            events_together: false,
            start_event_concurrency: 16,
            max_starts_in_flight: 1024,
            audit_retention: Some(Duration::from_secs(365 * 24 * 3600)),
            auth: crate::auth_settings::AuthSettings::default(),
            outbound_allow: None,
        }
    }
}

impl Config {
    /// The names of the namespace's exchanges and queues, with their queue type.
    pub fn names(&self) -> crate::topology::Names {
        crate::topology::Names::new(&self.namespace, self.shards).with_queue_type(self.queue_type)
    }

    /// Reads the process environment; unset variables take their defaults.
    pub fn from_env() -> Result<Self> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// Reads configuration through `get` (the environment, or a map in tests).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let d = Self::default();
        let cfg = Self {
            database_url: get("WEFT_DATABASE_URL").unwrap_or(d.database_url),
            database_read_url: get("WEFT_DATABASE_READ_URL").filter(|u| !u.trim().is_empty()),
            amqp_url: get("WEFT_AMQP_URL").unwrap_or(d.amqp_url),
            queue_type: match get("WEFT_QUEUE_TYPE") {
                Some(raw) => raw
                    .parse()
                    .map_err(|e| Error::Config(format!("WEFT_QUEUE_TYPE: {e}")))?,
                None => d.queue_type,
            },
            redis_url: get("WEFT_REDIS_URL").unwrap_or(d.redis_url),
            namespace: get("WEFT_NAMESPACE").unwrap_or(d.namespace),
            http_addr: parse(&get, "WEFT_HTTP_ADDR")?.unwrap_or(d.http_addr),
            admin_addr: parse(&get, "WEFT_ADMIN_ADDR")?,
            shards: parse(&get, "WEFT_SHARDS")?.unwrap_or(d.shards),
            prefetch: parse(&get, "WEFT_PREFETCH")?.unwrap_or(d.prefetch),
            decider_writers: parse(&get, "WEFT_DECIDER_WRITERS")?.unwrap_or(d.decider_writers),
            outbox_sweep_after: parse(&get, "WEFT_OUTBOX_SWEEP_AFTER_MS")?
                .map(Duration::from_millis)
                .unwrap_or(d.outbox_sweep_after),
            shutdown_grace: parse(&get, "WEFT_SHUTDOWN_GRACE_MS")?
                .map(Duration::from_millis)
                .unwrap_or(d.shutdown_grace),
            max_body_bytes: parse(&get, "WEFT_MAX_BODY_BYTES")?.unwrap_or(d.max_body_bytes),
            results_together: parse(&get, "WEFT_RESULTS_TOGETHER")?.unwrap_or(d.results_together),
            starts_together: parse(&get, "WEFT_STARTS_TOGETHER")?.unwrap_or(d.starts_together),
            max_loop_iterations: parse(&get, "WEFT_MAX_LOOP_ITERATIONS")?
                .unwrap_or(d.max_loop_iterations),
            max_fork_branches: parse(&get, "WEFT_MAX_FORK_BRANCHES")?
                .unwrap_or(d.max_fork_branches),
            max_variables_kb: parse(&get, "WEFT_MAX_VARIABLES_KB")?.unwrap_or(d.max_variables_kb),
            heartbeat_write_interval: parse(&get, "WEFT_HEARTBEAT_WRITE_INTERVAL_MS")?
                .map(Duration::from_millis)
                .unwrap_or(d.heartbeat_write_interval),
            heartbeat_scan_interval: parse(&get, "WEFT_HEARTBEAT_SCAN_INTERVAL_MS")?
                .map(Duration::from_millis)
                .unwrap_or(d.heartbeat_scan_interval),
            task_check_retention: parse(&get, "WEFT_TASK_CHECK_RETENTION_HOURS")?
                .map(|h: u64| Duration::from_secs(h * 3600))
                .unwrap_or(d.task_check_retention),
            trace_url: get("WEFT_TRACE_URL").filter(|u| !u.trim().is_empty()),
            events: match get("WEFT_EVENTS") {
                Some(list) => crate::events::EventKeys::parse(&list)?,
                None => d.events,
            },
            events_together: parse(&get, "WEFT_EVENTS_TOGETHER")?.unwrap_or(d.events_together),
            start_event_concurrency: parse(&get, "WEFT_START_EVENT_CONCURRENCY")?
                .unwrap_or(d.start_event_concurrency),
            max_starts_in_flight: parse(&get, "WEFT_MAX_STARTS_IN_FLIGHT")?
                .unwrap_or(d.max_starts_in_flight),
            audit_retention: match parse::<u64>(&get, "WEFT_AUDIT_RETENTION_DAYS")? {
                None => d.audit_retention,
                Some(0) => None,
                Some(days) => Some(Duration::from_secs(days.saturating_mul(24 * 3600))),
            },
            auth: crate::auth_settings::AuthSettings::from_lookup(&get)?,
            outbound_allow: match get(crate::outbound::allow::ENV) {
                Some(raw) => Some(crate::outbound::AllowList::parse(&raw).map_err(|e| {
                    Error::Config(format!("{}={raw:?}: {e}", crate::outbound::allow::ENV))
                })?),
                None => d.outbound_allow,
            },
        };
        cfg.validate()?;
        Ok(cfg)
    }

    fn validate(&self) -> Result<()> {
        let ns_ok = !self.namespace.is_empty()
            && self.namespace.len() <= 64
            && self
                .namespace
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !ns_ok {
            return Err(Error::Config(format!(
                "WEFT_NAMESPACE must be 1-64 characters of [A-Za-z0-9_-], got {:?}",
                self.namespace
            )));
        }
        if self.shards == 0 || self.shards > 1024 {
            return Err(Error::Config(format!(
                "WEFT_SHARDS must be between 1 and 1024, got {}",
                self.shards
            )));
        }
        if self.max_loop_iterations == 0 {
            return Err(Error::Config(
                "WEFT_MAX_LOOP_ITERATIONS must be at least 1".into(),
            ));
        }
        if self.max_fork_branches == 0 {
            return Err(Error::Config(
                "WEFT_MAX_FORK_BRANCHES must be at least 1".into(),
            ));
        }
        if self.max_variables_kb == 0 {
            return Err(Error::Config(
                "WEFT_MAX_VARIABLES_KB must be at least 1".into(),
            ));
        }
        if self.heartbeat_write_interval.is_zero() || self.heartbeat_scan_interval.is_zero() {
            return Err(Error::Config(
                "WEFT_HEARTBEAT_WRITE_INTERVAL_MS and WEFT_HEARTBEAT_SCAN_INTERVAL_MS must be at least 1".into(),
            ));
        }
        if let Some(url) = &self.trace_url {
            if !url.contains("{traceId}") {
                return Err(Error::Config(format!(
                    "WEFT_TRACE_URL must contain {{traceId}} where the trace id goes, got {url:?}"
                )));
            }
        }
        if self.prefetch == 0 {
            return Err(Error::Config("WEFT_PREFETCH must be at least 1".into()));
        }
        if self.max_starts_in_flight == 0 {
            return Err(Error::Config(
                "WEFT_MAX_STARTS_IN_FLIGHT must be at least 1".into(),
            ));
        }
        if self.decider_writers == 0 {
            return Err(Error::Config(
                "WEFT_DECIDER_WRITERS must be at least 1".into(),
            ));
        }
        Ok(())
    }
}

fn parse<T: std::str::FromStr>(
    get: &impl Fn(&str) -> Option<String>,
    key: &str,
) -> Result<Option<T>>
where
    T::Err: std::fmt::Display,
{
    match get(key) {
        None => Ok(None),
        Some(raw) => raw
            .trim()
            .parse()
            .map(Some)
            .map_err(|e| Error::Config(format!("{key}={raw:?}: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn with(pairs: &[(&str, &str)]) -> Result<Config> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_lookup(|k| map.get(k).cloned())
    }

    #[test]
    fn defaults_match_the_design() {
        let c = with(&[]).unwrap();
        assert_eq!(c.namespace, "weft");
        assert_eq!(c.shards, 16);
        assert_eq!(c.http_addr.to_string(), "127.0.0.1:8080");
        assert_eq!(c.outbound_allow, None);
    }

    #[test]
    fn the_queue_type_is_read_and_a_wrong_one_is_refused_naming_the_variable() {
        use crate::topology::QueueType;
        assert_eq!(with(&[]).unwrap().queue_type, QueueType::Classic);
        let quorum = with(&[("WEFT_QUEUE_TYPE", "Quorum")]).unwrap();
        assert_eq!(quorum.queue_type, QueueType::Quorum);
        assert_eq!(quorum.names().queue_type(), QueueType::Quorum);
        let err = with(&[("WEFT_QUEUE_TYPE", "stream")])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("WEFT_QUEUE_TYPE") && err.contains("classic or quorum"),
            "{err}"
        );
    }

    #[test]
    fn run_size_caps_fit_big_runs_by_default_and_zero_is_refused_by_name() {
        let c = with(&[]).unwrap();
        assert_eq!(
            (c.max_loop_iterations, c.max_fork_branches),
            (100_000, 10_000)
        );
        let set = with(&[("WEFT_MAX_FORK_BRANCHES", "20000")]).unwrap();
        assert_eq!(set.max_fork_branches, 20_000);
        for key in ["WEFT_MAX_FORK_BRANCHES", "WEFT_MAX_LOOP_ITERATIONS"] {
            let err = with(&[(key, "0")]).unwrap_err().to_string();
            assert!(err.contains(key), "{err}");
        }
    }

    #[test]
    fn results_go_together_unless_switched_off() {
        assert!(with(&[]).unwrap().results_together);
        assert!(
            !with(&[("WEFT_RESULTS_TOGETHER", "false")])
                .unwrap()
                .results_together
        );
        let err = with(&[("WEFT_RESULTS_TOGETHER", "maybe")])
            .unwrap_err()
            .to_string();
        assert!(err.contains("WEFT_RESULTS_TOGETHER"), "{err}");
    }

    #[test]
    fn starts_go_alone_unless_switched_on_together() {
        assert!(!with(&[]).unwrap().starts_together);
        assert!(
            with(&[("WEFT_STARTS_TOGETHER", "true")])
                .unwrap()
                .starts_together
        );
    }

    #[test]
    fn events_go_alone_unless_switched_on_together() {
        assert!(!with(&[]).unwrap().events_together);
        assert!(
            with(&[("WEFT_EVENTS_TOGETHER", "true")])
                .unwrap()
                .events_together
        );
        let err = with(&[("WEFT_EVENTS_TOGETHER", "yes please")])
            .unwrap_err()
            .to_string();
        assert!(err.contains("WEFT_EVENTS_TOGETHER"), "{err}");
    }

    #[test]
    fn a_read_replica_is_optional_and_an_empty_one_is_none() {
        assert_eq!(with(&[]).unwrap().database_read_url, None);
        assert_eq!(
            with(&[("WEFT_DATABASE_READ_URL", " ")])
                .unwrap()
                .database_read_url,
            None
        );
        let url = "postgres://postgres@replica:5432/weft";
        assert_eq!(
            with(&[("WEFT_DATABASE_READ_URL", url)])
                .unwrap()
                .database_read_url
                .as_deref(),
            Some(url)
        );
    }

    #[test]
    fn the_outbound_allow_list_is_read_and_an_empty_one_is_kept_apart_from_unset() {
        use crate::outbound::AllowList;
        let c = with(&[("WEFT_OUTBOUND_ALLOW", "10.1.0.0/16, ::1, *.corp.example")]).unwrap();
        let list = c.outbound_allow.expect("set");
        assert!(list.allows_ip("10.1.2.3".parse().unwrap()));
        assert!(list.allows_ip("::1".parse().unwrap()));
        assert!(list.allows_host("db.corp.example"));
        assert!(!list.allows_ip("10.2.0.1".parse().unwrap()));
        let c = with(&[("WEFT_OUTBOUND_ALLOW", "")]).unwrap();
        assert_eq!(c.outbound_allow, Some(AllowList::none()));
        let c = with(&[("WEFT_OUTBOUND_ALLOW", "*")]).unwrap();
        assert!(c.outbound_allow.unwrap().allows_everything());
    }

    #[test]
    fn bad_values_name_the_variable() {
        let e = with(&[("WEFT_SHARDS", "lots")]).unwrap_err().to_string();
        assert!(e.contains("WEFT_SHARDS"), "{e}");
        let e = with(&[("WEFT_NAMESPACE", "a.b")]).unwrap_err().to_string();
        assert!(e.contains("WEFT_NAMESPACE"), "{e}");
        let e = with(&[("WEFT_TRACE_URL", "http://jaeger/trace")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("WEFT_TRACE_URL"), "{e}");
        let e = with(&[("WEFT_OUTBOUND_ALLOW", "10.0.0.0/8,https://x.example")])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("WEFT_OUTBOUND_ALLOW") && e.contains("\"https://x.example\""),
            "{e}"
        );
        let c = with(&[("WEFT_TRACE_URL", "http://j:16686/trace/{traceId}")]).unwrap();
        assert_eq!(
            c.trace_url.as_deref(),
            Some("http://j:16686/trace/{traceId}")
        );
    }

    #[test]
    fn starts_in_flight_are_bounded_by_at_least_one() {
        assert_eq!(with(&[]).unwrap().max_starts_in_flight, 1024);
        let c = with(&[("WEFT_MAX_STARTS_IN_FLIGHT", "8")]).unwrap();
        assert_eq!(c.max_starts_in_flight, 8);
        let e = with(&[("WEFT_MAX_STARTS_IN_FLIGHT", "0")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("WEFT_MAX_STARTS_IN_FLIGHT"), "{e}");
    }

    #[test]
    fn audit_rows_are_kept_a_year_unless_told_and_zero_keeps_them_for_ever() {
        let day = Duration::from_secs(24 * 3600);
        assert_eq!(with(&[]).unwrap().audit_retention, Some(day * 365));
        let c = with(&[("WEFT_AUDIT_RETENTION_DAYS", "30")]).unwrap();
        assert_eq!(c.audit_retention, Some(day * 30));
        let c = with(&[("WEFT_AUDIT_RETENTION_DAYS", "0")]).unwrap();
        assert_eq!(c.audit_retention, None);
        let e = with(&[("WEFT_AUDIT_RETENTION_DAYS", "a year")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("WEFT_AUDIT_RETENTION_DAYS"), "{e}");
    }
}
