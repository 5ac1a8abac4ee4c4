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

/// The value of counter `<name>_total` in a `/metrics` text (0 when absent).
pub fn counter(text: &str, name: &str) -> u64 {
    let prefix = format!("{name}_total ");
    text.lines()
        .find_map(|line| line.strip_prefix(prefix.as_str()))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// The `<name>_sum` and `<name>_count` of a histogram in a `/metrics` text (both 0 when
/// absent).
pub fn histogram_sum_count(text: &str, name: &str) -> (f64, u64) {
    let value = |suffix: &str| {
        let prefix = format!("{name}_{suffix} ");
        text.lines()
            .find_map(|line| line.strip_prefix(prefix.as_str()))
            .map(str::trim)
    };
    (
        value("sum").and_then(|v| v.parse().ok()).unwrap_or(0.0),
        value("count").and_then(|v| v.parse().ok()).unwrap_or(0),
    )
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

    #[test]
    fn a_histograms_sum_and_count_are_read_by_name() {
        let text = "weft_decider_commit_seconds_sum 0.75\n\
                    weft_decider_commit_seconds_count 3\n\
                    weft_decider_commit_seconds_bucket{le=\"0.0001\"} 0\n\
                    weft_decider_outbox_publish_seconds_count 9\n";
        assert_eq!(
            super::histogram_sum_count(text, "weft_decider_commit_seconds"),
            (0.75, 3)
        );
        assert_eq!(super::histogram_sum_count(text, "weft_absent"), (0.0, 0));
    }

    #[test]
    fn a_counter_is_read_by_name() {
        let text = "weft_bus_ack_frames_total 12\nweft_bus_acked_deliveries_total 40\n";
        assert_eq!(super::counter(text, "weft_bus_ack_frames"), 12);
        assert_eq!(super::counter(text, "weft_bus_acked_deliveries"), 40);
        assert_eq!(super::counter(text, "weft_absent"), 0);
    }
}
