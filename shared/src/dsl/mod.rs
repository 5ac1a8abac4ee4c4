//! The workflow DSL: Conductor-compatible definitions, their validation, and the
//! `${...}` parameter expressions.

pub mod expr;
pub mod hooks;
pub mod model;
pub mod script;
pub mod taskdef;
pub mod validate;

pub use model::{TaskType, WorkflowDef, WorkflowTask};
pub use validate::{parse_definition, DslError};
