//! Performing a [`RequestSpec`] and shaping the result as Conductor's HTTP task output.
//!
//! Output of a 2xx answer: `{"response": {"statusCode", "headers", "body",
//! "reasonPhrase"}}`, where `headers` maps each (lower-case) header name to the list of
//! its values, as Conductor's does, and `body` is the parsed JSON when the answer is
//! JSON, else the text (`null` when empty). Any other status, and a connection error or
//! timeout, is a retryable failure whose reason names the status or the error.
//!
//! Every call goes through the outbound guard ([`weft::outbound`], docs/outbound.md): the
//! URL's scheme and literal address are checked before sending, host names are resolved
//! through the guard, and each redirect (at most [`MAX_REDIRECTS`]) is checked before it
//! is followed. A refused call is a terminal failure (`FAILED_WITH_TERMINAL_ERROR`)
//! whose reason says what was refused and why: the same call would be refused again, so
//! retrying it would only burn the task's retries and delays.
//!
//! No unbounded memory: a response body is read up to [`MAX_RESPONSE_BYTES`]; the rest
//! is dropped and the text ends with a `[truncated …]` marker.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use reqwest::header::{HeaderMap, CONTENT_TYPE};
use reqwest::{Client, StatusCode, Url};
use serde_json::{json, Value};
use weft::outbound::{Guard, Refused};
use weft::worker::ActivityError;

use crate::request::{self, RequestSpec};

/// The most response body bytes kept; the rest is dropped.
pub const MAX_RESPONSE_BYTES: usize = 1024 * 1024;
/// The most characters of a failed answer's body quoted in the failure reason.
pub const MAX_REASON_BODY_CHARS: usize = 512;
/// The longest a whole request may take, whatever its timeouts (a trickling server).
pub const TOTAL_TIMEOUT: Duration = Duration::from_secs(600);
/// Redirects followed at most (reqwest's default limit, kept when the guard came).
pub const MAX_REDIRECTS: usize = 10;
/// Clients kept for reuse (one per distinct pair of timeouts, each with its pool).
const MAX_CACHED_CLIENTS: usize = 32;

/// Runs HTTP tasks; keeps one pooled client per pair of timeouts. Share it with an `Arc`.
#[derive(Debug)]
pub struct HttpExecutor {
    guard: Guard,
    clients: Mutex<HashMap<(Duration, Duration), Client>>,
}

/// A response as read: status, headers and the (possibly truncated) body.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpResponse {
    /// The status code.
    pub status: StatusCode,
    /// The headers.
    pub headers: HeaderMap,
    /// The body: parsed JSON, text, or `null` when empty.
    pub body: Value,
}

impl HttpExecutor {
    /// An executor with no client yet, whose calls go through `guard`.
    pub fn new(guard: Guard) -> Self {
        Self {
            guard,
            clients: Mutex::default(),
        }
    }

    /// Runs one HTTP task: parses `input`, performs the request and maps the answer to
    /// the task's output (2xx) or a failure.
    pub async fn execute(&self, input: &Value) -> Result<Value, ActivityError> {
        let spec = request::parse(input)?;
        let response = self.perform(&spec).await?;
        tracing::debug!(
            method = %spec.method,
            url = %redacted(&spec.url),
            status = response.status.as_u16(),
            "HTTP task answered"
        );
        outcome(&spec, &response)
    }

