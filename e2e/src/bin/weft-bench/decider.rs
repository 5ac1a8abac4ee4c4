//! The decider's own timings over a phase: its commit (a shard batch handed to the
//! committer → the transaction's outcome) and its outbox publish (commit → confirms),
//! from the `weft_decider_commit_seconds` and `weft_decider_outbox_publish_seconds`
//! histograms of every decider process (`/metrics`), before and after.

use weft_e2e::{Service, Suite};

const COMMIT: &str = "weft_decider_commit_seconds";
const PUBLISH: &str = "weft_decider_outbox_publish_seconds";
const STATEMENT: &str = "weft_decider_commit_statement_seconds";

/// Sums and counts of the two histograms, over the suite's deciders.
#[derive(Debug, Default, Clone, Copy)]
pub struct DeciderTimes {
    commit: (f64, u64),
    statement: (f64, u64),
    publish: (f64, u64),
}

impl DeciderTimes {
    /// The histograms now (`weft dev` included; a process that does not answer counts
    /// nothing).
    pub async fn take(suite: &Suite) -> Self {
        let mut times = Self::default();
        for text in crate::scrape::metrics(suite, &[Service::Decider, Service::Dev]).await {
            for (total, name) in [
                (&mut times.commit, COMMIT),
                (&mut times.statement, STATEMENT),
                (&mut times.publish, PUBLISH),
            ] {
                let (sum, count) = weft_e2e::metrics::histogram_sum_count(&text, name);
                total.0 += sum;
                total.1 += count;
            }
        }
        times
    }

    /// A report row: the mean commit and publish between `self` and `after`.
    pub fn row_until(&self, after: &DeciderTimes, phase: &str) -> String {
        let mean = |before: (f64, u64), after: (f64, u64)| {
            let n = after.1.saturating_sub(before.1);
            let ms = (after.0 - before.0) * 1000.0 / n.max(1) as f64;
            format!("{ms:.2}ms ({n})")
        };
        format!(
            "| &nbsp;&nbsp;the decider's commit (a batch handed to the committer → its outcome), mean over the {phase} (batches) | {} |\n\
             | &nbsp;&nbsp;its statement alone (the committer's round trip to the database), mean over the {phase} (statements) | {} |\n\
             | &nbsp;&nbsp;the decider's outbox publish (commit → confirms), mean over the {phase} (batches) | {} |\n",
            mean(self.commit, after.commit),
            mean(self.statement, after.statement),
            mean(self.publish, after.publish),
        )
    }
}
