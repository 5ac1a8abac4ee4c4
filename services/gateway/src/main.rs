//! `weft-gateway`: configuration, telemetry and signals around [`weft_gateway::run`].

#[tokio::main]
async fn main() -> std::process::ExitCode {
    weft::runtime::main("weft-gateway", weft_gateway::run).await
}
