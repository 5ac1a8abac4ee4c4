//! Workflow and task definitions: put (with and without overwrite), get, list, delete.

use serde_json::json;
use weft::dsl::taskdef::TaskDef;
use weft::store::definitions::PutOutcome;
use weft::store::Store;

use super::definition;

store_test!(definitions_put_get_list_delete);
async fn definitions_put_get_list_delete(store: &Store) {
    let v1 = definition("orders", 1);
    assert_eq!(
        store.put_definition(&v1, false).await.unwrap(),
        PutOutcome::Created
    );
    let created = store
        .get_definition("orders", Some(1))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(created.definition, serde_json::to_value(&v1).unwrap());

    // Without overwrite an existing version is left untouched.
    let mut changed = v1.clone();
    changed.description = Some("changed".into());
    assert_eq!(
        store.put_definition(&changed, false).await.unwrap(),
        PutOutcome::Exists
    );
    let kept = store
        .get_definition("orders", Some(1))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(kept.definition, created.definition);

    // With overwrite it is replaced; its creation time stays.
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    assert_eq!(
        store.put_definition(&changed, true).await.unwrap(),
        PutOutcome::Replaced
    );
    let replaced = store
        .get_definition("orders", Some(1))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(replaced.definition["description"], json!("changed"));
    assert_eq!(replaced.created_at, created.created_at);
    assert!(replaced.updated_at > created.updated_at);
    // Overwrite of a missing version creates it.
    assert_eq!(
        store
            .put_definition(&definition("orders", 2), true)
            .await
            .unwrap(),
        PutOutcome::Created
    );
    store
        .put_definition(&definition("billing", 3), false)
        .await
        .unwrap();

    let latest = store.get_definition("orders", None).await.unwrap().unwrap();
    assert_eq!(latest.version, 2);
    assert!(store
        .get_definition("orders", Some(9))
        .await
        .unwrap()
        .is_none());
    assert!(store
        .get_definition("nothing", None)
        .await
        .unwrap()
        .is_none());
    let listed: Vec<(String, i32)> = store
        .list_definitions()
        .await
        .unwrap()
        .into_iter()
        .map(|d| (d.name, d.version))
        .collect();
    assert_eq!(
        listed,
        vec![
            ("billing".to_owned(), 3),
            ("orders".to_owned(), 1),
            ("orders".to_owned(), 2)
        ]
    );

    assert!(store.delete_definition("orders", 1).await.unwrap());
    assert!(!store.delete_definition("orders", 1).await.unwrap());
    assert_eq!(
        store
            .get_definition("orders", None)
            .await
            .unwrap()
            .unwrap()
            .version,
        2
    );
}

fn task_def(name: &str, retries: i32) -> TaskDef {
    serde_json::from_value(json!({"name": name, "retryCount": retries})).expect("task def")
}

store_test!(task_definitions_put_get_list_delete);
async fn task_definitions_put_get_list_delete(store: &Store) {
    // The last occurrence of a name wins.
    store
        .put_task_defs(&[
            task_def("charge", 1),
            task_def("ship", 2),
            task_def("charge", 5),
        ])
        .await
        .unwrap();
    store.put_task_defs(&[]).await.unwrap();
    let charge = store.get_task_def("charge").await.unwrap().unwrap();
    assert_eq!(charge.definition["retryCount"], json!(5));
    assert!(store.get_task_def("nothing").await.unwrap().is_none());

    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    store.put_task_defs(&[task_def("charge", 7)]).await.unwrap();
    let replaced = store.get_task_def("charge").await.unwrap().unwrap();
    assert_eq!(replaced.definition["retryCount"], json!(7));
    assert_eq!(replaced.created_at, charge.created_at);
    assert!(replaced.updated_at > charge.updated_at);

    let mut some: Vec<String> = store
        .get_task_defs(&["ship".into(), "charge".into(), "nothing".into()])
        .await
        .unwrap()
        .into_iter()
        .map(|d| d.name)
        .collect();
    some.sort();
    assert_eq!(some, vec!["charge".to_owned(), "ship".to_owned()]);
    assert!(store.get_task_defs(&[]).await.unwrap().is_empty());
    let all: Vec<String> = store
        .list_task_defs()
        .await
        .unwrap()
        .into_iter()
        .map(|d| d.name)
        .collect();
    assert_eq!(all, vec!["charge".to_owned(), "ship".to_owned()]);

    assert!(store.delete_task_def("ship").await.unwrap());
    assert!(!store.delete_task_def("ship").await.unwrap());
    assert_eq!(store.list_task_defs().await.unwrap().len(), 1);
}

