//! The library guard in a Rust tool: a card is charged once per step, however the model retries.
//!
//! ```bash
//! cargo run --example guard
//! ```
//!
//! Three calls arrive: the original and the model's rewritten retry *at the same time* (the retry
//! waits for the original and replays its receipt), then a deliberate repeat at the next step
//! (charged again). The store here is the in-memory one; a Lambda or a service would pass a
//! `DynamoDbStore` instead, with no other change.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use toolcall_dedup::guard::{Dedup, GuardError};
use toolcall_dedup::key::{Call, Keyer};
use toolcall_dedup::store::MemoryStore;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Receipt {
    charge_id: String,
    amount_cents: u64,
}

/// The side effect: a slow payment API.
async fn charge_card(ledger: &AtomicU32, amount_cents: u64) -> Result<Receipt, std::io::Error> {
    tokio::time::sleep(Duration::from_millis(200)).await;
    let n = ledger.fetch_add(1, Ordering::SeqCst) + 1;
    Ok(Receipt {
        charge_id: format!("ch_{n:04}"),
        amount_cents,
    })
}

fn call<'a>(args: &'a str, step: &'a str) -> Call<'a> {
    Call {
        tool: "charge_card",
        args,
        namespace: Some("payments"),
        run_id: Some("run-42"),
        step: Some(step),
        ..Call::default()
    }
}

#[tokio::main]
async fn main() -> Result<(), GuardError<std::io::Error>> {
    let dedup = Dedup::new(MemoryStore::new(), Keyer::new());
    let ledger = AtomicU32::new(0);
    let original = r#"{"customer_id": "cus_4f9a2c", "amount": 4200, "currency": "USD"}"#;
    let retry = r#"{"currency": "usd", "customer_id": "cus_4f9a2c", "amount": 4200.0}"#;

    let (original_call, retry_call) = (call(original, "7"), call(retry, "7"));
    let (first, second) = tokio::join!(
        dedup.run(&original_call, || charge_card(&ledger, 4200)),
        dedup.run(&retry_call, || charge_card(&ledger, 4200)),
    );
    let (first, second) = (first?, second?);
    let repeat = dedup
        .run(&call(original, "8"), || charge_card(&ledger, 4200))
        .await?;

    for (what, guarded) in [
        ("original", &first),
        ("retry", &second),
        ("next step", &repeat),
    ] {
        println!(
            "{what:>9}: {} ({}, key {})",
            guarded.value.charge_id, guarded.outcome, guarded.key
        );
    }
    let charged = ledger.load(Ordering::SeqCst);
    println!("charged {charged} times for 3 calls");
    assert_eq!(
        first.value, second.value,
        "the retry replays the original's receipt"
    );
    assert!(
        first.replayed() != second.replayed(),
        "exactly one of them ran"
    );
    assert_ne!(repeat.value, first.value, "the next step is a new charge");
    assert_eq!(charged, 2);
    Ok(())
}
