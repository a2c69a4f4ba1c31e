//! The machinery's integration tests (the `dedup` binary, the corpus, the chaos soak), one
//! binary. They share the product's test support (`toolcall_dedup::test_util`).

use toolcall_dedup::test_util::{harness as fixture, servers, shapes};

mod agent_api;
mod agent_commands;
mod at_most_once;
mod audit_replay;
mod bedrock_declared;
mod chaos;
mod cli_cost_audit;
mod cli_key;
mod config_check;
mod drift_cases;
mod events_corpus;
mod gateway_api;
mod handler_replay;
mod handler_runs_once;
mod mcp_replay;
mod real_shapes;
mod records;
mod score;
mod settle;

/// The key of the call [`at_most_once_claim`] claims (32 hex digits, as keys are).
pub const CLAIMED_KEY: &str = "0123456789abcdef0123456789abcdef";

/// A fresh table on `backend` holding one `at_most_once` claim of [`CLAIMED_KEY`], as an executor
/// leaves it while the tool runs (a minute's lease, an hour's life): the store and the claim's token.
pub async fn at_most_once_claim(
    backend: servers::Backend,
    clock: &toolcall_dedup::store::ManualClock,
) -> (
    toolcall_dedup::store::DynamoDbStore,
    toolcall_dedup::store::LeaseToken,
) {
    use toolcall_dedup::store::{ClaimOutcome, ClaimRequest, Clock, Store};
    let store = servers::dynamodb_store(backend, clock.clone()).await;
    let now = clock.now_ms();
    let req = ClaimRequest {
        key: CLAIMED_KEY,
        fingerprint: "fp",
        tool: "charge_card",
        lease_until_ms: now + 60_000,
        expires_at_s: now / 1000 + 3_600,
        owner: None,
        at_most_once: true,
        on_failure: Default::default(),
        path_digests: None,
        about: Default::default(),
    };
    let ClaimOutcome::Claimed { token } = store.claim(req).await.unwrap() else {
        panic!("expected a claim")
    };
    (store, token)
}

/// The `dedup` binary as a newcomer runs it: from the repository root, with none of the caller's
/// `DEDUP_*` settings (the test servers' `DEDUP_TEST_*` endpoints stay), no ledger and no log filter.
pub fn dedup() -> std::process::Command {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_dedup"));
    for (var, _) in std::env::vars() {
        let setting = var.starts_with("DEDUP_") && !var.starts_with("DEDUP_TEST_");
        if setting || var == "DEMO_LEDGER" || var == "RUST_LOG" {
            cmd.env_remove(var);
        }
    }
    cmd.current_dir(fixture::root());
    cmd
}
