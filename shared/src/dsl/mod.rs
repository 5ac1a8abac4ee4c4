//! The workflow DSL: Conductor-compatible definitions, their validation, the `${...}`
//! parameter expressions, and the sandboxes that run scripts and jq programs.

pub mod expr;
pub mod hooks;
pub mod jq;
pub mod model;
pub mod script;
pub mod taskdef;
pub mod validate;

pub use model::{TaskType, WorkflowDef, WorkflowTask};
pub use validate::{parse_definition, DslError};
