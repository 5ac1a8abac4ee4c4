//! Retention: verdicts on operator commands (`operation_outcomes`) are needed only
//! while the gateway waits for them (seconds); they are kept a day for post-mortems,
//! then deleted in bounded batches. The audit trail (`audit_log`) is kept as long as
//! `WEFT_AUDIT_RETENTION_DAYS` says (a year by default), then deleted the same way.

use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use tokio_util::sync::CancellationToken;
use weft::admin::Metrics;
use weft::store::Store;

/// How long a verdict is kept.
const VERDICT_RETENTION: Duration = Duration::from_secs(24 * 3600);
/// Rows deleted per statement, so a backlog never holds long locks.
const BATCH: i64 = 1_000;
/// Pause between rounds when there is nothing (more) to delete.
const IDLE: Duration = Duration::from_secs(60);

/// Periodically deletes expired rows.
pub struct Retention {
    store: Store,
    purged: Counter,
    audit_retention: Option<Duration>,
    audit_purged: Counter,
}

impl Retention {
    /// Retention over `store`; audit rows older than `audit_retention` go too (`None`:
    /// they are kept).
    pub fn new(store: Store, metrics: &Metrics, audit_retention: Option<Duration>) -> Self {
        Self {
            store,
            purged: metrics.counter(
                "weft_operation_outcomes_purged",
                "Verdicts on operator commands deleted after their retention",
            ),
            audit_retention,
            audit_purged: metrics.counter(
                "weft_audit_rows_purged",
                "Audit rows deleted after their retention (WEFT_AUDIT_RETENTION_DAYS)",
            ),
        }
    }

    /// Purges until `shutdown`: a full batch is followed at once by the next one.
    pub async fn run(&self, shutdown: CancellationToken) {
        let verdicts = weft::purge::in_batches(
            "operation outcomes",
            BATCH,
            IDLE,
            &self.purged,
            shutdown.clone(),
            || {
                self.store
                    .purge_operation_outcomes(VERDICT_RETENTION, BATCH)
            },
        );
        let audit = async {
            if let Some(age) = self.audit_retention {
                weft::purge::in_batches(
                    "audit rows",
                    BATCH,
                    IDLE,
                    &self.audit_purged,
                    shutdown,
                    || self.store.purge_audit(age, BATCH),
                )
                .await;
            }
        };
        tokio::join!(verdicts, audit);
    }
}
