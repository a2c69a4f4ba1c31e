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
use toolcall_dedup::key::{Call, Keyer, PolicySet, Schema, Strategy};

#[derive(Debug, clap::Args)]
pub struct KeyArgs {
    /// Keying strategy.
    #[arg(long, default_value = "typed", value_parser = clap::value_parser!(StrategyArg))]
    pub strategy: StrategyArg,
    /// Add the normalized canonical form and the rules that fired.
    #[arg(long)]
    pub explain: bool,
    /// Per-tool policy file (JSON or TOML).
    #[arg(long)]
    pub policy: Option<PathBuf>,
}

/// clap wrapper so `--help` lists the strategies.
#[derive(Debug, Clone, Copy)]
pub struct StrategyArg(pub Strategy);

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
pub struct KeyRequest {
    pub tool: String,
    pub args: String,
    pub run_id: Option<String>,
    pub step: Option<Step>,
    pub namespace: Option<String>,
    pub schema: Option<Value>,
}

/// A step index, given as a number or a string.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Step {
    Number(serde_json::Number),
    Text(String),
}

impl Step {
    pub fn as_text(&self) -> String {
        match self {
            Step::Number(n) => n.to_string(),
            Step::Text(s) => s.clone(),
        }
    }
}

pub fn run(args: KeyArgs) -> Result<ExitCode, CliError> {
    let keyer = match &args.policy {
        Some(path) => Keyer::new().with_policies(PolicySet::load(path)?),
        None => Keyer::new(),
    };
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
pub fn key_lines(
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
