//! Redirects through the guard: each hop's scheme and literal address are checked
//! before it is followed. A hop to a host name needs nothing more here — the client
//! resolves it through the guard's resolver like any other name.

use reqwest::redirect::Policy;

use super::guard::Guard;

/// A redirect chain longer than the client allows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("too many redirects (more than {0})")]
pub struct TooManyRedirects(pub usize);

/// Follows at most `max` redirects, each checked by `guard`; `max` 0 follows none (the
/// 3xx answer is the response).
pub fn policy(guard: Guard, max: usize) -> Policy {
    if max == 0 {
        return Policy::none();
    }
    Policy::custom(move |attempt| {
        // `previous` holds the first URL too, hence `>` (as reqwest's own limit).
        if attempt.previous().len() > max {
            return attempt.error(TooManyRedirects(max));
        }
        match guard.check_url(attempt.url()) {
            Ok(()) => attempt.follow(),
            Err(refused) => attempt.error(refused),
        }
    })
}
