//! `dedup key`: one JSON line in, one JSON line out.
//!
//! Input: `{"tool": str, "args": "<raw JSON text>", "run_id"?: str, "step"?: int|str, "namespace"?: str,
//! "schema"?: <JSON Schema or provider tool definition>}`.
//! Output: `{"key": "<32 hex>", "strategy": "<name>"}` (with `"dedup": "off"` for a tool whose policy
//! turns deduplication off) or `{"error": "<message>"}`, in input order.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use serde::Deserialize;
use serde_json::{Value, json};

use super::CliError;
use toolcall_dedup::config::{Config, StoreKind};
use toolcall_dedup::key::{Call, Keyer, KeyerVersion, PolicySet, Schema, Strategy};

#[derive(Debug, clap::Args)]
pub(crate) struct KeyArgs {
    /// Keying strategy.
    #[arg(long, default_value = "typed", value_parser = clap::value_parser!(StrategyArg))]
    pub(crate) strategy: StrategyArg,
    /// Add the normalized canonical form and the rules that fired.
    #[arg(long)]
    pub(crate) explain: bool,
    /// Per-tool policy file (JSON or TOML).
    #[arg(long)]
    pub(crate) policy: Option<PathBuf>,
    /// The function's config document (a file): its tools' policies and schemas and its pinned
    /// keyer (`settings.keyer`), read as the Lambda reads them, so the keys are the function's.
    /// As in the Lambda, a `DEDUP_*` variable overrides the document's setting; `--keyer` both.
    #[arg(long, value_name = "DOCUMENT", conflicts_with_all = ["policy", "compare_policy"])]
    pub(crate) config: Option<PathBuf>,
    /// Key the calls on stdin (`dedup key` lines, or call-log lines of `DEDUP_LOG_CALLS=full`)
    /// under two policy files and list those whose key changes.
    #[arg(long, num_args = 2, value_names = ["OLD", "NEW"], conflicts_with_all = ["policy", "explain"])]
    pub(crate) compare_policy: Option<Vec<PathBuf>>,
    /// The typed keyer's version (`typed/v1`, `typed/v2`, `typed/v3`); default: `DEDUP_KEYER`,
    /// else `typed/v2`, what a deployment that pins none keys with.
    #[arg(long, value_parser = parse_version)]
    pub(crate) keyer: Option<KeyerVersion>,
    /// Key the calls on stdin under two keyer versions (with `--policy`'s policies) and list those
    /// whose key changes: the calls a move of the pinned version (`DEDUP_KEYER`) re-keys.
    #[arg(long, num_args = 2, value_names = ["OLD", "NEW"], value_parser = parse_version,
          conflicts_with_all = ["compare_policy", "explain", "keyer"])]
    pub(crate) compare_keyer: Option<Vec<KeyerVersion>>,
}

fn parse_version(text: &str) -> Result<KeyerVersion, String> {
    text.parse()
}

/// The version `--keyer` names, else the one `DEDUP_KEYER` pins, else the unpinned default.
fn version(args: &KeyArgs) -> Result<KeyerVersion, CliError> {
    match (
        args.keyer,
        std::env::var("DEDUP_KEYER")
            .ok()
            .filter(|v| !v.trim().is_empty()),
    ) {
        (Some(version), _) => Ok(version),
        (None, Some(pinned)) => pinned
            .trim()
            .parse()
            .map_err(|e| CliError::Usage(format!("DEDUP_KEYER: {e}"))),
        (None, None) => Ok(KeyerVersion::default()),
    }
}

/// The policies and the keyer version to key with: `--config`'s document as the Lambda reads it
/// (its environment's `DEDUP_*` variables over the document's settings), else `--policy`'s file
/// and `DEDUP_KEYER`; `--keyer` over either.
fn keying(args: &KeyArgs) -> Result<(PolicySet, KeyerVersion), CliError> {
    let Some(path) = &args.config else {
        let policies = match &args.policy {
            Some(path) => PolicySet::load(path)?,
            None => PolicySet::default(),
        };
        return Ok((policies, version(args)?));
    };
    let refused = |e: &dyn std::fmt::Display| CliError::Usage(format!("{}: {e}", path.display()));
    let text = std::fs::read_to_string(path).map_err(|e| refused(&e))?;
    let document = toolcall_dedup::config::document::parse(&text).map_err(|e| refused(&e))?;
    let config = Config::from_lookup_and_document(
        |name| std::env::var(name).ok(),
        Some(&document),
        StoreKind::Memory,
    )
    .map_err(|e| refused(&e))?;
    Ok((config.policies, args.keyer.unwrap_or(config.keyer)))
}

