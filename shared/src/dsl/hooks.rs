//! Hooks (a Weft extension of the Conductor schema, docs/hooks.md): HTTP calls declared on
//! a task or a workflow and made by the hook dispatcher when something happens to it.
//!
//! ```json
//! {"name": "charge", "taskReferenceName": "charge",
//!  "hooks": {"onRollback": {"url": "https://billing/refund", "await": true,
//!                           "headers": {"x-team": "billing"},
//!                           "body": {"order": "${task.input.order}"}}}}
//! ```
//!
//! On a task: `onRollback` (a reset moved the run back past it), `onTimeout`, `onFailure`,
//! `onComplete`. On a workflow: `onTimeout`, `onFailure`, `onComplete`, and `secret`, the
//! key of the HMAC-SHA256 signature of every call of the definition.

use serde_json::{Map, Value};

use super::validate::DslError;

/// When a hook fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookKind {
    /// A reset moved the run back past the task.
    OnRollback,
    /// The task (or the run) ran out of time.
    OnTimeout,
    /// The task (or the run) failed.
    OnFailure,
    /// The task (or the run) completed.
    OnComplete,
}

impl HookKind {
    /// Every kind.
    pub const ALL: [HookKind; 4] = [
        HookKind::OnRollback,
        HookKind::OnTimeout,
        HookKind::OnFailure,
        HookKind::OnComplete,
    ];

    /// The key in `hooks`.
    pub fn as_str(self) -> &'static str {
        match self {
            HookKind::OnRollback => "onRollback",
            HookKind::OnTimeout => "onTimeout",
            HookKind::OnFailure => "onFailure",
            HookKind::OnComplete => "onComplete",
        }
    }
}

/// One declared hook.
#[derive(Debug, Clone, PartialEq)]
pub struct Hook {
    /// Where to POST.
    pub url: String,
    /// Extra request headers.
    pub headers: Map<String, Value>,
    /// The body template (`${task.input...}`, `${task.output...}`, `${workflow...}`,
    /// `${reason}`); absent: the event document.
    pub body: Option<Value>,
    /// `await`: a rollback hook the new run waits for; its failure fails the reset.
    pub blocking: bool,
}

/// The hook of `kind` declared in `extra` (a task's or a workflow's extra fields).
pub fn hook(extra: &Map<String, Value>, kind: HookKind) -> Option<Hook> {
    let h = extra.get("hooks")?.get(kind.as_str())?;
    Some(Hook {
        url: h.get("url")?.as_str()?.to_owned(),
        headers: h
            .get("headers")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default(),
        body: h.get("body").cloned(),
        blocking: h.get("await").and_then(Value::as_bool).unwrap_or(false),
    })
}

/// The definition's signing secret (`hooks.secret` of the workflow), in a type whose
/// `Debug` output is redacted.
pub fn secret(extra: &Map<String, Value>) -> Option<crate::hooks::Secret> {
    extra
        .get("hooks")?
        .get("secret")?
        .as_str()
        .map(crate::hooks::Secret::new)
}

