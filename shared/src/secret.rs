//! A secret — a definition's hook signing secret (`hooks.secret`), the gateway's admin
//! token — in a type that does not print it: `{:?}` shows `Secret(<redacted>)` and there
//! is no `Display`, so a secret held in a struct that ends up in a log line or an error
//! message does not leak.

use std::fmt;
use std::ops::Deref;

/// A secret. Read it with [`Secret::expose`] (or through `Deref`, which lets an
/// `Option<Secret>` lend an `Option<&str>` with `as_deref`) only to sign or compare.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps `value`.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret itself, for signing or comparing.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl Deref for Secret {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_output_never_shows_the_secret() {
        let secret = Secret::new("s3cret-value");
        let held = Some(secret.clone());
        let shown = format!("{held:?} {held:#?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("<redacted>"));
        assert_eq!(held.as_deref(), Some("s3cret-value"));
        assert_eq!(secret.expose(), "s3cret-value");
    }
}
