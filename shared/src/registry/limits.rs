//! Task limits (docs/task-limits.md): a task definition's `concurrentExecLimit` and
//! `rateLimitPerFrequency` / `rateLimitFrequencyInSeconds`, enforced at the claim.
//!
//! The decider writes an attempt's limits into its registry row when it schedules it
//! (from the run's frozen TaskDef); a claim of a row without limits takes the usual
//! single-statement path and pays nothing for this module. A claim of a limited row is
//! decided here, with the task name's other claims serialized by the backend (an advisory
//! lock in PostgreSQL, the single writer in SQLite): [`Gate`] admits it, or defers it
//! with the time the claimant should wait before trying again.

use std::time::Duration;

use serde_json::Value;

/// How long a claim over its concurrency limit is told to wait: nothing says when a
/// running attempt will end, so claimants look again at this pace (each look is one
/// claim request, so the pace bounds what a crowd of waiting tasks costs).
pub const CONCURRENCY_RETRY_AFTER: Duration = Duration::from_millis(500);

/// The least wait a deferral advises (a window ending this very millisecond).
const MIN_RETRY_AFTER: Duration = Duration::from_millis(1);

/// A rate limit: at most `per_window` claims of the task name in each fixed window of
/// `window_seconds` (windows aligned on the epoch, by the store's clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    /// Claims per window (`rateLimitPerFrequency`, above 0).
    pub per_window: i32,
    /// The window's length in seconds (`rateLimitFrequencyInSeconds`, above 0).
    pub window_seconds: i32,
}

/// The limits an attempt's task definition puts on its task name; both absent for the
/// vast majority of tasks, which are then claimed without looking at any of this.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AttemptLimits {
    /// At most this many attempts of the name RUNNING at once (`concurrentExecLimit`).
    pub concurrency: Option<i32>,
    /// At most so many claims of the name per window.
    pub rate: Option<RateLimit>,
}

impl AttemptLimits {
    /// The limits a (frozen or inline) TaskDef sets, read as Conductor reads them:
    /// `concurrentExecLimit` above 0; `rateLimitPerFrequency` above 0 per
    /// `rateLimitFrequencyInSeconds` (absent: 1 s, Conductor's default; 0 or less: no
    /// rate limit, as Conductor's rate limiter skips it). Anything else is no limit.
    pub fn of_task_def(def: &Value) -> Self {
        let int = |key: &str| {
            def.get(key)
                .and_then(Value::as_i64)
                .map(|v| v.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32)
        };
        let concurrency = int("concurrentExecLimit").filter(|n| *n > 0);
        let window = match def.get("rateLimitFrequencyInSeconds") {
            None | Some(Value::Null) => Some(1),
            Some(_) => int("rateLimitFrequencyInSeconds"),
        };
        let rate = match (int("rateLimitPerFrequency"), window) {
            (Some(per_window), Some(window_seconds)) if per_window > 0 && window_seconds > 0 => {
                Some(RateLimit {
                    per_window,
                    window_seconds,
                })
            }
            _ => None,
        };
        Self { concurrency, rate }
    }

    /// Neither limit is set: the attempt is claimed on the usual path.
    pub fn is_unlimited(&self) -> bool {
        self.concurrency.is_none() && self.rate.is_none()
    }

    /// The limits as stored in `task_check` (`concurrency_limit`, `rate_limit`,
    /// `rate_window_seconds`): NULL for an absent limit, so an unlimited row stores
    /// nothing and enters no index of limited rows.
    pub fn columns(&self) -> (Option<i32>, Option<i32>, Option<i32>) {
        (
            self.concurrency,
            self.rate.map(|r| r.per_window),
            self.rate.map(|r| r.window_seconds),
        )
    }

    /// The limits of a stored row (see [`AttemptLimits::columns`]); a rate without a
    /// window (never written) counts as a 1 s window, as Conductor's default.
    pub fn from_columns(
        concurrency: Option<i32>,
        rate: Option<i32>,
        window_seconds: Option<i32>,
    ) -> Self {
        Self {
            concurrency: concurrency.filter(|n| *n > 0),
            rate: rate.filter(|n| *n > 0).map(|per_window| RateLimit {
                per_window,
                window_seconds: window_seconds.filter(|w| *w > 0).unwrap_or(1),
            }),
        }
    }
}

