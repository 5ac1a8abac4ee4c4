//! Reading the counters the processes export on `/metrics` (Prometheus text).

/// The `weft_bus_published_total{type="…",delivery="…"} n` lines of a `/metrics` text:
/// messages published, by (type, delivery).
pub fn published(text: &str) -> Vec<((String, String), u64)> {
    text.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix("weft_bus_published_total{")?;
            let (labels, value) = rest.split_once("} ")?;
            let label = |name: &str| {
                labels
                    .split(',')
                    .find_map(|kv| kv.strip_prefix(&format!("{name}=\"")))
                    .map(|v| v.trim_end_matches('"').to_owned())
                    .unwrap_or_default()
            };
            let n = value.trim().parse().ok()?;
            Some(((label("type"), label("delivery")), n))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn published_counters_are_read_by_type_and_delivery() {
        let text = "# HELP weft_bus_published_total Messages published\n\
                    weft_bus_published_total{type=\"ActivityTask\",delivery=\"persistent\"} 12\n\
                    weft_bus_published_total{delivery=\"transient\",type=\"ClaimAttempts\"} 3\n\
                    weft_decider_commits_total 9\n";
        assert_eq!(
            super::published(text),
            [
                (("ActivityTask".into(), "persistent".into()), 12),
                (("ClaimAttempts".into(), "transient".into()), 3),
            ]
        );
    }
}
