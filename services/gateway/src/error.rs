//! The gateway's errors: [`Error`] for start-up and serving, [`ApiError`] for answers.
//!
//! Every error answer has the same body, `{"code", "message", "path"?}`, whatever went
//! wrong: a bad field, an unknown id, an unreadable body, or an internal failure (whose
//! details go to the log, never to the caller).

use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use weft::dsl::DslError;

/// Why the gateway could not start or stopped serving.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Connecting to PostgreSQL or RabbitMQ failed, or shutdown came first. Retrying
    /// can help when a dependency was unreachable.
    #[error("start-up: {0}")]
    Startup(#[from] weft::Error),
    /// Asked to serve on a non-loopback address with nobody checking tokens.
    #[error(
        "refusing to serve on {addr} without authentication: anyone who reaches it could \
         start, terminate and read every run. Set WEFT_ADMIN_TOKEN (a secret of at least 24 \
         characters, e.g. `openssl rand -hex 24`) to turn auth on, or WEFT_AUTH=off to serve \
         without it on purpose"
    )]
    Insecure {
        /// The listen address.
        addr: std::net::SocketAddr,
    },
    /// Binding or serving the HTTP listener failed. Retrying can help if the address
    /// was busy.
    #[error("http server on {addr}: {source}")]
    Serve {
        /// The listen address.
        addr: std::net::SocketAddr,
        /// The I/O failure.
        source: std::io::Error,
    },
}

/// An error answer. Each variant has one status code.
#[derive(Debug)]
pub enum ApiError {
    /// 400: the request is malformed or names an invalid field.
    BadRequest {
        /// Stable machine-readable code, e.g. `invalid_definition`.
        code: &'static str,
        /// What is wrong.
        message: String,
        /// The offending field, e.g. `tasks[2].type`.
        path: Option<String>,
    },
    /// 401: no token, or one that is unknown, revoked or expired.
    Unauthenticated {
        /// What is wrong.
        message: String,
        /// Conductor's `error` code for a token its SDKs should trade again
        /// (`INVALID_TOKEN`, `EXPIRED_TOKEN`); `None` when no token was sent.
        conductor_code: Option<&'static str>,
    },
    /// 403: the token lacks the scope the route needs; the message names it.
    Forbidden(String),
    /// 404: the named thing does not exist.
    NotFound(String),
    /// 405: the path exists but not with this method.
    MethodNotAllowed(String),
    /// 409: the thing exists already.
    Conflict(String),
    /// 413: the body is larger than the configured limit.
    PayloadTooLarge(String),
    /// 429: the gateway has as much work in flight as it takes (starts beyond
    /// `WEFT_MAX_STARTS_IN_FLIGHT`, or no database connection free in time); nothing was
    /// done, and the answer's `Retry-After` says when to try again.
    Overloaded(String),
    /// 500: a dependency failed; the detail is logged, not returned.
    Internal(weft::Error),
    /// 503: the gateway is still connecting to its dependencies.
    Unavailable(String),
    /// 501: a Conductor endpoint Weft does not offer; the message names it and says why
    /// (docs/conductor.md lists them). Retrying cannot help.
    NotOffered(String),
}

/// The JSON body of every error answer.
#[derive(Debug, Serialize)]
struct ErrorBody<'a> {
    code: &'a str,
    message: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    path: Option<&'a str>,
}

impl ApiError {
    /// A 400 naming `path`.
    pub fn invalid(
        code: &'static str,
        path: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self::BadRequest {
            code,
            message: message.into(),
            path: Some(path.into()),
        }
    }

