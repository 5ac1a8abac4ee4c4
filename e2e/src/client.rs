//! A small REST client on the gateway (API.md), for tests, the demo and the benchmark.

use std::time::Duration;

use anyhow::Context as _;
use serde::Deserialize;
use serde_json::Value;

/// Workflow statuses after which nothing changes any more.
pub const TERMINAL: [&str; 4] = ["COMPLETED", "FAILED", "TIMED_OUT", "TERMINATED"];

/// One event of a run's history.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HistoryEvent {
    /// Position in the run's history, from 1.
    pub event_id: i64,
    /// `WorkflowStarted`, `TaskScheduled`, ...
    #[serde(rename = "type")]
    pub kind: String,
    /// When it happened.
    #[serde(default)]
    pub time: Value,
    /// Type-specific fields (`taskRef`, `taskId`, ...).
    #[serde(default)]
    pub attributes: Value,
}

#[derive(Debug, Deserialize)]
struct HistoryPage {
    events: Vec<HistoryEvent>,
    #[serde(default)]
    next: Value,
}

/// An answer as it came: status, body text and, when it parses, body JSON.
#[derive(Debug, Clone)]
pub struct RawResponse {
    /// HTTP status code.
    pub status: u16,
    /// `Content-Type` header, if any.
    pub content_type: Option<String>,
    /// The body as text.
    pub text: String,
    /// The body as JSON, when it is JSON.
    pub json: Option<Value>,
}

/// REST client on one gateway.
#[derive(Debug, Clone)]
pub struct Client {
    base: String,
    http: reqwest::Client,
}

impl Client {
    /// A client on the gateway at `base_url` (e.g. `http://127.0.0.1:8080`).
    pub fn new(base_url: &str) -> Self {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .pool_max_idle_per_host(128)
            .build()
            .unwrap_or_default();
        Self {
            base: base_url.trim_end_matches('/').to_owned(),
            http,
        }
    }

    /// The same gateway, every request carrying `token` as `Authorization: Bearer`
    /// (for a gateway with authentication on).
    pub fn with_token(&self, token: &str) -> anyhow::Result<Self> {
        let mut value = reqwest::header::HeaderValue::from_str(&format!("Bearer {token}"))
            .context("a token is visible ASCII")?;
        value.set_sensitive(true);
        let headers =
            reqwest::header::HeaderMap::from_iter([(reqwest::header::AUTHORIZATION, value)]);
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .pool_max_idle_per_host(128)
            .default_headers(headers)
            .build()
            .context("building the HTTP client")?;
        Ok(Self {
            base: self.base.clone(),
            http,
        })
    }

    /// The gateway's base URL.
    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// Sends `method path` with an optional body and returns the answer whatever its status.
    pub async fn raw(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<(&str, Vec<u8>)>,
    ) -> anyhow::Result<RawResponse> {
        let url = format!("{}{path}", self.base);
        let mut req = self.http.request(method.clone(), &url);
        if let Some((content_type, bytes)) = body {
            req = req
                .header(reqwest::header::CONTENT_TYPE, content_type)
                .body(bytes);
        }
        let resp = req
            .send()
            .await
            .with_context(|| format!("{method} {url}"))?;
        let status = resp.status().as_u16();
        let content_type = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let text = resp
            .text()
            .await
            .with_context(|| format!("{method} {url}: body"))?;
        let json = serde_json::from_str(&text).ok();
        Ok(RawResponse {
            status,
            content_type,
            text,
            json,
        })
    }

