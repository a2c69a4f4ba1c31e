//! Results past DynamoDB's item limit through the real handler on moto: a 1 MB reply is stored in
//! the results bucket and replayed byte for byte; an altered or missing object is answered "stored
//! result unavailable", and the tool is never run again.

use toolcall_dedup::config::Config;
use toolcall_dedup::store::ManualClock;
use toolcall_dedup::telemetry::Outcome;

use crate::fixture::*;
use crate::servers::{self, Backend};

#[cfg_attr(
    not(feature = "local-servers"),
    ignore = "needs the local DynamoDB servers: run scripts/test"
)]
#[tokio::test]
async fn a_one_megabyte_reply_replays_from_s3_and_its_checksum_catches_an_altered_object() {
    let store =
        servers::dynamodb_store_offloading(Backend::Moto, ManualClock::starting_now()).await;
    let h = handler(
        store,
        Scripted::new(vec![Act::RunHuge, Act::Run]),
        &Config::default(),
    );
    let first = send(&h, &event("fd-charge_card.json")).await;
    assert_eq!(first.outcome, Outcome::Executed);
    let reply = first.response.as_ref().unwrap().get().to_string();
    assert!(reply.len() > 1_000_000, "{} bytes", reply.len());
    let record = stored(&h, &first).await.unwrap();
    let pointer = record.offloaded.clone().expect("offloaded to S3");
    assert_eq!(record.omitted_result_bytes, None);

    let retry = send(&h, &event("fd-charge_card-retry.json")).await;
    assert_eq!(retry.outcome, Outcome::Replayed);
    assert_eq!(
        retry.response.as_ref().unwrap().get(),
        reply,
        "byte for byte"
    );

    let bucket = h.store().result_bucket().unwrap().bucket().to_string();
    let mut altered = servers::s3_get(&bucket, &pointer.object).await;
    let at = altered.len() / 2;
    altered[at] = if altered[at] == b'a' { b'b' } else { b'a' };
    servers::s3_put(&bucket, &pointer.object, altered).await;
    for round in ["altered", "missing"] {
        let answered = send(&h, &event("fd-charge_card-retry.json")).await;
        assert_eq!(answered.outcome, Outcome::StoreError, "{round}");
        assert_eq!(state(&answered).as_deref(), Some("REPROMPT"), "{round}");
        let body = body(&answered);
        assert_eq!(body["status"], "result_unavailable", "{round}: {body}");
        assert!(
            body["message"].as_str().unwrap().contains("already ran"),
            "{body}"
        );
        servers::s3_delete(&bucket, &pointer.object).await;
    }
    assert_eq!(h.dispatcher().invokes(), 1, "never run again");
    assert_eq!(charges(&h.dispatcher().demo), 1);
}

/// Without `s3:ListBucket`, S3 answers a GetObject of a missing object with 403 AccessDenied, not
/// 404 (S3 API reference, *GetObject*, "Permissions"): the result is reported unavailable, naming
/// the object, never taken for a store outage. A loopback server answers every request so.
#[cfg_attr(
    not(feature = "local-servers"),
    ignore = "needs the local servers' credentials: run scripts/test"
)]
#[tokio::test]
async fn a_403_from_s3_is_a_missing_or_unreadable_result() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).await.unwrap_or(0) == 1
                {
                    head.push(byte[0]);
                }
                let body =
                    "<Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>";
                let answer = format!(
                    "HTTP/1.1 403 Forbidden\r\ncontent-type: application/xml\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(answer.as_bytes()).await;
            });
        }
    });
    let client = toolcall_dedup::store::offload::build_client(Some(&endpoint)).await;
    let bucket = toolcall_dedup::store::offload::ResultBucket::new(client, "results-bucket");
    let offloaded = toolcall_dedup::store::offload::Offloaded {
        object: "results/k/t".into(),
        sha256: "0".repeat(64),
        bytes: 2,
    };
    match bucket.fetch(&offloaded).await {
        Err(toolcall_dedup::store::StoreError::ResultUnavailable { object, why }) => {
            assert_eq!(object, "results/k/t");
            assert!(why.contains("403"), "{why}");
        }
        other => panic!("expected the result unavailable, got {other:?}"),
    }
}
