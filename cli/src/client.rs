//! A small REST client on one gateway (the contract in API.md), and how its failures
//! read: every [`Error`] displays as a sentence a person can act on.

use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderValue, AUTHORIZATION};
use reqwest::{Method, StatusCode, Url};
use serde_json::{json, Value};

use crate::exit;

/// How long to wait for a TCP connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long to wait for a whole answer (operations wait up to 10 s for the decider).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// The most of an unexpected body quoted in a message.
const QUOTE_LIMIT: usize = 200;

/// Why a request did not get the answer it asked for.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No answer: connection refused, unknown host, timeout. Retrying helps once the
    /// gateway runs.
    #[error(
        "cannot reach the gateway at {server} ({reason}). Is it running? Start one with \
         `weft dev` (`cargo run --release --bin weft -- dev`), or point --server (or \
         WEFT_SERVER) at a running gateway"
    )]
    Unreachable {
        /// The gateway's base URL.
        server: String,
        /// What the connection attempt ran into.
        reason: String,
    },
    /// A 4xx answer in the gateway's error shape: the request was refused (unknown
    /// workflow, invalid field, a state that does not allow it). Retrying the same
    /// request does not help.
    #[error("{}", refusal(message, path.as_deref()))]
    Refused {
        /// HTTP status.
        status: u16,
        /// The gateway's stable code, e.g. `not_found`, `invalid_definition`.
        code: String,
        /// The gateway's sentence.
        message: String,
        /// The field to blame, e.g. `tasks[2].type`.
        path: Option<String>,
    },
    /// A 401 answer: the gateway wants a token and got none, or refused the one given
    /// (unknown, mistyped, expired, revoked). Retrying with the same token does not help.
    #[error("{}", unauthenticated(server, message, *token_given))]
    Unauthenticated {
        /// The gateway's base URL.
        server: String,
        /// The gateway's sentence.
        message: String,
        /// Whether this request carried a token (`--token`, `WEFT_TOKEN`).
        token_given: bool,
    },
    /// A 403 answer: the token is valid but lacks the scope (or task type) the request
    /// needs. Retrying with the same token does not help.
    #[error(
        "not allowed: {message} (an administrator can create a token with the scope \
         needed: weft token create)"
    )]
    Forbidden {
        /// The gateway's sentence, naming the missing scope.
        message: String,
    },
    /// A 5xx answer: the gateway or one of its dependencies failed. Retrying may help.
    #[error("the gateway at {server} failed ({status}): {message}")]
    Server {
        /// The gateway's base URL.
        server: String,
        /// HTTP status.
        status: u16,
        /// The gateway's message, or the start of the body.
        message: String,
    },
    /// An answer outside the contract (another kind of server at that address, or an
    /// incompatible gateway). Retrying does not help.
    #[error("unexpected answer from {server} to {request}: {detail}")]
    Unexpected {
        /// The gateway's base URL.
        server: String,
        /// `METHOD /path`.
        request: String,
        /// What was wrong with it.
        detail: String,
    },
}

impl Error {
    /// The process exit code this failure maps to (see [`crate::exit`]).
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Refused { .. } | Error::Unauthenticated { .. } | Error::Forbidden { .. } => {
                exit::REFUSED
            }
            Error::Unreachable { .. } | Error::Server { .. } | Error::Unexpected { .. } => {
                exit::UNAVAILABLE
            }
        }
    }
}

/// The message, and the field when the message does not already start with it.
fn refusal(message: &str, path: Option<&str>) -> String {
    match path {
        Some(p) if !p.is_empty() && !message.starts_with(p) => format!("{message} (field {p})"),
        _ => message.to_owned(),
    }
}

/// What to do about a 401: pass a token, or check the one passed. Without a token the
/// gateway's sentence adds nothing (it asks for one); with one, it says why it was refused.
fn unauthenticated(server: &str, message: &str, token_given: bool) -> String {
    if token_given {
        format!("the gateway at {server} refused the token: {message}. Check --token or WEFT_TOKEN")
    } else {
        format!(
            "the gateway at {server} requires a token: pass --token or set WEFT_TOKEN (an \
             administrator creates one with `weft token create`)"
        )
    }
}

