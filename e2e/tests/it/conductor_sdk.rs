//! The official Conductor Python SDK (`conductor-python` from PyPI, unmodified) drives
//! Weft as a Conductor user's code would, on both back-ends: definitions built with
//! `ConductorWorkflow` and every task builder Weft runs (SET_VARIABLE, INLINE,
//! JSON_JQ_TRANSFORM, SWITCH, DO_WHILE, FORK/JOIN, SUB_WORKFLOW, HTTP, START_WORKFLOW,
//! TERMINATE, HUMAN, WAIT), run with `execute`; then the workflow client (correlation
//! ids, the batch form, variables, status, terminate, delete), the task client (update,
//! update_task_sync, signals, queue sizes), bulk pause and the metadata client. The
//! script is `e2e/python/conductor_sdk_tour.py`; it prints one line per check and exits
//! non-zero on the first that fails.

use weft_e2e::Suite;

/// The SDK version the tests pin (as the worker test does).
const SDK_VERSION: &str = "2.0.0";
/// The tour itself.
const TOUR: &str = include_str!("../../python/conductor_sdk_tour.py");

crate::on_both_backends!(the_conductor_python_sdk_drives_every_endpoint_and_builder);

async fn the_conductor_python_sdk_drives_every_endpoint_and_builder(suite: Suite) {
    let python = weft_e2e::python::venv("py-venv", "conductor-python", SDK_VERSION)
        .expect("the Conductor Python SDK must be installable");
    let script = suite.log_dir().join("conductor_sdk_tour.py");
    std::fs::write(&script, TOUR).unwrap();
    let server = format!("{}/api", suite.gateway_url());
    let output = weft_e2e::python::run_script(
        &python,
        &script,
        &[("CONDUCTOR_SERVER_URL", &server)],
        crate::RUN_TIMEOUT,
    )
    .await
    .unwrap();
    weft_e2e::python::assert_checks_passed("the SDK tour", &output, &suite.describe());
}
