//! Which lifecycle events the decider publishes (docs/events.md).
//!
//! Publishing an event nobody listens to costs a stored outbox row, a persistent message
//! and a broker confirm per change of a run — most of a short run's messages. So events
//! are switched on per routing key by the deployment (`WEFT_EVENTS`, topic patterns as
//! listeners bind them: `#`, `workflow.*`, `task.failed`); keys that match no pattern are
//! never written. Default: none.

use crate::{Error, Result};

/// The routing-key patterns whose events are published. Cheap to clone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventKeys {
    patterns: Vec<Vec<String>>,
}

impl EventKeys {
    /// No event is published.
    pub fn none() -> Self {
        Self::default()
    }

    /// Every event is published (`#`).
    pub fn all() -> Self {
        Self::parse("#").unwrap_or_default()
    }

    /// Parses a comma-separated list of topic patterns (`WEFT_EVENTS`): words separated
    /// by dots, `*` for exactly one word, `#` for zero or more. Blank entries are ignored.
    pub fn parse(list: &str) -> Result<Self> {
        let mut patterns = Vec::new();
        for pattern in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let words: Vec<String> = pattern.split('.').map(str::to_owned).collect();
            if let Some(bad) = words.iter().find(|w| {
                w.is_empty()
                    || (w.len() > 1 && (w.contains('*') || w.contains('#')))
                    || !w
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '*' | '#'))
            }) {
                return Err(Error::Config(format!(
                    "WEFT_EVENTS: {pattern:?} is not a topic pattern (word {bad:?}); use words \
                     separated by dots, `*` for one word, `#` for any number, e.g. `workflow.*,task.failed` or `#`"
                )));
            }
            patterns.push(words);
        }
        Ok(Self { patterns })
    }

    /// Whether nothing is published.
    pub fn is_empty(&self) -> bool {
        self.patterns.is_empty()
    }

    /// Whether the event with routing key `key` is published.
    pub fn matches(&self, key: &str) -> bool {
        if self.patterns.is_empty() {
            return false;
        }
        let words: Vec<&str> = key.split('.').collect();
        self.patterns.iter().any(|p| topic_match(p, &words))
    }
}

impl std::fmt::Display for EventKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let list: Vec<String> = self.patterns.iter().map(|p| p.join(".")).collect();
        f.write_str(&list.join(","))
    }
}

/// AMQP topic matching of `pattern` against the words of a routing key.
fn topic_match(pattern: &[String], words: &[&str]) -> bool {
    match pattern.split_first() {
        None => words.is_empty(),
        Some((head, rest)) if head == "#" => {
            (0..=words.len()).any(|skip| topic_match(rest, &words[skip..]))
        }
        Some((head, rest)) => match words.split_first() {
            Some((word, more)) if head == "*" || head == word => topic_match(rest, more),
            _ => false,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_published_by_default() {
        assert!(!EventKeys::none().matches("workflow.started"));
        assert!(!EventKeys::parse(" , ").unwrap().matches("task.failed"));
    }

    #[test]
    fn patterns_match_as_amqp_topics() {
        let keys = EventKeys::parse("workflow.*, task.failed").unwrap();
        assert!(keys.matches("workflow.started"));
        assert!(keys.matches("workflow.completed"));
        assert!(keys.matches("task.failed"));
        assert!(!keys.matches("task.completed"));
        assert!(!keys.matches("workflow.a.b"));
        let all = EventKeys::all();
        assert!(all.matches("task.scheduled") && all.matches("workflow.reset"));
        let tail = EventKeys::parse("task.#").unwrap();
        assert!(
            tail.matches("task.failed") && tail.matches("task") && !tail.matches("workflow.failed")
        );
        let mid = EventKeys::parse("*.failed").unwrap();
        assert!(mid.matches("task.failed") && mid.matches("workflow.failed"));
        assert!(!mid.matches("workflow.completed"));
    }

    #[test]
    fn a_malformed_pattern_is_refused_with_its_name() {
        let e = EventKeys::parse("workflow.st*rted")
            .unwrap_err()
            .to_string();
        assert!(e.contains("workflow.st*rted"), "{e}");
        assert!(EventKeys::parse("task..failed").is_err());
    }
}
