//! Retry and timeout policies of a task, read from its frozen `taskDefinition` (the
//! registered TaskDef the gateway embedded at start, or one written inline), with the
//! workflow task's own `retryCount` taking precedence as in Conductor.

use serde_json::Value;
use weft::dsl::{TaskType, WorkflowTask};
use weft::registry::AttemptLimits;

/// How the delay between attempts grows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryLogic {
    /// `retryDelaySeconds` every time.
    Fixed,
    /// `retryDelaySeconds × 2^(attempt−1)`.
    Exponential,
    /// `retryDelaySeconds × backoffScaleFactor × attempt`.
    Linear,
}

/// What happens when a task runs out of time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeoutPolicy {
    /// The attempt times out and is retried like a failure.
    Retry,
    /// The whole run times out.
    TimeOutWorkflow,
    /// Nothing but the record: the task keeps waiting.
    AlertOnly,
}

/// A task's policies.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    /// Retries after the first attempt.
    pub retry_count: i32,
    /// Growth of the delay.
    pub retry_logic: RetryLogic,
    /// Base delay between attempts.
    pub retry_delay_seconds: i64,
    /// Factor of LINEAR_BACKOFF.
    pub backoff_scale_factor: i64,
    /// Upper bound of any delay (`maxRetryDelaySeconds`; 0 = a day).
    pub max_retry_delay_seconds: i64,
    /// Upper bound of the random milliseconds added to each delay (`backoffJitterMs`).
    pub backoff_jitter_ms: i64,
    /// Time an attempt may take from a worker's start (0 = no limit).
    pub timeout_seconds: i64,
    /// Time an attempt may wait for a worker to take it (0 = no limit).
    pub poll_timeout_seconds: i64,
    /// Time all attempts together may take, from the first one's scheduling (0 = no limit).
    pub total_timeout_seconds: i64,
    /// What a timeout does.
    pub timeout_policy: TimeoutPolicy,
    /// Error kinds never retried (`nonRetryableErrors`, a Weft extension of TaskDef).
    pub non_retryable_errors: Vec<String>,
    /// Heartbeat timeout (`responseTimeoutSeconds`): a running attempt silent for
    /// longer is timed out by the heartbeat service. Conductor's default, 3,600 s.
    pub response_timeout_seconds: i64,
    /// `concurrentExecLimit` and the rate limit, enforced when a worker claims an
    /// attempt (docs/task-limits.md); written into each attempt's registry row.
    pub limits: AttemptLimits,
}

/// Whether a failed or timed-out task of `kind` is retried per its policy. Conductor
/// retries a task of any type but its built-in flow tasks (`TaskType.isBuiltIn`: the
/// forks, joins, switches and loops), which fail for good; a failure that is terminal
/// (FAILED_WITH_TERMINAL_ERROR: an INLINE script that throws, a SET_VARIABLE too large)
/// is never retried either.
pub fn retried(kind: TaskType) -> bool {
    !matches!(
        kind,
        TaskType::Decision
            | TaskType::Switch
            | TaskType::ForkJoin
            | TaskType::ForkJoinDynamic
            | TaskType::Join
            | TaskType::ExclusiveJoin
            | TaskType::DoWhile
    )
}

/// Conductor's default `responseTimeoutSeconds`.
pub const DEFAULT_RESPONSE_TIMEOUT_SECONDS: i64 = 3_600;

/// Bound on any computed retry delay (a day), so a long backoff cannot overflow.
const MAX_DELAY_SECONDS: i64 = 86_400;

