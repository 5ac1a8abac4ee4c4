//! From a request's token to a [`Principal`]: the configured admin token, or a stored
//! token looked up by its hash — remembered for [`CACHE_FOR`] so a busy worker's polls do
//! not each read the store.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::HeaderMap;
use chrono::Utc;
use weft::auth_settings::AuthSettings;
use weft::store::auth::{hash_secret, ApiToken};
use weft::store::Store;

use super::principal::Principal;

/// How long a looked-up token is trusted before the store is asked again: a revocation
/// takes effect at once on the gateway that revoked it, and within this on the others.
pub const CACHE_FOR: Duration = Duration::from_secs(10);

/// Why a request is not authenticated.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// No `Authorization: Bearer` or `X-Authorization` header.
    #[error("this gateway needs a token: send `Authorization: Bearer <token>` or `X-Authorization: <token>`")]
    Missing,
    /// The token is unknown (or revoked).
    #[error("the token is not valid (unknown or revoked)")]
    Unknown,
    /// The token has expired.
    #[error("the token `{0}` has expired")]
    Expired(String),
    /// The store could not be read.
    #[error(transparent)]
    Store(#[from] weft::Error),
}

/// A cached look-up: the token (or its absence) and when it was read.
type Cached = (Option<ApiToken>, Instant);

/// Checks tokens; cheap to clone (shared state behind an `Arc`).
#[derive(Debug)]
pub struct Authenticator {
    enabled: bool,
    metrics_need_token: bool,
    admin_hash: Option<String>,
    cache: Mutex<HashMap<String, Cached>>,
}

impl Authenticator {
    /// Per the settings: enabled or not, and the admin token's hash.
    pub fn new(settings: &AuthSettings) -> Self {
        Self {
            enabled: settings.enabled(),
            metrics_need_token: settings.enabled() && settings.metrics_need_token,
            admin_hash: settings
                .admin_token
                .as_ref()
                .map(|t| hash_secret(t.expose())),
            cache: Mutex::default(),
        }
    }

    /// Whether requests must carry a token.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Whether `/metrics` needs a token with the `read` scope.
    pub fn metrics_need_token(&self) -> bool {
        self.metrics_need_token
    }

    /// The principal `secret` stands for.
    pub async fn principal(&self, store: &Store, secret: &str) -> Result<Principal, AuthError> {
        let hash = hash_secret(secret);
        if self.admin_hash.as_deref() == Some(hash.as_str()) {
            return Ok(Principal::admin());
        }
        let token = match self.cached(&hash) {
            Some(token) => token,
            None => {
                let token = store.token_by_hash(&hash).await?;
                self.remember(hash, token.clone());
                token
            }
        };
        let token = token.ok_or(AuthError::Unknown)?;
        if token.expired_at(Utc::now()) {
            return Err(AuthError::Expired(token.name));
        }
        Ok(Principal {
            scopes: token.scopes.iter().filter_map(|s| s.parse().ok()).collect(),
            task_types: token.task_types,
            name: token.name,
        })
    }

    /// Forgets every cached look-up (after a revocation on this gateway).
    pub fn forget_all(&self) {
        self.cache.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    fn cached(&self, hash: &str) -> Option<Option<ApiToken>> {
        let cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        cache
            .get(hash)
            .filter(|(_, at)| at.elapsed() < CACHE_FOR)
            .map(|(token, _)| token.clone())
    }

    fn remember(&self, hash: String, token: Option<ApiToken>) {
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        // Unknown secrets are remembered too (a client retrying a bad token must not
        // reach the store each time), so bound the map: drop the stale, then everything.
        if cache.len() >= 10_000 {
            cache.retain(|_, (_, at)| at.elapsed() < CACHE_FOR);
            if cache.len() >= 10_000 {
                cache.clear();
            }
        }
        cache.insert(hash, (token, Instant::now()));
    }
}

/// The token a request carries: `Authorization: Bearer <t>` or Conductor's
/// `X-Authorization: <t>` (which its SDKs send, sometimes with a `Bearer ` prefix too).
pub fn token_of(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .filter(|v| v.trim().len() > 7 && v.trim()[..7].eq_ignore_ascii_case("bearer "))
        .or_else(|| headers.get("x-authorization").and_then(|v| v.to_str().ok()))
        .map(without_bearer)
        .filter(|t| !t.is_empty())
}

/// `v` without a leading `Bearer ` (any case).
fn without_bearer(v: &str) -> &str {
    let v = v.trim();
    match v.get(..7) {
        Some(p) if p.eq_ignore_ascii_case("bearer ") => v[7..].trim(),
        _ => v,
    }
}

impl From<AuthError> for crate::error::ApiError {
    fn from(e: AuthError) -> Self {
        let conductor_code = match &e {
            AuthError::Missing => None,
            AuthError::Unknown => Some("INVALID_TOKEN"),
            AuthError::Expired(_) => Some("EXPIRED_TOKEN"),
            AuthError::Store(_) => None,
        };
        match e {
            AuthError::Store(e) => Self::Internal(e),
            e => Self::Unauthenticated {
                message: e.to_string(),
                conductor_code,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn a_token_comes_from_bearer_or_conductors_header() {
        assert_eq!(
            token_of(&headers(&[("authorization", "Bearer abc")])),
            Some("abc")
        );
        assert_eq!(
            token_of(&headers(&[("x-authorization", "abc")])),
            Some("abc")
        );
        assert_eq!(
            token_of(&headers(&[("x-authorization", "Bearer abc")])),
            Some("abc")
        );
        assert_eq!(token_of(&headers(&[("authorization", "Basic eHg=")])), None);
        assert_eq!(token_of(&headers(&[])), None);
    }
}
