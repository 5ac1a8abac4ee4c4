//! Whether a cache of registered definitions may still be trusted.
//!
//! The gateway keeps each start's resolved definition (the registered one, its task
//! definitions and children frozen in) so a start reads nothing before its commit
//! (docs/definition-cache.md). A cached copy is good only while no workflow or task
//! definition has changed since it was read: every such change moves the epoch on, and
//! an entry is used only while the epoch it was read under is still the current one.
//!
//! Changes made through this process move it at once (a gateway sees its own writes);
//! changes made by other processes move it when the database tells (PostgreSQL's
//! `NOTIFY` from a trigger on both tables, [`crate::store::pg`]). While nobody listens
//! (not started yet, or the listening connection lost) there is no current epoch and
//! nothing may be cached.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// A shared, cheap-to-clone epoch of the registered definitions.
#[derive(Debug, Clone, Default)]
pub struct DefinitionsEpoch {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Moves on at every change, and whenever watching starts or stops, so nothing read
    /// before a gap in watching is taken for current after it.
    epoch: AtomicU64,
    watching: AtomicBool,
}

impl DefinitionsEpoch {
    /// An epoch that is watched from the start: every change goes through this process
    /// (the embedded store of `weft dev`).
    pub fn watched() -> Self {
        let epoch = Self::default();
        epoch.start_watching();
        epoch
    }

    /// The current epoch, or `None` while changes are not being watched (then nothing
    /// may be cached). Read it before reading the definitions a cache entry is made of.
    pub fn current(&self) -> Option<u64> {
        self.inner
            .watching
            .load(Ordering::SeqCst)
            .then(|| self.inner.epoch.load(Ordering::SeqCst))
    }

    /// Whether an entry read under `epoch` may still be used.
    pub fn is_current(&self, epoch: u64) -> bool {
        self.current() == Some(epoch)
    }

    /// A workflow or task definition changed (after its commit).
    pub fn changed(&self) {
        self.inner.epoch.fetch_add(1, Ordering::SeqCst);
    }

    /// Changes are watched from now on.
    pub fn start_watching(&self) {
        self.inner.epoch.fetch_add(1, Ordering::SeqCst);
        self.inner.watching.store(true, Ordering::SeqCst);
    }

    /// Changes are no longer watched (the listening connection is gone): nothing cached
    /// until watching starts again.
    pub fn stop_watching(&self) {
        self.inner.watching.store(false, Ordering::SeqCst);
        self.inner.epoch.fetch_add(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::DefinitionsEpoch;

    #[test]
    fn nothing_is_current_until_changes_are_watched() {
        let epoch = DefinitionsEpoch::default();
        assert_eq!(epoch.current(), None);
        epoch.start_watching();
        assert!(epoch.current().is_some());
    }

    #[test]
    fn a_change_makes_what_was_read_before_it_stale() {
        let epoch = DefinitionsEpoch::watched();
        let read = epoch.current().unwrap();
        assert!(epoch.is_current(read));
        epoch.changed();
        assert!(!epoch.is_current(read));
        assert!(epoch.is_current(epoch.current().unwrap()));
    }

    #[test]
    fn a_gap_in_watching_makes_everything_before_it_stale() {
        let epoch = DefinitionsEpoch::watched();
        let read = epoch.current().unwrap();
        epoch.stop_watching();
        assert!(!epoch.is_current(read));
        assert_eq!(epoch.current(), None);
        epoch.start_watching();
        assert!(!epoch.is_current(read));
    }
}
