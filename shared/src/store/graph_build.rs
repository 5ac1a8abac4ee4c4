//! The flowchart of a run (docs/graph.md): a pure function of the frozen definition and
//! the run's materialised task rows. Never reads history: every fact it shows (the case
//! a switch chose, the tasks a dynamic fork forked, a loop's iterations, a child's id)
//! is in the task rows the decider commits with each event.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::dsl::{TaskType, WorkflowDef, WorkflowTask};

/// Edge kinds (docs/graph.md).
pub mod kind {
    /// One task after the other in a list (also into a loop's first iteration and out of
    /// its last).
    pub const SEQUENCE: &str = "sequence";
    /// From a switch into the case it chose.
    pub const BRANCH_TAKEN: &str = "branch_taken";
    /// From a switch into a case it did not choose.
    pub const BRANCH_NOT_TAKEN: &str = "branch_not_taken";
    /// From a switch not evaluated yet into any of its cases.
    pub const BRANCH: &str = "branch";
    /// From a fork into the first task of a branch.
    pub const FORK: &str = "fork";
    /// From the last task of a branch into the join (of a fork's branch into its JOIN, of
    /// a switch's case into the EXCLUSIVE_JOIN after it).
    pub const JOIN: &str = "join";
    /// From the last task of a loop iteration into the first of the next.
    pub const LOOP_BACK: &str = "loop_back";
}

/// A run's flowchart, as `GET /api/workflow/{id}/graph` answers it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Graph {
    /// The workflow.
    pub workflow_id: String,
    /// The run shown.
    pub run_id: Uuid,
    /// The run's version (history length) the graph was computed at.
    pub version: i64,
    /// The id of the run's trace (of its start request), when it was traced.
    #[serde(default)]
    pub trace_id: Option<String>,
    /// Every node of the definition (loop bodies once per iteration).
    pub nodes: Vec<Node>,
    /// Every edge between them.
    pub edges: Vec<Edge>,
}

/// One node: a task of the definition at one loop iteration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Node {
    /// Unique in the graph: the ref, plus `#<iteration>` per enclosing loop.
    pub id: String,
    /// Reference name.
    #[serde(rename = "ref")]
    pub task_ref: String,
    /// Task type as written in the definition.
    #[serde(rename = "type")]
    pub kind: String,
    /// Executed by the decider itself (everything but SIMPLE and HTTP).
    pub logical: bool,
    /// Task status; `null` when not reached (yet).
    pub status: Option<String>,
    /// Innermost loop iteration (from 1), 0 outside loops.
    pub iteration: i32,
    /// The latest attempt (from 1); `null` when not reached.
    pub attempt: Option<i32>,
    /// Epoch ms: scheduled (queue wait starts).
    pub scheduled_time: Option<i64>,
    /// Epoch ms: a worker (or the decider) started it.
    pub start_time: Option<i64>,
    /// Epoch ms: it ended.
    pub end_time: Option<i64>,
    /// Size of its resolved input (JSON text bytes).
    pub input_bytes: Option<i32>,
    /// Size of its output (JSON text bytes).
    pub output_bytes: Option<i32>,
    /// The task row of the latest attempt.
    pub task_id: Option<Uuid>,
    /// SUB_WORKFLOW: the child's workflow id.
    pub sub_workflow_id: Option<String>,
}

/// One edge.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Edge {
    /// Node id.
    pub from: String,
    /// Node id.
    pub to: String,
    /// See [`kind`].
    pub kind: String,
    /// Both ends were reached through this edge (never for `branch_not_taken`/`branch`).
    pub followed: bool,
    /// The case name, on edges out of a switch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