    /// Sends the request and reads the answer, whatever its status. A connection error,
    /// a timeout or a broken body is a retryable failure naming the target; a call the
    /// outbound guard refuses is a terminal one saying why.
    pub async fn perform(&self, spec: &RequestSpec) -> Result<HttpResponse, ActivityError> {
        // A URL naming an address is connected to without resolution, so the guard's
        // resolver never sees it: it is checked here.
        self.guard
            .check_url(&spec.url)
            .map_err(|refused| refusal(spec, &refused))?;
        let client = self.client(spec)?;
        let mut builder = client
            .request(spec.method.clone(), spec.url.clone())
            .headers(spec.headers.clone());
        if let Some(body) = &spec.body {
            builder = builder.body(body.clone());
        }
        let mut response = builder.send().await.map_err(|e| failure(spec, &e))?;
        let status = response.status();
        let headers = response.headers().clone();
        let mut bytes = Vec::new();
        let mut truncated = false;
        while let Some(chunk) = response.chunk().await.map_err(|e| failure(spec, &e))? {
            let room = MAX_RESPONSE_BYTES - bytes.len();
            if chunk.len() > room {
                bytes.extend_from_slice(&chunk[..room]);
                truncated = true;
                break;
            }
            bytes.extend_from_slice(&chunk);
        }
        let content_type = headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok());
        let body = body_value(&bytes, truncated, content_type);
        Ok(HttpResponse {
            status,
            headers,
            body,
        })
    }

    fn client(&self, spec: &RequestSpec) -> Result<Client, ActivityError> {
        let key = (spec.connect_timeout, spec.read_timeout);
        let mut clients = self
            .clients
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(client) = clients.get(&key) {
            return Ok(client.clone());
        }
        let client = self
            .guard
            .client_builder(MAX_REDIRECTS)
            .connect_timeout(spec.connect_timeout)
            .read_timeout(spec.read_timeout)
            .timeout(TOTAL_TIMEOUT)
            .user_agent(concat!("weft-http-worker/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| ActivityError::retryable(format!("building the HTTP client: {e}")))?;
        if clients.len() < MAX_CACHED_CLIENTS {
            clients.insert(key, client.clone());
        }
        Ok(client)
    }
}

/// 2xx → the output; anything else → a retryable failure naming the status, with the
/// start of the body.
pub fn outcome(spec: &RequestSpec, response: &HttpResponse) -> Result<Value, ActivityError> {
    let status = response.status;
    if status.is_success() {
        return Ok(output(response));
    }
    let text = match &response.body {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let mut snippet: String = text.chars().take(MAX_REASON_BODY_CHARS).collect();
    if snippet.len() < text.len() {
        snippet.push('…');
    }
    Err(ActivityError::retryable(format!(
        "HTTP {} {} from {} {}: {}",
        status.as_u16(),
        status.canonical_reason().unwrap_or(""),
        spec.method,
        redacted(&spec.url),
        if snippet.is_empty() {
            "(empty body)"
        } else {
            &snippet
        }
    )))
}

/// Conductor's output: `{"response": {"statusCode", "headers", "body", "reasonPhrase"}}`.
pub fn output(response: &HttpResponse) -> Value {
    let mut headers: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for (name, value) in &response.headers {
        let text = String::from_utf8_lossy(value.as_bytes()).into_owned();
        headers.entry(name.as_str()).or_default().push(text);
    }
    json!({
        "response": {
            "statusCode": response.status.as_u16(),
            "reasonPhrase": response.status.canonical_reason().unwrap_or(""),
            "headers": headers,
            "body": response.body,
        }
    })
}

/// The body as output: JSON when the answer says it is JSON (or, as Conductor, looks
/// like a JSON object or array), else text; `null` when empty. A truncated body is text
/// ending with a marker.
pub fn body_value(bytes: &[u8], truncated: bool, content_type: Option<&str>) -> Value {
    if truncated {
        let text = String::from_utf8_lossy(bytes);
        return Value::String(format!(
            "{text}…[truncated: the response body is larger than {MAX_RESPONSE_BYTES} bytes]"
        ));
    }
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Value::Null;
    }
    let says_json = content_type.is_some_and(|ct| ct.to_ascii_lowercase().contains("json"));
    let looks_json = matches!(
        bytes.iter().find(|b| !b.is_ascii_whitespace()),
        Some(b'{' | b'[')
    );
    if says_json || looks_json {
        if let Ok(v) = serde_json::from_slice::<Value>(bytes) {
            return v;
        }
    }
    Value::String(String::from_utf8_lossy(bytes).into_owned())
}

/// A refused call (terminal): the target and the guard's reason.
fn refusal(spec: &RequestSpec, refused: &Refused) -> ActivityError {
    ActivityError::terminal(format!(
        "HTTP {} {}: {refused}",
        spec.method,
        redacted(&spec.url)
    ))
}

/// A transport failure (retryable): what happened, to which target, with its causes;
/// or, when the outbound guard refused the call (a name resolving to a refused address,
/// a redirect to one), that refusal (terminal).
fn failure(spec: &RequestSpec, e: &reqwest::Error) -> ActivityError {
    if let Some(refused) = Refused::find(e) {
        return refusal(spec, refused);
    }
    let what = if e.is_timeout() {
        format!(
            "timed out (connect timeout {} ms, read timeout {} ms)",
            spec.connect_timeout.as_millis(),
            spec.read_timeout.as_millis()
        )
    } else if e.is_connect() {
        "could not connect".to_owned()
    } else {
        "failed".to_owned()
    };
    let mut causes = String::new();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        causes.push_str(": ");
        causes.push_str(&cause.to_string());
        source = cause.source();
    }
    ActivityError::retryable(format!(
        "HTTP {} {} {what}{causes}",
        spec.method,
        redacted(&spec.url)
    ))
}

