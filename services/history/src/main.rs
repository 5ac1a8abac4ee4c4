//! `weft-history`: configuration, telemetry and signals around [`weft_history::run`].

#[tokio::main]
async fn main() -> std::process::ExitCode {
    weft::runtime::main("weft-history", weft_history::run).await
}
