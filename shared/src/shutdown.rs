//! Graceful shutdown on SIGINT / SIGTERM.
//!
//! A binary calls [`on_signals`] once and passes the returned root [`CancellationToken`] (or
//! child tokens of it) down to everything it runs. The first SIGINT or SIGTERM cancels the
//! token: consumers stop taking new work, finish what is in flight within their bound, ack
//! nothing unfinished, and `main` returns. A second signal means the operator does not want
//! to wait: the process exits at once with code [`FORCED_EXIT_CODE`] (130, as a shell reports
//! an interrupted command).

use std::future::Future;

use tokio_util::sync::CancellationToken;

/// Exit code of the process when a second signal forces it to stop.
pub const FORCED_EXIT_CODE: i32 = 130;

/// Returns a token that is cancelled on the first SIGINT or SIGTERM (Ctrl-C on non-Unix
/// systems); a second signal exits the process at once with [`FORCED_EXIT_CODE`]. Both are
/// logged.
///
/// The signal handlers are installed before this returns, so a signal arriving right after
/// start-up already shuts down gracefully. Must be called inside a Tokio runtime (it spawns
/// the task that waits for signals); call it once per process. If the handlers cannot be
/// installed, the error is logged and the token is never cancelled by a signal (the signals
/// then keep their default effect of ending the process).
pub fn on_signals() -> CancellationToken {
    let token = CancellationToken::new();
    match Signals::install() {
        Ok(signals) => {
            tokio::spawn(watch(signals, token.clone(), |code| {
                std::process::exit(code)
            }));
        }
        Err(e) => tracing::error!(
            error = %e,
            "cannot install signal handlers; SIGINT/SIGTERM will end the process without a graceful shutdown"
        ),
    }
    token
}

/// Where the signals come from: the operating system, or a channel in tests.
trait SignalSource: Send + 'static {
    /// Waits for the next signal and returns its name; `None` when no signal can arrive any
    /// more.
    fn next(&mut self) -> impl Future<Output = Option<&'static str>> + Send;
}

/// Cancels `token` on the first signal from `signals`, and calls `exit` with
/// [`FORCED_EXIT_CODE`] on the second.
async fn watch<S: SignalSource>(mut signals: S, token: CancellationToken, exit: impl FnOnce(i32)) {
    let Some(first) = signals.next().await else {
        return;
    };
    tracing::info!(
        signal = first,
        "shutdown requested, finishing in-flight work (send the signal again to exit at once)"
    );
    token.cancel();
    let Some(second) = signals.next().await else {
        return;
    };
    tracing::warn!(
        signal = second,
        code = FORCED_EXIT_CODE,
        "second signal, exiting at once"
    );
    exit(FORCED_EXIT_CODE);
}

/// SIGINT and SIGTERM.
#[cfg(unix)]
struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
}

#[cfg(unix)]
impl Signals {
    fn install() -> std::io::Result<Self> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Self {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
        })
    }
}

#[cfg(unix)]
impl SignalSource for Signals {
    async fn next(&mut self) -> Option<&'static str> {
        tokio::select! {
            got = self.interrupt.recv() => got.map(|()| "SIGINT"),
            got = self.terminate.recv() => got.map(|()| "SIGTERM"),
        }
    }
}

/// Ctrl-C, where Unix signals do not exist.
#[cfg(not(unix))]
struct Signals;

#[cfg(not(unix))]
impl Signals {
    fn install() -> std::io::Result<Self> {
        Ok(Self)
    }
}

#[cfg(not(unix))]
impl SignalSource for Signals {
    async fn next(&mut self) -> Option<&'static str> {
        tokio::signal::ctrl_c().await.ok().map(|()| "Ctrl-C")
    }
}

#[cfg(test)]
mod tests {
    //! The signal handling logic, fed from a channel: sending real signals to the test
    //! process (or installing handlers in it) would disturb the other tests.

    use super::*;
    use std::time::Duration;
    use tokio::sync::{mpsc, oneshot};

    impl SignalSource for mpsc::UnboundedReceiver<&'static str> {
        async fn next(&mut self) -> Option<&'static str> {
            self.recv().await
        }
    }

    #[tokio::test]
    async fn first_signal_cancels_and_second_exits_with_130() {
        let (send, signals) = mpsc::unbounded_channel();
        let (exited, exit_code) = oneshot::channel();
        let token = CancellationToken::new();
        let task = tokio::spawn(watch(signals, token.clone(), move |code| {
            let _ = exited.send(code);
        }));

        send.send("SIGTERM").unwrap();
        tokio::time::timeout(Duration::from_secs(5), token.cancelled())
            .await
            .expect("the first signal cancels the token");
        assert!(!task.is_finished(), "still waiting for a second signal");

        send.send("SIGINT").unwrap();
        let code = tokio::time::timeout(Duration::from_secs(5), exit_code)
            .await
            .expect("the second signal exits")
            .unwrap();
        assert_eq!(code, 130);
        task.await.unwrap();
    }

    #[tokio::test]
    async fn no_signal_leaves_the_token_alone() {
        let (send, signals) = mpsc::unbounded_channel::<&'static str>();
        let token = CancellationToken::new();
        drop(send);
        watch(signals, token.clone(), |_| panic!("must not exit")).await;
        assert!(!token.is_cancelled());
    }
}
