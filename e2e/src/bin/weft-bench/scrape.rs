//! The `/metrics` texts of the suite's processes.

use weft_e2e::{Service, Suite};

/// The `/metrics` text of every process of `services` that answers.
pub async fn metrics(suite: &Suite, services: &[Service]) -> Vec<String> {
    let http = reqwest::Client::new();
    let mut texts = Vec::new();
    for &service in services {
        for id in suite.procs(service) {
            let url = format!("http://{}/metrics", suite.proc(id).addr);
            let Ok(response) = http.get(&url).send().await else {
                continue;
            };
            if let Ok(text) = response.text().await {
                texts.push(text);
            }
        }
    }
    texts
}