/// An access token for the gateway (`--token`, `WEFT_TOKEN`), sent on every request as
/// `Authorization: Bearer <token>`. Its `Debug` hides the secret, so that it never ends
/// up in a log line or a panic message.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl Token {
    /// A token as typed: surrounding whitespace (a pasted newline) is dropped; what is
    /// left must be non-empty visible ASCII, as an HTTP header value needs.
    pub fn parse(raw: &str) -> Result<Self, String> {
        let token = raw.trim();
        if token.is_empty() {
            return Err("is empty".to_owned());
        }
        if let Some(bad) = token.chars().find(|c| !c.is_ascii_graphic()) {
            return Err(format!(
                "holds {bad:?}: a token is visible ASCII without spaces"
            ));
        }
        Ok(Self(token.to_owned()))
    }

    /// The secret itself.
    pub fn secret(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(<hidden>)")
    }
}

/// What a 2xx answer carried.
#[derive(Debug, Clone)]
pub struct Answer {
    /// HTTP status.
    pub status: u16,
    /// The body as text.
    pub text: String,
}

/// The result of an operator operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// Applied by the decider; the body (a run id for reset, else usually empty).
    Done(String),
    /// Durably queued, not applied yet (no decider answered in time): the gateway's note.
    Queued(String),
}

/// REST client on one gateway.
#[derive(Debug, Clone)]
pub struct Client {
    base: Url,
    http: reqwest::Client,
    /// Whether requests carry a token: a 401 then says to check it rather than to pass one.
    token_given: bool,
}

impl Client {
    /// A client on the gateway at `base` (e.g. `http://127.0.0.1:8080`), without a token.
    pub fn new(base: Url) -> Self {
        Self::with_token(base, None)
    }

    /// A client on the gateway at `base` that sends `token` (when given) with every
    /// request as `Authorization: Bearer <token>`.
    pub fn with_token(base: Url, token: Option<&Token>) -> Self {
        let mut headers = HeaderMap::new();
        // `Token::parse` admits only visible ASCII, so the value always builds.
        if let Some(Ok(mut value)) =
            token.map(|t| HeaderValue::from_str(&format!("Bearer {}", t.secret())))
        {
            // Kept out of reqwest's debug output.
            value.set_sensitive(true);
            headers.insert(AUTHORIZATION, value);
        }
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(REQUEST_TIMEOUT)
            .user_agent(concat!("weft-cli/", env!("CARGO_PKG_VERSION")))
            .default_headers(headers)
            .build()
            .unwrap_or_default();
        Self {
            base,
            http,
            token_given: token.is_some(),
        }
    }

    /// The gateway's base URL as the user gave it (without a trailing slash).
    pub fn server(&self) -> String {
        self.base.as_str().trim_end_matches('/').to_owned()
    }

