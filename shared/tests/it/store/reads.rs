//! Reads of a committed run: history pages and the flowchart.

use serde_json::json;
use uuid::Uuid;
use weft::store::runs::CommitBatch;
use weft::store::Store;

use super::{now, run, started, task, variables};

store_test!(history_pages_follow_event_ids);
async fn history_pages_follow_event_ids(store: &Store) {
    let wf = "wf-pages";
    let run_id = Uuid::new_v4();
    let mut events = vec![started(run_id)];
    events.extend((2..=5).map(|id| variables(run_id, id)));
    store
        .commit(&CommitBatch {
            new_runs: vec![run(wf, run_id, 5)],
            events,
            ..CommitBatch::default()
        })
        .await
        .unwrap();

    let ids = |page: Vec<weft::store::reads::EventView>| {
        page.iter().map(|e| e.event_id).collect::<Vec<_>>()
    };
    let first = store.history_page(run_id, 0, 2).await.unwrap();
    assert_eq!(first[0].kind, "WorkflowStarted");
    assert_eq!(first[1].attributes, json!({"variables": {"n": 2}}));
    assert_eq!(ids(first), vec![1, 2]);
    assert_eq!(
        ids(store.history_page(run_id, 2, 2).await.unwrap()),
        vec![3, 4]
    );
    assert_eq!(
        ids(store.history_page(run_id, 4, 2).await.unwrap()),
        vec![5]
    );
    assert!(store.history_page(run_id, 5, 2).await.unwrap().is_empty());
    assert!(store
        .history_page(Uuid::new_v4(), 0, 10)
        .await
        .unwrap()
        .is_empty());
}

store_test!(the_graph_of_a_committed_run);
async fn the_graph_of_a_committed_run(store: &Store) {
    let wf = "wf-graph";
    let run_id = Uuid::new_v4();
    let the_run = run(wf, run_id, 2);
    let mut a = task(&the_run, "a", 0);
    a.status = "COMPLETED".into();
    a.start_time = Some(a.scheduled_time + chrono::Duration::milliseconds(7));
    a.end_time = Some(now() + chrono::Duration::milliseconds(20));
    a.output = Some(json!({"done": true}));
    store
        .commit(&CommitBatch {
            new_runs: vec![the_run],
            events: vec![started(run_id), variables(run_id, 2)],
            tasks: vec![a.clone()],
            ..CommitBatch::default()
        })
        .await
        .unwrap();

    let graph = store.run_graph(wf, run_id).await.unwrap().expect("graph");
    assert_eq!(graph.run_id, run_id);
    assert_eq!(graph.version, 2);
    assert_eq!(
        graph.trace_id.as_deref(),
        Some("4bf92f3577b34da6a3ce929d0e0e4736")
    );
    let node = |r: &str| {
        graph
            .nodes
            .iter()
            .find(|n| n.task_ref == r)
            .unwrap_or_else(|| panic!("node {r} in {:?}", graph.nodes))
    };
    let node_a = node("a");
    assert_eq!(node_a.status.as_deref(), Some("COMPLETED"));
    assert_eq!(node_a.task_id, Some(a.task_id));
    assert_eq!(node_a.attempt, Some(1));
    assert_eq!(
        node_a.scheduled_time,
        Some(a.scheduled_time.timestamp_millis())
    );
    assert_eq!(
        node_a.start_time,
        a.start_time.map(|t| t.timestamp_millis())
    );
    assert_eq!(node_a.end_time, a.end_time.map(|t| t.timestamp_millis()));
    // `{"in":"a"}` and `{"done":true}` as stored: sizes are measured, not exact across
    // backends (PostgreSQL renders jsonb with spaces).
    assert!(node_a.input_bytes.is_some_and(|n| n > 0));
    assert!(node_a.output_bytes.is_some_and(|n| n > 0));
    assert_eq!(node("b").status, None);
    assert!(!graph.edges.is_empty());

    assert!(store.run_graph(wf, Uuid::new_v4()).await.unwrap().is_none());
    assert!(store.run_graph("wf-other", run_id).await.unwrap().is_none());
}
