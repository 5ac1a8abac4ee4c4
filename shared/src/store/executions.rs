//! Conductor's execution lookups and removal (`WorkflowResource`): the runs of a workflow
//! name with a correlation id, the ids of the running ones, and the removal of a workflow
//! whose run has ended.
//!
//! Removal deletes rows the decider wrote without going through it: it only ever takes a
//! workflow whose current run has ended, and the decider's version check turns any later
//! write to a removed run (a late operation racing the removal) into a conflict that
//! reloads and finds nothing, so the single writer never resurrects it.

use chrono::{DateTime, Utc};

/// Run statuses after which a run changes no more (unless an operator resets it).
pub const ENDED_STATUSES: [&str; 4] = ["COMPLETED", "FAILED", "TIMED_OUT", "TERMINATED"];

/// What [`super::backend::ExecutionStore::remove_workflow`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Removal {
    /// Every run of the workflow, its history, tasks, timers, registry rows, hook
    /// deliveries, task logs and its accepted start are gone.
    Removed,
    /// No run and no accepted start has that id.
    NotFound,
    /// Its current run has not ended (or the decider has not applied its start yet):
    /// nothing was deleted.
    NotEnded {
        /// The current run's status (`RUNNING` for a start not applied yet).
        status: String,
    },
}

/// Which runs of a definition `running_workflow_ids` lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunningFilter {
    /// The runs RUNNING now.
    Running,
    /// The runs (current ones, any status) started in `[from, to]`: Conductor's
    /// `startTime`/`endTime` form.
    StartedBetween {
        /// Earliest start.
        from: DateTime<Utc>,
        /// Latest start.
        to: DateTime<Utc>,
    },
}

/// The task types whose pending tasks can be listed (an index keeps them): the ones that
/// wait for a person or a signal rather than for a worker's queue.
pub const PENDING_LISTED: [&str; 2] = ["HUMAN", "WAIT"];

/// The most correlation ids or runs one lookup reads: a bound, not a page.
pub const MAX_LOOKUP: i64 = 1_000;

/// Why a workflow cannot be removed, from its current run's status (`None`: it has no
/// run) and whether it has an accepted start; `None` when it can.
pub(crate) fn removal_blocker(current_status: Option<String>, started: bool) -> Option<Removal> {
    match current_status {
        Some(status) if ENDED_STATUSES.contains(&status.as_str()) => None,
        Some(status) => Some(Removal::NotEnded { status }),
        // Accepted, not applied by the decider yet: it is about to run.
        None if started => Some(Removal::NotEnded {
            status: "RUNNING".to_owned(),
        }),
        None => Some(Removal::NotFound),
    }
}
