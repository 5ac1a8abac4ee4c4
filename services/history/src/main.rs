//! `weft-history`: configuration, telemetry and signals around [`weft_history::run`].

/// mimalloc, not glibc's allocator (BENCHMARKS.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    weft::runtime::main("weft-history", weft_history::run).await
}
