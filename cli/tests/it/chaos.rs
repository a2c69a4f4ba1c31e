//! The CI chaos soak: a short fixed-seed run of `dedup chaos` on each local DynamoDB server,
//! in-process, against the servers `scripts/test` starts (their processes are paused in the
//! soak's pause windows when `DEDUP_TEST_*_PID` is set). Every fault class is on, including the
//! tool that crashes after its side effect, unless `DEDUP_CHAOS_WITHOUT` names classes to leave
//! out (comma-separated, e.g. `tool_crash_after_effect`).
//!
//! The long run is `scripts/chaos --seed S --invocations N` (docs/testing.md, "The chaos soak").

use crate::servers;

use dedup_cli::chaos::gateway::{GatewayFault, GatewaySoakConfig, gateway_soak};
use dedup_cli::chaos::{FaultClass, SoakConfig, fault_names, soak};
use servers::Backend;
use std::collections::BTreeSet;

/// The seed of the CI soak: fixed, so a failure reproduces with `scripts/chaos --seed 14`.
const SEED: u64 = 14;
const INVOCATIONS: usize = 1500;

fn excluded() -> Vec<FaultClass> {
    let names = std::env::var("DEDUP_CHAOS_WITHOUT").unwrap_or_default();
    names
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(|n| FaultClass::from_name(n).unwrap_or_else(|| panic!("unknown fault {n:?}")))
        .collect()
}

async fn soak_on(backend: Backend, server: &str, pid_var: &str) {
    let report = soak(&SoakConfig {
        seed: SEED,
        invocations: INVOCATIONS,
        server: server.into(),
        endpoint: backend.endpoint(),
        server_pid: std::env::var(pid_var).ok().and_then(|p| p.parse().ok()),
        concurrency: 16,
        rate: 100.0,
        events_dir: crate::fixture::events_dir(),
        excluded: excluded(),
        ledger_dir: std::env::temp_dir(),
    })
    .await
    .expect("the soak ran");
    println!("{}", report.summary());
    assert_eq!(report.invocations, INVOCATIONS as u64);
    assert!(report.distinct_calls >= 100, "hundreds of distinct calls");
    // Every class is in the summary, drawn or not.
    for name in fault_names() {
        assert!(
            report.faults.contains_key(name),
            "{name} is missing from the summary's faults"
        );
    }
    let injected = |kind: &str| report.faults.get(kind).copied().unwrap_or(0);
    let excluded: Vec<&str> = excluded().into_iter().map(FaultClass::name).collect();
    for kind in [
        "store_drop_before_forward",
        "store_drop_after_forward",
        "store_throttle_provisioned_throughput",
        "store_throttle_rate",
        "store_outage_windows",
        "kill_before_effect",
        "tool_hang_past_timeout",
        "pause_before_complete_past_lease",
        "tool_typed_error_after_effect",
        "tool_4xx_after_run",
        "store_slow_claim",
        "store_slow_completion_near_deadline",
        "store_claim_answers_lost",
        "store_server_error",
        "store_throttle_request_limit",
        "store_write_conflict",
        "store_request_timeout_408",
        "store_access_or_table_error",
        "store_item_too_large",
        "store_response_garbled",
        "store_body_stalled",
        "store_connect_refused",
        "store_connect_blackholed",
        "store_item_too_large_on_claim",
        "tool_invoke_throttled",
        "tool_invoke_refused",
        "tool_invoke_prestart_unknown",
        "tool_invoke_5xx",
        "tool_sandbox_timedout",
        "tool_invoke_connection_lost",
        "second_build_side_by_side",
        "at_most_once_swept",
    ] {
        if excluded.contains(&kind) {
            continue;
        }
        assert!(injected(kind) > 0, "no {kind} fault was injected");
    }
    if !excluded.contains(&"at_most_once_swept") {
        assert!(
            report.at_most_once_calls() > 0,
            "no at_most_once calls:\n{}",
            report.summary()
        );
    }
    assert!(
        report.passed(),
        "double executions {}, lost results {}, stuck claims {}, claims misjudged {}:\n{}",
        report.double_executions,
        report.lost_results,
        report.stuck_claims,
        report.claims_misjudged,
        report.summary()
    );
}

