//! A burst of starts against one gateway whose in-flight limit is small
//! (`WEFT_MAX_STARTS_IN_FLIGHT`): every answer is 200 or 429 — never a 5xx — and every
//! start that was accepted runs to its end, while the refused ones left nothing behind.

use futures_util::StreamExt;
use serde_json::json;
use weft_e2e::{EnvOptions, Suite, TestEnv};

use crate::RUN_TIMEOUT;

/// Starts in the burst, and how many are sent at once.
const STARTS: usize = 1_500;
const AT_ONCE: usize = 150;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_starts_is_accepted_or_refused_with_429_and_every_accepted_one_runs() {
    let options = EnvOptions {
        extra_env: vec![("WEFT_MAX_STARTS_IN_FLIGHT".into(), "16".into())],
        ..EnvOptions::default()
    };
    let suite = Suite::start(TestEnv::create(options).await.unwrap())
        .await
        .unwrap();
    let client = suite.client();
    client
        .register(&json!({
            "name": "burst", "version": 1,
            "tasks": [{"name": "note", "taskReferenceName": "note", "type": "SET_VARIABLE",
                       "inputParameters": {"n": "${workflow.input.n}"}}]
        }))
        .await
        .unwrap();

    let answers: Vec<_> = futures_util::stream::iter(0..STARTS)
        .map(|n| {
            let client = client.clone();
            async move {
                client
                    .post_json(
                        "/api/workflow",
                        &json!({"name": "burst", "input": {"n": n}}),
                    )
                    .await
            }
        })
        .buffer_unordered(AT_ONCE)
        .collect()
        .await;

    let mut accepted = Vec::new();
    let mut refused = 0;
    for answer in answers {
        let answer = answer.expect("every start is answered");
        match answer.status {
            200 => accepted.push(answer.text),
            429 => {
                let code = answer.json.as_ref().map(|b| b["code"].clone());
                assert_eq!(code, Some(json!("overloaded")), "{}", answer.text);
                refused += 1;
            }
            status => panic!("a start answered {status}: {}", answer.text),
        }
    }
    // 150 at once against 16 permits: the limit is met, and starts still go through.
    assert!(
        refused > 0,
        "no start was refused: the burst never met the limit"
    );
    assert!(!accepted.is_empty(), "every start was refused");
    assert_eq!(accepted.len() + refused, STARTS);

    for id in &accepted {
        client
            .wait_for_status(id, &["COMPLETED"], RUN_TIMEOUT)
            .await
            .unwrap_or_else(|e| panic!("an accepted start did not run: {e}\n{}", suite.describe()));
    }
    // Nothing of the refused ones was recorded: the runs are exactly the accepted starts.
    let search = client
        .raw(
            reqwest::Method::GET,
            "/api/workflow/search?query=workflowType%3Dburst&size=1",
            None,
        )
        .await
        .unwrap();
    let total = search.json.as_ref().and_then(|j| j["totalHits"].as_u64());
    assert_eq!(total, Some(accepted.len() as u64), "{}", search.text);
}
