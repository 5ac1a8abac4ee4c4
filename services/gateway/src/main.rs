//! `weft-gateway`: configuration, telemetry and signals around [`weft_gateway::run`].

/// mimalloc, not glibc's allocator (BENCHMARKS.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    weft::runtime::main("weft-gateway", weft_gateway::run).await
}