/// Checks `hooks` in `extra` at `path`: known kinds only (`allowed`), each with an
/// http(s) `url`, string headers and a boolean `await`; `secret`, where allowed, a
/// non-empty string.
pub fn validate(
    extra: &Map<String, Value>,
    path: &str,
    allowed: &[HookKind],
    secret_allowed: bool,
) -> Result<(), DslError> {
    let Some(hooks) = extra.get("hooks") else {
        return Ok(());
    };
    let at = |field: &str| {
        if path.is_empty() {
            format!("hooks.{field}")
        } else {
            format!("{path}.hooks.{field}")
        }
    };
    let Some(hooks) = hooks.as_object() else {
        return Err(DslError::new(
            at("").trim_end_matches('.'),
            "hooks must be a JSON object",
        ));
    };
    for (name, spec) in hooks {
        if name == "secret" && secret_allowed {
            if spec.as_str().is_none_or(|s| s.is_empty()) {
                return Err(DslError::new(
                    at(name),
                    "the hook secret must be a non-empty string",
                ));
            }
            continue;
        }
        let Some(kind) = allowed.iter().find(|k| k.as_str() == name) else {
            let names: Vec<&str> = allowed.iter().map(|k| k.as_str()).collect();
            return Err(DslError::new(
                at(name),
                format!("unknown hook {name:?}; here: {}", names.join(", ")),
            ));
        };
        let here = at(kind.as_str());
        let Some(spec) = spec.as_object() else {
            return Err(DslError::new(
                here,
                "a hook must be a JSON object with a url",
            ));
        };
        match spec.get("url").and_then(Value::as_str) {
            Some(u) if u.starts_with("http://") || u.starts_with("https://") => {}
            _ => {
                return Err(DslError::new(
                    format!("{here}.url"),
                    "a hook needs an http:// or https:// url",
                ))
            }
        }
        if let Some(headers) = spec.get("headers") {
            let ok = headers
                .as_object()
                .is_some_and(|h| h.values().all(Value::is_string));
            if !ok {
                return Err(DslError::new(
                    format!("{here}.headers"),
                    "headers must be an object of strings",
                ));
            }
        }
        if spec.get("await").is_some_and(|a| !a.is_boolean()) {
            return Err(DslError::new(
                format!("{here}.await"),
                "await must be true or false",
            ));
        }
        if spec.contains_key("await") && *kind != HookKind::OnRollback {
            return Err(DslError::new(
                format!("{here}.await"),
                "only onRollback hooks can be awaited",
            ));
        }
        // A body template reads the hook's event document (hooks::body), nothing else.
        if let Some(body) = spec.get("body") {
            let roots = crate::hooks::body::ROOTS;
            if let Some(bad) = super::expr::references(body)
                .into_iter()
                .find(|r| !roots.contains(&r.as_str()))
            {
                return Err(DslError::new(
                    format!("{here}.body"),
                    format!(
                        "a hook body can read {}; {bad:?} is none of them",
                        roots.join(", ")
                    ),
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn extra(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn declared_hooks_are_read_and_checked() {
        let e = extra(
            json!({"hooks": {"onRollback": {"url": "http://x/y", "await": true,
                                                      "headers": {"a": "b"}}}}),
        );
        validate(&e, "tasks[1]", &HookKind::ALL, false).unwrap();
        let h = hook(&e, HookKind::OnRollback).unwrap();
        assert_eq!((h.url.as_str(), h.blocking), ("http://x/y", true));
        assert!(hook(&e, HookKind::OnTimeout).is_none());
        let err = |v: Value, path: &str| {
            let e = validate(&extra(v), "tasks[1]", &HookKind::ALL, false).unwrap_err();
            assert_eq!(e.path, path, "{}", e.message);
        };
        err(
            json!({"hooks": {"onRollback": {"url": "ftp://x"}}}),
            "tasks[1].hooks.onRollback.url",
        );
        err(
            json!({"hooks": {"onWhatever": {"url": "http://x"}}}),
            "tasks[1].hooks.onWhatever",
        );
        err(
            json!({"hooks": {"onTimeout": {"url": "http://x", "await": true}}}),
            "tasks[1].hooks.onTimeout.await",
        );
        err(
            json!({"hooks": {"onComplete": {"url": "http://x", "headers": {"a": 1}}}}),
            "tasks[1].hooks.onComplete.headers",
        );
        err(json!({"hooks": {"secret": "s"}}), "tasks[1].hooks.secret");
        err(
            json!({"hooks": {"onRollback": {"url": "http://x", "body": {"a": "${t1.output.x}"}}}}),
            "tasks[1].hooks.onRollback.body",
        );
        validate(
            &extra(json!({"hooks": {"onRollback": {"url": "http://x",
                "body": {"a": "${task.output.x}", "b": "${workflow.input.y} ${reason}"}}}})),
            "tasks[1]",
            &HookKind::ALL,
            false,
        )
        .unwrap();
        let wf = extra(json!({"hooks": {"secret": "s3", "onFailure": {"url": "https://x"}}}));
        validate(&wf, "", &HookKind::ALL[1..], true).unwrap();
        assert_eq!(secret(&wf).as_deref(), Some("s3"));
    }
}
