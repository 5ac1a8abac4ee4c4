//! The scheduler's counters, exported through the worker's [`Metrics`].

use prometheus_client::metrics::counter::Counter;

use crate::admin::Metrics;

/// What the scheduler did since the worker started.
#[derive(Debug, Clone)]
pub(crate) struct Counters {
    /// `Heartbeats` requests sent.
    pub(crate) requests: Counter,
    /// Beats sent (one per activity per request).
    pub(crate) beats: Counter,
    /// Requests that got no answer (timeout, connection lost).
    pub(crate) failed: Counter,
    /// Attempts the service stopped (STOP or NOT_FOUND).
    pub(crate) stopped: Counter,
}

impl Counters {
    /// Registers the counters in `metrics` (or finds them there).
    pub(crate) fn new(metrics: &Metrics) -> Self {
        Self {
            requests: metrics.counter(
                "weft_worker_heartbeat_requests",
                "Heartbeat requests sent (one per tick carries every due activity)",
            ),
            beats: metrics.counter("weft_worker_heartbeats", "Heartbeats sent"),
            failed: metrics.counter(
                "weft_worker_heartbeat_failures",
                "Heartbeat requests that got no answer",
            ),
            stopped: metrics.counter(
                "weft_worker_activities_stopped",
                "Activities stopped by the heartbeat service",
            ),
        }
    }
}
