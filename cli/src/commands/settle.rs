//! `dedup settle KEY --completed FILE | --release | --show`: an operator's word on a call whose
//! outcome nobody else can settle (see [`crate::operator::settle`]).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use crate::operator::inspect::describe;
use crate::operator::settle::{Action, settle};
use toolcall_dedup::internals::bedrock::operator_reply;
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
    /// With `--completed`: FILE is the tool's body (any text), stored inside the Bedrock
    /// action-group response the record's tool would have given (a function's `TEXT` body, an
    /// operation's `application/json` body), instead of a reply already in the caller's format.
    #[arg(long, requires = "completed")]
    pub(crate) bedrock_body: bool,
    /// The action group of that response [default: the record's namespace after its last `/`,
    /// which is the group for a Bedrock call that states no namespace of its own].
    #[arg(long, requires = "bedrock_body")]
    pub(crate) action_group: Option<String>,
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
    let file = match &args.completed {
        Some(path) => Some(std::fs::read(path)?),
        None => None,
    };
    let body = match (&file, args.bedrock_body) {
        (Some(file), true) => Some(String::from_utf8(file.clone()).map_err(|_| {
            CliError::Usage("--bedrock-body: the tool's body must be UTF-8 text".into())
        })?),
        (Some(file), false) => {
            serde_json::from_slice::<serde_json::Value>(file).map_err(|e| {
                CliError::Usage(format!(
                    "--completed: the reply must be JSON, in the caller's format (or pass \
                     --bedrock-body with the tool's body): {e}"
                ))
            })?;
            None
        }
        (None, _) => None,
    };
    args.table.with_store(|store| async move {
        let reply = match body {
            Some(body) => {
                let group = args.action_group.as_deref();
                Some(
                    bedrock_reply(&store, &args.key, group, body)
                        .await?
                        .into_bytes(),
                )
            }
            None => file,
        };
        let action = match (&reply, args.release) {
            (Some(reply), _) => Action::Complete(reply),
            (None, true) => Action::Release,
            (None, false) => Action::Show,
        };
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

/// The Bedrock response the record's tool would have given with `body`, addressed to `group` or to
/// the action group the record's namespace ends with.
async fn bedrock_reply(
    store: &impl Store,
    key: &str,
    group: Option<&str>,
    body: String,
) -> Result<String, CliError> {
    let record = store
        .get(key)
        .await?
        .ok_or_else(|| CliError::Usage(format!("{key}: no live record")))?;
    let from_namespace = record
        .about
        .namespace
        .as_deref()
        .and_then(|ns| ns.rsplit('/').next())
        .filter(|g| !g.is_empty());
    let group = group.or(from_namespace).ok_or_else(|| {
        CliError::Usage(format!(
            "{key}: the record names no namespace to take the action group from: pass --action-group"
        ))
    })?;
    Ok(operator_reply(group, &record.tool, body))
}
