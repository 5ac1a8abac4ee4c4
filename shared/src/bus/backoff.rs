//! Exponential back-off between reconnection attempts.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// First delay after a failure.
const FIRST: Duration = Duration::from_millis(100);
/// Longest delay; a broker restart takes seconds, so waiting longer only delays recovery.
const CAP: Duration = Duration::from_secs(5);

/// Delays of 100 ms, 200 ms, 400 ms, … capped at 5 s.
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    next: Duration,
}

impl Backoff {
    pub(crate) fn new() -> Self {
        Self { next: FIRST }
    }

    /// The delay to wait now; the following one doubles.
    pub(crate) fn next_delay(&mut self) -> Duration {
        let delay = self.next;
        self.next = (self.next * 2).min(CAP);
        delay
    }

    /// Starts over after a success.
    pub(crate) fn reset(&mut self) {
        self.next = FIRST;
    }

    /// Sleeps for the next delay; `false` when `shutdown` fired first.
    pub(crate) async fn sleep(&mut self, shutdown: &CancellationToken) -> bool {
        let delay = self.next_delay();
        tokio::select! {
            _ = shutdown.cancelled() => false,
            _ = tokio::time::sleep(delay) => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_up_to_the_cap() {
        let mut b = Backoff::new();
        let delays: Vec<_> = (0..8).map(|_| b.next_delay().as_millis()).collect();
        assert_eq!(delays, [100, 200, 400, 800, 1600, 3200, 5000, 5000]);
        b.reset();
        assert_eq!(b.next_delay(), FIRST);
    }
}
