//! The workflow DSL: Conductor-compatible definitions, their validation, the `${...}`
//! parameter expressions, and the sandboxes that run scripts and jq programs.

pub mod expr;
pub mod failure_workflow;
pub mod hooks;
pub mod jq;
pub mod model;
pub mod script;
pub mod taskdef;
pub mod validate;

pub use model::{TaskType, WorkflowDef, WorkflowTask};

/// The key of a definition's `extra` where the gateway freezes, at start, the definition
/// its `failureWorkflow` names, for the decider to start when the run fails.
pub const FAILURE_WORKFLOW_DEFINITION: &str = "failureWorkflowDefinition";
pub use validate::{parse_definition, DslError};
