//! `weft-heartbeat`: configuration, telemetry and signals around [`weft_heartbeat::run`].

#[tokio::main]
async fn main() -> std::process::ExitCode {
    weft::runtime::main("weft-heartbeat", weft_heartbeat::run).await
}