    /// `base` + the path segments (each percent-encoded).
    fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.base.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(segments);
        }
        url
    }

    /// Sends a request; a 2xx answer is returned, anything else becomes an [`Error`].
    pub async fn send(
        &self,
        method: Method,
        segments: &[&str],
        query: &[(&str, String)],
        body: Option<&Value>,
    ) -> Result<Answer, Error> {
        let url = self.url(segments);
        let request_name = format!("{method} {}", url.path());
        let mut request = self.http.request(method, url);
        if !query.is_empty() {
            request = request.query(query);
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.map_err(|e| self.unreachable(&e))?;
        let status = response.status();
        let text = response.text().await.map_err(|e| self.unreachable(&e))?;
        if status.is_success() {
            return Ok(Answer {
                status: status.as_u16(),
                text,
            });
        }
        Err(self.failure(status, &request_name, &text))
    }

    /// Sends a request whose answer must be JSON.
    pub async fn send_json(
        &self,
        method: Method,
        segments: &[&str],
        query: &[(&str, String)],
        body: Option<&Value>,
    ) -> Result<Value, Error> {
        let request_name = format!("{method} /{}", segments.join("/"));
        let answer = self.send(method, segments, query, body).await?;
        serde_json::from_str(&answer.text).map_err(|e| Error::Unexpected {
            server: self.server(),
            request: request_name,
            detail: format!("not JSON ({e}): {}", quote(&answer.text)),
        })
    }

    /// `GET` of a JSON document.
    pub async fn get_json(
        &self,
        segments: &[&str],
        query: &[(&str, String)],
    ) -> Result<Value, Error> {
        self.send_json(Method::GET, segments, query, None).await
    }

    /// `POST /api/metadata/workflow?overwrite=`: registers one definition.
    pub async fn register(&self, definition: &Value, overwrite: bool) -> Result<(), Error> {
        self.send(
            Method::POST,
            &["api", "metadata", "workflow"],
            &[("overwrite", overwrite.to_string())],
            Some(definition),
        )
        .await
        .map(drop)
    }

    /// `POST /api/workflow`: starts a run; answers its workflow id.
    pub async fn start(&self, request: &Value) -> Result<String, Error> {
        let answer = self
            .send(Method::POST, &["api", "workflow"], &[], Some(request))
            .await?;
        Ok(answer.text.trim().trim_matches('"').to_owned())
    }

    /// `GET /api/workflow/{id}`: the current run with its tasks.
    pub async fn workflow(&self, id: &str) -> Result<Value, Error> {
        self.get_json(&["api", "workflow", id], &[("includeTasks", "true".into())])
            .await
    }

    /// An operator operation: 200/204 → applied, 202 → queued for later.
    pub async fn operate(
        &self,
        method: Method,
        segments: &[&str],
        query: &[(&str, String)],
        body: Option<&Value>,
    ) -> Result<Applied, Error> {
        let answer = self.send(method, segments, query, body).await?;
        if answer.status == StatusCode::ACCEPTED.as_u16() {
            let note = serde_json::from_str::<Value>(&answer.text)
                .ok()
                .and_then(|v| v["message"].as_str().map(str::to_owned))
                .unwrap_or_else(|| "accepted, not applied yet".to_owned());
            return Ok(Applied::Queued(note));
        }
        Ok(Applied::Done(
            answer.text.trim().trim_matches('"').to_owned(),
        ))
    }

    /// `POST /api/workflow/{id}/signal/{name}` (202 once durably queued).
    pub async fn signal(&self, id: &str, name: &str, data: &Value) -> Result<Answer, Error> {
        self.send(
            Method::POST,
            &["api", "workflow", id, "signal", name],
            &[],
            Some(data),
        )
        .await
    }

    /// Every event of the current run's history, page after page.
    pub async fn history(&self, id: &str) -> Result<Vec<Value>, Error> {
        let mut events = Vec::new();
        let mut after = 0_i64;
        loop {
            let page = self
                .get_json(
                    &["api", "workflow", id, "history"],
                    &[("after", after.to_string()), ("limit", "1000".into())],
                )
                .await?;
            if let Some(batch) = page["events"].as_array() {
                events.extend(batch.iter().cloned());
            }
            match page["next"].as_i64() {
                Some(next) if next > after => after = next,
                _ => return Ok(events),
            }
        }
    }

    fn unreachable(&self, e: &reqwest::Error) -> Error {
        Error::Unreachable {
            server: self.server(),
            reason: reason_of(e),
        }
    }

    /// Classifies a non-2xx answer.
    fn failure(&self, status: StatusCode, request: &str, text: &str) -> Error {
        let body: Option<Value> = serde_json::from_str(text).ok();
        let message = body
            .as_ref()
            .and_then(|b| b["message"].as_str())
            .map(str::to_owned);
        // Authentication answers read the same whatever serves them (the gateway or a
        // proxy in front of it), so they are told apart by status alone.
        match status {
            StatusCode::UNAUTHORIZED => {
                return Error::Unauthenticated {
                    server: self.server(),
                    message: message.unwrap_or_else(|| quote(text)),
                    token_given: self.token_given,
                }
            }
            StatusCode::FORBIDDEN => {
                return Error::Forbidden {
                    message: message.unwrap_or_else(|| quote(text)),
                }
            }
            _ => {}
        }
        match message {
            Some(message) if status.is_client_error() => {
                let body = body.unwrap_or(json!({}));
                Error::Refused {
                    status: status.as_u16(),
                    code: body["code"].as_str().unwrap_or_default().to_owned(),
                    message,
                    path: body["path"].as_str().map(str::to_owned),
                }
            }
            Some(message) if status.is_server_error() => Error::Server {
                server: self.server(),
                status: status.as_u16(),
                message,
            },
            None if status.is_server_error() => Error::Server {
                server: self.server(),
                status: status.as_u16(),
                message: quote(text),
            },
            _ => Error::Unexpected {
                server: self.server(),
                request: request.to_owned(),
                detail: format!("{status}: {} (is it a Weft gateway?)", quote(text)),
            },
        }
    }
}

