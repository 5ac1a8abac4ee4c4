//! Validation of workflow definitions. (Scaffold: being written by the DSL helper.)

use serde_json::Value;

use super::WorkflowDef;

/// A definition problem, naming the offending field by path (e.g. `tasks[2].type`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct DslError {
    /// JSON path of the offending field, e.g. `tasks[2].taskReferenceName`.
    pub path: String,
    /// What is wrong, as a sentence.
    pub message: String,
}

/// Parses and validates a definition from JSON.
pub fn parse_definition(json: &Value) -> Result<WorkflowDef, DslError> {
    let def: WorkflowDef = serde_json::from_value(json.clone()).map_err(|e| DslError {
        path: String::new(),
        message: e.to_string(),
    })?;
    validate(&def)?;
    Ok(def)
}

/// Checks a parsed definition.
pub fn validate(_def: &WorkflowDef) -> Result<(), DslError> {
    Ok(())
}

/// Checks that every task of `def` can be executed today.
pub fn check_executable(_def: &WorkflowDef) -> Result<(), DslError> {
    Ok(())
}
