//! `weft dev --example`: the example workflows, validated like any definition and
//! stored before the gateway opens (so the first request already finds them), and their
//! worker, on the in-process bus.

use serde_json::Value;
use weft::store::definitions::PutOutcome;
use weft::store::Store;
use weft::worker::Worker;
use weft::Config;

use super::DevError;

/// The example worker (the `greet` activities).
pub(super) fn worker(config: &Config) -> Worker {
    weft_worker_example::register(Worker::builder(config).worker_id("weft-dev-example")).build()
}

/// Stores each example workflow unless a definition of that name and version is
/// already there (a user's edit of it is kept).
pub(super) async fn register(store: &Store) -> Result<(), DevError> {
    for (name, json) in weft_worker_example::WORKFLOWS {
        let failed = |reason: String| DevError::Example {
            name: name.to_owned(),
            reason,
        };
        let json: Value = serde_json::from_str(json).map_err(|e| failed(e.to_string()))?;
        let definition = weft::dsl::parse_definition(&json).map_err(|e| failed(e.to_string()))?;
        match store.put_definition(&definition, false).await? {
            PutOutcome::Exists => {}
            _ => tracing::info!(workflow = name, "registered the example workflow"),
        }
    }
    Ok(())
}
