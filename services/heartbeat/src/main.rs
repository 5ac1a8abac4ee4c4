//! `weft-heartbeat`: configuration, telemetry and signals around [`weft_heartbeat::run`].

/// mimalloc, not glibc's allocator (BENCHMARKS.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    weft::runtime::main("weft-heartbeat", weft_heartbeat::run).await
}
