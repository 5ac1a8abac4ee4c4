//! `weft-decider`: configuration, telemetry and signals around [`weft_decider::run`].

#[tokio::main]
async fn main() -> std::process::ExitCode {
    weft::runtime::main("weft-decider", weft_decider::run).await
}
