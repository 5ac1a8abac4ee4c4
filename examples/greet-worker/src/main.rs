//! `weft-worker-example`: serves the `greet` workflow's activities until SIGINT/SIGTERM.
//!
//! Reads the usual `WEFT_*` environment (DESIGN.md §8); `WEFT_WORKER_ID` overrides the
//! worker id reported in results (default `<hostname>-<pid>`), `WEFT_WORKER_CONCURRENCY`
//! the number of activities run at once (default [`weft_worker_example::CONCURRENCY`]).

use weft::worker::Worker;

/// mimalloc, not glibc's allocator (BENCHMARKS.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let _telemetry = weft::telemetry::init("weft-worker-example")?;
    let config = weft::Config::from_env()?;
    let shutdown = weft::shutdown::on_signals();

    let mut builder = weft_worker_example::register(Worker::builder(&config));
    if let Some(id) = std::env::var("WEFT_WORKER_ID")
        .ok()
        .filter(|id| !id.is_empty())
    {
        builder = builder.worker_id(id);
    }
    if let Ok(raw) = std::env::var("WEFT_WORKER_CONCURRENCY") {
        let n: usize = raw
            .trim()
            .parse()
            .map_err(|e| anyhow::anyhow!("WEFT_WORKER_CONCURRENCY={raw:?}: {e}"))?;
        builder = builder.concurrency(n);
    }
    let worker = builder.build();
    tracing::info!(
        worker_id = worker.worker_id(),
        "weft-worker-example starting"
    );
    worker.run(shutdown).await?;
    Ok(())
}
