//! AMQP topic matching: routing keys and binding patterns are words separated by dots;
//! in a pattern `*` stands for exactly one word and `#` for zero or more.

/// Whether `key` matches the binding `pattern`.
///
/// Dynamic programming over (pattern words, key words), so that patterns full of `#`
/// cost `O(pattern × key)` rather than exponential time.
pub(crate) fn matches(pattern: &str, key: &str) -> bool {
    let pattern: Vec<&str> = pattern.split('.').collect();
    let key: Vec<&str> = key.split('.').collect();
    // can[j]: the pattern words seen so far match the first j key words.
    let mut can = vec![false; key.len() + 1];
    can[0] = true;
    for word in &pattern {
        let mut next = vec![false; key.len() + 1];
        for j in 0..=key.len() {
            next[j] = match *word {
                // Zero words, or one more word taken by the same `#`.
                "#" => can[j] || (j > 0 && next[j - 1]),
                "*" => j > 0 && can[j - 1],
                literal => j > 0 && can[j - 1] && key[j - 1] == literal,
            };
        }
        can = next;
    }
    can[key.len()]
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn words_stars_and_hashes_match_as_in_amqp() {
        assert!(matches("workflow.completed", "workflow.completed"));
        assert!(!matches("workflow.completed", "workflow.failed"));
        assert!(matches("workflow.*", "workflow.failed"));
        assert!(!matches("workflow.*", "workflow"));
        assert!(!matches("workflow.*", "workflow.task.failed"));
        assert!(matches("workflow.#", "workflow"));
        assert!(matches("workflow.#", "workflow.task.failed"));
        assert!(matches("#", "anything.at.all"));
        assert!(matches("#", ""));
        assert!(matches("*.task.*", "workflow.task.failed"));
        assert!(matches("#.failed", "workflow.task.failed"));
        assert!(!matches("#.failed", "workflow.task.completed"));
        assert!(matches("a.#.z", "a.z"));
        assert!(matches("a.#.z", "a.b.c.z"));
        assert!(!matches("a.#.z", "a.b.c"));
    }
}