#[cfg_attr(
    not(feature = "local-servers"),
    ignore = "needs the local DynamoDB servers: run scripts/test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_seed_chaos_soak_on_moto_runs_each_call_once() {
    soak_on(Backend::Moto, "moto", "DEDUP_TEST_MOTO_PID").await;
}

#[cfg_attr(
    not(feature = "local-servers"),
    ignore = "needs the local DynamoDB servers: run scripts/test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_seed_chaos_soak_on_dynalite_runs_each_call_once() {
    soak_on(Backend::Dynalite, "dynalite", "DEDUP_TEST_DYNALITE_PID").await;
}

/// The interceptor soak (issue 48): what changes under a call between its REQUEST and its
/// RESPONSE, across three containers, with every class acting and the oracle clean. The long run is
/// `scripts/chaos --interceptor --invocations 20000` (docs/testing.md).
async fn interceptor_soak_on(backend: Backend, server: &str) {
    let report = gateway_soak(&GatewaySoakConfig {
        seed: SEED,
        invocations: 1200,
        server: server.into(),
        endpoint: backend.endpoint(),
        concurrency: 16,
        containers: 3,
        excluded: vec![],
    })
    .await
    .expect("the soak ran");
    println!("{}", report.summary());
    assert!(report.invocations >= 1000, "{}", report.invocations);
    for fault in GatewayFault::ALL {
        assert!(
            report.faults.get(fault.name()).copied().unwrap_or(0) > 0,
            "{} never acted",
            fault.name()
        );
    }
    assert!(report.replayed > 0 && report.executed > 0);
    assert!(
        report.passed(),
        "{}\n{:?}",
        report.summary(),
        report.findings
    );
}

#[cfg_attr(
    not(feature = "local-servers"),
    ignore = "needs the local DynamoDB servers: run scripts/test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interceptor_soak_on_moto_runs_each_call_once_whatever_changes_under_it() {
    interceptor_soak_on(Backend::Moto, "moto").await;
}

#[cfg_attr(
    not(feature = "local-servers"),
    ignore = "needs the local DynamoDB servers: run scripts/test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interceptor_soak_on_dynalite_runs_each_call_once_whatever_changes_under_it() {
    interceptor_soak_on(Backend::Dynalite, "dynalite").await;
}

/// The backticked words of a table cell.
fn backticked(cell: &str) -> impl Iterator<Item = &str> {
    cell.split('`').skip(1).step_by(2)
}

/// The fault model of docs/testing.md and the soak agree: every row of its tables names a class
/// the summary's `faults` counts, or says why the failure cannot arise; every class the soak
/// injects is named by some row.
#[test]
fn every_failure_of_the_fault_model_names_a_class_of_the_soak() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/testing.md");
    let doc = std::fs::read_to_string(path).unwrap();
    let start = doc.find("## Fault model from the AWS contracts").unwrap();
    let end = start + doc[start..].find("\n## ").unwrap();
    let names = fault_names();
    let mut named = BTreeSet::new();
    let rows = doc[start..end]
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| call |"));
    let mut checked = 0;
    for row in rows {
        let last = row
            .trim_end()
            .trim_end_matches('|')
            .rsplit(" | ")
            .next()
            .unwrap();
        let classes: Vec<&str> = backticked(last).filter(|w| names.contains(w)).collect();
        assert!(
            !classes.is_empty() || last.trim_start().starts_with("not injected"),
            "a failure with no chaos class and no reason why: {row}"
        );
        named.extend(classes);
        checked += 1;
    }
    assert!(checked > 40, "the tables were found ({checked} rows)");
    for class in FaultClass::all() {
        assert!(
            named.contains(class.name()),
            "{} is injected but no failure of the fault model names it",
            class.name()
        );
    }
}