/// Why a request got no answer, in a few words: "connection refused", "timed out".
fn reason_of(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        return "no answer in time".to_owned();
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    let mut innermost = e.to_string();
    while let Some(err) = source {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            return match io.kind() {
                std::io::ErrorKind::ConnectionRefused => "connection refused".to_owned(),
                std::io::ErrorKind::ConnectionReset => "connection reset".to_owned(),
                std::io::ErrorKind::TimedOut => "connection timed out".to_owned(),
                _ => io.to_string(),
            };
        }
        innermost = err.to_string();
        source = err.source();
    }
    innermost
}

/// The start of a body, on one line, for a message.
fn quote(text: &str) -> String {
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.is_empty() {
        return "(empty body)".to_owned();
    }
    match one_line.char_indices().nth(QUOTE_LIMIT) {
        Some((cut, _)) => format!("{}…", &one_line[..cut]),
        None => one_line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client() -> Client {
        Client::new(Url::parse("http://127.0.0.1:8080").unwrap())
    }

    #[test]
    fn path_segments_are_encoded_under_the_base_path() {
        let c = Client::new(Url::parse("http://gw:8080/weft/").unwrap());
        let url = c.url(&["api", "workflow", "a b/c", "signal", "ok?"]);
        assert_eq!(
            url.as_str(),
            "http://gw:8080/weft/api/workflow/a%20b%2Fc/signal/ok%3F"
        );
        assert_eq!(client().server(), "http://127.0.0.1:8080");
    }

    #[test]
    fn refusals_show_the_message_and_the_field() {
        let e = client().failure(
            StatusCode::BAD_REQUEST,
            "POST /api/metadata/workflow",
            r#"{"code":"invalid_definition","message":"unknown task type \"FOO\"","path":"tasks[2].type"}"#,
        );
        assert_eq!(
            e.to_string(),
            "unknown task type \"FOO\" (field tasks[2].type)"
        );
        assert_eq!(e.exit_code(), exit::REFUSED);

        let e = client().failure(
            StatusCode::BAD_REQUEST,
            "POST /api/workflow/x/reset",
            r#"{"code":"invalid_field","message":"taskRef: no task \"zz\"","path":"taskRef"}"#,
        );
        assert_eq!(
            e.to_string(),
            "taskRef: no task \"zz\"",
            "the field is not repeated"
        );

        let e = client().failure(
            StatusCode::NOT_FOUND,
            "GET /api/workflow/wf-1",
            r#"{"code":"not_found","message":"workflow wf-1 not found"}"#,
        );
        assert_eq!(e.to_string(), "workflow wf-1 not found");
    }

    #[test]
    fn an_unauthenticated_answer_says_how_to_pass_a_token() {
        let body = r#"{"code":"unauthenticated","message":"this gateway needs a token"}"#;
        let e = client().failure(StatusCode::UNAUTHORIZED, "GET /api/workflow/x", body);
        assert_eq!(
            e.to_string(),
            "the gateway at http://127.0.0.1:8080 requires a token: pass --token or set \
             WEFT_TOKEN (an administrator creates one with `weft token create`)"
        );
        assert_eq!(e.exit_code(), exit::REFUSED);
        // A proxy's 401 (not the gateway's JSON) says the same.
        let e = client().failure(StatusCode::UNAUTHORIZED, "GET /", "<h1>401</h1>");
        assert!(
            e.to_string().contains("pass --token or set WEFT_TOKEN"),
            "{e}"
        );
        assert_eq!(e.exit_code(), exit::REFUSED);

        let token = Token::parse("weft_nope").unwrap();
        let c = Client::with_token(Url::parse("http://127.0.0.1:8080").unwrap(), Some(&token));
        let body = r#"{"code":"unauthenticated","message":"the token has expired"}"#;
        let e = c.failure(StatusCode::UNAUTHORIZED, "GET /api/workflow/x", body);
        assert_eq!(
            e.to_string(),
            "the gateway at http://127.0.0.1:8080 refused the token: the token has expired. \
             Check --token or WEFT_TOKEN"
        );
        assert_eq!(e.exit_code(), exit::REFUSED);
    }

    #[test]
    fn a_forbidden_answer_names_the_missing_scope() {
        let body =
            r#"{"code":"forbidden","message":"token `ci` lacks the scope `operate` needed here"}"#;
        let e = client().failure(StatusCode::FORBIDDEN, "DELETE /api/workflow/x", body);
        assert_eq!(
            e.to_string(),
            "not allowed: token `ci` lacks the scope `operate` needed here (an administrator \
             can create a token with the scope needed: weft token create)"
        );
        assert_eq!(e.exit_code(), exit::REFUSED);
    }

    #[test]
    fn tokens_are_checked_and_never_shown_by_debug() {
        let t = Token::parse("  weft_abc123\n").unwrap();
        assert_eq!(t.secret(), "weft_abc123", "a pasted newline is dropped");
        assert_eq!(format!("{t:?}"), "Token(<hidden>)");
        assert_eq!(Token::parse(" \t").unwrap_err(), "is empty");
        let err = Token::parse("two words").unwrap_err();
        assert!(err.contains("' '"), "{err}");
        assert!(Token::parse("caf\u{e9}").is_err());
    }

    /// A one-shot HTTP server on loopback: answers `{}` to one request and hands over
    /// the request's head (request line and headers), lower-cased.
    async fn capture_one_request() -> (Url, tokio::task::JoinHandle<String>) {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = Url::parse(&format!("http://{}", listener.local_addr().unwrap())).unwrap();
        let head = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut seen = Vec::new();
            let mut buf = [0_u8; 1024];
            while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = socket.read(&mut buf).await.unwrap();
                assert!(n > 0, "the client closed before sending its headers");
                seen.extend_from_slice(&buf[..n]);
            }
            socket
                .write_all(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                      content-length: 2\r\nconnection: close\r\n\r\n{}",
                )
                .await
                .unwrap();
            String::from_utf8_lossy(&seen).to_lowercase()
        });
        (url, head)
    }

    #[tokio::test]
    async fn a_given_token_goes_with_every_request_as_a_bearer() {
        let (url, head) = capture_one_request().await;
        let token = Token::parse("weft_S3cret").unwrap();
        Client::with_token(url, Some(&token))
            .get_json(&["api", "admin", "tokens"], &[])
            .await
            .unwrap();
        let head = head.await.unwrap();
        assert!(head.starts_with("get /api/admin/tokens "), "{head}");
        assert!(
            head.contains("\r\nauthorization: bearer weft_s3cret\r\n"),
            "{head}"
        );

        let (url, head) = capture_one_request().await;
        Client::new(url).get_json(&["api", "x"], &[]).await.unwrap();
        let head = head.await.unwrap();
        assert!(
            !head.contains("authorization"),
            "no token, no header: {head}"
        );
    }

    #[test]
    fn server_failures_and_foreign_answers_are_unavailable() {
        let e = client().failure(
            StatusCode::INTERNAL_SERVER_ERROR,
            "GET /api/workflow/x",
            r#"{"code":"internal","message":"internal error; see the gateway log"}"#,
        );
        assert_eq!(
            e.to_string(),
            "the gateway at http://127.0.0.1:8080 failed (500): internal error; see the gateway log"
        );
        assert_eq!(e.exit_code(), exit::UNAVAILABLE);

        let e = client().failure(
            StatusCode::NOT_FOUND,
            "GET /api/workflow/x",
            "<html>\n<body>Not Found</body></html>",
        );
        let text = e.to_string();
        assert!(text.contains("GET /api/workflow/x"), "{text}");
        assert!(text.contains("<html> <body>Not Found"), "{text}");
        assert!(text.contains("is it a Weft gateway?"), "{text}");
        assert_eq!(e.exit_code(), exit::UNAVAILABLE);
    }

    #[test]
    fn long_bodies_are_cut() {
        let q = quote(&"x".repeat(500));
        assert_eq!(q.chars().count(), QUOTE_LIMIT + 1);
        assert!(q.ends_with('…'));
        assert_eq!(quote("  \n"), "(empty body)");
    }

    #[tokio::test]
    async fn an_absent_gateway_is_a_sentence_naming_the_url() {
        // A port that was free a moment ago: nothing listens there.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let c = Client::new(Url::parse(&format!("http://127.0.0.1:{port}")).unwrap());
        let e = c.workflow("wf-1").await.unwrap_err();
        assert_eq!(e.exit_code(), exit::UNAVAILABLE);
        assert_eq!(
            e.to_string(),
            format!(
                "cannot reach the gateway at http://127.0.0.1:{port} (connection refused). \
                 Is it running? Start one with `weft dev` (`cargo run --release --bin weft \
                 -- dev`), or point --server (or WEFT_SERVER) at a running gateway"
            )
        );
    }
}