/// The URL without credentials and query (they may hold secrets): for reasons and logs.
pub fn redacted(url: &Url) -> String {
    format!("{}{}", url.origin().ascii_serialization(), url.path())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_is_json_when_declared_or_shaped_like_it() {
        let json_ct = Some("application/json; charset=utf-8");
        assert_eq!(body_value(b"{\"a\":1}", false, json_ct), json!({"a": 1}));
        assert_eq!(body_value(b"42", false, json_ct), json!(42));
        assert_eq!(body_value(b" [1]", false, Some("text/plain")), json!([1]));
        assert_eq!(body_value(b"42", false, Some("text/plain")), json!("42"));
        assert_eq!(body_value(b"{oops", false, json_ct), json!("{oops"));
        assert_eq!(body_value(b"", false, json_ct), Value::Null);
    }

    #[test]
    fn a_truncated_body_is_text_with_a_marker() {
        let v = body_value(b"{\"a\":", true, Some("application/json"));
        let text = v.as_str().unwrap();
        assert!(text.starts_with("{\"a\":…[truncated: the response body is larger than"));
    }

    #[test]
    fn redacted_drops_credentials_and_query() {
        let url = Url::parse("http://u:secret@h:81/p/q?token=x").unwrap();
        assert_eq!(redacted(&url), "http://h:81/p/q");
    }

    #[test]
    fn output_lists_every_header_value() {
        let mut headers = HeaderMap::new();
        headers.append("x-a", "1".parse().unwrap());
        headers.append("x-a", "2".parse().unwrap());
        let response = HttpResponse {
            status: StatusCode::CREATED,
            headers,
            body: json!("ok"),
        };
        let out = output(&response);
        assert_eq!(
            out,
            json!({"response": {"statusCode": 201, "reasonPhrase": "Created",
                "headers": {"x-a": ["1", "2"]}, "body": "ok"}})
        );
    }

    #[test]
    fn a_non_2xx_answer_is_retryable_and_names_the_status() {
        let spec = request::parse(&json!({"uri": "http://h/x?k=secret"})).unwrap();
        let long = "e".repeat(2000);
        let response = HttpResponse {
            status: StatusCode::SERVICE_UNAVAILABLE,
            headers: HeaderMap::new(),
            body: json!(long),
        };
        let e = outcome(&spec, &response).unwrap_err();
        assert!(!e.terminal);
        assert!(
            e.reason
                .starts_with("HTTP 503 Service Unavailable from GET http://h/x: eee"),
            "{}",
            e.reason
        );
        assert!(
            e.reason.len() < 700 && e.reason.ends_with('…'),
            "{}",
            e.reason
        );
    }
}
