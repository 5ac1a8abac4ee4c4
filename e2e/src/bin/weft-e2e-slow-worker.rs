//! `weft-e2e-slow-worker`: a worker for the end-to-end heartbeat tests, so that a test can
//! SIGKILL a worker in the middle of an activity.
//!
//! Serves the task named by `WEFT_E2E_TASK` (default `slow_task`): waits `input.ms`
//! milliseconds (default 4,000) while the SDK heartbeats it, returns early when the
//! heartbeat service says STOP, then completes with `{ "worker": <worker id>,
//! "attempt": <attempt> }`. Reads the usual `WEFT_*` environment; `WEFT_WORKER_ID` names
//! the worker.

use std::time::Duration;

use serde_json::json;
use weft::worker::{ActivityError, Worker};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let _telemetry = weft::telemetry::init("weft-e2e-slow-worker")?;
    let config = weft::Config::from_env()?;
    let shutdown = weft::shutdown::on_signals();
    let task = std::env::var("WEFT_E2E_TASK").unwrap_or_else(|_| "slow_task".into());
    let mut builder = Worker::builder(&config);
    let worker_id = std::env::var("WEFT_WORKER_ID").unwrap_or_default();
    if !worker_id.is_empty() {
        builder = builder.worker_id(worker_id.clone());
    }
    let worker = builder
        .activity(task, move |task, ctx| {
            let worker_id = worker_id.clone();
            async move {
                // Tests read when each activity reached the worker from this line.
                tracing::info!(
                    workflow_id = %task.workflow_id,
                    task_ref = %task.task_ref,
                    attempt = task.attempt,
                    "activity started"
                );
                let ms = task.input["ms"].as_u64().unwrap_or(4_000);
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(ms)) => {}
                    _ = ctx.cancelled() => {
                        return Err(ActivityError::retryable("stopped by the heartbeat service"));
                    }
                }
                Ok(json!({ "worker": worker_id, "attempt": ctx.attempt() }))
            }
        })
        .build();
    tracing::info!(
        worker_id = worker.worker_id(),
        "weft-e2e-slow-worker starting"
    );
    worker.run(shutdown).await?;
    Ok(())
}
