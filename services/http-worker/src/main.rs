//! `weft-http-worker`: configuration, telemetry and signals around
//! [`weft_http_worker::run`].

/// mimalloc, not glibc's allocator (BENCHMARKS.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    weft::runtime::main("weft-http-worker", weft_http_worker::run).await
}
