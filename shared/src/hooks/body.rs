//! A delivery's body. Every hook call has an *event document* (below); a hook without
//! `body` sends the document itself, a hook with `body` sends its template resolved
//! against the document with the same `${...}` rules as task inputs (`dsl::expr`), so
//! `${task.input.order}`, `${workflow.input.x}` or `${reason}` work there.
//!
//! ```json
//! {"hook": "onRollback", "event": "workflow.reset", "deliveryId": "…",
//!  "workflowId": "…", "runId": "…", "workflowType": "checkout", "correlationId": "o-42",
//!  "time": "…", "reason": "wrong address",
//!  "previousRunId": "…", "resetTo": "charge",
//!  "task": {"taskRef": "charge", "taskId": "…", "taskType": "SIMPLE", "taskName": "charge",
//!           "attempt": 1, "iteration": 0, "status": "COMPLETED", "input": {…}, "output": {…}},
//!  "workflow": {"status": "RUNNING", "input": {…}, "output": null, "variables": {…}}}
//! ```

use serde_json::{Map, Value};
use uuid::Uuid;

use super::{delivery_id, sign, NewDelivery};
use crate::dsl::hooks::{Hook, HookKind};

/// The top-level names of the event document: the only roots a body template may read.
pub const ROOTS: &[&str] = &[
    "hook",
    "event",
    "deliveryId",
    "workflowId",
    "runId",
    "workflowType",
    "correlationId",
    "time",
    "reason",
    "previousRunId",
    "resetTo",
    "task",
    "workflow",
];

/// Where a hook fires: the run, the cause and (for a task's hook) the task.
#[derive(Debug, Clone)]
pub struct Firing<'a> {
    /// The kind of hook.
    pub kind: HookKind,
    /// The lifecycle event that caused it.
    pub event: &'a str,
    /// The workflow.
    pub workflow_id: &'a str,
    /// The run the delivery belongs to.
    pub run_id: Uuid,
    /// What makes this firing unique within the run (an event id, a task id): with the
    /// hook and the run, it names the delivery.
    pub cause: String,
    /// The task's `(ref, id, iteration)`, for a task's hook.
    pub task: Option<(&'a str, Uuid, i32)>,
    /// Position in a reset's rollback sequence.
    pub group_seq: Option<i32>,
}

/// The delivery of `hook` (declared as `decl`, signed with `secret` if any) for
/// `firing`, whose event document is `document` (without `hook`, `event` and
/// `deliveryId`, which are added here).
pub fn delivery(
    decl: &Hook,
    secret: Option<&str>,
    firing: &Firing<'_>,
    mut document: Map<String, Value>,
) -> NewDelivery {
    let hook = firing.kind.as_str();
    let id = delivery_id(firing.run_id, hook, &firing.cause);
    document.insert("hook".into(), hook.into());
    document.insert("event".into(), firing.event.into());
    document.insert("deliveryId".into(), id.to_string().into());
    let body = render(decl.body.as_ref(), &Value::Object(document));
    NewDelivery {
        id,
        workflow_id: firing.workflow_id.to_owned(),
        run_id: firing.run_id,
        hook: hook.to_owned(),
        event: firing.event.to_owned(),
        task_ref: firing.task.map(|(r, _, _)| r.to_owned()),
        task_id: firing.task.map(|(_, id, _)| id),
        iteration: firing.task.map_or(0, |(_, _, i)| i),
        url: decl.url.clone(),
        headers: decl.headers.clone(),
        signature: secret.map(|s| sign::signature(s, body.as_bytes())),
        body,
        blocking: decl.blocking && firing.kind == HookKind::OnRollback,
        group_seq: firing.group_seq,
        traceparent: crate::telemetry::current_traceparent(),
    }
}

/// The body sent: `template` resolved against `document`, or the document itself.
pub fn render(template: Option<&Value>, document: &Value) -> String {
    let value = match template {
        Some(t) => crate::dsl::expr::resolve(t, document),
        None => document.clone(),
    };
    value.to_string()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn decl(body: Option<Value>) -> Hook {
        Hook {
            url: "http://x/hook".into(),
            headers: Map::new(),
            body,
            blocking: true,
        }
    }

    fn firing(kind: HookKind) -> Firing<'static> {
        Firing {
            kind,
            event: "workflow.reset",
            workflow_id: "wf",
            run_id: Uuid::from_u128(7),
            cause: "t1".into(),
            task: Some(("charge", Uuid::from_u128(9), 0)),
            group_seq: Some(0),
        }
    }

    fn document() -> Map<String, Value> {
        json!({"workflowId": "wf", "reason": "oops",
               "task": {"taskRef": "charge", "input": {"order": 42, "items": [1, 2]},
                        "output": {"receipt": "r-1"}},
               "workflow": {"input": {"customer": "ada"}}})
        .as_object()
        .cloned()
        .unwrap()
    }

    #[test]
    fn templates_resolve_against_the_event_document() {
        let template = json!({
            "order": "${task.input.order}",
            "receipt": "${task.output.receipt}",
            "who": "customer ${workflow.input.customer}: ${reason}",
            "first": "${task.input.items[0]}",
            "hook": "${hook}",
            "missing": "${task.output.nothing}"
        });
        let d = delivery(
            &decl(Some(template)),
            None,
            &firing(HookKind::OnRollback),
            document(),
        );
        let body: Value = serde_json::from_str(&d.body).unwrap();
        assert_eq!(
            body,
            json!({"order": 42, "receipt": "r-1", "who": "customer ada: oops", "first": 1,
                   "hook": "onRollback", "missing": null})
        );
        assert_eq!(d.signature, None);
        assert!(d.blocking);
    }

    #[test]
    fn without_a_template_the_document_is_sent_signed() {
        let d = delivery(
            &decl(None),
            Some("s3cret"),
            &firing(HookKind::OnRollback),
            document(),
        );
        let body: Value = serde_json::from_str(&d.body).unwrap();
        assert_eq!(body["hook"], "onRollback");
        assert_eq!(body["event"], "workflow.reset");
        assert_eq!(body["deliveryId"], d.id.to_string());
        assert_eq!(body["task"]["output"]["receipt"], "r-1");
        let sig = d.signature.as_deref().unwrap();
        assert!(sign::verify("s3cret", d.body.as_bytes(), sig));
        // The id is a function of the cause: the same firing twice is one delivery.
        let again = delivery(&decl(None), None, &firing(HookKind::OnRollback), document());
        assert_eq!(again.id, d.id);
        // Only rollback hooks block.
        let timeout = delivery(&decl(None), None, &firing(HookKind::OnTimeout), document());
        assert!(!timeout.blocking);
        assert_ne!(timeout.id, d.id);
    }
}
