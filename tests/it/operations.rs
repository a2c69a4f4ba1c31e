//! What an on-call engineer sees: the stage spans reaching an X-Ray daemon as subsegments, and
//! the alarms of both stacks watching metrics the function really emits.

use crate::fixture::*;

use std::net::UdpSocket;
use std::time::Duration;

use serde_json::Value;
use toolcall_dedup::telemetry::Telemetry;
use toolcall_dedup::xray::XrayLayer;
use tracing_subscriber::layer::SubscriberExt;

const ROOT: &str = "1-6752c0de-0123456789abcdef01234567";
const PARENT: &str = "53995c3f42cd8ad8";

fn sampled() -> Option<String> {
    Some(format!("Root={ROOT};Parent={PARENT};Sampled=1"))
}

fn unsampled() -> Option<String> {
    Some(format!("Root={ROOT};Parent={PARENT};Sampled=0"))
}

/// The subsegments the daemon got, by name, in arrival order.
fn received(daemon: &UdpSocket) -> Vec<Value> {
    let mut docs = Vec::new();
    let mut buf = [0u8; 65_536];
    while let Ok(n) = daemon.recv(&mut buf) {
        let text = std::str::from_utf8(&buf[..n]).unwrap();
        let (header, body) = text.split_once('\n').expect("header line");
        assert_eq!(header, r#"{"format":"json","version":1}"#);
        docs.push(serde_json::from_str(body).unwrap());
    }
    docs
}

fn names(docs: &[Value]) -> Vec<&str> {
    docs.iter().map(|d| d["name"].as_str().unwrap()).collect()
}

#[tokio::test]
async fn a_sampled_invocation_sends_its_stages_to_the_xray_daemon() {
    let daemon = UdpSocket::bind("127.0.0.1:0").unwrap();
    daemon
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let layer = XrayLayer::new(daemon.local_addr().unwrap(), sampled).unwrap();
    let _traced = tracing::subscriber::set_default(tracing_subscriber::registry().with(layer));
    let h = demo_handler(Telemetry::quiet());

    send(&h, &event("fd-charge_card.json")).await;
    let first = received(&daemon);
    assert_eq!(names(&first), ["key", "claim", "invoke", "complete"]);
    for doc in &first {
        assert_eq!(doc["trace_id"], ROOT);
        assert_eq!(doc["parent_id"], PARENT);
        assert_eq!(doc["type"], "subsegment");
        assert_eq!(doc["id"].as_str().unwrap().len(), 16);
        let (start, end) = (doc["start_time"].as_f64().unwrap(), doc["end_time"].as_f64().unwrap());
        assert!(start > 1.7e9 && start <= end, "{doc}");
    }
    // The stages follow one another.
    for pair in first.windows(2) {
        assert!(pair[0]["end_time"].as_f64() <= pair[1]["start_time"].as_f64(), "{pair:?}");
    }

    // A repeat is keyed and replayed from its claim: nothing invoked, nothing completed.
    send(&h, &event("fd-charge_card-retry.json")).await;
    assert_eq!(names(&received(&daemon)), ["key", "claim"]);
}

#[tokio::test]
async fn an_unsampled_invocation_sends_nothing() {
    let daemon = UdpSocket::bind("127.0.0.1:0").unwrap();
    daemon
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let layer = XrayLayer::new(daemon.local_addr().unwrap(), unsampled).unwrap();
    let _traced = tracing::subscriber::set_default(tracing_subscriber::registry().with(layer));
    let h = demo_handler(Telemetry::quiet());
    send(&h, &event("fd-charge_card.json")).await;
    assert!(received(&daemon).is_empty());
}
