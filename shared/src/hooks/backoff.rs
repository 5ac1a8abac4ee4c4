//! The retry schedule of a delivery: exponential, bounded in delay and in attempts.
//! Deterministic (no jitter): deliveries are spread by their own causes' times, and a
//! schedule an operator can compute is worth more here than smoothing bursts.

use std::time::Duration;

/// How a failed delivery is retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// Delay after the first failed attempt.
    pub initial: Duration,
    /// Longest delay between two attempts.
    pub max: Duration,
    /// Attempts in all (the first one included); after the last failure the delivery is
    /// dead-lettered.
    pub max_attempts: u32,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            initial: Duration::from_secs(1),
            max: Duration::from_secs(300),
            max_attempts: 8,
        }
    }
}

impl Backoff {
    /// The delay before the attempt after failed attempt `attempt` (from 1):
    /// `initial * 2^(attempt-1)`, at most `max`; `None` when `attempt` was the last one.
    pub fn after(&self, attempt: u32) -> Option<Duration> {
        if attempt >= self.max_attempts {
            return None;
        }
        let factor = 2u32.saturating_pow(attempt.saturating_sub(1));
        Some(self.initial.saturating_mul(factor).min(self.max))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_up_to_the_cap_then_attempts_run_out() {
        let b = Backoff {
            initial: Duration::from_millis(100),
            max: Duration::from_millis(500),
            max_attempts: 6,
        };
        let delays: Vec<Option<u128>> =
            (1..=6).map(|n| b.after(n).map(|d| d.as_millis())).collect();
        assert_eq!(
            delays,
            vec![Some(100), Some(200), Some(400), Some(500), Some(500), None]
        );
        let one = Backoff {
            max_attempts: 1,
            ..Backoff::default()
        };
        assert_eq!(one.after(1), None);
        // A huge attempt number saturates instead of overflowing.
        let many = Backoff {
            max_attempts: u32::MAX,
            ..Backoff::default()
        };
        assert_eq!(many.after(100), Some(many.max));
    }
}
