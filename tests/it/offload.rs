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
