//! API tokens and the audit trail, on both backends.

use chrono::{Duration, Utc};
use serde_json::json;
use uuid::Uuid;
use weft::store::auth::{hash_secret, ApiToken, AuditEntry, AuditFilter};
use weft::store::outbox::OutboxMessage;
use weft::store::starts::{NewStart, StartOutcome};
use weft::store::Store;

fn token(name: &str, secret: &str) -> ApiToken {
    ApiToken {
        name: name.into(),
        token_hash: hash_secret(secret),
        scopes: vec!["read".into(), "work".into()],
        task_types: Some(vec!["greet".into()]),
        // Whole milliseconds: both backends keep at least that.
        created_at: chrono::DateTime::from_timestamp_millis(Utc::now().timestamp_millis()).unwrap(),
        expires_at: None,
    }
}

fn audit(actor: &str, action: &str, workflow_id: Option<&str>) -> AuditEntry {
    AuditEntry {
        at: Utc::now(),
        actor: Some(actor.into()),
        action: action.into(),
        target: Some("t".into()),
        workflow_id: workflow_id.map(str::to_owned),
        reason: Some("because".into()),
        status: Some(200),
        method: "POST".into(),
        path: "/api/x".into(),
    }
}

fn all() -> AuditFilter {
    AuditFilter {
        limit: 100,
        ..AuditFilter::default()
    }
}

store_test!(a_token_is_found_by_its_hash_until_revoked_and_each_change_is_audited);
async fn a_token_is_found_by_its_hash_until_revoked_and_each_change_is_audited(store: &Store) {
    let t = token("ci", "secret-1");
    assert!(store
        .create_token(&t, &audit("admin", "token.create", None))
        .await
        .unwrap());
    // The same name again writes nothing, not even its audit row.
    assert!(!store
        .create_token(
            &token("ci", "secret-2"),
            &audit("admin", "token.create", None)
        )
        .await
        .unwrap());
    assert_eq!(
        store.token_by_hash(&hash_secret("secret-1")).await.unwrap(),
        Some(t.clone())
    );
    assert_eq!(
        store.token_by_hash(&hash_secret("secret-2")).await.unwrap(),
        None
    );
    assert_eq!(store.tokens().await.unwrap(), vec![t]);

    assert!(store
        .revoke_token("ci", &audit("admin", "token.revoke", None))
        .await
        .unwrap());
    assert!(!store
        .revoke_token("ci", &audit("admin", "token.revoke", None))
        .await
        .unwrap());
    assert_eq!(
        store.token_by_hash(&hash_secret("secret-1")).await.unwrap(),
        None
    );

    let rows = store.audit_entries(&all()).await.unwrap();
    let actions: Vec<&str> = rows.iter().map(|r| r.action.as_str()).collect();
    assert_eq!(actions, ["token.revoke", "token.create"]);
}

store_test!(audit_rows_are_filtered_by_token_workflow_and_time_newest_first);
async fn audit_rows_are_filtered_by_token_workflow_and_time_newest_first(store: &Store) {
    let mut first = audit("alice", "workflow.pause", Some("wf-1"));
    first.at = Utc::now() - Duration::minutes(10);
    store.record_audit(&first).await.unwrap();
    store
        .record_audit(&audit("bob", "workflow.resume", Some("wf-1")))
        .await
        .unwrap();
    store
        .record_audit(&audit("alice", "definition.create", None))
        .await
        .unwrap();

    let by_alice = store
        .audit_entries(&AuditFilter {
            actor: Some("alice".into()),
            ..all()
        })
        .await
        .unwrap();
    let actions: Vec<&str> = by_alice.iter().map(|r| r.action.as_str()).collect();
    assert_eq!(actions, ["definition.create", "workflow.pause"]);
    let on_wf = store
        .audit_entries(&AuditFilter {
            workflow_id: Some("wf-1".into()),
            ..all()
        })
        .await
        .unwrap();
    assert_eq!(on_wf.len(), 2);
    assert_eq!(on_wf[0].actor.as_deref(), Some("bob"));
    assert_eq!(on_wf[0].reason.as_deref(), Some("because"));
    let recent = store
        .audit_entries(&AuditFilter {
            from: Some(Utc::now() - Duration::minutes(1)),
            ..all()
        })
        .await
        .unwrap();
    assert_eq!(recent.len(), 2);
    let one = store
        .audit_entries(&AuditFilter { limit: 1, ..all() })
        .await
        .unwrap();
    assert_eq!(one[0].action, "definition.create");
}

store_test!(an_audited_start_writes_its_row_with_the_start_and_a_repeat_writes_none);
async fn an_audited_start_writes_its_row_with_the_start_and_a_repeat_writes_none(store: &Store) {
    let start = |id: &str| NewStart {
        workflow_id: id.into(),
        idempotency_key: Some("once".into()),
        workflow_name: "orders".into(),
        workflow_version: 1,
        input: json!({}),
        correlation_id: None,
    };
    let message = || OutboxMessage {
        id: Uuid::now_v7(),
        exchange: "weft.commands".into(),
        routing_key: "cmd.0".into(),
        body: b"start".to_vec(),
        traceparent: None,
        raw: false,
    };
    let row = AuditEntry {
        action: "workflow.start".into(),
        target: Some("orders".into()),
        workflow_id: Some("wf-a".into()),
        reason: None,
        status: None,
        ..audit("alice", "", None)
    };
    let outcome = store
        .accept_start(&start("wf-a"), &mut [message()], Some(&row))
        .await
        .unwrap();
    assert_eq!(outcome, StartOutcome::Accepted);
    let again = store
        .accept_start(&start("wf-b"), &mut [message()], Some(&row))
        .await
        .unwrap();
    assert_eq!(again, StartOutcome::Existing("wf-a".into()));
    let rows = store.audit_entries(&all()).await.unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].action, "workflow.start");
    assert_eq!(rows[0].workflow_id.as_deref(), Some("wf-a"));
    assert_eq!(rows[0].target.as_deref(), Some("orders"));
    assert_eq!(rows[0].actor.as_deref(), Some("alice"));
    // Unaudited starts (auth off) write no row.
    let mut plain = start("wf-c");
    plain.idempotency_key = None;
    store
        .accept_start(&plain, &mut [message()], None)
        .await
        .unwrap();
    assert_eq!(store.audit_entries(&all()).await.unwrap().len(), 1);
}

store_test!(audit_rows_past_their_retention_are_purged_in_batches);
async fn audit_rows_past_their_retention_are_purged_in_batches(store: &Store) {
    for days in [400, 380, 370] {
        let mut old = audit("alice", "workflow.pause", None);
        old.at = Utc::now() - Duration::days(days);
        store.record_audit(&old).await.unwrap();
    }
    store
        .record_audit(&audit("bob", "workflow.resume", None))
        .await
        .unwrap();
    let year = std::time::Duration::from_secs(365 * 24 * 3600);
    assert_eq!(store.purge_audit(year, 2).await.unwrap(), 2);
    assert_eq!(store.purge_audit(year, 2).await.unwrap(), 1);
    assert_eq!(store.purge_audit(year, 2).await.unwrap(), 0);
    let left = store.audit_entries(&all()).await.unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].actor.as_deref(), Some("bob"));
    // An age longer than time itself purges nothing (and does not overflow).
    assert_eq!(
        store
            .purge_audit(std::time::Duration::MAX, 10)
            .await
            .unwrap(),
        0
    );
}