/// What the graph needs of a task row (the latest attempt wins per node).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct GraphRow {
    /// The task row.
    pub task_id: Uuid,
    /// Reference name.
    pub task_ref: String,
    /// Type.
    pub task_type: String,
    /// Schedule order.
    pub seq: i32,
    /// Innermost loop iteration.
    pub iteration: i32,
    /// Attempt.
    pub attempt: i32,
    /// Status.
    pub status: String,
    /// Epoch ms.
    pub scheduled_ms: i64,
    /// Epoch ms.
    pub start_ms: Option<i64>,
    /// Epoch ms.
    pub end_ms: Option<i64>,
    /// Input size.
    pub input_bytes: Option<i32>,
    /// Output size.
    pub output_bytes: Option<i32>,
    /// SWITCH/DECISION: the case chosen.
    pub selected_case: Option<String>,
    /// SUB_WORKFLOW: the child.
    pub sub_workflow_id: Option<String>,
    /// FORK_JOIN_DYNAMIC: the refs it forked.
    pub forked: Option<sqlx::types::Json<Vec<String>>>,
}

/// Where a list ends: an edge still to be drawn from `from` into whatever comes next.
#[derive(Debug, Clone)]
struct Exit {
    from: String,
    kind: &'static str,
    label: Option<String>,
}

impl Exit {
    fn seq(from: String) -> Self {
        Self {
            from,
            kind: kind::SEQUENCE,
            label: None,
        }
    }
}

/// The rows a part of the walk may see: one loop iteration, inside the seq window of
/// the loop instance that ran it (nested loops repeat `(ref, iteration)` pairs).
#[derive(Debug, Clone)]
struct Scope {
    iteration: i32,
    lo: i32,
    hi: i32,
    suffix: String,
}

struct Builder<'a> {
    rows: &'a [GraphRow],
    by_ref: HashMap<(&'a str, i32), Vec<usize>>,
    nodes: Vec<Node>,
    reached: HashMap<String, bool>,
    edges: Vec<Edge>,
}

/// Builds the graph of a run from its frozen definition and its task rows.
pub fn build(
    workflow_id: &str,
    run_id: Uuid,
    version: i64,
    def: &WorkflowDef,
    rows: &[GraphRow],
) -> Graph {
    let mut by_ref: HashMap<(&str, i32), Vec<usize>> = HashMap::new();
    for (i, r) in rows.iter().enumerate() {
        by_ref
            .entry((r.task_ref.as_str(), r.iteration))
            .or_default()
            .push(i);
    }
    let mut b = Builder {
        rows,
        by_ref,
        nodes: Vec::with_capacity(rows.len() + def.tasks.len()),
        reached: HashMap::new(),
        edges: Vec::new(),
    };
    let top = Scope {
        iteration: 0,
        lo: i32::MIN,
        hi: i32::MAX,
        suffix: String::new(),
    };
    b.list(&def.tasks, &top, Vec::new());
    let Builder {
        nodes,
        reached,
        mut edges,
        ..
    } = b;
    for e in &mut edges {
        e.followed = e.kind != kind::BRANCH_NOT_TAKEN
            && e.kind != kind::BRANCH
            && reached.get(&e.from).copied().unwrap_or(false)
            && reached.get(&e.to).copied().unwrap_or(false);
    }
    Graph {
        workflow_id: workflow_id.to_owned(),
        run_id,
        version,
        trace_id: None,
        nodes,
        edges,
    }
}

impl<'a> Builder<'a> {
    fn list(&mut self, tasks: &[WorkflowTask], scope: &Scope, mut entries: Vec<Exit>) -> Vec<Exit> {
        for task in tasks {
            entries = self.task(task, scope, entries);
        }
        entries
    }

