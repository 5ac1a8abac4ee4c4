//! `WEFT_DATABASE_READ_URL` (issue 17): the reads that may lag — search, statistics,
//! history pages, the graph once the replica has the run's version — go to a streaming
//! replica; a run's current state stays on the primary.
//! The test makes both: a private primary and a `pg_basebackup` replica of it. With the
//! replica's replay paused, a run that completes is COMPLETED to `GET /workflow/{id}`
//! (the primary) and absent from search (the replica); resumed, search finds it. With the
//! replica stopped, search answers from the primary.

use std::time::Duration;

use serde_json::Value;
use weft_e2e::infra::PgServer;
use weft_e2e::{greet, EnvOptions, Service, Suite, TestEnv};

/// How long a run or the replica may take.
const WAIT: Duration = Duration::from_secs(60);

/// Runs `sql` on `url`.
async fn exec(url: &str, sql: &str) {
    use sqlx::Connection as _;
    let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
    sqlx::query(sql).execute(&mut conn).await.unwrap();
    let _ = conn.close().await;
}

/// The workflow ids that search finds for `correlationId = correlation`.
async fn search(suite: &Suite, correlation: &str) -> Vec<String> {
    let found = suite
        .client()
        .raw(
            reqwest::Method::GET,
            &format!("/api/workflow/search?query=correlationId%3D{correlation}"),
            None,
        )
        .await
        .unwrap();
    assert_eq!(found.status, 200, "{}", found.text);
    let hits: Value = serde_json::from_str(&found.text).unwrap();
    hits["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["workflowId"].as_str().unwrap().to_owned())
        .collect()
}

/// Starts a `greet` run correlated by `correlation` and waits until it is COMPLETED.
async fn completed_run(suite: &Suite, correlation: &str) -> String {
    let id = suite
        .client()
        .start_request(&serde_json::json!({
            "name": "greet",
            "input": greet::input("Replica", 1),
            "correlationId": correlation,
        }))
        .await
        .unwrap();
    suite
        .client()
        .wait_for_status(&id, &["COMPLETED"], WAIT)
        .await
        .unwrap();
    id
}

/// Polls search until it finds exactly `ids` for `correlation`.
async fn search_finds(suite: &Suite, correlation: &str, ids: &[String]) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let found = search(suite, correlation).await;
        if found == ids {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "search for {correlation} found {found:?}, not {ids:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_reads_the_replica_and_a_runs_state_the_primary() {
    let root = std::env::temp_dir().join(format!("weft-replica-{}", uuid::Uuid::new_v4().simple()));
    let primary = PgServer::start(&root.join("primary")).await.unwrap();
    let replica = PgServer::replica_of(&primary, &root.join("replica"))
        .await
        .expect("a pg_basebackup replica of the primary");

    let mut env = TestEnv::create_on(
        EnvOptions::default(),
        &primary.url("postgres"),
        &std::env::var("WEFT_AMQP_URL").unwrap_or_else(|_| weft_e2e::env::DEFAULT_AMQP_URL.into()),
    )
    .await
    .unwrap();
    let db = env.database_url.rsplit('/').next().unwrap().to_owned();
    env.options
        .extra_env
        .push(("WEFT_DATABASE_READ_URL".into(), replica.url(&db)));
    let mut services = Service::CORE.to_vec();
    services.push(Service::Worker);
    let mut suite = Suite::start_with(env, &services).await.unwrap();
    suite.client().register(&greet::definition()).await.unwrap();

    let first = completed_run(&suite, "replicaFirst").await;
    search_finds(&suite, "replicaFirst", std::slice::from_ref(&first)).await;

    // Replay paused: the replica stops where it is.
    let on_replica = replica.url("postgres");
    exec(&on_replica, "SELECT pg_wal_replay_pause()").await;
    let second = completed_run(&suite, "replicaSecond").await;
    // Completed on the primary, which `GET /workflow/{id}` reads...
    let run = suite.client().get(&second).await.unwrap();
    assert_eq!(run["status"], "COMPLETED", "{run}");
    // ...and not there for search, which reads the replica.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(search(&suite, "replicaSecond").await, Vec::<String>::new());
    exec(&on_replica, "SELECT pg_wal_replay_resume()").await;
    search_finds(&suite, "replicaSecond", std::slice::from_ref(&second)).await;

    // The graph of an ended run the replica has: built there (its statements are in the
    // replica's log, which logs every statement).
    let graph_query = "attributes->'definition'";
    assert!(!replica.log().unwrap().contains(graph_query));
    let graph = suite
        .client()
        .raw(
            reqwest::Method::GET,
            &format!("/api/workflow/{first}/graph"),
            None,
        )
        .await
        .unwrap();
    assert_eq!(graph.status, 200, "{}", graph.text);
    assert!(replica.log().unwrap().contains(graph_query));

    // The replica gone: search answers from the primary.
    replica.stop().await.unwrap();
    let third = completed_run(&suite, "replicaThird").await;
    search_finds(&suite, "replicaThird", &[third]).await;

    suite.stop_all().await.unwrap();
    drop(suite);
    drop((replica, primary));
    let _ = std::fs::remove_dir_all(&root);
}
