//! The gateway's authentication settings (docs/security.md), read with the rest of
//! [`crate::Config`]: `WEFT_AUTH`, `WEFT_ADMIN_TOKEN`, `WEFT_METRICS_AUTH`.

use crate::{Error, Result};

/// Shortest admin token accepted: a guessable bootstrap secret would open everything.
pub const MIN_ADMIN_TOKEN_LEN: usize = 24;

/// A secret that never shows in `Debug` output (configuration is logged at start-up).
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps `value`.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret itself, for comparing or hashing; never for printing.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// Whether and how the gateway asks who is calling.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuthSettings {
    /// `WEFT_AUTH`: `Some(true)` on, `Some(false)` off (even on a public address),
    /// `None`: on when an admin token is configured, off otherwise (and then the gateway
    /// serves on a loopback address only).
    pub mode: Option<bool>,
    /// `WEFT_ADMIN_TOKEN`: the bootstrap token, named `admin`, with every scope.
    pub admin_token: Option<Secret>,
    /// `WEFT_METRICS_AUTH`: `/metrics` needs a token with the `read` scope (`on`), or is
    /// open to whoever reaches the port (`off`, the default: scrapers rarely hold tokens).
    pub metrics_need_token: bool,
}

impl AuthSettings {
    /// Reads the settings through `get`.
    pub fn from_lookup(get: &impl Fn(&str) -> Option<String>) -> Result<Self> {
        let mode = match get("WEFT_AUTH").as_deref().map(str::trim) {
            None | Some("") => None,
            Some(v) => Some(switch("WEFT_AUTH", v)?),
        };
        let admin_token = match get("WEFT_ADMIN_TOKEN") {
            None => None,
            Some(t) if t.trim().is_empty() => None,
            Some(t) if t.trim().len() < MIN_ADMIN_TOKEN_LEN => {
                return Err(Error::Config(format!(
                    "WEFT_ADMIN_TOKEN must be at least {MIN_ADMIN_TOKEN_LEN} characters \
                     (e.g. `openssl rand -hex 24`)"
                )))
            }
            Some(t) => Some(Secret::new(t.trim())),
        };
        if mode == Some(false) && admin_token.is_some() {
            return Err(Error::Config(
                "WEFT_AUTH=off and WEFT_ADMIN_TOKEN contradict each other: unset one".into(),
            ));
        }
        let metrics_need_token = match get("WEFT_METRICS_AUTH").as_deref().map(str::trim) {
            None | Some("") => false,
            Some(v) => switch("WEFT_METRICS_AUTH", v)?,
        };
        Ok(Self {
            mode,
            admin_token,
            metrics_need_token,
        })
    }

    /// Whether requests must carry a token.
    pub fn enabled(&self) -> bool {
        self.mode.unwrap_or(self.admin_token.is_some())
    }

    /// Whether serving without auth was asked for explicitly (`WEFT_AUTH=off`).
    pub fn explicitly_off(&self) -> bool {
        self.mode == Some(false)
    }
}

fn switch(key: &str, value: &str) -> Result<bool> {
    match value.to_ascii_lowercase().as_str() {
        "on" | "true" | "1" => Ok(true),
        "off" | "false" | "0" => Ok(false),
        _ => Err(Error::Config(format!(
            "{key} must be `on` or `off`, got {value:?}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn with(pairs: &[(&str, &str)]) -> Result<AuthSettings> {
        let map: HashMap<&str, &str> = pairs.iter().copied().collect();
        AuthSettings::from_lookup(&|k| map.get(k).map(|v| v.to_string()))
    }

    #[test]
    fn auth_is_on_with_an_admin_token_and_off_without() {
        assert!(!with(&[]).unwrap().enabled());
        let on = with(&[("WEFT_ADMIN_TOKEN", "0123456789abcdef0123456789")]).unwrap();
        assert!(on.enabled());
        assert!(with(&[("WEFT_AUTH", "on")]).unwrap().enabled());
        assert!(with(&[("WEFT_AUTH", "off")]).unwrap().explicitly_off());
    }

    #[test]
    fn bad_settings_name_their_variable() {
        let e = with(&[("WEFT_ADMIN_TOKEN", "short")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("WEFT_ADMIN_TOKEN"), "{e}");
        let e = with(&[("WEFT_AUTH", "maybe")]).unwrap_err().to_string();
        assert!(e.contains("WEFT_AUTH"), "{e}");
        let e = with(&[
            ("WEFT_AUTH", "off"),
            ("WEFT_ADMIN_TOKEN", "0123456789abcdef0123456789"),
        ])
        .unwrap_err()
        .to_string();
        assert!(e.contains("contradict"), "{e}");
    }

    #[test]
    fn the_admin_token_never_shows_in_debug_output() {
        let s = with(&[("WEFT_ADMIN_TOKEN", "0123456789abcdef0123456789")]).unwrap();
        assert!(!format!("{s:?}").contains("0123456789"));
    }
}