/// Which limit deferred a claim (the `limit` label of `weft_claims_deferred`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LimitKind {
    /// `concurrentExecLimit`.
    Concurrency,
    /// `rateLimitPerFrequency` per `rateLimitFrequencyInSeconds`.
    Rate,
}

impl LimitKind {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            LimitKind::Concurrency => "concurrency",
            LimitKind::Rate => "rate",
        }
    }
}

/// A claim the limits turned away for now: the attempt stays SCHEDULED and the claimant
/// is told to come back after `retry_after`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deferral {
    /// The limit that was reached.
    pub limit: LimitKind,
    /// When to try again (the rest of the rate window; a fixed pace for concurrency).
    pub retry_after: Duration,
    /// What the claimant is told, naming the limit.
    pub reason: String,
}

/// A task name's rate window as stored (`task_rate_windows`): when it began (ms since the
/// epoch) and how many claims it admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// Start, ms since the epoch (a multiple of the window's length).
    pub start_ms: i64,
    /// Claims admitted in it.
    pub claims: i32,
}

/// Decides the limited claims of one task name, in order, from the state the backend
/// read under the name's lock: its RUNNING limited attempts and its rate window.
#[derive(Debug)]
pub struct Gate {
    now_ms: i64,
    running: i64,
    window: Option<Window>,
    stored: Option<Window>,
}

impl Gate {
    /// The gate of a name at `now_ms` (the store's clock), with `running` attempts of it
    /// RUNNING under a concurrency limit and its stored rate window, if any.
    pub fn new(now_ms: i64, running: i64, window: Option<Window>) -> Self {
        Self {
            now_ms,
            running,
            window,
            stored: window,
        }
    }

    /// Admits a claim under `limits` (counting it), or defers it. Concurrency is judged
    /// first, so a claim it defers uses none of the window's claims.
    pub fn admit(&mut self, limits: &AttemptLimits) -> Result<(), Deferral> {
        if let Some(limit) = limits.concurrency {
            if self.running >= i64::from(limit) {
                return Err(Deferral {
                    limit: LimitKind::Concurrency,
                    retry_after: CONCURRENCY_RETRY_AFTER,
                    reason: format!("concurrentExecLimit {limit} reached"),
                });
            }
        }
        if let Some(rate) = limits.rate {
            let length_ms = i64::from(rate.window_seconds) * 1_000;
            let start_ms = self.now_ms - self.now_ms.rem_euclid(length_ms);
            let claims = match self.window {
                Some(w) if w.start_ms == start_ms => w.claims,
                // A new window (or one of another length, after the TaskDef changed).
                _ => 0,
            };
            if claims >= rate.per_window {
                let left = (start_ms + length_ms - self.now_ms).max(0) as u64;
                return Err(Deferral {
                    limit: LimitKind::Rate,
                    retry_after: Duration::from_millis(left).max(MIN_RETRY_AFTER),
                    reason: format!(
                        "rateLimitPerFrequency {} per {} s reached",
                        rate.per_window, rate.window_seconds
                    ),
                });
            }
            self.window = Some(Window {
                start_ms,
                claims: claims + 1,
            });
        }
        if limits.concurrency.is_some() {
            self.running += 1;
        }
        Ok(())
    }

    /// Gives back what [`Gate::admit`] counted for a claim that was not written after
    /// all (its attempt was stopped meanwhile), so the window is not charged for it.
    pub fn release(&mut self, limits: &AttemptLimits) {
        if limits.concurrency.is_some() {
            self.running -= 1;
        }
        if limits.rate.is_some() {
            if let Some(w) = &mut self.window {
                w.claims = (w.claims - 1).max(0);
            }
        }
    }

