//! `weft-event-log-listener`: writes every lifecycle event of the namespace to a file, one
//! JSON line each, until SIGINT/SIGTERM.
//!
//! Reads the usual `WEFT_*` environment (DESIGN.md §8) and:
//! - `WEFT_EVENT_LOG`: the file (default `weft-events.log`);
//! - `WEFT_LISTENER_NAME`: the listener's name, hence its queue
//!   `<namespace>.listener.<name>` (default `event-log`);
//! - `WEFT_LISTENER_BINDINGS`: comma-separated routing keys (default `#`, every event).

use std::path::PathBuf;

use weft_event_log_listener::EventLog;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let _telemetry = weft::telemetry::init("weft-event-log-listener")?;
    let config = weft::Config::from_env()?;
    let shutdown = weft::shutdown::on_signals();
    let var = |k: &str, default: &str| std::env::var(k).unwrap_or_else(|_| default.to_owned());
    let path = PathBuf::from(var("WEFT_EVENT_LOG", "weft-events.log"));
    let name = var("WEFT_LISTENER_NAME", "event-log");
    let bindings = var("WEFT_LISTENER_BINDINGS", "#")
        .split(',')
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .map(str::to_owned)
        .collect();
    let log = EventLog::open(&path, bindings)?;
    tracing::info!(path = %log.path().display(), listener = %name, "writing lifecycle events");
    weft::listener::run(&config, &name, log, shutdown).await?;
    Ok(())
}