/// clap wrapper so `--help` lists the strategies.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StrategyArg(pub Strategy);

impl clap::ValueEnum for StrategyArg {
    fn value_variants<'a>() -> &'a [Self] {
        &[
            StrategyArg(Strategy::Raw),
            StrategyArg(Strategy::Canonical),
            StrategyArg(Strategy::Normalized),
            StrategyArg(Strategy::Scoped),
            StrategyArg(Strategy::Typed),
        ]
    }
    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(self.0.name()))
    }
}

/// One input line of `dedup key` (also the plain JSONL format `dedup audit` reads).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct KeyRequest {
    pub(crate) tool: String,
    pub(crate) args: String,
    pub(crate) run_id: Option<String>,
    pub(crate) step: Option<Step>,
    pub(crate) namespace: Option<String>,
    pub(crate) schema: Option<Value>,
}

/// A step index, given as a number or a string.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub(crate) enum Step {
    Number(serde_json::Number),
    Text(String),
}

impl Step {
    pub(crate) fn as_text(&self) -> String {
        match self {
            Step::Number(n) => n.to_string(),
            Step::Text(s) => s.clone(),
        }
    }
}

pub(crate) fn run(args: KeyArgs) -> Result<ExitCode, CliError> {
    if let Some(files) = &args.compare_policy {
        let old = Keyer::new().with_policies(PolicySet::load(&files[0])?);
        let new = Keyer::new().with_policies(PolicySet::load(&files[1])?);
        let stdin = std::io::stdin().lock();
        let stdout = std::io::BufWriter::new(std::io::stdout().lock());
        compare_policies(&old, &new, stdin, stdout)?;
        return Ok(ExitCode::SUCCESS);
    }
    let (policies, version) = keying(&args)?;
    if let Some(versions) = &args.compare_keyer {
        let old = Keyer::new()
            .with_policies(policies.clone())
            .with_version(versions[0]);
        let new = Keyer::new()
            .with_policies(policies)
            .with_version(versions[1]);
        let stdin = std::io::stdin().lock();
        let stdout = std::io::BufWriter::new(std::io::stdout().lock());
        compare_policies(&old, &new, stdin, stdout)?;
        return Ok(ExitCode::SUCCESS);
    }
    let keyer = Keyer::new().with_policies(policies).with_version(version);
    let stdin = std::io::stdin().lock();
    let stdout = std::io::BufWriter::new(std::io::stdout().lock());
    let all_ok = key_lines(&keyer, args.strategy.0, args.explain, stdin, stdout)?;
    Ok(if all_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Keys every line of `input` into `output`; returns whether every line succeeded.
pub(crate) fn key_lines(
    keyer: &Keyer,
    strategy: Strategy,
    explain: bool,
    input: impl BufRead,
    mut output: impl Write,
) -> std::io::Result<bool> {
    let mut all_ok = true;
    // Lines are split as bytes so that one line that is not UTF-8 gets its own error line
    // instead of ending the stream (`BufRead::lines` would fail on it).
    for line in input.split(b'\n') {
        let line = line?;
        let line = line.strip_suffix(b"\r").unwrap_or(&line);
        let keyed = std::str::from_utf8(line)
            .map_err(|e| {
                format!(
                    "invalid input line: not UTF-8 (invalid byte at offset {})",
                    e.valid_up_to()
                )
            })
            .and_then(|line| key_line(keyer, strategy, explain, line));
        let reply = match keyed {
            Ok(reply) => reply,
            Err(message) => {
                all_ok = false;
                json!({ "error": message })
            }
        };
        serde_json::to_writer(&mut output, &reply)?;
        output.write_all(b"\n")?;
    }
    output.flush()?;
    Ok(all_ok)
}

fn key_line(keyer: &Keyer, strategy: Strategy, explain: bool, line: &str) -> Result<Value, String> {
    let request: KeyRequest =
        serde_json::from_str(line).map_err(|e| format!("invalid input line: {e}"))?;
    let schema = match &request.schema {
        Some(definition) => Some(
            Schema::for_tool(definition, &request.tool)
                .map_err(|e| format!("schema of tool {:?}: {e}", request.tool))?,
        ),
        None => None,
    };
    let step = request.step.as_ref().map(Step::as_text);
    let call = Call {
        tool: &request.tool,
        args: &request.args,
        namespace: request.namespace.as_deref(),
        run_id: request.run_id.as_deref(),
        step: step.as_deref(),
        schema: schema.as_ref(),
        policy: None,
    };
    let mut out = if explain {
        let e = keyer.explain(strategy, &call).map_err(|e| e.to_string())?;
        json!({
            "key": e.key.to_string(),
            "strategy": strategy.name(),
            "keyer_version": match strategy {
                Strategy::Typed => keyer.version().name(),
                other => other.name(),
            },
            "policy": keyer.policy_fingerprint(&request.tool),
            "canonical": e.canonical,
            "rules": e.rules.names().collect::<Vec<_>>(),
        })
    } else {
        let key = keyer.key(strategy, &call).map_err(|e| e.to_string())?;
        json!({ "key": key.to_string(), "strategy": strategy.name() })
    };
    if !keyer.dedups(&request.tool) {
        // The key is still derived (for logs), but the Lambda and the guard never claim it.
        out["dedup"] = json!("off");
    }
    Ok(out)
}

/// Keys each call of `input` under `old` and `new` keyers (two policy files, or two keyer
/// versions); writes one line per call whose key changes (`{"line", "tool", "old", "new",
/// "old_policy", "new_policy", "old_keyer", "new_keyer"}`) and a summary line
/// (`{"calls", "rekeyed", "by_tool"}`). Lines that are not calls are counted as skipped.
pub(crate) fn compare_policies(
    old: &Keyer,
    new: &Keyer,
    input: impl BufRead,
    mut output: impl Write,
) -> std::io::Result<()> {
    let (mut calls, mut skipped) = (0u64, 0u64);
    let mut by_tool: std::collections::BTreeMap<String, (u64, u64)> = Default::default();
    for (i, line) in input.lines().enumerate() {
        let line = line?;
        let Ok(value) = serde_json::from_str::<Value>(&line) else {
            skipped += 1;
            continue;
        };
        let text = |name: &str| value.get(name).and_then(Value::as_str);
        let (Some(tool), Some(args)) = (text("tool"), text("args")) else {
            skipped += 1;
            continue;
        };
        let step = value.get("step").map(|s| match s {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        });
        let call = Call {
            tool,
            args,
            namespace: text("namespace"),
            run_id: text("run_id"),
            step: step.as_deref().filter(|s| *s != "null"),
            ..Call::default()
        };
        let (Ok(before), Ok(after)) = (
            old.key(Strategy::Typed, &call),
            new.key(Strategy::Typed, &call),
        ) else {
            skipped += 1;
            continue;
        };
        calls += 1;
        let counts = by_tool.entry(tool.to_string()).or_default();
        counts.0 += 1;
        if before != after {
            counts.1 += 1;
            let changed = json!({
                "line": i + 1,
                "tool": tool,
                "old": before.to_string(),
                "new": after.to_string(),
                "old_policy": old.policy_fingerprint(tool),
                "new_policy": new.policy_fingerprint(tool),
                "old_keyer": old.version().name(),
                "new_keyer": new.version().name(),
            });
            serde_json::to_writer(&mut output, &changed)?;
            output.write_all(b"\n")?;
        }
    }
    let rekeyed: u64 = by_tool.values().map(|(_, r)| r).sum();
    let by_tool: serde_json::Map<String, Value> = by_tool
        .into_iter()
        .map(|(tool, (n, r))| (tool, json!({"calls": n, "rekeyed": r})))
        .collect();
    serde_json::to_writer(
        &mut output,
        &json!({"calls": calls, "rekeyed": rekeyed, "skipped": skipped, "by_tool": by_tool}),
    )?;
    output.write_all(b"\n")?;
    output.flush()
}
