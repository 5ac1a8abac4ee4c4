//! `--http-workers`: greet's activities served the way Conductor's SDKs serve tasks —
//! over the gateway's HTTP task API instead of the example worker's AMQP queues. Each
//! poller long-polls a batch (`GET /api/tasks/poll/batch/{name}`, as the SDKs' default
//! `timeout=100`), computes each task with the example worker's own functions and
//! answers it (`POST /api/tasks`), the results of a batch in parallel. The answer waits
//! for the decider's verdict (docs/task-updates.md), which is what this mode measures.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use anyhow::Context as _;
use serde_json::{json, Value};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use weft_e2e::Client;
use weft_worker_example::activities;

/// The pollers, until [`HttpWorkers::stop`].
pub struct HttpWorkers {
    stop: CancellationToken,
    loops: Vec<JoinHandle<anyhow::Result<()>>>,
    /// Results answered 200.
    pub answered: Arc<AtomicU64>,
}

impl HttpWorkers {
    /// `per_task` pollers for each of greet's activities, each taking up to `batch`
    /// tasks a poll.
    pub fn spawn(client: &Client, per_task: usize, batch: usize) -> Self {
        let stop = CancellationToken::new();
        let answered = Arc::new(AtomicU64::new(0));
        let mut loops = Vec::new();
        for task in weft_e2e::greet::TASKS {
            for i in 0..per_task {
                let poller = Poller {
                    client: client.clone(),
                    task,
                    worker_id: format!("bench-{task}-{i}"),
                    batch,
                    answered: answered.clone(),
                };
                loops.push(tokio::spawn(poller.run(stop.clone())));
            }
        }
        Self {
            stop,
            loops,
            answered,
        }
    }

    /// Stops polling; the first poller's error, if one failed.
    pub async fn stop(self) -> anyhow::Result<()> {
        self.stop.cancel();
        for handle in self.loops {
            handle.await??;
        }
        Ok(())
    }
}

/// One poller of one activity.
struct Poller {
    client: Client,
    task: &'static str,
    worker_id: String,
    batch: usize,
    answered: Arc<AtomicU64>,
}

impl Poller {
    async fn run(self, stop: CancellationToken) -> anyhow::Result<()> {
        let path = format!(
            "/api/tasks/poll/batch/{}?workerid={}&count={}&timeout=100",
            self.task, self.worker_id, self.batch
        );
        while !stop.is_cancelled() {
            let polled = tokio::select! {
                r = self.client.raw(reqwest::Method::GET, &path, None) => r?,
                () = stop.cancelled() => return Ok(()),
            };
            anyhow::ensure!(
                polled.status == 200 || polled.status == 204,
                "poll of {} answered {}: {}",
                self.task,
                polled.status,
                polled.text
            );
            let tasks = match polled.json {
                Some(Value::Array(tasks)) => tasks,
                _ => continue,
            };
            let answers = tasks.iter().map(|task| self.answer(task));
            for result in futures_util::future::join_all(answers).await {
                result?;
            }
        }
        Ok(())
    }

    /// Computes `task` and posts its result.
    async fn answer(&self, task: &Value) -> anyhow::Result<()> {
        let input = &task["inputData"];
        let output = match self.task {
            "make_name" => activities::make_name(input),
            "shout" => activities::shout(input),
            _ => activities::count(input),
        }
        .map_err(|e| anyhow::anyhow!("{} failed: {e:?}", self.task))?;
        let result = json!({
            "workflowInstanceId": task["workflowInstanceId"],
            "taskId": task["taskId"],
            "workerId": self.worker_id,
            "status": "COMPLETED",
            "outputData": output,
        });
        let r = self
            .client
            .post_json("/api/tasks", &result)
            .await
            .with_context(|| format!("result of {}", task["taskId"]))?;
        anyhow::ensure!(
            r.status == 200,
            "result of {} answered {}: {}",
            task["taskId"],
            r.status,
            r.text
        );
        self.answered.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}
