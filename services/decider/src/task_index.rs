//! An index of a run's tasks: by id, by reference name and loop iteration, and the set of
//! those still pending. A run of 100,000 tasks answers "the newest `step` of iteration
//! 70,000" or "what stopped waiting with this event" without a pass over every task,
//! which made the cost of a step grow with the run (issue 20; docs/decider.md, "Runs of
//! any size").
//!
//! The run's fold keeps it (`RunState::apply`): tasks are only ever appended, and their
//! id, reference name and iteration never change, so only the pending set follows the
//! statuses, from the tasks each event marks.

use std::collections::BTreeSet;
use std::sync::Arc;

// A fast hash: a walk of a dynamic fork of 10,000 branches looks each one up, at every
// command of its run (std's SipHash made those lookups half of the decider's time).
use foldhash::HashMap;

use serde::Deserialize as _;
use uuid::Uuid;
use weft::dsl::{TaskType, WorkflowTask};

use crate::state::TaskState;

/// The tasks of one reference name.
#[derive(Debug, Clone, Default)]
struct RefTasks {
    /// The newest task's position.
    newest: usize,
    /// The newest task's position in each iteration.
    by_iteration: HashMap<i32, usize>,
    /// The position of the newest task with the highest iteration.
    highest: usize,
    /// That iteration.
    highest_iteration: i32,
}

/// See the module documentation. Derived data: two indexes always compare equal, so a
/// run's state compares by what it holds.
#[derive(Debug, Clone, Default)]
pub struct TaskIndex {
    /// How many tasks (from the first) are indexed.
    covered: usize,
    by_id: HashMap<Uuid, usize>,
    by_ref: HashMap<String, RefTasks>,
    /// Positions of the tasks scheduled or in progress.
    pending: BTreeSet<usize>,
    /// Positions of the tasks the event being applied changed, to settle afterwards.
    marked: Vec<usize>,
    /// Positions of the tasks the last event applied took out of the pending set.
    ended: Vec<usize>,
    /// The branches each dynamic fork recorded (`forkedTaskDefs`), by the fork's
    /// position: read once, not at every walk of a fork of thousands.
    forked: HashMap<usize, Arc<[WorkflowTask]>>,
}

impl PartialEq for TaskIndex {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl TaskIndex {
    /// Whether the index covers all of `tasks` (it does unless a task was appended
    /// without [`TaskIndex::push`]: then the lookups fall back to a pass).
    pub fn covers(&self, tasks: &[TaskState]) -> bool {
        self.covered == tasks.len()
    }

    /// Indexes `task`, just appended at `position`.
    pub fn push(&mut self, position: usize, task: &TaskState) {
        self.covered = position + 1;
        self.by_id.insert(task.task_id, position);
        let entry = self.by_ref.entry(task.task_ref.clone()).or_default();
        if entry.by_iteration.is_empty() || task.iteration >= entry.highest_iteration {
            entry.highest = position;
            entry.highest_iteration = task.iteration;
        }
        entry.newest = position;
        entry.by_iteration.insert(task.iteration, position);
        self.mark(position);
    }

    /// Records that the task at `position` may have changed status.
    pub fn mark(&mut self, position: usize) {
        self.marked.push(position);
    }

    /// The position of the task with id `task_id`.
    pub fn position(&self, task_id: Uuid) -> Option<usize> {
        self.by_id.get(&task_id).copied()
    }

    /// The position of the newest task with `task_ref`.
    pub fn newest(&self, task_ref: &str) -> Option<usize> {
        self.by_ref.get(task_ref).map(|r| r.newest)
    }

    /// The position of the newest task with `task_ref` in iteration `iteration`.
    pub fn newest_at(&self, task_ref: &str, iteration: i32) -> Option<usize> {
        self.by_ref
            .get(task_ref)?
            .by_iteration
            .get(&iteration)
            .copied()
    }

    /// The position of the newest task with `task_ref` in its highest iteration.
    pub fn highest(&self, task_ref: &str) -> Option<usize> {
        self.by_ref.get(task_ref).map(|r| r.highest)
    }

    /// The branches the dynamic fork at `position` recorded, once it has.
    pub fn forked(&self, position: usize) -> Option<Arc<[WorkflowTask]>> {
        self.forked.get(&position).cloned()
    }

    /// Positions of the pending tasks, oldest first.
    pub fn pending(&self) -> impl Iterator<Item = usize> + '_ {
        self.pending.iter().copied()
    }

    /// Positions of the tasks the last event applied took out of the pending set.
    pub fn ended(&self) -> &[usize] {
        &self.ended
    }

    /// Begins an event: nothing ended by it yet.
    pub fn begin(&mut self) {
        self.ended.clear();
    }

    /// Ends an event: the marked tasks join or leave the pending set by their status now.
    pub fn settle(&mut self, tasks: &[TaskState]) {
        for position in std::mem::take(&mut self.marked) {
            let Some(task) = tasks.get(position) else {
                continue;
            };
            if task.task_type == TaskType::ForkJoinDynamic.as_str() {
                let branches = recorded_branches(task);
                if branches.is_empty() {
                    self.forked.remove(&position);
                } else {
                    self.forked.insert(position, branches);
                }
            }
            if task.status.is_pending() {
                self.pending.insert(position);
            } else if self.pending.remove(&position) {
                self.ended.push(position);
            }
        }
    }
}

/// The branches a dynamic fork recorded in its output (none before it was reached).
pub fn recorded_branches(fork: &TaskState) -> Arc<[WorkflowTask]> {
    fork.output
        .as_ref()
        .and_then(|o| o.get("forkedTaskDefs"))
        .and_then(|d| Vec::<WorkflowTask>::deserialize(d).ok())
        .map(Arc::from)
        .unwrap_or_default()
}
