//! The outbound guard in the worker's real client: a call to this machine is refused
//! (terminally, with the reason) without the allow-list and made with it; the check is
//! on the resolved address (`localhost`), on redirects (to an address or a name), and on
//! the scheme.

use serde_json::json;
use weft::outbound::AllowList;

use super::{serve, serve_on, Decider};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_to_this_machine_is_refused_without_the_allow_list_and_made_with_it() {
    let (addr, server) = serve().await;
    let port = addr.port();

    let mut strict = Decider::start_allowing(None).await;
    let failed = strict
        .failed(json!({"http_request": {"uri": format!("http://{addr}/json?token=t")}}))
        .await;
    assert!(failed.terminal, "a refusal is not retried: {failed:?}");
    assert_eq!(
        failed.reason,
        format!(
            "HTTP GET http://{addr}/json: outbound call refused: 127.0.0.1 is in the \
             loopback range (127.0.0.0/8); allow it with WEFT_OUTBOUND_ALLOW"
        )
    );
    // The IPv4-mapped spelling of the same address.
    let failed = strict
        .failed(json!({"uri": format!("http://[::ffff:127.0.0.1]:{port}/json")}))
        .await;
    assert!(failed.terminal, "{failed:?}");
    assert!(
        failed
            .reason
            .contains("is an IPv4-mapped form of 127.0.0.1, in the loopback range"),
        "{}",
        failed.reason
    );
    // A name is checked on what it resolves to: `localhost` is this machine.
    let failed = strict
        .failed(json!({"uri": format!("http://localhost:{port}/json")}))
        .await;
    assert!(failed.terminal, "{failed:?}");
    assert!(
        failed
            .reason
            .contains("outbound call refused: localhost resolves to ")
            && failed.reason.contains("allow it with WEFT_OUTBOUND_ALLOW"),
        "{}",
        failed.reason
    );
    strict.teardown().await;

    // Allowed by address: the literal, and `localhost` (through its loopback address).
    let mut allowed = Decider::start_allowing(Some(AllowList::parse("127.0.0.0/8").unwrap())).await;
    for uri in [
        format!("http://{addr}/json"),
        format!("http://localhost:{port}/json"),
    ] {
        let out = allowed.completed(json!({"uri": uri})).await;
        assert_eq!(out["response"]["statusCode"], 200, "{uri}: {out}");
    }
    allowed.teardown().await;
    server.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redirects_are_checked_hop_by_hop() {
    // The allowed server is 127.0.0.2; the rest of this machine stays refused.
    let (allowed_addr, allowed_server) = serve_on("127.0.0.2").await;
    let (refused_addr, refused_server) = serve().await;
    let mut decider = Decider::start_allowing(Some(AllowList::parse("127.0.0.2").unwrap())).await;
    let via =
        |to: &str| json!({"uri": format!("http://{allowed_addr}/redirect?to={}", encode(to))});

    // A redirect within what is allowed is followed.
    let out = decider
        .completed(via(&format!("http://{allowed_addr}/json")))
        .await;
    assert_eq!(out["response"]["body"]["hello"], "world", "{out}");

    // Into a refused address, written as one: refused by the redirect policy.
    let failed = decider
        .failed(via(&format!("http://{refused_addr}/json")))
        .await;
    assert!(failed.terminal, "{failed:?}");
    assert!(
        failed
            .reason
            .contains("outbound call refused: 127.0.0.1 is in the loopback range"),
        "{}",
        failed.reason
    );
    // Into a name that resolves to refused addresses: refused by the resolver.
    let failed = decider
        .failed(via(&format!(
            "http://localhost:{}/json",
            refused_addr.port()
        )))
        .await;
    assert!(failed.terminal, "{failed:?}");
    assert!(
        failed
            .reason
            .contains("outbound call refused: localhost resolves to"),
        "{}",
        failed.reason
    );
    // Into another scheme.
    let failed = decider.failed(via("ftp://files.example.com/x")).await;
    assert!(failed.terminal, "{failed:?}");
    assert!(
        failed
            .reason
            .contains("outbound call refused: scheme `ftp` is not allowed"),
        "{}",
        failed.reason
    );

    decider.teardown().await;
    allowed_server.cancel();
    refused_server.cancel();
}

/// `s` as a query value.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
