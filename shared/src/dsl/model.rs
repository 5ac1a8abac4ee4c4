//! Conductor's workflow definition schema (`WorkflowDef`, `WorkflowTask`), as serde types.
//!
//! Fields Weft interprets are typed; every other field a Conductor user sends is kept
//! in `extra` so that a definition round-trips unchanged through register → get.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A workflow definition: named, versioned, a list of tasks run in sequence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowDef {
    /// The definition's name; `(name, version)` identifies it.
    #[serde(default)]
    pub name: String,
    /// Version; Conductor's default is 1.
    #[serde(default = "default_version")]
    pub version: i32,
    /// Free text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The top-level sequence of tasks.
    #[serde(default)]
    pub tasks: Vec<WorkflowTask>,
    /// Names of the expected inputs (documentation only, as in Conductor).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub input_parameters: Vec<String>,
    /// Shapes the workflow output from `${...}` expressions.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub output_parameters: Map<String, Value>,
    /// Whole-run timeout in seconds (0 = none).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub timeout_seconds: i64,
    /// A workflow started with the failed run's context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_workflow: Option<String>,
    /// Initial workflow variables.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub variables: Map<String, Value>,
    /// Every other Conductor field, kept verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// One node of a definition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowTask {
    /// Task (definition) name: for SIMPLE, the activity queue it goes to.
    #[serde(default)]
    pub name: String,
    /// Unique inside the definition; how expressions refer to this task.
    #[serde(default)]
    pub task_reference_name: String,
    /// The task type as written (`SIMPLE` when absent, as in Conductor).
    #[serde(rename = "type", default = "default_type")]
    pub kind: String,
    /// Input map; string values may hold `${...}` expressions.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub input_parameters: Map<String, Value>,
    /// A failure of an optional task does not fail the workflow.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub optional: bool,
    /// DECISION/SWITCH branches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision_cases: Option<std::collections::BTreeMap<String, Vec<WorkflowTask>>>,
    /// DECISION/SWITCH default branch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_case: Option<Vec<WorkflowTask>>,
    /// FORK_JOIN branches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fork_tasks: Option<Vec<Vec<WorkflowTask>>>,
    /// DO_WHILE body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loop_over: Option<Vec<WorkflowTask>>,
    /// Every other Conductor field, kept verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

fn default_version() -> i32 {
    1
}

fn default_type() -> String {
    "SIMPLE".to_owned()
}

fn is_zero(v: &i64) -> bool {
    *v == 0
}

/// The task types Weft knows (DESIGN.md §6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TaskType {
    /// An activity run by a worker from `weft.activity.<name>`.
    Simple,
    /// An activity run by the built-in HTTP worker.
    Http,
    /// Conductor's legacy switch.
    Decision,
    /// Branch on an expression.
    Switch,
    /// Loop.
    DoWhile,
    /// Static parallel branches.
    ForkJoin,
    /// Parallel branches from input.
    ForkJoinDynamic,
    /// Waits for forked branches.
    Join,
    /// A child run.
    SubWorkflow,
    /// Waits for a signal or a timer.
    Wait,
    /// Ends the run.
    Terminate,
    /// Sets workflow variables.
    SetVariable,
    /// Evaluates a script.
    Inline,
    /// Publishes its input as a message to a queue or an exchange (its `sink`).
    Event,
    /// Does nothing: completes at once.
    Noop,
    /// Conductor's older script task: `scriptExpression` over the input.
    Lambda,
    /// Waits, like a WAIT without a timer, until completed through the task API.
    Human,
    /// Starts another workflow and goes on without waiting for it.
    StartWorkflow,
    /// A SIMPLE task whose name is read from its input when it runs.
    Dynamic,
    /// Applies the jq program `queryExpression` to its input.
    JsonJqTransform,
    /// After a switch: takes the output of the first of its `joinOn` tasks that ran.
    ExclusiveJoin,
}

impl TaskType {
    /// Every known type, in the order error messages list them.
    pub const ALL: [TaskType; 21] = [
        TaskType::Simple,
        TaskType::Http,
        TaskType::Decision,
        TaskType::Switch,
        TaskType::DoWhile,
        TaskType::ForkJoin,
        TaskType::ForkJoinDynamic,
        TaskType::Join,
        TaskType::SubWorkflow,
        TaskType::Wait,
        TaskType::Terminate,
        TaskType::SetVariable,
        TaskType::Inline,
        TaskType::Event,
        TaskType::Noop,
        TaskType::Lambda,
        TaskType::Human,
        TaskType::StartWorkflow,
        TaskType::Dynamic,
        TaskType::JsonJqTransform,
        TaskType::ExclusiveJoin,
    ];

