//! Registrations in flight in this process.
//!
//! The SDK publishes `AttemptStarted` (confirmed) before its first heartbeat, and both
//! travel the same queue, so the registration is delivered first; but handlers run
//! concurrently, and a heartbeat may be answered while its attempt's registration is
//! still being written. A heartbeat that finds its task unknown therefore waits for a
//! registration of that task in flight here, then asks again, instead of answering
//! NOT_FOUND (which stops the worker's handler).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedRwLockWriteGuard, RwLock};
use uuid::Uuid;

/// The tasks whose registration is being written.
#[derive(Debug, Clone, Default)]
pub struct Pending {
    tasks: Arc<Mutex<HashMap<Uuid, Arc<RwLock<()>>>>>,
}

/// Held while a registration is written; dropping it releases the waiters.
#[derive(Debug)]
pub struct Registering {
    pending: Pending,
    task_id: Uuid,
    _write: OwnedRwLockWriteGuard<()>,
}

impl Pending {
    /// Marks `task_id` as being registered until the returned guard is dropped.
    pub fn start(&self, task_id: Uuid) -> Registering {
        let lock = Arc::new(RwLock::new(()));
        let write = lock.clone().try_write_owned().expect("a new lock is free");
        self.lock().insert(task_id, lock);
        Registering {
            pending: self.clone(),
            task_id,
            _write: write,
        }
    }

    /// Waits for the registrations in flight of any of `task_ids`; returns whether there
    /// was one (then the caller asks the registry again).
    pub async fn wait_for(&self, task_ids: &[Uuid]) -> bool {
        let locks: Vec<Arc<RwLock<()>>> = {
            let tasks = self.lock();
            task_ids
                .iter()
                .filter_map(|id| tasks.get(id).cloned())
                .collect()
        };
        for lock in &locks {
            drop(lock.read().await);
        }
        !locks.is_empty()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Uuid, Arc<RwLock<()>>>> {
        self.tasks.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Registering {
    fn drop(&mut self) {
        self.pending.lock().remove(&self.task_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_waiter_is_released_when_the_registration_ends() {
        let pending = Pending::default();
        let id = Uuid::new_v4();
        assert!(!pending.wait_for(&[id]).await, "nothing in flight");
        let registering = pending.start(id);
        let waiter = {
            let pending = pending.clone();
            tokio::spawn(async move { pending.wait_for(&[id]).await })
        };
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        drop(registering);
        assert!(waiter.await.unwrap());
        assert!(!pending.wait_for(&[id]).await, "forgotten once done");
    }
}
