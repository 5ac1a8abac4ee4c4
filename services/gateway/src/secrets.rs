//! Hook secrets are write-only (docs/security.md): every answer that carries a
//! definition — a definition read, a run's history — shows `hooks.secret` as [`MASK`],
//! and a definition sent back with the mask keeps the secret it had.

use serde_json::Value;

use crate::error::ApiError;

/// What a secret reads as.
pub const MASK: &str = "********";

/// `value` with every `hooks.secret` (at any depth: inline sub-workflow definitions have
/// their own) replaced by [`MASK`].
pub fn masked(mut value: Value) -> Value {
    mask(&mut value);
    value
}

/// Replaces every `hooks.secret` under `value` by [`MASK`].
pub fn mask(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, child) in map.iter_mut() {
                if key == "hooks" {
                    if let Some(secret) = child.get_mut("secret").filter(|s| s.is_string()) {
                        *secret = Value::String(MASK.to_owned());
                    }
                }
                mask(child);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(mask),
        _ => {}
    }
}

/// Puts back, from `stored` (the definition as registered before), each secret that
/// `submitted` carries as the mask — a client that reads, edits and writes a definition
/// must not replace its secret with the mask. A mask with no secret to put back is a 400
/// naming its place.
pub fn restore(submitted: &mut Value, stored: Option<&Value>) -> Result<(), ApiError> {
    restore_at(submitted, stored, String::new())
}

fn restore_at(submitted: &mut Value, stored: Option<&Value>, path: String) -> Result<(), ApiError> {
    match submitted {
        Value::Object(map) => {
            for (key, child) in map.iter_mut() {
                let here = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                let before = stored.and_then(|s| s.get(key));
                if key == "hooks" {
                    if let Some(secret) = child.get_mut("secret").filter(|s| *s == MASK) {
                        match before
                            .and_then(|h| h.get("secret"))
                            .filter(|s| s.is_string() && *s != MASK)
                        {
                            Some(old) => *secret = old.clone(),
                            None => {
                                return Err(ApiError::invalid(
                                    "invalid_definition",
                                    format!("{here}.secret"),
                                    "this is the mask a read shows, and there is no secret \
                                     to keep: give the secret itself",
                                ))
                            }
                        }
                    }
                }
                restore_at(child, before, here)?;
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                let before = stored.and_then(|s| s.get(i));
                restore_at(item, before, format!("{path}[{i}]"))?;
            }
        }
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn secrets_are_masked_at_any_depth() {
        let def = json!({
            "hooks": {"secret": "s1", "onFailure": {"url": "https://x"}},
            "tasks": [{"subWorkflowParam": {"workflowDefinition": {"hooks": {"secret": "s2"}}}}]
        });
        let text = masked(def).to_string();
        assert!(!text.contains("s1") && !text.contains("s2"), "{text}");
        assert!(text.contains(MASK));
    }

    #[test]
    fn a_masked_secret_sent_back_keeps_the_stored_one() {
        let stored = json!({"hooks": {"secret": "s1"}});
        let mut sent = masked(stored.clone());
        restore(&mut sent, Some(&stored)).unwrap();
        assert_eq!(sent, stored);
        let mut new = json!({"hooks": {"secret": MASK}});
        let e = restore(&mut new, None).unwrap_err();
        assert!(matches!(e, ApiError::BadRequest { path: Some(p), .. } if p == "hooks.secret"));
        // A new secret replaces the old.
        let mut changed = json!({"hooks": {"secret": "s9"}});
        restore(&mut changed, Some(&stored)).unwrap();
        assert_eq!(changed["hooks"]["secret"], "s9");
    }
}
