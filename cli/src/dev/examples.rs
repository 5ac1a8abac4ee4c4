//! `weft dev --example`: the example workflows, registered through the gateway (so they
//! are validated like any definition), and their worker, on the in-process bus.

use reqwest::Url;
use serde_json::Value;
use weft::worker::Worker;
use weft::Config;

use super::DevError;
use crate::client::{self, Client};

/// The example worker (the `greet` activities).
pub(super) fn worker(config: &Config) -> Worker {
    weft_worker_example::register(Worker::builder(config).worker_id("weft-dev-example")).build()
}

/// Registers each example workflow unless a definition of that name and version is
/// already there (a user's edit of it is kept).
pub(super) async fn register(gateway: &str) -> Result<(), DevError> {
    let base = Url::parse(gateway).map_err(|e| DevError::Example {
        name: "*".into(),
        reason: format!("bad gateway URL {gateway}: {e}"),
    })?;
    let client = Client::new(base);
    for (name, json) in weft_worker_example::WORKFLOWS {
        let failed = |reason: String| DevError::Example {
            name: name.to_owned(),
            reason,
        };
        let definition: Value = serde_json::from_str(json).map_err(|e| failed(e.to_string()))?;
        match client.register(&definition, false).await {
            Ok(()) => tracing::info!(workflow = name, "registered the example workflow"),
            Err(client::Error::Refused { status: 409, .. }) => {}
            Err(e) => return Err(failed(e.to_string())),
        }
    }
    Ok(())
}
