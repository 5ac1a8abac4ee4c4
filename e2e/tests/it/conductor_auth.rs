//! The official Conductor Python SDK (`conductor-python`, unmodified) against a gateway
//! with auth on, configured as for an Orkes server with an application key
//! (`AuthenticationSettings(key_id, key_secret)`): the key id is a Weft token's name and
//! the secret the token. The script is `e2e/python/conductor_auth.py`; afterwards the
//! audit trail names the token for the definition and the start.

use serde_json::{json, Value};
use weft_e2e::{EnvOptions, Suite, TestEnv};

/// The SDK version the tests pin (as the other SDK tests do).
const SDK_VERSION: &str = "2.0.0";
const SCRIPT: &str = include_str!("../../python/conductor_auth.py");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_conductor_python_sdk_works_with_a_key_id_and_secret_when_auth_is_on() {
    let admin = format!("weft_admin_{}", uuid::Uuid::new_v4().simple());
    let options = EnvOptions {
        extra_env: vec![("WEFT_ADMIN_TOKEN".into(), admin.clone())],
        ..EnvOptions::default()
    };
    let suite = Suite::start(TestEnv::create(options).await.unwrap())
        .await
        .unwrap();
    let admin_client = suite.client().with_token(&admin).unwrap();
    let created = admin_client
        .post_json(
            "/api/admin/tokens",
            &json!({"name": "py-sdk", "scopes": ["read", "start", "define", "work"]}),
        )
        .await
        .unwrap();
    assert_eq!(created.status, 201, "{}", created.text);
    let secret = created
        .json
        .as_ref()
        .and_then(|j| j["token"].as_str())
        .expect("the secret")
        .to_owned();

    let python = weft_e2e::python::venv("py-venv", "conductor-python", SDK_VERSION)
        .expect("the Conductor Python SDK must be installable");
    let script = suite.log_dir().join("conductor_auth.py");
    std::fs::write(&script, SCRIPT).unwrap();
    let server = format!("{}/api", suite.gateway_url());
    let output = weft_e2e::python::run_script(
        &python,
        &script,
        &[
            ("CONDUCTOR_SERVER_URL", &server),
            ("KEY_ID", "py-sdk"),
            ("KEY_SECRET", &secret),
        ],
        crate::RUN_TIMEOUT,
    )
    .await
    .unwrap();
    weft_e2e::python::assert_checks_passed("the SDK script", &output, &suite.describe());

    let rows: Value = admin_client
        .raw(reqwest::Method::GET, "/api/audit?token=py-sdk", None)
        .await
        .unwrap()
        .json
        .expect("the audit rows");
    let actions: Vec<&str> = rows
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["action"].as_str())
        .collect();
    assert!(actions.contains(&"workflow.start"), "{rows}");
    // Neither the admin token nor the key's secret is in any service's log.
    let mut logs = 0;
    for entry in std::fs::read_dir(suite.log_dir()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "log") {
            let log = std::fs::read_to_string(&path).unwrap_or_default();
            logs += usize::from(!log.is_empty());
            assert!(
                !log.contains(&secret) && !log.contains(&admin),
                "a secret in {}",
                path.display()
            );
        }
    }
    assert!(
        logs >= 4,
        "the services' logs were not found in {}",
        suite.log_dir().display()
    );
    assert!(
        actions.contains(&"definition.update") || actions.contains(&"definition.create"),
        "{rows}"
    );
}