    /// The latest attempt of `task_ref` in `scope`.
    fn row(&self, task_ref: &str, scope: &Scope) -> Option<&'a GraphRow> {
        let rows = self.rows;
        self.by_ref
            .get(&(task_ref, scope.iteration))?
            .iter()
            .map(|&i| &rows[i])
            .filter(|r| r.seq >= scope.lo && r.seq < scope.hi)
            .max_by_key(|r| (r.attempt, r.seq))
    }

    /// Adds the node of `task_ref` in `scope` and the edges into it; returns its id.
    fn node(
        &mut self,
        task_ref: &str,
        kind: &str,
        row: Option<&GraphRow>,
        scope: &Scope,
        entries: Vec<Exit>,
    ) -> String {
        let id = format!("{task_ref}{}", scope.suffix);
        let logical = !matches!(
            TaskType::parse(kind),
            Some(TaskType::Simple | TaskType::Http)
        );
        self.nodes.push(Node {
            id: id.clone(),
            task_ref: task_ref.to_owned(),
            kind: kind.to_owned(),
            logical,
            status: row.map(|r| r.status.clone()),
            iteration: scope.iteration,
            attempt: row.map(|r| r.attempt),
            scheduled_time: row.map(|r| r.scheduled_ms),
            start_time: row.and_then(|r| r.start_ms),
            end_time: row.and_then(|r| r.end_ms),
            input_bytes: row.and_then(|r| r.input_bytes),
            output_bytes: row.and_then(|r| r.output_bytes),
            task_id: row.map(|r| r.task_id),
            sub_workflow_id: row.and_then(|r| r.sub_workflow_id.clone()),
        });
        self.reached.insert(id.clone(), row.is_some());
        for e in entries {
            self.edges.push(Edge {
                from: e.from,
                to: id.clone(),
                kind: e.kind.to_owned(),
                followed: false,
                label: e.label,
            });
        }
        id
    }

    fn task(&mut self, task: &WorkflowTask, scope: &Scope, entries: Vec<Exit>) -> Vec<Exit> {
        // An EXCLUSIVE_JOIN closes the cases of the switch before it, as a JOIN its fork's
        // branches.
        let entries = if task.task_type() == Some(TaskType::ExclusiveJoin) {
            entries.into_iter().map(join).collect()
        } else {
            entries
        };
        let row = self.row(&task.task_reference_name, scope);
        let id = self.node(&task.task_reference_name, &task.kind, row, scope, entries);
        match task.task_type() {
            Some(TaskType::Switch | TaskType::Decision) => self.switch(task, row, id, scope),
            Some(TaskType::ForkJoin) => {
                let mut exits = Vec::new();
                for branch in task.fork_tasks.iter().flatten() {
                    let start = Exit {
                        from: id.clone(),
                        kind: kind::FORK,
                        label: None,
                    };
                    exits.extend(self.list(branch, scope, vec![start]).into_iter().map(join));
                }
                if exits.is_empty() {
                    exits.push(Exit::seq(id));
                }
                exits
            }
            Some(TaskType::ForkJoinDynamic) => {
                let forked = row.and_then(|r| r.forked.as_ref()).map(|f| f.0.as_slice());
                let mut exits = Vec::new();
                for r in forked.unwrap_or_default() {
                    let child = self.row(r, scope);
                    let start = Exit {
                        from: id.clone(),
                        kind: kind::FORK,
                        label: None,
                    };
                    let kind = child.map_or("SIMPLE", |c| c.task_type.as_str()).to_owned();
                    exits.push(join(Exit::seq(self.node(
                        r,
                        &kind,
                        child,
                        scope,
                        vec![start],
                    ))));
                }
                if exits.is_empty() {
                    exits.push(Exit::seq(id));
                }
                exits
            }
            Some(TaskType::DoWhile) => self.do_while(task, row, id, scope),
            _ => vec![Exit::seq(id)],
        }
    }

    fn switch(
        &mut self,
        task: &WorkflowTask,
        row: Option<&GraphRow>,
        id: String,
        scope: &Scope,
    ) -> Vec<Exit> {
        let chosen = row.and_then(|r| r.selected_case.as_deref());
        let cases = task.decision_cases.iter().flatten();
        let known = chosen.is_some_and(|c| task.decision_cases.iter().any(|m| m.contains_key(c)));
        let default = task.default_case.as_deref().unwrap_or_default();
        let all = cases
            .map(|(name, tasks)| (name.as_str(), tasks.as_slice(), chosen == Some(name)))
            .chain(std::iter::once((
                "default",
                default,
                chosen.is_some() && !known,
            )))
            .collect::<Vec<_>>();
        let mut exits = Vec::new();
        for (name, tasks, taken) in all {
            let kind = match (chosen.is_some(), taken) {
                (false, _) => kind::BRANCH,
                (true, true) => kind::BRANCH_TAKEN,
                (true, false) => kind::BRANCH_NOT_TAKEN,
            };
            let start = Exit {
                from: id.clone(),
                kind,
                label: Some(name.to_owned()),
            };
            exits.extend(self.list(tasks, scope, vec![start]));
        }
        exits
    }

    /// A loop's body once per iteration that ran (once, unreached, when none did yet);
    /// iteration i's last tasks lead into iteration i+1's first (`loop_back`).
    fn do_while(
        &mut self,
        task: &WorkflowTask,
        row: Option<&GraphRow>,
        id: String,
        scope: &Scope,
    ) -> Vec<Exit> {
        let body = task.loop_over.as_deref().unwrap_or_default();
        let (lo, hi) = match row {
            Some(r) => (
                r.seq,
                self.next_instance(&task.task_reference_name, r.seq, scope),
            ),
            // Not started: an empty window, so the body shows unreached.
            None => (0, 0),
        };
        let mut refs = Vec::new();
        collect_refs(body, &mut refs);
        let ran = refs
            .iter()
            .flat_map(|r| self.rows_of_ref(r))
            .filter(|r| r.seq >= lo && r.seq < hi)
            .map(|r| r.iteration)
            .max()
            .unwrap_or(0);
        let mut exits = vec![Exit::seq(id)];
        for i in 1..=ran.max(1) {
            let inner = Scope {
                iteration: i,
                lo,
                hi,
                suffix: format!("{}#{i}", scope.suffix),
            };
            if i > 1 {
                for e in &mut exits {
                    if e.kind == kind::SEQUENCE {
                        e.kind = kind::LOOP_BACK;
                    }
                }
            }
            exits = self.list(body, &inner, exits);
        }
        exits
    }

    /// The seq of the next row of `task_ref` after `seq` (the loop's next instance in
    /// an enclosing loop), bounded by the scope.
    fn next_instance(&self, task_ref: &str, seq: i32, scope: &Scope) -> i32 {
        self.rows_of_ref(task_ref)
            .map(|r| r.seq)
            .filter(|&s| s > seq && s < scope.hi)
            .min()
            .unwrap_or(scope.hi)
    }

    fn rows_of_ref<'s>(&'s self, task_ref: &'s str) -> impl Iterator<Item = &'a GraphRow> + 's {
        let rows = self.rows;
        self.by_ref
            .iter()
            .filter(move |((r, _), _)| *r == task_ref)
            .flat_map(move |(_, ix)| ix.iter().map(move |&i| &rows[i]))
    }
}

