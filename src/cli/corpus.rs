//! `dedup corpus`: rebuilds the replay corpus (pair files and tool schemas) byte for byte.

use std::path::PathBuf;
use std::process::ExitCode;

use super::CliError;
use crate::corpus;

#[derive(Debug, clap::Args)]
pub struct CorpusArgs {
    /// Directory to write the corpus into.
    #[arg(long, default_value = "tests/corpus")]
    pub out: PathBuf,
    /// Write nothing; exit 1 if any file under --out is missing or differs from the generator.
    #[arg(long)]
    pub check: bool,
}

pub fn run(args: CorpusArgs) -> Result<ExitCode, CliError> {
    if args.check {
        let stale = corpus::stale(&args.out);
        if stale.is_empty() {
            println!("corpus in {} is up to date", args.out.display());
            return Ok(ExitCode::SUCCESS);
        }
        for file in &stale {
            eprintln!(
                "dedup: {} differs from the generator",
                args.out.join(file).display()
            );
        }
        return Ok(ExitCode::FAILURE);
    }
    let written = corpus::write(&args.out)?;
    println!("wrote {} files under {}", written.len(), args.out.display());
    Ok(ExitCode::SUCCESS)
}
