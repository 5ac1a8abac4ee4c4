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
