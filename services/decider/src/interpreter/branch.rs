//! Choosing the case of a DECISION or SWITCH task.

use serde_json::Value;
use weft::dsl::{script, TaskType, WorkflowTask};

/// The case value selected by `task` given its resolved `input`, as Conductor computes
/// it: DECISION reads `caseValueParam` (or evaluates `caseExpression`); SWITCH reads
/// the input named by `expression` (`value-param`) or evaluates it (`javascript`).
pub(super) fn select_case(
    task: &WorkflowTask,
    kind: TaskType,
    input: &Value,
) -> Result<String, String> {
    let text = |key: &str| {
        task.extra
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    let value = match kind {
        TaskType::Decision if !text("caseValueParam").is_empty() => input
            .get(text("caseValueParam"))
            .cloned()
            .unwrap_or(Value::Null),
        TaskType::Decision => run_script(text("caseExpression"), input)?,
        _ => match text("evaluatorType") {
            "value-param" => input
                .get(text("expression"))
                .cloned()
                .unwrap_or(Value::Null),
            "javascript" | "graaljs" => run_script(text("expression"), input)?,
            other => return Err(format!("unknown evaluatorType {other:?}")),
        },
    };
    Ok(script::switch_case_key(&value))
}

/// The tasks of the case named `case`: its `decisionCases` entry, else `defaultCase`,
/// else none (a missing default means "continue after the switch").
pub(super) fn case_tasks<'t>(task: &'t WorkflowTask, case: &str) -> &'t [WorkflowTask] {
    task.decision_cases
        .as_ref()
        .and_then(|cases| cases.get(case))
        .or(task.default_case.as_ref())
        .map_or(&[], Vec::as_slice)
}

/// Evaluates a case expression over the task's input (bound to `$`, as in Conductor).
fn run_script(expression: &str, input: &Value) -> Result<Value, String> {
    script::evaluate(expression, input, script::Limits::default()).map_err(|e| e.to_string())
}
