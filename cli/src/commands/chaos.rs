//! `dedup chaos`: the randomized fault soak with the ledger oracle (see [`crate::chaos`]).
//!
//! `scripts/chaos` installs and starts the servers, passes their endpoints and processes through
//! the `DEDUP_TEST_*` variables, and stops them after. The summary goes to stdout; its last line
//! is one JSON object (with `--json`, the only line: the summary goes to stderr); the exit code is
//! 1 when the oracle found a double execution, a lost result, a stuck claim or a claim the
//! executor released or kept against what the tool's answer proved.

use std::path::PathBuf;
use std::process::ExitCode;

use super::CliError;
use crate::chaos::gateway::{GatewayFault, GatewaySoakConfig, gateway_soak};
use crate::chaos::{FaultClass, SoakConfig, SoakReport, soak};

#[derive(Debug, clap::Args)]
pub(crate) struct ChaosArgs {
    /// Fixes the calls, their interleaving and their faults.
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
    /// Invocations per server.
    #[arg(long, default_value_t = 2000)]
    pub(crate) invocations: usize,
    #[arg(long, default_value = "both", value_parser = ["moto", "dynalite", "both"])]
    pub(crate) server: String,
    /// Invocations in flight at most.
    #[arg(long, default_value_t = 32)]
    pub(crate) concurrency: usize,
    /// Planned invocations per second.
    #[arg(long, default_value_t = 100.0)]
    pub(crate) rate: f64,
    #[arg(long, env = "DEDUP_TEST_MOTO_ENDPOINT")]
    pub(crate) moto_endpoint: Option<String>,
    #[arg(long, env = "DEDUP_TEST_DYNALITE_ENDPOINT")]
    pub(crate) dynalite_endpoint: Option<String>,
    /// The moto process, paused (SIGSTOP/SIGCONT) in the pause windows.
    #[arg(long, env = "DEDUP_TEST_MOTO_PID")]
    pub(crate) moto_pid: Option<u32>,
    #[arg(long, env = "DEDUP_TEST_DYNALITE_PID")]
    pub(crate) dynalite_pid: Option<u32>,
    /// The events directory (its corpus/ is sent).
    #[arg(long, default_value = "events")]
    pub events: PathBuf,
    /// Leave a fault class out (repeatable), by its name in the summary's `faults`, e.g.
    /// `tool_crash_after_effect`, `store_server_error`, `store_connect_refused`.
    #[arg(long, value_name = "FAULT")]
    pub(crate) without: Vec<String>,
    /// Print only the JSON summary on stdout (the human summary goes to stderr).
    #[arg(long)]
    pub(crate) json: bool,
    /// Where the ledgers go [default: the temp directory].
    #[arg(long)]
    pub(crate) ledger_dir: Option<PathBuf>,
    /// Soak the interceptor door instead: what changes under a call between its REQUEST and its
    /// RESPONSE (config refreshes, schema and listing changes, lost answers and re-sent
    /// requests, container restarts, retries in flight), across several containers.
    #[arg(long)]
    pub(crate) interceptor: bool,
    /// With --interceptor: the containers of the deployment.
    #[arg(long, default_value_t = 3)]
    pub(crate) containers: usize,
}

pub(crate) fn run(args: ChaosArgs) -> Result<ExitCode, CliError> {
    if args.interceptor {
        return run_interceptor(args);
    }
    let known: Vec<&str> = FaultClass::all()
        .into_iter()
        .map(FaultClass::name)
        .collect();
    let excluded = named_faults(&args.without, FaultClass::from_name, &known)?;
    let mut configs = Vec::new();
    for (server, endpoint, pid) in servers(&args)? {
        configs.push(SoakConfig {
            seed: args.seed,
            invocations: args.invocations,
            server: server.into(),
            endpoint,
            server_pid: pid,
            concurrency: args.concurrency,
            rate: args.rate,
            events_dir: args.events.clone(),
            excluded: excluded.clone(),
            ledger_dir: args.ledger_dir.clone().unwrap_or_else(std::env::temp_dir),
        });
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let reports = configs.iter().map(|cfg| {
        runtime
            .block_on(soak(cfg))
            .map_err(|e| CliError::Usage(format!("chaos soak on {}: {e}", cfg.server)))
    });
    report(reports, args.json)
}

/// `--interceptor`: the interceptor soak on each server.
fn run_interceptor(args: ChaosArgs) -> Result<ExitCode, CliError> {
    let known = GatewayFault::ALL.map(GatewayFault::name);
    let excluded = named_faults(&args.without, GatewayFault::from_name, &known)?;
    let configs: Vec<GatewaySoakConfig> = servers(&args)?
        .into_iter()
        .map(|(server, endpoint, _)| GatewaySoakConfig {
            seed: args.seed,
            invocations: args.invocations,
            server: server.into(),
            endpoint,
            concurrency: args.concurrency,
            containers: args.containers,
            excluded: excluded.clone(),
        })
        .collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let reports = configs.iter().map(|cfg| {
        runtime
            .block_on(gateway_soak(cfg))
            .map_err(|e| CliError::Usage(format!("interceptor soak on {}: {e}", cfg.server)))
    });
    report(reports, args.json)
}

/// The faults `names` names (`--without`), each read by `find`; an unknown one is refused with
/// the `known` names.
fn named_faults<T>(
    names: &[String],
    find: impl Fn(&str) -> Option<T>,
    known: &[&str],
) -> Result<Vec<T>, CliError> {
    names
        .iter()
        .map(|name| {
            find(name).ok_or_else(|| {
                CliError::Usage(format!(
                    "unknown fault {name:?} (known: {})",
                    known.join(", ")
                ))
            })
        })
        .collect()
}

/// One server asked for: its label, endpoint and process.
type Server = (&'static str, String, Option<u32>);

/// The servers asked for, with their endpoints and processes.
fn servers(args: &ChaosArgs) -> Result<Vec<Server>, CliError> {
    let servers: &[&'static str] = match args.server.as_str() {
        "both" => &["moto", "dynalite"],
        "moto" => &["moto"],
        _ => &["dynalite"],
    };
    servers
        .iter()
        .map(|&server| {
            let (endpoint, pid) = match server {
                "moto" => (&args.moto_endpoint, args.moto_pid),
                _ => (&args.dynalite_endpoint, args.dynalite_pid),
            };
            let endpoint = endpoint.clone().ok_or_else(|| {
                CliError::Usage(format!(
                    "no {server} endpoint: pass --{server}-endpoint or run scripts/chaos"
                ))
            })?;
            Ok((server, endpoint, pid))
        })
        .collect()
}

/// Prints each server's summary and the total's JSON line; fails when the oracle found anything.
fn report(
    reports: impl Iterator<Item = Result<SoakReport, CliError>>,
    json: bool,
) -> Result<ExitCode, CliError> {
    let mut total: Option<SoakReport> = None;
    for report in reports {
        let report = report?;
        if json {
            eprint!("{}", report.summary());
        } else {
            print!("{}", report.summary());
        }
        total = Some(match total {
            Some(t) => t.merge(report),
            None => report,
        });
    }
    let total = total.expect("at least one server");
    let mut line = serde_json::to_value(&total).map_err(std::io::Error::other)?;
    line.as_object_mut().map(|o| o.remove("findings"));
    println!("{line}");
    Ok(if total.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
