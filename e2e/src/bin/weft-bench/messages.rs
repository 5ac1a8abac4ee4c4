//! The broker messages a run costs: the `weft_bus_published_total` counters of every
//! process of the suite (`/metrics`), before and after the throughput phase, per run and
//! by message type. The example worker's and the benchmark's own publishes are not in
//! them (the worker exports no `/metrics`; its results are `ActivityCompleted`, one a task).

use std::collections::BTreeMap;

use weft_e2e::{Service, Suite};

/// Published messages by (type, delivery), summed over the suite's processes.
#[derive(Debug, Default, Clone)]
pub struct Published {
    counts: BTreeMap<(String, String), u64>,
    /// `basic.ack` frames sent and the deliveries they acknowledged (the services'
    /// consumers; one frame may acknowledge many).
    acks: (u64, u64),
}

impl Published {
    /// The counters now (a process that does not answer counts nothing).
    pub async fn take(suite: &Suite) -> Self {
        let services: Vec<Service> = Service::ALL.into_iter().chain([Service::Dev]).collect();
        let mut counts = BTreeMap::new();
        let mut acks = (0, 0);
        for text in crate::scrape::metrics(suite, &services).await {
            for ((kind, delivery), n) in weft_e2e::metrics::published(&text) {
                *counts.entry((kind, delivery)).or_default() += n;
            }
            acks.0 += weft_e2e::metrics::counter(&text, "weft_bus_ack_frames");
            acks.1 += weft_e2e::metrics::counter(&text, "weft_bus_acked_deliveries");
        }
        Self { counts, acks }
    }

    /// A report row: messages a run between `self` and `after`, persistent first.
    pub fn row_until(&self, after: &Published, runs: usize) -> String {
        let per_run = |n: u64| n as f64 / runs.max(1) as f64;
        let mut parts: Vec<(String, f64)> = after
            .counts
            .iter()
            .map(|(key, n)| {
                let before = self.counts.get(key).copied().unwrap_or(0);
                (key, n.saturating_sub(before))
            })
            .filter(|(_, n)| *n > 0)
            .map(|((kind, delivery), n)| (format!("{kind} {delivery}"), per_run(n)))
            .collect();
        parts.sort_by(|a, b| b.1.total_cmp(&a.1));
        let persistent: f64 = parts
            .iter()
            .filter(|(k, _)| k.ends_with(" persistent"))
            .map(|(_, n)| n)
            .sum();
        let detail: Vec<String> = parts.iter().map(|(k, n)| format!("{k} {n:.2}")).collect();
        let frames = after.acks.0.saturating_sub(self.acks.0);
        let acked = after.acks.1.saturating_sub(self.acks.1);
        format!(
            "| broker messages per run, throughput phase (the services' counters; the worker's three results a run come on top, one message each or several for one shard together: the deliveries below count both) | {persistent:.2} persistent ({}) |\n\
             | &nbsp;&nbsp;acknowledgements per run, throughput phase (the services' consumers: `basic.ack` frames, and the deliveries they settled) | {:.2} frames for {:.2} deliveries |\n",
            detail.join(", "),
            per_run(frames),
            per_run(acked),
        )
    }
}
