//! `dedup audit LOG...`: what each keyer would have caught and merged on your own traffic.

use std::io::{BufReader, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::json;

use super::CliError;
use crate::audit::{Auditor, export_corpus};
use toolcall_dedup::key::{Keyer, PolicySet, Strategy};

#[derive(Debug, clap::Args)]
pub(crate) struct AuditArgs {
    /// Log files: `DEDUP_LOG_CALLS` lines from the Lambda, or `dedup key` input lines (`-` for stdin).
    #[arg(required = true)]
    pub(crate) logs: Vec<PathBuf>,
    /// Print one JSON object per strategy, as a JSON array, last on stdout.
    #[arg(long)]
    pub(crate) json: bool,
    /// Write the found pairs (those with arguments) as a replay corpus for `dedup score --corpus`.
    #[arg(long, value_name = "DIR")]
    pub(crate) export_corpus: Option<PathBuf>,
    /// A run unseen for this many lines is closed; bounds memory on endless logs.
    #[arg(long, default_value_t = 100_000)]
    pub(crate) window: u64,
    /// Policy file applied when keys are derived from `dedup key` input lines.
    #[arg(long)]
    pub(crate) policy: Option<PathBuf>,
}

pub(crate) fn run(args: AuditArgs) -> Result<ExitCode, CliError> {
    let keyer = match &args.policy {
        Some(path) => Keyer::new().with_policies(PolicySet::load(path)?),
        None => Keyer::new(),
    };
    let started = std::time::Instant::now();
    let mut auditor = Auditor::new(&keyer, args.window, args.export_corpus.is_some());
    for path in &args.logs {
        if path.as_os_str() == "-" {
            auditor.feed(std::io::stdin().lock())?;
        } else {
            let file = std::fs::File::open(path)
                .map_err(|e| CliError::Usage(format!("cannot read {}: {e}", path.display())))?;
            auditor.feed(BufReader::with_capacity(1 << 16, file))?;
        }
    }
    let report = auditor.finish();
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "{} lines, {} calls ({} without run id/step, {} other lines) in {:.2} s",
        report.lines,
        report.calls,
        report.unscoped,
        report.other_lines,
        started.elapsed().as_secs_f64()
    )?;
    writeln!(
        out,
        "{:<12} {:>18} {:>20}",
        "strategy", "retries caught", "repeats merged"
    )?;
    let pct = |n: u64, d: u64| {
        if d == 0 {
            0.0
        } else {
            100.0 * n as f64 / d as f64
        }
    };
    for strategy in Strategy::ALL {
        let c = report.counts(strategy);
        writeln!(
            out,
            "{:<12} {:>9}/{:<4}{:>4.0}% {:>11}/{:<4}{:>4.0}%",
            strategy.name(),
            c.retries_caught,
            report.retries_total,
            pct(c.retries_caught, report.retries_total),
            c.repeats_merged,
            report.repeats_total,
            pct(c.repeats_merged, report.repeats_total),
        )?;
    }
    if !report.typed_rules.is_empty() {
        let rules: Vec<String> = report
            .typed_rules
            .iter()
            .map(|(r, n)| format!("{r} {n}"))
            .collect();
        writeln!(out, "rules in retries typed caught: {}", rules.join(", "))?;
    }
    if let Some(dir) = &args.export_corpus {
        let (written, skipped) = export_corpus(&report, dir)?;
        writeln!(
            out,
            "exported {written} pairs to {} ({skipped} skipped: logged without arguments)",
            dir.display()
        )?;
    }
    if args.json {
        let rows: Vec<_> = Strategy::ALL
            .iter()
            .map(|&s| {
                let c = report.counts(s);
                json!({
                    "strategy": s.name(),
                    "retries_caught": c.retries_caught,
                    "retries_total": report.retries_total,
                    "repeats_merged": c.repeats_merged,
                    "repeats_total": report.repeats_total,
                })
            })
            .collect();
        writeln!(out, "{}", serde_json::Value::Array(rows))?;
    }
    Ok(ExitCode::SUCCESS)
}
