//! `dedup audit`: measure every keyer on your own traffic.
//!
//! Reads tool-call logs (the Lambda's `DEDUP_LOG_CALLS` lines, or plain `dedup key` input lines) and
//! finds, per the article's definition:
//! - **retries**: the same `(namespace, run_id, step, tool)` fired more than once — each later call is
//!   paired with the first;
//! - **deliberate repeats**: identical strict arguments (canonical JSON) at a later step of the same run.
//!
//! It streams: state is kept per run, and a run that has not been seen for `window` lines is closed and
//! forgotten, so memory grows with the runs in flight, not with the file.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::io::BufRead;

use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use toolcall_dedup::key::{Call, Key, Keyer, Rules, Schema, Strategy};

/// One logged call, reduced to what the audit compares.
#[derive(Debug, Clone)]
pub(crate) struct LoggedCall {
    pub(crate) namespace: Option<String>,
    pub(crate) run_id: String,
    pub(crate) step: String,
    pub(crate) tool: String,
    /// Keys by strategy, in [`Strategy::ALL`] order; `None` where the strategy failed on these args.
    pub(crate) keys: [Option<Key>; 5],
    pub(crate) rules: Rules,
    /// The argument text, when the log carries it (`full` logs and `dedup key` input).
    pub(crate) args: Option<String>,
}

/// How a line was read.
#[derive(Debug)]
pub(crate) enum Line {
    Call(Box<LoggedCall>),
    /// A call without a run id or step: it cannot be placed in a run.
    Unscoped,
    /// Not a tool-call line (other log output).
    Other,
}

fn strategy_index(strategy: Strategy) -> usize {
    Strategy::ALL
        .iter()
        .position(|s| *s == strategy)
        .unwrap_or(0)
}

/// The fields of a log line that the audit reads; everything else is ignored. Strings borrow from the
/// line where they can, so a million lines parse without a million trees.
#[derive(Deserialize)]
struct RawLine<'a> {
    dedup_call: Option<u8>,
    #[serde(borrow)]
    tool: Option<Cow<'a, str>>,
    #[serde(borrow)]
    run_id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    step: Option<&'a RawValue>,
    #[serde(borrow)]
    namespace: Option<Cow<'a, str>>,
    #[serde(borrow)]
    keys: Option<RawKeys<'a>>,
    #[serde(borrow, default)]
    rules: Vec<Cow<'a, str>>,
    #[serde(borrow)]
    args: Option<Cow<'a, str>>,
    schema: Option<Value>,
}

#[derive(Deserialize)]
struct RawKeys<'a> {
    #[serde(borrow)]
    raw: Option<Cow<'a, str>>,
    #[serde(borrow)]
    canonical: Option<Cow<'a, str>>,
    #[serde(borrow)]
    normalized: Option<Cow<'a, str>>,
    #[serde(borrow)]
    scoped: Option<Cow<'a, str>>,
    #[serde(borrow)]
    typed: Option<Cow<'a, str>>,
}

/// A step given as a number or a string; `null` counts as absent.
fn step_text(raw: Option<&RawValue>) -> Option<String> {
    let text = raw?.get();
    match serde_json::from_str::<Value>(text).ok()? {
        Value::String(s) => Some(s),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Parses one log line: a call-log line, a `dedup key` input line, or anything else.
pub(crate) fn parse_line(keyer: &Keyer, line: &str) -> Line {
    // Log pipelines often prefix a timestamp or request id; the JSON object starts at the first brace.
    let Some(start) = line.find('{') else {
        return Line::Other;
    };
    let Ok(raw) = serde_json::from_str::<RawLine<'_>>(&line[start..]) else {
        return Line::Other;
    };
    let is_call = raw.dedup_call.is_some() || (raw.tool.is_some() && raw.args.is_some());
    if !is_call {
        return Line::Other;
    }
    let (Some(tool), Some(run_id), Some(step)) = (raw.tool, raw.run_id, step_text(raw.step)) else {
        return Line::Unscoped;
    };
    let namespace = raw.namespace.map(Cow::into_owned);
    let (keys, rules) = if let Some(logged) = raw.keys {
        let parse = |k: Option<Cow<'_, str>>| k.and_then(|k| k.parse::<Key>().ok());
        let keys = [
            parse(logged.raw),
            parse(logged.canonical),
            parse(logged.normalized),
            parse(logged.scoped),
            parse(logged.typed),
        ];
        let mut rules = Rules::default();
        for name in &raw.rules {
            if let Some(rule) = Rules::from_name(name) {
                rules.insert(rule);
            }
        }
        (keys, rules)
    } else if let Some(args) = &raw.args {
        let schema = raw
            .schema
            .as_ref()
            .and_then(|s| Schema::from_tool_definition(s).ok())
            .map(|(_, s)| s);
        let call = Call {
            tool: &tool,
            args,
            namespace: namespace.as_deref(),
            run_id: Some(&run_id),
            step: Some(&step),
            schema: schema.as_ref(),
            policy: None,
        };
        keyer.every_key(&call)
    } else {
        return Line::Other;
    };
    Line::Call(Box::new(LoggedCall {
        namespace,
        run_id: run_id.into_owned(),
        step,
        tool: tool.into_owned(),
        keys,
        rules,
        args: raw.args.map(Cow::into_owned),
    }))
}

/// A found pair: the first call and the later one.
#[derive(Debug, Clone)]
pub(crate) struct FoundPair {
    pub(crate) first: LoggedCall,
    pub(crate) later: LoggedCall,
}

/// Counts for one strategy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct StrategyCounts {
    pub(crate) retries_caught: u64,
    pub(crate) repeats_merged: u64,
}

