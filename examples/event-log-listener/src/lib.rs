//! An [`EventListener`] that appends every lifecycle event it receives to a file, one
//! JSON document per line: the example of docs/hooks.md ("Listeners in Rust").

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use weft::listener::{EventListener, ListenerError};
use weft::messages::LifecycleEvent;

/// Appends events to a log file.
#[derive(Debug)]
pub struct EventLog {
    path: PathBuf,
    file: Mutex<File>,
    bindings: Vec<String>,
}

impl EventLog {
    /// A log appending to `path` (created if missing) the events matching `bindings`
    /// (routing keys such as `#` or `task.*`).
    pub fn open(path: &Path, bindings: Vec<String>) -> std::io::Result<Self> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Self {
            path: path.to_owned(),
            file: Mutex::new(file),
            bindings,
        })
    }

    /// The file written to.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl EventListener for EventLog {
    fn bindings(&self) -> Vec<String> {
        self.bindings.clone()
    }

    async fn on_event(&self, event: LifecycleEvent) -> Result<(), ListenerError> {
        let mut line = serde_json::to_vec(&event)
            .map_err(|e| ListenerError::Reject(format!("unencodable event: {e}")))?;
        line.push(b'\n');
        // A poisoned lock only means a panic in another write; the file is still usable.
        let mut file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        // One write per line and a flush before the event is acknowledged: a crash loses
        // no acknowledged event (a write that fails is retried, the event comes again).
        file.write_all(&line)
            .and_then(|()| file.flush())
            .map_err(|e| ListenerError::Retry(format!("writing {}: {e}", self.path.display())))
    }
}