impl Policy {
    /// The policies of `task`. Without a task definition: no retries (unless the task
    /// says `retryCount`), no delay, no timeout. With one: Conductor's TaskDef defaults
    /// for what it leaves out (3 retries, FIXED 60 s, TIME_OUT_WF).
    pub fn of(task: &WorkflowTask) -> Self {
        let def = task.extra.get("taskDefinition").filter(|d| d.is_object());
        let int = |key: &str, default: i64| {
            def.and_then(|d| d.get(key))
                .and_then(Value::as_i64)
                .unwrap_or(default)
                .max(0)
        };
        let text = |key: &str| def.and_then(|d| d.get(key)).and_then(Value::as_str);
        let defaults = def.is_some();
        let retry_count = task
            .extra
            .get("retryCount")
            .and_then(Value::as_i64)
            .unwrap_or_else(|| int("retryCount", if defaults { 3 } else { 0 }))
            .clamp(0, 1_000) as i32;
        Self {
            retry_count,
            retry_logic: match text("retryLogic") {
                Some("EXPONENTIAL_BACKOFF") => RetryLogic::Exponential,
                Some("LINEAR_BACKOFF") => RetryLogic::Linear,
                _ => RetryLogic::Fixed,
            },
            retry_delay_seconds: int("retryDelaySeconds", if defaults { 60 } else { 0 }),
            backoff_scale_factor: int("backoffScaleFactor", 1).max(1),
            max_retry_delay_seconds: int("maxRetryDelaySeconds", 0),
            backoff_jitter_ms: int("backoffJitterMs", 0).min(MAX_DELAY_SECONDS * 1_000),
            timeout_seconds: int("timeoutSeconds", 0),
            poll_timeout_seconds: int("pollTimeoutSeconds", 0),
            total_timeout_seconds: int("totalTimeoutSeconds", 0),
            timeout_policy: match text("timeoutPolicy") {
                Some("RETRY") => TimeoutPolicy::Retry,
                Some("ALERT_ONLY") => TimeoutPolicy::AlertOnly,
                _ => TimeoutPolicy::TimeOutWorkflow,
            },
            non_retryable_errors: def
                .and_then(|d| d.get("nonRetryableErrors"))
                .and_then(Value::as_array)
                .map(|kinds| {
                    kinds
                        .iter()
                        .filter_map(|k| k.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default(),
            response_timeout_seconds: int(
                "responseTimeoutSeconds",
                DEFAULT_RESPONSE_TIMEOUT_SECONDS,
            ),
            limits: def.map(AttemptLimits::of_task_def).unwrap_or_default(),
        }
    }

    /// Whether a failure of `kind` may be retried.
    pub fn is_retryable(&self, kind: Option<&str>) -> bool {
        kind.is_none_or(|k| !self.non_retryable_errors.iter().any(|n| n == k))
    }

    /// The delay before the attempt after `failed_attempt` (from 1).
    pub fn retry_delay(&self, failed_attempt: i32) -> chrono::Duration {
        let base = self.retry_delay_seconds;
        let n = i64::from(failed_attempt.max(1));
        let seconds = match self.retry_logic {
            RetryLogic::Fixed => base,
            RetryLogic::Linear => base
                .saturating_mul(self.backoff_scale_factor)
                .saturating_mul(n),
            RetryLogic::Exponential => base.saturating_mul(1_i64 << (n - 1).min(20)),
        };
        let cap = match self.max_retry_delay_seconds {
            0 => MAX_DELAY_SECONDS,
            max => max.min(MAX_DELAY_SECONDS),
        };
        chrono::Duration::seconds(seconds.min(cap))
    }

    /// The back-off of the retry of `failed`, the attempt `failed_attempt`: the capped
    /// delay, and that delay plus a jitter in `[0, backoffJitterMs]` (Conductor applies
    /// the cap first). The jitter is drawn from the failed attempt's id, not from a
    /// random source: the decision stays a function of the history.
    pub fn backoff(&self, failed_attempt: i32, failed: uuid::Uuid) -> super::Backoff {
        let seconds = self.retry_delay(failed_attempt).num_seconds();
        let jitter = match self.backoff_jitter_ms {
            0 => 0,
            max => {
                let bytes = failed.as_bytes();
                let mut tail = [0_u8; 8];
                tail.copy_from_slice(&bytes[8..]);
                (u64::from_le_bytes(tail) % (max as u64 + 1)) as i64
            }
        };
        super::Backoff {
            seconds,
            delay_ms: seconds * 1_000 + jitter,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn task(extra: Value) -> WorkflowTask {
        let mut t = json!({"name": "a", "taskReferenceName": "a"});
        t.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        serde_json::from_value(t).unwrap()
    }

    #[test]
    fn no_task_definition_means_no_retry_and_no_timeout() {
        let p = Policy::of(&task(json!({})));
        assert_eq!(
            (p.retry_count, p.retry_delay_seconds, p.timeout_seconds),
            (0, 0, 0)
        );
    }

    #[test]
    fn limits_come_from_the_frozen_task_definition_only() {
        assert!(Policy::of(&task(json!({}))).limits.is_unlimited());
        // A limit on the workflow task itself is not Conductor's: only its TaskDef counts.
        assert!(Policy::of(&task(json!({"concurrentExecLimit": 2})))
            .limits
            .is_unlimited());
        let p = Policy::of(&task(json!({"taskDefinition": {
            "name": "a", "concurrentExecLimit": 2, "rateLimitPerFrequency": 5,
            "rateLimitFrequencyInSeconds": 10}})));
        assert_eq!(p.limits.concurrency, Some(2));
        assert_eq!(
            p.limits.rate,
            Some(weft::registry::RateLimit {
                per_window: 5,
                window_seconds: 10
            })
        );
    }

    #[test]
    fn task_definition_defaults_are_conductors_and_retry_count_override_wins() {
        let p = Policy::of(&task(json!({"taskDefinition": {"name": "a"}})));
        assert_eq!(p.retry_count, 3);
        assert_eq!(p.retry_delay(1), chrono::Duration::seconds(60));
        assert_eq!(p.timeout_policy, TimeoutPolicy::TimeOutWorkflow);
        let p = Policy::of(&task(
            json!({"retryCount": 1, "taskDefinition": {"retryCount": 5}}),
        ));
        assert_eq!(p.retry_count, 1);
    }

    #[test]
    fn a_jitter_stays_within_its_bound_and_on_top_of_the_capped_delay() {
        let p = Policy::of(&task(json!({"taskDefinition": {
            "retryLogic": "EXPONENTIAL_BACKOFF", "retryDelaySeconds": 2,
            "maxRetryDelaySeconds": 3, "backoffJitterMs": 2000}})));
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..200 {
            let b = p.backoff(2, uuid::Uuid::new_v4());
            assert_eq!(b.seconds, 3, "capped before the jitter");
            assert!((3_000..=5_000).contains(&b.delay_ms), "{b:?}");
            seen.insert(b.delay_ms / 500);
        }
        assert!(seen.len() > 2, "jitter spreads: {seen:?}");
        let id = uuid::Uuid::new_v4();
        assert_eq!(
            p.backoff(1, id),
            p.backoff(1, id),
            "the same for the same attempt"
        );

        let none = Policy::of(&task(json!({"taskDefinition": {
            "retryLogic": "FIXED", "retryDelaySeconds": 30, "backoffJitterMs": 0}})));
        let b = none.backoff(1, uuid::Uuid::new_v4());
        assert_eq!((b.seconds, b.delay_ms), (30, 30_000));
    }

    #[test]
    fn backoffs_grow_as_declared() {
        let def = |logic: &str| {
            Policy::of(&task(json!({"taskDefinition": {
                "retryLogic": logic, "retryDelaySeconds": 2, "backoffScaleFactor": 3}})))
        };
        let secs = |p: &Policy| {
            (1..=3)
                .map(|a| p.retry_delay(a).num_seconds())
                .collect::<Vec<_>>()
        };
        assert_eq!(secs(&def("FIXED")), vec![2, 2, 2]);
        assert_eq!(secs(&def("LINEAR_BACKOFF")), vec![6, 12, 18]);
        assert_eq!(secs(&def("EXPONENTIAL_BACKOFF")), vec![2, 4, 8]);
        assert_eq!(
            def("EXPONENTIAL_BACKOFF").retry_delay(500).num_seconds(),
            MAX_DELAY_SECONDS
        );
    }
}