/// The audit's result.
#[derive(Debug, Clone, Default)]
pub(crate) struct AuditReport {
    pub(crate) lines: u64,
    pub(crate) calls: u64,
    pub(crate) unscoped: u64,
    pub(crate) other_lines: u64,
    pub(crate) retries_total: u64,
    pub(crate) repeats_total: u64,
    pub(crate) by_strategy: [StrategyCounts; 5],
    /// For retries the typed keyer caught: how often each rule fired on either side of the pair.
    pub(crate) typed_rules: BTreeMap<&'static str, u64>,
    pub(crate) retries: Vec<FoundPair>,
    pub(crate) repeats: Vec<FoundPair>,
    /// The most runs held open at once (the audit's memory bound).
    pub(crate) peak_open_runs: usize,
}

impl AuditReport {
    pub(crate) fn counts(&self, strategy: Strategy) -> StrategyCounts {
        self.by_strategy[strategy_index(strategy)]
    }
}

/// What a run remembers of a call: its keys and rules, and the call itself only when pairs are kept.
struct Seen {
    step: String,
    keys: [Option<Key>; 5],
    rules: Rules,
    call: Option<Box<LoggedCall>>,
}

impl Seen {
    fn new(call: &LoggedCall, keep: bool) -> Self {
        Seen {
            step: call.step.clone(),
            keys: call.keys,
            rules: call.rules,
            call: keep.then(|| Box::new(call.clone())),
        }
    }
}

#[derive(Default)]
struct RunState {
    last_line: u64,
    /// First call per (step, tool).
    first_at_step: HashMap<(String, String), Seen>,
    /// First call per (tool, strict fingerprint), for deliberate repeats.
    first_by_args: HashMap<(String, Key), Seen>,
}

/// Streams log lines and pairs calls. `keep_pairs` keeps the pairs themselves (for `--export-corpus`).
pub(crate) struct Auditor<'k> {
    keyer: &'k Keyer,
    window: u64,
    keep_pairs: bool,
    runs: HashMap<(Option<String>, String), RunState>,
    report: AuditReport,
}

impl<'k> Auditor<'k> {
    pub(crate) fn new(keyer: &'k Keyer, window: u64, keep_pairs: bool) -> Self {
        Self {
            keyer,
            window: window.max(1),
            keep_pairs,
            runs: HashMap::new(),
            report: AuditReport::default(),
        }
    }

    pub(crate) fn feed(&mut self, input: impl BufRead) -> std::io::Result<()> {
        for line in input.lines() {
            self.line(&line?);
        }
        Ok(())
    }

    pub(crate) fn line(&mut self, line: &str) {
        self.report.lines += 1;
        let n = self.report.lines;
        // Sweep eight times per window, so closed runs linger at most an eighth of a window.
        if n.is_multiple_of((self.window / 8).max(1)) {
            let horizon = n.saturating_sub(self.window);
            self.runs.retain(|_, run| run.last_line >= horizon);
        }
        match parse_line(self.keyer, line) {
            Line::Other => self.report.other_lines += 1,
            Line::Unscoped => self.report.unscoped += 1,
            Line::Call(call) => self.call(*call),
        }
    }

    fn call(&mut self, call: LoggedCall) {
        self.report.calls += 1;
        let keep = self.keep_pairs;
        let run = self
            .runs
            .entry((call.namespace.clone(), call.run_id.clone()))
            .or_default();
        run.last_line = self.report.lines;
        let report = &mut self.report;
        let same = |a: &[Option<Key>; 5], i: usize| a[i].is_some() && a[i] == call.keys[i];
        let step_key = (call.step.clone(), call.tool.clone());
        if let Some(first) = run.first_at_step.get(&step_key) {
            report.retries_total += 1;
            for (i, counts) in report.by_strategy.iter_mut().enumerate() {
                if same(&first.keys, i) {
                    counts.retries_caught += 1;
                }
            }
            if same(&first.keys, strategy_index(Strategy::Typed)) {
                for name in first.rules.union(call.rules).names() {
                    *report.typed_rules.entry(name).or_default() += 1;
                }
            }
            if let Some(first) = &first.call {
                report.retries.push(FoundPair {
                    first: (**first).clone(),
                    later: call,
                });
            }
            return;
        }
        // A repeat is judged once per step: the first call at a later step with the same arguments.
        if let Some(strict) = call.keys[strategy_index(Strategy::Canonical)] {
            let args_key = (call.tool.clone(), strict);
            match run.first_by_args.get(&args_key) {
                Some(first) if first.step != call.step => {
                    report.repeats_total += 1;
                    for (i, counts) in report.by_strategy.iter_mut().enumerate() {
                        if same(&first.keys, i) {
                            counts.repeats_merged += 1;
                        }
                    }
                    if let Some(first) = &first.call {
                        report.repeats.push(FoundPair {
                            first: (**first).clone(),
                            later: call.clone(),
                        });
                    }
                }
                Some(_) => {}
                None => {
                    run.first_by_args.insert(args_key, Seen::new(&call, keep));
                }
            }
        }
        run.first_at_step.insert(step_key, Seen::new(&call, keep));
        self.report.peak_open_runs = self.report.peak_open_runs.max(self.runs.len());
    }