/// A branch's end leads into the join.
fn join(mut e: Exit) -> Exit {
    if e.kind == kind::SEQUENCE {
        e.kind = kind::JOIN;
    }
    e
}

fn collect_refs(tasks: &[WorkflowTask], out: &mut Vec<String>) {
    for t in tasks {
        out.push(t.task_reference_name.clone());
        for list in t.children() {
            collect_refs(list, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn row(task_ref: &str, task_type: &str, seq: i32, status: &str) -> GraphRow {
        GraphRow {
            task_id: Uuid::new_v4(),
            task_ref: task_ref.into(),
            task_type: task_type.into(),
            seq,
            iteration: 0,
            attempt: 1,
            status: status.into(),
            scheduled_ms: 1_000 + i64::from(seq),
            start_ms: None,
            end_ms: None,
            input_bytes: Some(2),
            output_bytes: None,
            selected_case: None,
            sub_workflow_id: None,
            forked: None,
        }
    }

    fn edge_lines(g: &Graph) -> Vec<String> {
        let mut out: Vec<String> = g
            .edges
            .iter()
            .map(|e| format!("{}>{} {} {}", e.from, e.to, e.kind, e.followed))
            .collect();
        out.sort();
        out
    }

    #[test]
    fn a_dynamic_fork_shows_the_tasks_it_forked_between_it_and_its_join() {
        let def: WorkflowDef = serde_json::from_value(json!({"name": "dyn", "tasks": [
            {"name": "fan", "taskReferenceName": "fan", "type": "FORK_JOIN_DYNAMIC",
             "dynamicForkTasksParam": "tasks", "dynamicForkTasksInputParamName": "inputs",
             "inputParameters": {"tasks": "${workflow.input.tasks}",
                                 "inputs": "${workflow.input.inputs}"}},
            {"name": "join", "taskReferenceName": "join", "type": "JOIN"},
            {"name": "last", "taskReferenceName": "last", "type": "SIMPLE"}]}))
        .unwrap();
        let run = Uuid::new_v4();

        // Before the fork ran: nothing forked, the fork leads straight to its join.
        let g = build("wf", run, 1, &def, &[]);
        let ids: Vec<&str> = g.nodes.iter().map(|n| n.id.as_str()).collect();
        assert_eq!(ids, vec!["fan", "join", "last"]);

        // It forked two tasks: one done, one running.
        let mut fan = row("fan", "FORK_JOIN_DYNAMIC", 0, "COMPLETED");
        fan.forked = Some(sqlx::types::Json(vec!["d1".into(), "d2".into()]));
        let rows = vec![
            fan,
            row("d1", "SIMPLE", 1, "COMPLETED"),
            row("d2", "HTTP", 2, "IN_PROGRESS"),
            row("join", "JOIN", 3, "IN_PROGRESS"),
        ];
        let g = build("wf", run, 9, &def, &rows);
        let shown: Vec<(&str, &str, Option<&str>, bool)> = g
            .nodes
            .iter()
            .map(|n| {
                (
                    n.id.as_str(),
                    n.kind.as_str(),
                    n.status.as_deref(),
                    n.logical,
                )
            })
            .collect();
        assert_eq!(
            shown,
            vec![
                ("fan", "FORK_JOIN_DYNAMIC", Some("COMPLETED"), true),
                ("d1", "SIMPLE", Some("COMPLETED"), false),
                ("d2", "HTTP", Some("IN_PROGRESS"), false),
                ("join", "JOIN", Some("IN_PROGRESS"), true),
                ("last", "SIMPLE", None, false),
            ]
        );
        assert_eq!(
            edge_lines(&g),
            vec![
                "d1>join join true",
                "d2>join join true",
                "fan>d1 fork true",
                "fan>d2 fork true",
                "join>last sequence false",
            ]
        );
    }

    #[test]
    fn the_cases_of_a_switch_lead_into_the_exclusive_join_after_it() {
        let def: WorkflowDef = serde_json::from_value(json!({"name": "x", "tasks": [
            {"name": "route", "taskReferenceName": "route", "type": "SWITCH",
             "evaluatorType": "value-param", "expression": "to",
             "decisionCases": {"a": [{"name": "a", "taskReferenceName": "a"}],
                               "b": [{"name": "b", "taskReferenceName": "b"}]}},
            {"name": "xj", "taskReferenceName": "xj", "type": "EXCLUSIVE_JOIN",
             "joinOn": ["a", "b"]},
            {"name": "after", "taskReferenceName": "after"}]}))
        .unwrap();
        let mut route = row("route", "SWITCH", 0, "COMPLETED");
        route.selected_case = Some("b".into());
        let rows = vec![
            route,
            row("b", "SIMPLE", 1, "COMPLETED"),
            row("xj", "EXCLUSIVE_JOIN", 2, "COMPLETED"),
        ];
        let g = build("wf", Uuid::new_v4(), 7, &def, &rows);
        let xj = g.nodes.iter().find(|n| n.id == "xj").unwrap();
        assert!(xj.logical);
        assert_eq!(
            edge_lines(&g),
            vec![
                "a>xj join false",
                "b>xj join true",
                "route>a branch_not_taken false",
                "route>b branch_taken true",
                "route>xj branch_not_taken false",
                "xj>after sequence false",
            ]
        );
    }
}
