//! `dedup settle KEY --completed FILE | --release | --show`: an operator's word on a call whose
//! outcome nobody else can settle (see [`crate::operator::settle`]).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use crate::operator::inspect::describe;
use crate::operator::settle::{Action, settle};
use toolcall_dedup::store::Store;

use super::CliError;
use super::table::TableArgs;

#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("action").required(true).args(["completed", "release", "show"])))]
pub(crate) struct SettleArgs {
    /// The call's key (32 hex digits), as the `outcome_unknown` answer names it.
    pub(crate) key: String,
    /// The side effect happened: store this file (the reply in the caller's format, as the tool
    /// would have answered) as the call's result; every repeat replays it.
    #[arg(long, value_name = "FILE")]
    pub(crate) completed: Option<PathBuf>,
    /// The side effect did not happen: delete the record, so a retry runs the tool.
    #[arg(long)]
    pub(crate) release: bool,
    /// Print the record and change nothing.
    #[arg(long)]
    pub(crate) show: bool,
    #[command(flatten)]
    pub(crate) table: TableArgs,
    /// How long a completed call replays, from now.
    #[arg(long, env = "DEDUP_TTL_SECONDS", default_value_t = 86_400)]
    pub(crate) ttl_seconds: u64,
}

/// Prints the record (`--show`) or the call-log line of the action taken; exit 1 when refused.
pub(crate) fn run(args: SettleArgs) -> Result<ExitCode, CliError> {
    let reply = match &args.completed {
        Some(path) => Some(std::fs::read(path)?),
        None => None,
    };
    if let Some(reply) = &reply {
        serde_json::from_slice::<serde_json::Value>(reply).map_err(|e| {
            CliError::Usage(format!(
                "--completed: the reply must be JSON, in the caller's format: {e}"
            ))
        })?;
    }
    let action = match (&reply, args.release) {
        (Some(reply), _) => Action::Complete(reply),
        (None, true) => Action::Release,
        (None, false) => Action::Show,
    };
    args.table.with_store(|store| async move {
        let ttl = Duration::from_secs(args.ttl_seconds);
        match settle(&store, &args.key, action, ttl).await {
            Ok(done) if action == Action::Show => {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&describe(&done.before, store.now_ms()))?
                );
                Ok(ExitCode::SUCCESS)
            }
            Ok(done) => {
                println!("{}", done.log_line(store.now_ms()));
                Ok(ExitCode::SUCCESS)
            }
            Err(refused) => {
                eprintln!("dedup settle: {refused}");
                Ok(ExitCode::from(1))
            }
        }
    })
}