    pub(crate) fn finish(self) -> AuditReport {
        self.report
    }
}

/// Writes found pairs (those whose logs carry arguments) as a replay corpus `dedup score` can read.
/// Steps become per-run indices in order of first appearance, so hashed turn steps keep their meaning.
/// Returns (pairs written, pairs skipped for lack of arguments).
pub(crate) fn export_corpus(
    report: &AuditReport,
    dir: &std::path::Path,
) -> std::io::Result<(usize, usize)> {
    use serde_json::json;
    std::fs::create_dir_all(dir)?;
    let mut step_index: HashMap<String, HashMap<String, u32>> = HashMap::new();
    let mut index = |call: &LoggedCall| -> u32 {
        let steps = step_index.entry(call.run_id.clone()).or_default();
        let next = steps.len() as u32;
        *steps.entry(call.step.clone()).or_insert(next)
    };
    let (mut written, mut skipped) = (0, 0);
    for (section, class, expect, pairs) in [
        ("retries", "observed_retry", "same", &report.retries),
        ("distinct", "deliberate_repeat", "distinct", &report.repeats),
    ] {
        let mut out = String::new();
        for (n, pair) in pairs.iter().enumerate() {
            let (Some(a), Some(b)) = (&pair.first.args, &pair.later.args) else {
                skipped += 1;
                continue;
            };
            let line = json!({
                "id": format!("{section}/{}/{n}", pair.first.tool),
                "section": section,
                "class": class,
                "expect": expect,
                "tool": pair.first.tool,
                "base": format!("observed:{}", pair.first.run_id),
                "a": {"run_id": pair.first.run_id, "step": index(&pair.first), "args": a},
                "b": {"run_id": pair.later.run_id, "step": index(&pair.later), "args": b},
            });
            out.push_str(&line.to_string());
            out.push('\n');
            written += 1;
        }
        std::fs::write(dir.join(format!("{section}.jsonl")), out)?;
    }
    std::fs::write(dir.join("adversarial.jsonl"), "")?;
    Ok((written, skipped))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key_line(run: &str, step: u32, args: &str) -> String {
        serde_json::json!({"tool": "charge_card", "args": args, "run_id": run, "step": step})
            .to_string()
    }

    #[test]
    fn finds_retries_and_repeats_and_scores_each_strategy() {
        let keyer = Keyer::new();
        let lines = [
            key_line("r1", 1, r#"{"amount": 4200, "currency": "USD"}"#),
            key_line("r1", 1, r#"{"currency": "usd", "amount": 4200.0}"#), // retry, value drift
            key_line("r1", 2, r#"{"amount": 4200, "currency": "USD"}"#),   // deliberate repeat
            key_line("r2", 1, r#"{"amount": 1}"#),
            key_line("r2", 1, r#"{"amount": 1}"#), // byte-identical retry
            "not a call".to_string(),
            r#"{"tool": "x", "args": "{}"}"#.to_string(),
        ];
        let mut auditor = Auditor::new(&keyer, 1000, true);
        auditor.feed(lines.join("\n").as_bytes()).unwrap();
        let report = auditor.finish();
        assert_eq!(
            (report.calls, report.other_lines, report.unscoped),
            (5, 1, 1)
        );
        assert_eq!((report.retries_total, report.repeats_total), (2, 1));
        assert_eq!(
            report.counts(Strategy::Raw),
            StrategyCounts {
                retries_caught: 1,
                repeats_merged: 1
            }
        );
        assert_eq!(
            report.counts(Strategy::Typed),
            StrategyCounts {
                retries_caught: 2,
                repeats_merged: 0
            }
        );
        assert_eq!(report.counts(Strategy::Normalized).repeats_merged, 1);
        assert!(report.typed_rules.contains_key("number-canonical"));
    }

    #[test]
    fn closed_runs_are_forgotten() {
        let keyer = Keyer::new();
        let mut auditor = Auditor::new(&keyer, 10, false);
        for run in 0..1000 {
            auditor.line(&key_line(&format!("run-{run}"), 1, r#"{"a": 1}"#));
        }
        let report = auditor.finish();
        assert!(
            report.peak_open_runs <= 20,
            "open runs grew to {}",
            report.peak_open_runs
        );
    }
}
