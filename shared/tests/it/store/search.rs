//! Search and statistics over runs on both backends.

use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use serde_json::json;
use uuid::Uuid;
use weft::store::runs::{CommitBatch, RunRecord};
use weft::store::search::{parse_query, Search};
use weft::store::Store;

fn run(
    workflow_id: &str,
    name: &str,
    version: i32,
    status: &str,
    start: DateTime<Utc>,
    took_ms: Option<i64>,
    correlation: Option<&str>,
) -> RunRecord {
    let end = took_ms.map(|ms| start + TimeDelta::milliseconds(ms));
    RunRecord {
        run_id: Uuid::now_v7(),
        workflow_id: workflow_id.into(),
        workflow_name: name.into(),
        workflow_version: version,
        status: status.into(),
        sub_status: status.into(),
        input: json!({ "id": workflow_id }),
        output: end.map(|_| json!({ "ok": true })),
        variables: json!({}),
        correlation_id: correlation.map(str::to_owned),
        parent_workflow_id: None,
        reason: None,
        failed_task_refs: vec!["a".into()],
        start_time: start,
        end_time: end,
        update_time: end.unwrap_or(start),
        version: 1,
        is_current: true,
        reset_from: None,
        pending_signals: None,
    }
}

async fn seed(store: &Store, t0: DateTime<Utc>) {
    let s = |n| t0 + TimeDelta::seconds(n);
    let batch = CommitBatch {
        new_runs: vec![
            run(
                "Order-1",
                "orders",
                1,
                "COMPLETED",
                s(0),
                Some(100),
                Some("corr-1"),
            ),
            run("order-2", "orders", 1, "COMPLETED", s(1), Some(300), None),
            run("order-3", "orders", 2, "FAILED", s(2), Some(200), None),
            run(
                "order-4",
                "orders",
                2,
                "RUNNING",
                s(3),
                None,
                Some("Order-x"),
            ),
            run("bill-1", "billing", 1, "RUNNING", s(4), None, None),
        ],
        ..CommitBatch::default()
    };
    store.commit(&batch).await.unwrap();
}

async fn ids(
    store: &Store,
    query: &str,
    text: Option<&str>,
    start: i64,
    size: i64,
) -> (i64, Vec<String>) {
    let search = Search {
        filters: parse_query(query).unwrap(),
        free_text: text.map(str::to_owned),
        start,
        size,
    };
    let (total, hits) = store.search_runs(&search).await.unwrap();
    (total, hits.into_iter().map(|h| h.run.workflow_id).collect())
}

store_test!(search_filters_sorts_and_pages_current_runs, search);
async fn search(store: &Store) {
    let t0 = Utc::now().duration_trunc(TimeDelta::seconds(1)).unwrap() - TimeDelta::hours(1);
    seed(store, t0).await;
    let all = ["bill-1", "order-4", "order-3", "order-2", "Order-1"].map(String::from);
    assert_eq!(ids(store, "", None, 0, 10).await, (5, all.to_vec()));
    assert_eq!(
        ids(store, "", Some("*"), 1, 2).await,
        (5, all[1..3].to_vec())
    );
    assert_eq!(
        ids(store, "status IN (RUNNING, FAILED)", None, 0, 10).await,
        (3, all[..3].to_vec())
    );
    assert_eq!(
        ids(
            store,
            "workflowType = orders AND status = COMPLETED",
            None,
            0,
            10
        )
        .await,
        (2, all[3..].to_vec())
    );
    let after = (t0 + TimeDelta::seconds(2)).timestamp_millis();
    assert_eq!(
        ids(
            store,
            &format!("startTime >= {after} AND workflowType IN ('orders')"),
            None,
            0,
            10
        )
        .await,
        (2, all[1..3].to_vec())
    );
    assert_eq!(
        ids(store, "correlationId = 'corr-1'", None, 0, 10).await,
        (1, vec!["Order-1".into()])
    );
    assert_eq!(
        ids(store, "workflowId = \"order-2\"", None, 0, 10).await,
        (1, vec!["order-2".into()])
    );
    // Free text: exact id or correlation id, or a case-sensitive prefix of either.
    assert_eq!(
        ids(store, "", Some("corr-1"), 0, 10).await,
        (1, vec!["Order-1".into()])
    );
    assert_eq!(
        ids(store, "", Some("Order*"), 0, 10).await,
        (2, vec!["order-4".into(), "Order-1".into()])
    );
    assert_eq!(ids(store, "", Some("order-%*"), 0, 10).await, (0, vec![]));
    let (_, hits) = store
        .search_runs(&Search {
            filters: parse_query("workflowId = bill-1").unwrap(),
            free_text: None,
            start: 0,
            size: 1,
        })
        .await
        .unwrap();
    let hit = &hits[0];
    assert_eq!(hit.run.failed_task_refs, ["a"]);
    assert_eq!(hit.run.input, json!({ "id": "bill-1" }));
    assert_eq!(hit.run.start_time, t0 + TimeDelta::seconds(4));
    assert!(hit.run.is_current);
    assert!(hit.input_bytes.unwrap() > 0);
    assert_eq!(hit.output_bytes, None);
}

store_test!(stats_count_and_percentiles_of_recent_runs, stats);
async fn stats(store: &Store) {
    let t0 = Utc::now().duration_trunc(TimeDelta::seconds(1)).unwrap() - TimeDelta::hours(1);
    seed(store, t0).await;
    let s = store.run_stats("orders", None, t0, 100).await.unwrap();
    assert_eq!(s.count, 4);
    assert_eq!(s.by_status.get("COMPLETED"), Some(&2));
    assert_eq!(s.by_status.get("FAILED"), Some(&1));
    assert_eq!(s.by_status.get("RUNNING"), Some(&1));
    let d = s.duration_ms.unwrap();
    assert_eq!((d.p50, d.p95, d.p99), (200, 300, 300));
    assert!(s.input_bytes.is_some() && s.output_bytes.is_some());
    // A version, a window, a limit (the newest first).
    let v2 = store.run_stats("orders", Some(2), t0, 100).await.unwrap();
    assert_eq!(v2.count, 2);
    assert_eq!(v2.duration_ms.map(|d| d.p50), Some(200));
    let late = store
        .run_stats("orders", None, t0 + TimeDelta::seconds(1), 100)
        .await
        .unwrap();
    assert_eq!(late.count, 3);
    let newest = store.run_stats("orders", None, t0, 2).await.unwrap();
    assert_eq!(newest.count, 2);
    assert_eq!(newest.by_status.get("RUNNING"), Some(&1));
    let none = store.run_stats("nothing", None, t0, 10).await.unwrap();
    assert_eq!((none.count, none.duration_ms), (0, None));
}
