//! The error an activity handler returns.

/// Why an activity attempt failed, as reported to the decider in `ActivityFailed`.
///
/// A *retryable* failure lets the task definition's retry policy schedule another attempt;
/// a *terminal* one (`FAILED_WITH_TERMINAL_ERROR` in Conductor) fails the task at once,
/// whatever the policy says. The conversions from [`anyhow::Error`], [`String`] and `&str`
/// produce retryable failures, so `?` inside a handler means "try again later".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct ActivityError {
    /// Human-readable reason, stored in the run's history.
    pub reason: String,
    /// No retry, even if the task's retry policy would allow one.
    pub terminal: bool,
}

impl ActivityError {
    /// A failure that the retry policy may retry (a timeout, an unavailable dependency).
    pub fn retryable(reason: impl Into<String>) -> Self {
        Self {
            reason: reason.into(),
            terminal: false,
        }
    }

    /// A failure that retrying cannot fix (bad input, a business rule said no).
    pub fn terminal(reason: impl Into<String>) -> Self {
        Self {
            reason: reason.into(),
            terminal: true,
        }
    }

    /// Whether the failure is terminal.
    pub fn is_terminal(&self) -> bool {
        self.terminal
    }
}

impl ActivityError {
    /// A handler task that did not return: a panic (or an abort) is a retryable failure.
    pub(super) fn from_join_error(e: tokio::task::JoinError) -> Self {
        if !e.is_panic() {
            return Self::retryable("handler cancelled");
        }
        let payload = e.into_panic();
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "non-string panic payload".to_owned());
        tracing::error!(panic = %message, "activity handler panicked");
        Self::retryable(format!("handler panicked: {message}"))
    }
}

impl From<anyhow::Error> for ActivityError {
    /// Retryable; the reason is the error with its chain of causes.
    fn from(e: anyhow::Error) -> Self {
        Self::retryable(format!("{e:#}"))
    }
}

impl From<String> for ActivityError {
    /// Retryable.
    fn from(reason: String) -> Self {
        Self::retryable(reason)
    }
}

impl From<&str> for ActivityError {
    /// Retryable.
    fn from(reason: &str) -> Self {
        Self::retryable(reason)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constructors_set_the_terminal_flag() {
        assert!(!ActivityError::retryable("later").terminal);
        let e = ActivityError::terminal("never");
        assert!(e.is_terminal());
        assert_eq!(e.to_string(), "never");
    }

    #[test]
    fn conversions_are_retryable_and_keep_the_cause_chain() {
        let e: ActivityError = anyhow::anyhow!("root").context("calling the bank").into();
        assert!(!e.terminal);
        assert_eq!(e.reason, "calling the bank: root");
        assert_eq!(ActivityError::from("x"), ActivityError::retryable("x"));
        assert_eq!(ActivityError::from(String::from("y")).reason, "y");
    }

    #[tokio::test]
    async fn a_panic_becomes_a_retryable_failure_with_its_message() {
        let joined = tokio::spawn(async { panic!("at the {}", "disco") }).await;
        let e = ActivityError::from_join_error(joined.unwrap_err());
        assert_eq!(
            e,
            ActivityError::retryable("handler panicked: at the disco")
        );
    }

    #[test]
    fn question_mark_converts_in_a_handler() {
        fn handler() -> Result<(), ActivityError> {
            Err(anyhow::anyhow!("boom"))?;
            Ok(())
        }
        assert_eq!(handler().unwrap_err().reason, "boom");
    }
}
