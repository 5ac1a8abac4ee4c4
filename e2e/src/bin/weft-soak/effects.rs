//! The soak's own effects, counted: the activities its in-process worker serves and the
//! HTTP server its HTTP tasks call. The checks read the counts (an activity that
//! completed must have run at least once).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use weft::worker::{ActivityError, Worker};

/// How long `soak_long` works (its heartbeat timeout is 2 s: it lives on heartbeats).
const LONG_WORK: Duration = Duration::from_secs(4);

/// Executions counted by key: a task id for the activities, a run number for the HTTP
/// calls.
#[derive(Debug, Clone, Default)]
pub struct Effects {
    executions: Arc<Mutex<HashMap<String, u32>>>,
}

impl Effects {
    fn count(&self, key: String) -> u32 {
        let mut map = self.executions.lock().expect("effects lock");
        let n = map.entry(key).or_default();
        *n += 1;
        *n
    }

    /// How many times `key` ran.
    pub fn executions(&self, key: &str) -> u32 {
        self.executions
            .lock()
            .expect("effects lock")
            .get(key)
            .copied()
            .unwrap_or(0)
    }

    /// The soak's worker: `soak_flaky` fails each task's first execution here (retried
    /// after its back-off), `soak_long` works for seconds on heartbeats.
    pub fn worker(&self, config: &weft::Config) -> Worker {
        let (flaky, long) = (self.clone(), self.clone());
        Worker::builder(config)
            .concurrency(64)
            .handler("soak_flaky", move |task| {
                let effects = flaky.clone();
                async move {
                    effects.count(format!("task:{}", task.task_id));
                    // The run's first execution, whichever attempt it is: a retry always
                    // follows a real failure.
                    let first = effects.count(format!("flaky-run:{}", task.workflow_id)) == 1;
                    match first {
                        true => Err(ActivityError::retryable("the first try fails, on purpose")),
                        false => Ok(json!({"attempt": task.attempt})),
                    }
                }
            })
            .handler("soak_long", move |task| {
                let effects = long.clone();
                async move {
                    effects.count(format!("task:{}", task.task_id));
                    tokio::time::sleep(LONG_WORK).await;
                    Ok(json!({"done": true}))
                }
            })
            .build()
    }

    /// Serves `GET /call/{n}` on a free port of 127.0.0.1 until `shutdown`: counts the
    /// call under `http:{n}` and answers `{"key": n}`. `POST /hook` (a rollback hook) is
    /// counted under `hook:{workflowId}` of its event document.
    pub async fn serve_http(&self, shutdown: CancellationToken) -> anyhow::Result<SocketAddr> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let effects = self.clone();
        tokio::spawn(async move {
            loop {
                let (mut stream, _) = tokio::select! {
                    accepted = listener.accept() => match accepted {
                        Ok(a) => a,
                        Err(_) => continue,
                    },
                    _ = shutdown.cancelled() => return,
                };
                let effects = effects.clone();
                tokio::spawn(async move {
                    let Some((path, body)) = read_request(&mut stream).await else {
                        return;
                    };
                    let (status, body) = effects.answer(&path, &body);
                    let response = format!(
                        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\n\
                         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = stream.write_all(response.as_bytes()).await;
                    let _ = stream.shutdown().await;
                });
            }
        });
        Ok(addr)
    }

    /// Counts one request to the soak's server and answers it: `GET /call/{n}` under
    /// `http:{n}`, a rollback hook (`POST /hook`) under `hook:{workflowId}` of its event
    /// document.
    fn answer(&self, path: &str, body: &[u8]) -> (&'static str, String) {
        if path == "/hook" {
            let event: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
            return match event["workflowId"].as_str() {
                Some(wf) => {
                    self.count(format!("hook:{wf}"));
                    ("200 OK", json!({"ok": true}).to_string())
                }
                None => (
                    "400 Bad Request",
                    json!({"error": "no workflowId"}).to_string(),
                ),
            };
        }
        match path
            .strip_prefix("/call/")
            .and_then(|n| n.parse::<u64>().ok())
        {
            Some(n) => {
                self.count(format!("http:{n}"));
                ("200 OK", json!({"key": n}).to_string())
            }
            None => (
                "404 Not Found",
                json!({"error": "no such call"}).to_string(),
            ),
        }
    }
}

/// Reads one HTTP request: its path and its body (`Content-Length` bytes); `None` when
/// the connection ends first.
async fn read_request(stream: &mut tokio::net::TcpStream) -> Option<(String, Vec<u8>)> {
    let mut request = Vec::new();
    let mut buf = [0u8; 2048];
    let head_end = loop {
        if let Some(i) = request.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => request.extend_from_slice(&buf[..n]),
        }
    };
    let head = String::from_utf8_lossy(&request[..head_end]).into_owned();
    let path = head
        .split_whitespace()
        .nth(1)
        .unwrap_or_default()
        .to_owned();
    let length = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0);
    let mut body = request.split_off(head_end);
    while body.len() < length {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => body.extend_from_slice(&buf[..n]),
        }
    }
    Some((path, body))
}