    /// Parses a type name as written in a definition; `None` when unknown.
    pub fn parse(name: &str) -> Option<Self> {
        serde_json::from_value(Value::String(name.to_owned())).ok()
    }

    /// The canonical name.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskType::Simple => "SIMPLE",
            TaskType::Http => "HTTP",
            TaskType::Decision => "DECISION",
            TaskType::Switch => "SWITCH",
            TaskType::DoWhile => "DO_WHILE",
            TaskType::ForkJoin => "FORK_JOIN",
            TaskType::ForkJoinDynamic => "FORK_JOIN_DYNAMIC",
            TaskType::Join => "JOIN",
            TaskType::SubWorkflow => "SUB_WORKFLOW",
            TaskType::Wait => "WAIT",
            TaskType::Terminate => "TERMINATE",
            TaskType::SetVariable => "SET_VARIABLE",
            TaskType::Inline => "INLINE",
            TaskType::Event => "EVENT",
            TaskType::Noop => "NOOP",
            TaskType::Lambda => "LAMBDA",
            TaskType::Human => "HUMAN",
            TaskType::StartWorkflow => "START_WORKFLOW",
            TaskType::Dynamic => "DYNAMIC",
            TaskType::JsonJqTransform => "JSON_JQ_TRANSFORM",
            TaskType::ExclusiveJoin => "EXCLUSIVE_JOIN",
        }
    }

    /// Whether the decider can execute this type today.
    pub fn is_executable(self) -> bool {
        matches!(
            self,
            TaskType::Simple
                | TaskType::Http
                | TaskType::Decision
                | TaskType::Switch
                | TaskType::ForkJoin
                | TaskType::Join
                | TaskType::SetVariable
                | TaskType::Terminate
                | TaskType::DoWhile
                | TaskType::Inline
                | TaskType::Wait
                | TaskType::ForkJoinDynamic
                | TaskType::SubWorkflow
                | TaskType::Event
                | TaskType::Noop
                | TaskType::Lambda
                | TaskType::Human
                | TaskType::StartWorkflow
                | TaskType::Dynamic
                | TaskType::JsonJqTransform
                | TaskType::ExclusiveJoin
        )
    }

    /// Whether a worker executes this type (the decider publishes it to an activity queue).
    pub fn is_activity(self) -> bool {
        matches!(self, TaskType::Simple | TaskType::Http)
    }
}

impl WorkflowTask {
    /// The parsed type; `None` for a type Weft does not know.
    pub fn task_type(&self) -> Option<TaskType> {
        TaskType::parse(&self.kind)
    }

    /// The nested task lists of this node (branches, loop body), in definition order.
    pub fn children(&self) -> Vec<&[WorkflowTask]> {
        let mut lists: Vec<&[WorkflowTask]> = Vec::new();
        if let Some(cases) = &self.decision_cases {
            lists.extend(cases.values().map(Vec::as_slice));
        }
        if let Some(default) = &self.default_case {
            lists.push(default);
        }
        if let Some(forks) = &self.fork_tasks {
            lists.extend(forks.iter().map(Vec::as_slice));
        }
        if let Some(body) = &self.loop_over {
            lists.push(body);
        }
        lists
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_fields_round_trip() {
        let json = serde_json::json!({
            "name": "w", "version": 2, "schemaVersion": 2, "ownerEmail": "a@b",
            "tasks": [{"name": "t", "taskReferenceName": "t", "type": "SIMPLE",
                       "startDelay": 0, "inputParameters": {"a": "${workflow.input.a}"}}]
        });
        let def: WorkflowDef = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(def.extra["schemaVersion"], 2);
        assert_eq!(def.tasks[0].extra["startDelay"], 0);
        assert_eq!(serde_json::to_value(&def).unwrap(), json);
    }

    #[test]
    fn type_defaults_to_simple() {
        let t: WorkflowTask =
            serde_json::from_value(serde_json::json!({"name": "x", "taskReferenceName": "x"}))
                .unwrap();
        assert_eq!(t.task_type(), Some(TaskType::Simple));
        assert_eq!(
            TaskType::parse("FORK_JOIN_DYNAMIC"),
            Some(TaskType::ForkJoinDynamic)
        );
        assert_eq!(TaskType::parse("LAMBDA"), Some(TaskType::Lambda));
        assert_eq!(
            TaskType::parse("JSON_JQ_TRANSFORM"),
            Some(TaskType::JsonJqTransform)
        );
        assert_eq!(TaskType::parse("BUSINESS_RULE"), None);
    }

    #[test]
    fn all_lists_every_type_once() {
        for t in TaskType::ALL {
            assert_eq!(TaskType::parse(t.as_str()), Some(t));
        }
        let mut names: Vec<_> = TaskType::ALL.iter().map(|t| t.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), TaskType::ALL.len());
    }
}
