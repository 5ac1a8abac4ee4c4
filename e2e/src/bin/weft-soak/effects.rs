//! The soak's own effects, counted: the activities its in-process worker serves and the
//! HTTP server its HTTP tasks call. The checks read the counts (an activity that
//! completed must have run at least once).

use std::collections::{BTreeMap, HashMap, HashSet};
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
    /// The task ids the soak's worker ran, by workflow id.
    tasks_run: Arc<Mutex<HashMap<String, HashSet<String>>>>,
    /// Hook calls the checks expected, by hook (`onTimeout`, ...): the report says how
    /// many each check covered.
    hooks_checked: Arc<Mutex<BTreeMap<&'static str, u64>>>,
}

impl Effects {
    /// Counts one execution of `key`; how many so far.
    pub(crate) fn count(&self, key: String) -> u32 {
        let mut map = self.executions.lock().expect("effects lock");
        let n = map.entry(key).or_default();
        *n += 1;
        *n
    }

    /// Counts one execution by the soak's worker of task `task_id` of `workflow_id`.
    fn ran(&self, workflow_id: &str, task_id: uuid::Uuid) {
        self.count(format!("task:{task_id}"));
        self.tasks_run
            .lock()
            .expect("tasks lock")
            .entry(workflow_id.to_owned())
            .or_default()
            .insert(task_id.to_string());
    }

    /// The ids of the tasks of `workflow_id` that the soak's worker ran.
    pub fn tasks_run(&self, workflow_id: &str) -> HashSet<String> {
        self.tasks_run
            .lock()
            .expect("tasks lock")
            .get(workflow_id)
            .cloned()
            .unwrap_or_default()
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

    /// Counts one hook call that a check expected.
    pub fn hook_checked(&self, hook: &'static str) {
        *self
            .hooks_checked
            .lock()
            .expect("hooks lock")
            .entry(hook)
            .or_default() += 1;
    }

    /// The hook calls the checks expected, by hook.
    pub fn hooks_checked(&self) -> BTreeMap<&'static str, u64> {
        self.hooks_checked.lock().expect("hooks lock").clone()
    }

    /// How many times `key` ran, waiting until `deadline` for it to run at least once:
    /// hooks other than awaited rollbacks are delivered after their run moved on, so one
    /// may still be on its way (or retried after a fault) when the run is checked.
    pub async fn executions_by(&self, key: &str, deadline: tokio::time::Instant) -> u32 {
        loop {
            let n = self.executions(key);
            if n > 0 || tokio::time::Instant::now() >= deadline {
                return n;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
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
                    effects.ran(&task.workflow_id, task.task_id);
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
                    effects.ran(&task.workflow_id, task.task_id);
                    tokio::time::sleep(LONG_WORK).await;
                    Ok(json!({"done": true}))
                }
            })
            .build()
    }

    /// Serves `GET /call/{n}` on a free port of 127.0.0.1 until `shutdown`: counts the
    /// call under `http:{n}` and answers `{"key": n}`. `POST /hook` (a hook's call) is
    /// counted by what fired it (`Effects::hook_key`).
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
    /// `http:{n}`, a hook's call (`POST /hook`) under `Effects::hook_key` of its event
    /// document.
    fn answer(&self, path: &str, body: &[u8]) -> (&'static str, String) {
        if path == "/hook" {
            let event: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
            return match hook_key(&event) {
                Some(key) => {
                    self.count(key);
                    ("200 OK", json!({"ok": true}).to_string())
                }
                None => (
                    "400 Bad Request",
                    json!({"error": "not a hook the soak declares", "event": event}).to_string(),
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

/// The key a hook's call is counted under, from its event document: a rollback under
/// `hook:{workflowId}`, a task's timeout under `timeout-hook:{taskId}`, a run's
/// completion under `complete-hook:{workflowId}`; `None` for anything else.
pub fn hook_key(event: &serde_json::Value) -> Option<String> {
    let workflow = event["workflowId"].as_str()?;
    match event["hook"].as_str()? {
        "onRollback" => Some(format!("hook:{workflow}")),
        "onTimeout" => Some(format!(
            "timeout-hook:{}",
            event["task"]["taskId"].as_str()?
        )),
        "onComplete" if event["task"].is_null() => Some(format!("complete-hook:{workflow}")),
        _ => None,
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::hook_key;

    #[test]
    fn each_declared_hook_is_counted_under_what_fired_it() {
        let rollback = json!({"hook": "onRollback", "workflowId": "w1",
                              "task": {"taskId": "t0"}});
        let timeout = json!({"hook": "onTimeout", "workflowId": "w1",
                             "task": {"taskId": "t1"}});
        let complete = json!({"hook": "onComplete", "workflowId": "w2"});
        assert_eq!(hook_key(&rollback).as_deref(), Some("hook:w1"));
        assert_eq!(hook_key(&timeout).as_deref(), Some("timeout-hook:t1"));
        assert_eq!(hook_key(&complete).as_deref(), Some("complete-hook:w2"));
    }

    #[test]
    fn a_call_the_soak_did_not_declare_is_not_counted() {
        let task_complete = json!({"hook": "onComplete", "workflowId": "w",
                                   "task": {"taskId": "t"}});
        let no_run = json!({"hook": "onRollback"});
        let timeout_without_task = json!({"hook": "onTimeout", "workflowId": "w"});
        assert_eq!(hook_key(&task_complete), None);
        assert_eq!(hook_key(&no_run), None);
        assert_eq!(hook_key(&timeout_without_task), None);
    }
}