    /// Sends JSON and fails unless the answer is 2xx.
    async fn send_ok(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> anyhow::Result<RawResponse> {
        let bytes = body.map(|b| ("application/json", b.to_string().into_bytes()));
        let resp = self.raw(method.clone(), path, bytes).await?;
        if !(200..300).contains(&resp.status) {
            anyhow::bail!("{method} {path} answered {}: {}", resp.status, resp.text);
        }
        Ok(resp)
    }

    /// Registers a workflow definition (`POST /api/metadata/workflow`).
    pub async fn register(&self, def: &Value) -> anyhow::Result<()> {
        self.send_ok(reqwest::Method::POST, "/api/metadata/workflow", Some(def))
            .await
            .map(drop)
    }

    /// Registers a definition, replacing an existing one of the same version.
    pub async fn register_overwrite(&self, def: &Value) -> anyhow::Result<()> {
        let path = "/api/metadata/workflow?overwrite=true";
        self.send_ok(reqwest::Method::POST, path, Some(def))
            .await
            .map(drop)
    }

    /// Registers task definitions (`POST /api/metadata/taskdefs`, a JSON array).
    pub async fn register_taskdefs(&self, defs: &Value) -> anyhow::Result<()> {
        self.send_ok(reqwest::Method::POST, "/api/metadata/taskdefs", Some(defs))
            .await
            .map(drop)
    }

    /// `POST path` with a JSON body, whatever the answer.
    pub async fn post_json(&self, path: &str, body: &Value) -> anyhow::Result<RawResponse> {
        let bytes = ("application/json", body.to_string().into_bytes());
        self.raw(reqwest::Method::POST, path, Some(bytes)).await
    }

    /// Starts the latest version of `name` with `input`; returns the workflow id.
    pub async fn start(&self, name: &str, input: Value) -> anyhow::Result<String> {
        self.start_request(&serde_json::json!({ "name": name, "input": input }))
            .await
    }

    /// Sends a full StartWorkflowRequest (`POST /api/workflow`); returns the workflow id.
    pub async fn start_request(&self, request: &Value) -> anyhow::Result<String> {
        let resp = self
            .send_ok(reqwest::Method::POST, "/api/workflow", Some(request))
            .await?;
        let id = resp.text.trim().trim_matches('"').to_owned();
        anyhow::ensure!(!id.is_empty(), "start answered an empty workflow id");
        Ok(id)
    }

    /// The workflow with its tasks, or `None` when the gateway answers 404.
    pub async fn try_get(&self, id: &str) -> anyhow::Result<Option<Value>> {
        let path = format!("/api/workflow/{id}?includeTasks=true");
        let resp = self.raw(reqwest::Method::GET, &path, None).await?;
        match resp.status {
            404 => Ok(None),
            200 => resp
                .json
                .map(Some)
                .with_context(|| format!("GET {path}: not JSON: {}", resp.text)),
            s => anyhow::bail!("GET {path} answered {s}: {}", resp.text),
        }
    }

    /// The workflow with its tasks (`GET /api/workflow/{id}?includeTasks=true`).
    pub async fn get(&self, id: &str) -> anyhow::Result<Value> {
        self.try_get(id)
            .await?
            .with_context(|| format!("workflow {id} not found"))
    }

    /// The current run's whole history, following `next` page by page.
    pub async fn history(&self, id: &str) -> anyhow::Result<Vec<HistoryEvent>> {
        let mut events = Vec::new();
        let mut after: Option<String> = None;
        for _ in 0..10_000 {
            let mut path = format!("/api/workflow/{id}/history?limit=100");
            if let Some(a) = &after {
                path.push_str(&format!("&after={a}"));
            }
            let resp = self.send_ok(reqwest::Method::GET, &path, None).await?;
            let page: HistoryPage = serde_json::from_str(&resp.text)
                .with_context(|| format!("GET {path}: unexpected body {}", resp.text))?;
            let empty = page.events.is_empty();
            events.extend(page.events);
            let next = match page.next {
                Value::Null => None,
                Value::String(s) if s.is_empty() => None,
                Value::String(s) => Some(s),
                other => Some(other.to_string()),
            };
            if empty || next.is_none() || next == after {
                return Ok(events);
            }
            after = next;
        }
        anyhow::bail!("history of {id}: more than 10,000 pages")
    }

    /// Polls the workflow every 20 ms until its status is one of `statuses`; returns it.
    /// Fails at once if it reaches another terminal status, and after `timeout`.
    pub async fn wait_for_status(
        &self,
        id: &str,
        statuses: &[&str],
        timeout: Duration,
    ) -> anyhow::Result<Value> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut last = Value::Null;
        loop {
            if let Some(wf) = self.try_get(id).await? {
                let status = wf["status"].as_str().unwrap_or_default();
                if statuses.contains(&status) {
                    return Ok(wf);
                }
                if TERMINAL.contains(&status) {
                    anyhow::bail!(
                        "workflow {id} ended {status}, expected one of {statuses:?}: {wf}"
                    );
                }
                last = wf;
            }
            if tokio::time::Instant::now() >= deadline {
                anyhow::bail!(
                    "workflow {id} not {statuses:?} after {timeout:?}; last seen: {}",
                    summarize(&last)
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Status, sub-status and task statuses of a Workflow JSON, for error messages.
pub fn summarize(wf: &Value) -> String {
    if wf.is_null() {
        return "never found (404)".into();
    }
    let tasks: Vec<String> = wf["tasks"]
        .as_array()
        .map(|ts| {
            ts.iter()
                .map(|t| format!("{}={}", t["referenceTaskName"], t["status"]))
                .collect()
        })
        .unwrap_or_default();
    format!(
        "status {} subStatus {} tasks [{}]",
        wf["status"],
        wf["subStatus"],
        tasks.join(", ")
    )
}

/// Status and each task's type and status of a Workflow JSON, in order, for error
/// messages about a run's task list.
pub fn summarize_types(wf: &Value) -> String {
    let tasks: Vec<String> = wf["tasks"]
        .as_array()
        .map(|ts| {
            ts.iter()
                .map(|t| {
                    format!(
                        "{}:{}={}",
                        t["referenceTaskName"], t["taskType"], t["status"]
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    format!("status {} tasks [{}]", wf["status"], tasks.join(", "))
}
