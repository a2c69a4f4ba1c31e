//! The machinery's integration tests (the `dedup` binary, the corpus, the chaos soak), one
//! binary. They share the product's test support (`toolcall_dedup::test_util`).

use toolcall_dedup::test_util::{harness as fixture, servers, shapes};

mod agent_api;
mod agent_commands;
mod audit_replay;
mod bedrock_declared;
mod chaos;
mod cli_cost_audit;
mod cli_key;
mod config_check;
mod drift_cases;
mod events_corpus;
mod handler_replay;
mod handler_runs_once;
mod real_shapes;
mod records;
mod score;
mod settle;

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