    /// The window to store, when it changed.
    pub fn window_to_store(&self) -> Option<Window> {
        self.window.filter(|w| Some(*w) != self.stored)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn rate(per_window: i32, window_seconds: i32) -> AttemptLimits {
        AttemptLimits {
            concurrency: None,
            rate: Some(RateLimit {
                per_window,
                window_seconds,
            }),
        }
    }

    #[test]
    fn limits_are_read_as_conductor_reads_them() {
        assert!(AttemptLimits::of_task_def(&json!({"name": "t"})).is_unlimited());
        assert!(AttemptLimits::of_task_def(&json!({"concurrentExecLimit": 0})).is_unlimited());
        assert!(AttemptLimits::of_task_def(&json!({"concurrentExecLimit": null})).is_unlimited());
        assert_eq!(
            AttemptLimits::of_task_def(&json!({"concurrentExecLimit": 3})).concurrency,
            Some(3)
        );
        // Conductor's default window is 1 s; an explicit 0 switches the rate limit off.
        assert_eq!(
            AttemptLimits::of_task_def(&json!({"rateLimitPerFrequency": 5})),
            rate(5, 1)
        );
        assert_eq!(
            AttemptLimits::of_task_def(
                &json!({"rateLimitPerFrequency": 5, "rateLimitFrequencyInSeconds": 60})
            ),
            rate(5, 60)
        );
        assert!(AttemptLimits::of_task_def(
            &json!({"rateLimitPerFrequency": 5, "rateLimitFrequencyInSeconds": 0})
        )
        .is_unlimited());
        assert!(AttemptLimits::of_task_def(&json!({"rateLimitPerFrequency": 0})).is_unlimited());
        let both = AttemptLimits::of_task_def(&json!({
            "concurrentExecLimit": 2, "rateLimitPerFrequency": 10,
            "rateLimitFrequencyInSeconds": 5}));
        assert_eq!(both.columns(), (Some(2), Some(10), Some(5)));
        assert_eq!(
            AttemptLimits::from_columns(Some(2), Some(10), Some(5)),
            both
        );
        assert_eq!(AttemptLimits::default().columns(), (None, None, None));
    }

    #[test]
    fn concurrency_admits_up_to_the_limit_then_defers() {
        let limits = AttemptLimits {
            concurrency: Some(2),
            rate: None,
        };
        let mut gate = Gate::new(0, 1, None);
        assert!(gate.admit(&limits).is_ok());
        let deferred = gate.admit(&limits).unwrap_err();
        assert_eq!(deferred.limit, LimitKind::Concurrency);
        assert_eq!(deferred.retry_after, CONCURRENCY_RETRY_AFTER);
        assert!(deferred.reason.contains("concurrentExecLimit 2"));
        // A claim not written after all frees its place.
        gate.release(&limits);
        assert!(gate.admit(&limits).is_ok());
        assert_eq!(gate.window_to_store(), None);
    }

    #[test]
    fn a_fixed_window_admits_its_claims_then_defers_until_it_ends() {
        let limits = rate(2, 10);
        // 3.25 s into the window [0, 10 s).
        let mut gate = Gate::new(3_250, 0, None);
        assert!(gate.admit(&limits).is_ok());
        assert!(gate.admit(&limits).is_ok());
        let deferred = gate.admit(&limits).unwrap_err();
        assert_eq!(deferred.limit, LimitKind::Rate);
        assert_eq!(deferred.retry_after, Duration::from_millis(6_750));
        assert_eq!(
            gate.window_to_store(),
            Some(Window {
                start_ms: 0,
                claims: 2
            })
        );
        // The stored window is full until it ends; the next one starts empty.
        let full = gate.window_to_store();
        let mut later = Gate::new(9_999, 0, full);
        assert_eq!(
            later.admit(&limits).unwrap_err().retry_after,
            Duration::from_millis(1)
        );
        assert_eq!(later.window_to_store(), None, "nothing changed");
        let mut next = Gate::new(10_000, 0, full);
        assert!(next.admit(&limits).is_ok());
        assert_eq!(
            next.window_to_store(),
            Some(Window {
                start_ms: 10_000,
                claims: 1
            })
        );
    }

    #[test]
    fn concurrency_is_judged_first_and_spends_no_rate() {
        let limits = AttemptLimits {
            concurrency: Some(1),
            rate: Some(RateLimit {
                per_window: 5,
                window_seconds: 1,
            }),
        };
        let mut gate = Gate::new(500, 1, None);
        assert_eq!(
            gate.admit(&limits).unwrap_err().limit,
            LimitKind::Concurrency
        );
        assert_eq!(gate.window_to_store(), None);
        let mut gate = Gate::new(500, 0, None);
        assert!(gate.admit(&limits).is_ok());
        assert_eq!(
            gate.admit(&limits).unwrap_err().limit,
            LimitKind::Concurrency
        );
        assert_eq!(gate.window_to_store().map(|w| w.claims), Some(1));
    }
}
