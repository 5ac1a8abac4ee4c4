//! The resolved definitions of recent starts, so that a start of a registered workflow
//! reads nothing before its commit (docs/definition-cache.md).
//!
//! An entry is the definition as a start runs it: parsed, checked, its task definitions
//! and children frozen in. It was read under an epoch of the definitions
//! ([`DefinitionsEpoch`]) and is used only while that epoch is still current, so a
//! change to any workflow or task definition, here or in another process, drops every
//! entry at once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use weft::dsl::WorkflowDef;
use weft::store::definitions_epoch::DefinitionsEpoch;

/// How many `(name, version)` pairs are kept; past it the cache starts over (a frozen
/// definition with its children can be large, and a gateway serves few distinct ones).
const CAPACITY: usize = 256;

/// `(name, version)`: the version as asked, `None` for the latest.
type Key = (String, Option<i32>);

/// Resolved definitions by the name and version a start asked for.
#[derive(Debug, Default, Clone)]
pub struct StartDefinitions {
    entries: Arc<Mutex<HashMap<Key, Entry>>>,
}

#[derive(Debug)]
struct Entry {
    /// The epoch current before the definition was read.
    epoch: u64,
    definition: Arc<WorkflowDef>,
}

impl StartDefinitions {
    /// The definition resolved for `name` at `version`, while still current.
    pub fn get(
        &self,
        epoch: &DefinitionsEpoch,
        name: &str,
        version: Option<i32>,
    ) -> Option<WorkflowDef> {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let entry = entries.get(&(name.to_owned(), version))?;
        epoch
            .is_current(entry.epoch)
            .then(|| WorkflowDef::clone(&entry.definition))
    }

    /// Keeps `definition`, resolved for `name` at `version` from reads made under
    /// `read_under` (the epoch current before them; `None`: not watched, not kept).
    pub fn insert(
        &self,
        read_under: Option<u64>,
        name: &str,
        version: Option<i32>,
        definition: &WorkflowDef,
    ) {
        let Some(epoch) = read_under else {
            return;
        };
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if entries.len() >= CAPACITY {
            entries.clear();
        }
        entries.insert(
            (name.to_owned(), version),
            Entry {
                epoch,
                definition: Arc::new(definition.clone()),
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def(name: &str, version: i32) -> WorkflowDef {
        weft::dsl::parse_definition(&serde_json::json!({
            "name": name, "version": version,
            "tasks": [{"name": "a", "taskReferenceName": "a", "type": "SIMPLE"}]
        }))
        .unwrap()
    }

    #[test]
    fn an_entry_is_used_until_the_definitions_change() {
        let (epoch, cache) = (DefinitionsEpoch::watched(), StartDefinitions::default());
        let read_under = epoch.current();
        cache.insert(read_under, "w", None, &def("w", 2));
        assert_eq!(cache.get(&epoch, "w", None).unwrap().version, 2);
        assert!(
            cache.get(&epoch, "w", Some(2)).is_none(),
            "keyed by the version asked"
        );
        epoch.changed();
        assert!(cache.get(&epoch, "w", None).is_none());
    }

    #[test]
    fn reads_made_before_a_change_are_not_kept_as_current() {
        let (epoch, cache) = (DefinitionsEpoch::watched(), StartDefinitions::default());
        let read_under = epoch.current();
        epoch.changed(); // committed while the start was reading
        cache.insert(read_under, "w", None, &def("w", 1));
        assert!(cache.get(&epoch, "w", None).is_none());
    }

    #[test]
    fn nothing_is_kept_while_changes_are_not_watched() {
        let (epoch, cache) = (DefinitionsEpoch::default(), StartDefinitions::default());
        cache.insert(epoch.current(), "w", None, &def("w", 1));
        epoch.start_watching();
        assert!(cache.get(&epoch, "w", None).is_none());
    }
}
