//! `weft-gateway`: wires configuration, telemetry and signals to [`weft_gateway::run`].

use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    let _telemetry = match weft::telemetry::init("weft-gateway") {
        Ok(guard) => guard,
        Err(e) => {
            eprintln!("weft-gateway: {e}");
            return ExitCode::FAILURE;
        }
    };
    let config = match weft::Config::from_env() {
        Ok(config) => config,
        Err(e) => {
            tracing::error!(error = %e, "invalid configuration");
            return ExitCode::FAILURE;
        }
    };
    let shutdown = weft::shutdown::on_signals();
    match weft_gateway::run(config, shutdown).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "gateway stopped");
            ExitCode::FAILURE
        }
    }
}