store_test!(every_change_to_the_definitions_moves_their_epoch);
async fn every_change_to_the_definitions_moves_their_epoch(store: &Store) {
    store.watch_definitions(tokio_util::sync::CancellationToken::new());
    let epoch = store.definitions_epoch().clone();
    let mut seen = current_epoch(&epoch).await;
    let mut expect_moved = |what: &str| {
        let now = epoch.current().expect("watched");
        assert_ne!(now, seen, "{what} did not move the epoch");
        seen = now;
    };
    store
        .put_definition(&definition("orders", 1), false)
        .await
        .unwrap();
    expect_moved("a new definition");
    store
        .put_definition(&definition("orders", 1), true)
        .await
        .unwrap();
    expect_moved("a replaced definition");
    store.delete_definition("orders", 1).await.unwrap();
    expect_moved("a deleted definition");
    store.put_task_defs(&[task_def("ship", 2)]).await.unwrap();
    expect_moved("a new task definition");
    store.delete_task_def("ship").await.unwrap();
    expect_moved("a deleted task definition");
}

/// The epoch once watching has started (PostgreSQL: once the listener listens).
async fn current_epoch(epoch: &weft::store::definitions_epoch::DefinitionsEpoch) -> u64 {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        if let Some(now) = epoch.current() {
            return now;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "changes never watched"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// What another process writes (another gateway, or SQL by hand) reaches a watching
/// store through PostgreSQL's notification; a store that does not watch never offers a
/// current epoch, so nothing gets cached on its word.
#[tokio::test]
async fn on_postgres_changes_made_elsewhere_move_a_watching_stores_epoch() {
    let db = weft::testing::TestDb::create("store").await;
    let token = tokio_util::sync::CancellationToken::new();
    let watching = Store::connect(&db.url, 4, &token).await.unwrap();
    let elsewhere = Store::connect(&db.url, 4, &token).await.unwrap();
    assert_eq!(watching.definitions_epoch().current(), None);
    watching.watch_definitions(token.clone());
    let epoch = watching.definitions_epoch().clone();

    let before = current_epoch(&epoch).await;
    elsewhere
        .put_definition(&definition("orders", 1), false)
        .await
        .unwrap();
    let after_put = moved_from(&epoch, before).await;
    sqlx::query("UPDATE task_definitions SET updated_at = now()")
        .execute(elsewhere.pg_pool().unwrap())
        .await
        .unwrap();
    let after_task_defs = moved_from(&epoch, after_put).await;
    sqlx::query(
        "UPDATE definitions SET definition = definition || '{\"description\": \"by hand\"}'",
    )
    .execute(elsewhere.pg_pool().unwrap())
    .await
    .unwrap();
    moved_from(&epoch, after_task_defs).await;
    assert_eq!(
        elsewhere.definitions_epoch().current(),
        None,
        "a store that does not watch has no current epoch"
    );

    token.cancel();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
    while epoch.current().is_some() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "still watching after shutdown"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// Waits for the epoch to move on from `from`; the new one.
async fn moved_from(epoch: &weft::store::definitions_epoch::DefinitionsEpoch, from: u64) -> u64 {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match epoch.current() {
            Some(now) if now != from => return now,
            _ => {}
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the change was not heard"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}