    /// A 400 about the request as a whole.
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::BadRequest {
            code,
            message: message.into(),
            path: None,
        }
    }

    /// A definition problem, its path prefixed with `prefix` when the definition is
    /// nested in the request (e.g. `workflowDef` of a start request).
    pub fn definition(err: DslError, prefix: Option<&str>) -> Self {
        let path = match (prefix, err.path.is_empty()) {
            (Some(p), true) => p.to_owned(),
            (Some(p), false) if err.path.starts_with('[') => format!("{p}{}", err.path),
            (Some(p), false) => format!("{p}.{}", err.path),
            (None, _) => err.path,
        };
        Self::BadRequest {
            code: "invalid_definition",
            message: err.message,
            path: (!path.is_empty()).then_some(path),
        }
    }

    /// The status code of this answer.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::BadRequest { .. } => StatusCode::BAD_REQUEST,
            Self::Unauthenticated { .. } => StatusCode::UNAUTHORIZED,
            Self::Forbidden(_) => StatusCode::FORBIDDEN,
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            Self::Conflict(_) => StatusCode::CONFLICT,
            Self::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Self::Overloaded(_) => StatusCode::TOO_MANY_REQUESTS,
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            Self::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::NotOffered(_) => StatusCode::NOT_IMPLEMENTED,
        }
    }
}

impl From<weft::Error> for ApiError {
    fn from(e: weft::Error) -> Self {
        // Every connection busy for the pool's whole wait: saturation, not a fault.
        if e.is_pool_exhausted() {
            return Self::Overloaded(
                "no database connection came free in time; retry shortly".into(),
            );
        }
        Self::Internal(e)
    }
}

impl From<BytesRejection> for ApiError {
    fn from(r: BytesRejection) -> Self {
        if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
            Self::PayloadTooLarge("request body is larger than the configured limit".into())
        } else {
            Self::bad_request("unreadable_body", r.body_text())
        }
    }
}

impl ApiError {
    /// The answer's code, message and field.
    fn parts(&self) -> (&str, &str, Option<&str>) {
        match self {
            Self::BadRequest {
                code,
                message,
                path,
            } => (code, message.as_str(), path.as_deref()),
            Self::Unauthenticated { message, .. } => ("unauthenticated", message.as_str(), None),
            Self::Forbidden(m) => ("forbidden", m.as_str(), None),
            Self::NotFound(m) => ("not_found", m.as_str(), None),
            Self::MethodNotAllowed(m) => ("method_not_allowed", m.as_str(), None),
            Self::Unavailable(m) => ("unavailable", m.as_str(), None),
            Self::NotOffered(m) => ("not_offered", m.as_str(), None),
            Self::Conflict(m) => ("conflict", m.as_str(), None),
            Self::PayloadTooLarge(m) => ("payload_too_large", m.as_str(), None),
            Self::Overloaded(m) => ("overloaded", m.as_str(), None),
            Self::Internal(_) => ("internal", "internal error; see the gateway log", None),
        }
    }

    /// The JSON body of the answer (`code`, `message`, `path` when a field is at fault),
    /// for answers that travel elsewhere than HTTP (a start event's reply).
    pub fn body(&self) -> serde_json::Value {
        let (code, message, path) = self.parts();
        serde_json::to_value(ErrorBody {
            code,
            message,
            path,
        })
        .unwrap_or_default()
    }

    /// One line for a log or a header: `code: message (at path)`.
    pub fn summary(&self) -> String {
        let (code, message, path) = self.parts();
        match path {
            Some(path) => format!("{code}: {path}: {message}"),
            None => format!("{code}: {message}"),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let Self::Internal(e) = &self {
            tracing::error!(error = %e, "request failed");
        }
        let mut body = self.body();
        if let Self::Unauthenticated {
            conductor_code: Some(code),
            ..
        } = &self
        {
            // Conductor's SDKs read `error` to decide to trade their key for a new token.
            body["error"] = serde_json::Value::String((*code).to_owned());
        }
        let challenge = matches!(self, Self::Unauthenticated { .. });
        let overloaded = matches!(self, Self::Overloaded(_));
        let mut response = (self.status(), axum::Json(body)).into_response();
        if overloaded {
            response.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from_static("1"),
            );
        }
        if challenge {
            response.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer"),
            );
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_definition_paths_are_prefixed() {
        let e = DslError {
            path: "tasks[1].type".into(),
            message: "unknown".into(),
        };
        match ApiError::definition(e, Some("workflowDef")) {
            ApiError::BadRequest { path, .. } => {
                assert_eq!(path.as_deref(), Some("workflowDef.tasks[1].type"))
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}
