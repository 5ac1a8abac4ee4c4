//! Retention of operator verdicts: expired rows go, fresh ones stay, in bounded batches.

use std::time::Duration;

use sqlx::postgres::PgPoolOptions;
use uuid::Uuid;

use crate::utils::TestEnv;

#[tokio::test]
async fn expired_verdicts_are_purged_in_batches_and_fresh_ones_kept() {
    let env = TestEnv::new().await;
    let pool = PgPoolOptions::new().connect(&env.db_url).await.unwrap();
    let insert = |age_hours: i32| {
        let pool = pool.clone();
        async move {
            let id = Uuid::now_v7();
            sqlx::query(
                "INSERT INTO operation_outcomes (request_id, workflow_id, status, body, created_at)
                 VALUES ($1, 'wf', 200, '{}', now() - make_interval(hours => $2))",
            )
            .bind(id)
            .bind(age_hours)
            .execute(&pool)
            .await
            .unwrap();
            id
        }
    };
    let old = [insert(30).await, insert(25).await, insert(48).await];
    let fresh = insert(1).await;
    let day = Duration::from_secs(24 * 3600);
    assert_eq!(env.store.purge_operation_outcomes(day, 2).await.unwrap(), 2);
    assert_eq!(env.store.purge_operation_outcomes(day, 2).await.unwrap(), 1);
    assert_eq!(env.store.purge_operation_outcomes(day, 2).await.unwrap(), 0);
    for id in old {
        assert!(env.store.operation_outcome(id).await.unwrap().is_none());
    }
    let kept = env.store.operation_outcome(fresh).await.unwrap().unwrap();
    assert_eq!(kept.status, 200);
    pool.close().await;
    env.finish().await;
}
