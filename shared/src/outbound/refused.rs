//! Why an outbound call was refused: the error the guard returns, and how to find it
//! inside an HTTP client's error.

use std::error::Error as StdError;

use super::ranges::Blocked;

/// An outbound call the guard refused. Its text is meant for the task's or the hook
/// delivery's failure reason: it names the address or scheme, and the remedy.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// A scheme other than http and https.
    #[error("outbound call refused: scheme `{0}` is not allowed (http and https only)")]
    Scheme(String),
    /// A URL without a host.
    #[error("outbound call refused: the URL has no host")]
    NoHost,
    /// A URL (or a redirect) naming a refused address literally.
    #[error("outbound call refused: {0}; allow it with WEFT_OUTBOUND_ALLOW")]
    Address(Blocked),
    /// A host name resolving only to refused addresses (the first is named).
    #[error(
        "outbound call refused: {host} resolves to {}, which {}; allow it with WEFT_OUTBOUND_ALLOW",
        blocked.ip,
        blocked.verdict()
    )]
    Resolved {
        /// The name looked up.
        host: String,
        /// Where its (first) address falls.
        blocked: Blocked,
    },
}

impl Refused {
    /// The refusal in `error` or among its causes: how a client's caller tells a
    /// refused call (not worth retrying) from a transport failure (worth it).
    pub fn find<'a>(error: &'a (dyn StdError + 'static)) -> Option<&'a Refused> {
        let mut current = Some(error);
        while let Some(e) = current {
            if let Some(refused) = e.downcast_ref::<Refused>() {
                return Some(refused);
            }
            current = e.source();
        }
        None
    }
}
