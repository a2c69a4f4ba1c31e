//! `dedup corpus`: rebuilds the replay corpus (pair files and tool schemas) and its Bedrock events
//! byte for byte.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use super::CliError;
use crate::corpus;

#[derive(Debug, clap::Args)]
pub(crate) struct CorpusArgs {
    /// Directory to write the corpus into.
    #[arg(long, default_value = "tests/corpus")]
    pub(crate) out: PathBuf,
    /// Directory to write the corpus's Bedrock events into (retry pairs and deliberate repeats, and
    /// the key policy they need).
    #[arg(long, default_value = corpus::events::DEFAULT_DIR)]
    pub events: PathBuf,
    /// Leave the events alone (write or check the corpus only).
    #[arg(long)]
    pub(crate) no_events: bool,
    /// Write nothing; exit 1 if any file under --out (or --events) is missing or differs from the
    /// generator, or an event file there is not generated.
    #[arg(long)]
    pub(crate) check: bool,
}

pub(crate) fn run(args: CorpusArgs) -> Result<ExitCode, CliError> {
    if args.check {
        let mut ok = report(&args.out, corpus::stale(&args.out), "corpus in", "is");
        if !args.no_events {
            let stale = corpus::events::stale(&args.events);
            ok &= report(&args.events, stale, "events in", "are");
        }
        return Ok(if ok {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        });
    }
    let written = corpus::write(&args.out)?;
    println!("wrote {} files under {}", written.len(), args.out.display());
    if !args.no_events {
        let written = corpus::events::write(&args.events)?;
        println!(
            "wrote {} files under {}",
            written.len(),
            args.events.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Prints whether `dir` is up to date; true when it is.
fn report(dir: &Path, stale: Vec<String>, what: &str, verb: &str) -> bool {
    if stale.is_empty() {
        println!("{what} {} {verb} up to date", dir.display());
        return true;
    }
    for file in &stale {
        eprintln!(
            "dedup: {} differs from the generator (rerun `dedup corpus`)",
            dir.join(file).display()
        );
    }
    false
}
