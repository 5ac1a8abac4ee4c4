//! A definition's `failureWorkflow`: which workflow a run starts when it fails.
//!
//! The gateway freezes it at start (`FAILURE_WORKFLOW_DEFINITION`); the decider freezes it
//! for the runs it starts from a definition it resolves itself (a child named at run time,
//! a START_WORKFLOW's run, a child embedded without its own failure workflow).

use serde_json::{Map, Value};

use super::WorkflowDef;

/// The input key a name of the form `$workflow.input.<key>` (Conductor's `failureWorkflow`)
/// or `${workflow.input.<key>}` (a sub-workflow's name) refers to.
pub fn input_key(name: &str) -> Option<&str> {
    let path = name
        .strip_prefix("${")
        .and_then(|p| p.strip_suffix('}'))
        .or_else(|| name.strip_prefix('$'))?;
    path.strip_prefix("workflow.input.")
        .filter(|k| !k.is_empty())
}

/// The workflow a run of `def` with `input` starts when it fails: `failureWorkflow` as
/// written, or the input's value for a name that reads the input (none when the input
/// has no such text); `None` when there is none.
pub fn failure_workflow_name(
    def: &WorkflowDef,
    input: Option<&Map<String, Value>>,
) -> Option<String> {
    let written = def.failure_workflow.as_deref().filter(|n| !n.is_empty())?;
    match input_key(written) {
        None => Some(written.to_owned()),
        Some(key) => input?
            .get(key)
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .map(str::to_owned),
    }
}

/// Whether a run of `def` names a failure workflow that is not frozen into it yet.
pub fn needs_freezing(def: &WorkflowDef) -> bool {
    def.failure_workflow
        .as_deref()
        .is_some_and(|n| !n.is_empty())
        && !def.extra.contains_key(super::FAILURE_WORKFLOW_DEFINITION)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_failure_workflow_may_name_an_input_key() {
        assert_eq!(
            input_key("$workflow.input.failureWfName"),
            Some("failureWfName")
        );
        assert_eq!(input_key("${workflow.input.wf}"), Some("wf"));
        assert_eq!(input_key("cleanup"), None);
        assert_eq!(input_key("$workflow.input."), None);
        assert_eq!(input_key("${workflow.variables.x}"), None);
    }

    #[test]
    fn the_failure_workflow_is_the_written_name_or_the_inputs() {
        let def = |name: Value| {
            crate::dsl::parse_definition(&json!({"name": "w", "failureWorkflow": name,
                "tasks": [{"name": "t", "taskReferenceName": "t", "type": "SIMPLE"}]}))
            .unwrap()
        };
        let input = json!({"wf": "cleanup_b", "blank": ""});
        let input = input.as_object();
        assert_eq!(
            failure_workflow_name(&def(json!("cleanup")), input).as_deref(),
            Some("cleanup")
        );
        let named = def(json!("$workflow.input.wf"));
        assert_eq!(
            failure_workflow_name(&named, input).as_deref(),
            Some("cleanup_b")
        );
        assert_eq!(failure_workflow_name(&named, None), None);
        assert!(needs_freezing(&named));
        assert_eq!(
            failure_workflow_name(&def(json!("$workflow.input.blank")), input),
            None
        );
        assert_eq!(failure_workflow_name(&def(json!("")), input), None);
        assert!(!needs_freezing(&def(json!(""))));
        let mut frozen = def(json!("cleanup"));
        frozen
            .extra
            .insert(crate::dsl::FAILURE_WORKFLOW_DEFINITION.into(), json!({}));
        assert!(!needs_freezing(&frozen));
    }
}
