//! Group commit for the registry's writes: claims (`ClaimAttempt`), registrations
//! (`AttemptStarted`) and ends (`AttemptFinished`) handled concurrently are written together, one statement and one
//! Redis call for all that queued up while the previous group was being written, instead
//! of one transaction each. The group never waits to fill: it takes what is there, so an
//! idle service writes each item at once.

use std::future::Future;
use std::panic::AssertUnwindSafe;

use futures_util::FutureExt;

use tokio::sync::{mpsc, oneshot};

/// Most items written in one group.
pub const MAX_GROUP: usize = 256;

/// What became of one item of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Written.
    Done,
    /// Never writable (a bad message): dead-letter it with this reason.
    Refused(String),
    /// Not written this time (e.g. the database is unreachable): hand it back.
    Failed(String),
}

/// An item's outcome when its group could not be written (the writer stopped or
/// panicked).
pub trait Unwritten {
    /// The outcome of an item that was not written, and why.
    fn unwritten(why: &str) -> Self;
}

impl Unwritten for Outcome {
    fn unwritten(why: &str) -> Self {
        Outcome::Failed(why.to_owned())
    }
}

impl<T> Unwritten for Result<T, String> {
    fn unwritten(why: &str) -> Self {
        Err(why.to_owned())
    }
}

/// Submits items to a task that writes them in groups with `apply`; each item gets an
/// outcome `O` (by default an [`Outcome`]).
#[derive(Debug)]
pub struct Group<T, O = Outcome> {
    tx: mpsc::Sender<(T, oneshot::Sender<O>)>,
}

impl<T, O> Clone for Group<T, O> {
    fn clone(&self) -> Self {
        Self {
            tx: self.tx.clone(),
        }
    }
}

impl<T: Send + 'static, O: Unwritten + Send + 'static> Group<T, O> {
    /// Starts the writer: `apply` gets each group and answers one outcome per item, in
    /// order. The writer ends when every [`Group`] handle is dropped.
    pub fn start<F, Fut>(apply: F) -> Self
    where
        F: Fn(Vec<T>) -> Fut + Send + 'static,
        Fut: Future<Output = Vec<O>> + Send,
    {
        let (tx, mut rx) = mpsc::channel::<(T, oneshot::Sender<O>)>(MAX_GROUP * 4);
        tokio::spawn(async move {
            while let Some(first) = rx.recv().await {
                let mut items = vec![first];
                while items.len() < MAX_GROUP {
                    match rx.try_recv() {
                        Ok(item) => items.push(item),
                        Err(_) => break,
                    }
                }
                let (values, waiters): (Vec<T>, Vec<_>) = items.into_iter().unzip();
                // A panic fails this group's items (handed back), not the writer.
                let outcomes = AssertUnwindSafe(apply(values))
                    .catch_unwind()
                    .await
                    .unwrap_or_else(|_| {
                        tracing::error!(
                            "the group writer panicked; its items go back to the queue"
                        );
                        Vec::new()
                    });
                let mut outcomes = outcomes.into_iter();
                for waiter in waiters {
                    let outcome = outcomes
                        .next()
                        .unwrap_or_else(|| O::unwritten("no outcome for the item"));
                    // The submitter may be gone (shutdown): nothing to tell.
                    let _ = waiter.send(outcome);
                }
            }
        });
        Self { tx }
    }

    /// Writes `item` with the next group and returns what became of it.
    pub async fn submit(&self, item: T) -> O {
        let (tx, rx) = oneshot::channel();
        if self.tx.send((item, tx)).await.is_err() {
            return O::unwritten("the group writer stopped");
        }
        rx.await
            .unwrap_or_else(|_| O::unwritten("the group writer stopped"))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    #[tokio::test]
    async fn items_submitted_together_are_written_in_one_group_with_their_outcomes() {
        let groups: Arc<Mutex<Vec<Vec<u32>>>> = Arc::default();
        let seen = groups.clone();
        let group = Group::start(move |items: Vec<u32>| {
            let seen = seen.clone();
            async move {
                // Slow enough that the others queue up behind the first.
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                seen.lock().unwrap().push(items.clone());
                items
                    .iter()
                    .map(|&i| {
                        if i == 3 {
                            Outcome::Refused("three".into())
                        } else {
                            Outcome::Done
                        }
                    })
                    .collect()
            }
        });
        let outcomes = futures_util::future::join_all((0..6).map(|i| group.submit(i))).await;
        assert_eq!(outcomes[3], Outcome::Refused("three".into()));
        assert!(outcomes
            .iter()
            .enumerate()
            .all(|(i, o)| i == 3 || *o == Outcome::Done));
        let groups = groups.lock().unwrap();
        let all: Vec<u32> = groups.iter().flatten().copied().collect();
        assert_eq!(all.len(), 6);
        assert!(groups.len() < 6, "grouped: {groups:?}");
    }

    #[tokio::test]
    async fn a_group_that_panics_fails_its_items_and_the_writer_goes_on() {
        let group = Group::start(|items: Vec<u32>| async move {
            assert!(!items.contains(&13), "unlucky");
            vec![Outcome::Done; items.len()]
        });
        assert!(matches!(group.submit(13).await, Outcome::Failed(_)));
        assert_eq!(group.submit(7).await, Outcome::Done);
    }
}
