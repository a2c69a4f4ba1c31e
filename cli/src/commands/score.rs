//! `dedup score`: the article's table for keyers A–D and ours, replayed on the corpus.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use super::CliError;
use crate::corpus::pyjson::{PyJson, Style};
use crate::corpus::score::{self, KeyerScore, Options, Report};
use crate::corpus::{self, Corpus, Expect};
use toolcall_dedup::key::{KeyerVersion, Strategy};

#[derive(Debug, clap::Args)]
pub(crate) struct ScoreArgs {
    /// Corpus directory (retries.jsonl, distinct.jsonl, adversarial.jsonl).
    #[arg(long, default_value = "tests/corpus")]
    pub corpus: PathBuf,
    /// Tool schemas for the typed keyer, one <tool>.json each [default: <corpus>/schemas].
    #[arg(long, conflicts_with = "no_schemas")]
    pub(crate) schemas: Option<PathBuf>,
    /// Score the typed keyer without schemas (schema-free rules only).
    #[arg(long)]
    pub(crate) no_schemas: bool,
    /// One JSON object per keyer instead of the table.
    #[arg(long)]
    pub(crate) json: bool,
    /// Break recall and merges down by mutation and adversarial class.
    #[arg(long)]
    pub(crate) by_class: bool,
    /// The typed keyer's version scored (`typed/v1`, `typed/v2`, `typed/v3`).
    #[arg(long, default_value_t = KeyerVersion::NEWEST, value_parser = |s: &str| s.parse::<KeyerVersion>())]
    pub(crate) keyer: KeyerVersion,
    /// Timed runs per keyer; µs/key is their median.
    #[arg(long, default_value_t = 7)]
    pub(crate) runs: usize,
    /// Key derivations per timed run (the article's 20,000; 2,000 in a debug build, which is ten
    /// times slower and not worth timing precisely).
    #[arg(long, default_value_t = DEFAULT_ITERATIONS)]
    pub(crate) iterations: usize,
}

const DEFAULT_ITERATIONS: usize = if cfg!(debug_assertions) {
    2_000
} else {
    20_000
};

pub(crate) fn run(args: ScoreArgs) -> Result<ExitCode, CliError> {
    let started = Instant::now();
    let corpus = Corpus::load(&args.corpus).map_err(|e| CliError::Usage(e.to_string()))?;
    let schema_dir = (!args.no_schemas).then(|| {
        args.schemas
            .clone()
            .unwrap_or_else(|| args.corpus.join("schemas"))
    });
    let schemas = match &schema_dir {
        Some(dir) => Some(corpus::load_schemas(dir).map_err(|e| CliError::Usage(e.to_string()))?),
        None => None,
    };
    let schema_count = schemas.as_ref().map_or(0, |s| s.len());
    let options = Options {
        schemas,
        runs: args.runs,
        iterations: args.iterations,
        keyer: args.keyer,
    };
    let progress = crate::progress::spinner("scoring keyers A–D and typed on the corpus");
    let mut report = score::score(&corpus, &options);
    progress.finish_and_clear();
    report.wall_clock = started.elapsed();

    let text = if args.json {
        json(&report, args.by_class)
    } else {
        let mut out = header(&args, &corpus, schema_dir.as_ref(), schema_count);
        out.push_str(&table(&report));
        if args.by_class {
            out.push_str(&by_class(&report));
        }
        out
    };
    print!("{text}");
    Ok(ExitCode::SUCCESS)
}

fn header(
    args: &ScoreArgs,
    corpus: &Corpus,
    schema_dir: Option<&PathBuf>,
    schema_count: usize,
) -> String {
    let count = |section: &str, class: Option<&str>, expect: Option<Expect>| {
        corpus
            .section(section)
            .filter(|p| class.is_none_or(|c| p.class == c))
            .filter(|p| expect.is_none_or(|e| p.expect == e))
            .count()
    };
    let schemas = match schema_dir {
        Some(dir) => format!(
            "typed keyer with {schema_count} tool schemas from {}",
            dir.display()
        ),
        None => "typed keyer without schemas".to_string(),
    };
    format!(
        "Replay of {}: {} retry pairs; {} distinct pairs ({} value changed, {} deliberate repeats); \
         {} adversarial pairs ({} must stay distinct, {} are retries). {schemas}.\n\n",
        args.corpus.display(),
        count("retries", None, None),
        count("distinct", None, None),
        count("distinct", Some("value_changed"), None),
        count("distinct", Some("deliberate_repeat"), None),
        count("adversarial", None, None),
        count("adversarial", None, Some(Expect::Distinct)),
        count("adversarial", None, Some(Expect::Same)),
    )
}

fn ratio(n: usize, total: usize) -> String {
    format!("{n}/{total}")
}

fn percent(n: usize, total: usize) -> String {
    let pct = if total == 0 {
        0.0
    } else {
        100.0 * n as f64 / total as f64
    };
    format!("{n}/{total} ({pct:.1}%)")
}

fn table(report: &Report) -> String {
    let headers = [
        "Keyer",
        "Retries caught",
        "FM: value changed",
        "FM: deliberate repeat",
        "FM: adversarial",
        "Adversarial retries caught",
        "µs/key",
        "× B (spread)",
    ];
    let rows: Vec<Vec<String>> = report
        .keyers
        .iter()
        .map(|k| {
            vec![
                k.label.clone(),
                percent(k.retries_caught, k.retries_total),
                ratio(k.fm_value_changed, k.value_changed_total),
                ratio(k.fm_deliberate_repeat, k.deliberate_repeat_total),
                ratio(k.fm_adversarial, k.adversarial_distinct_total),
                percent(k.adversarial_caught, k.adversarial_same_total),
                format!("{:.2}", k.us_per_key),
                format!(
                    "{:.2} ({:.2}–{:.2})",
                    k.ratio_to_canonical.median,
                    k.ratio_to_canonical.low,
                    k.ratio_to_canonical.high
                ),
            ]
        })
        .collect();
    let mut out = render(&headers, &rows);
    let errors: usize = report.keyers.iter().map(|k| k.errors).sum();
    if errors > 0 {
        for k in report.keyers.iter().filter(|k| k.errors > 0) {
            let _ = writeln!(out, "{}: {} calls refused with an error", k.label, k.errors);
        }
    }
    let _ = writeln!(
        out,
        "\nµs/key: median of {} runs of {} derivations each, cycling through the {} calls of the \
         retry and distinct pairs; the keyers take turns within each run, and × B is the median (and \
         range) of the per-run ratios to keyer B. Whole harness: {:.2} s wall clock.",
        report.runs,
        report.iterations,
        report.timed_calls,
        report.wall_clock.as_secs_f64()
    );
    if cfg!(debug_assertions) {
        out.push_str("This is a debug build: µs/key is not representative (use --release).\n");
    }
    out
}

fn short(keyer: &KeyerScore) -> &'static str {
    match keyer.strategy {
        Strategy::Raw => "A",
        Strategy::Canonical => "B",
        Strategy::Normalized => "C",
        Strategy::Scoped => "D",
        Strategy::Typed if keyer.bedrock => "typed/Bedrock",
        Strategy::Typed => "typed",
    }
}

fn by_class(report: &Report) -> String {
    let Some(first) = report.keyers.first() else {
        return String::new();
    };
    let mut headers = vec![
        "Section".to_string(),
        "Class".to_string(),
        "Expect".to_string(),
        "No-ops".to_string(),
    ];
    headers.extend(report.keyers.iter().map(|k| short(k).to_string()));
    let rows: Vec<Vec<String>> = first
        .by_class
        .iter()
        .enumerate()
        .map(|(i, class)| {
            let mut row = vec![
                class.section.clone(),
                class.class.clone(),
                class.expect.name().to_string(),
                if class.section == "retries" {
                    class.noops.to_string()
                } else {
                    "-".to_string()
                },
            ];
            row.extend(
                report
                    .keyers
                    .iter()
                    .map(|k| ratio(k.by_class[i].merged, k.by_class[i].total)),
            );
            row
        })
        .collect();
    let header_refs: Vec<&str> = headers.iter().map(String::as_str).collect();
    let mut out = String::from(
        "\nBy class: pairs whose two calls derived one key (caught, where `same`; false merges, \
         where `distinct`).\n\n",
    );
    out.push_str(&render(&header_refs, &rows));
    for k in &report.keyers {
        let wrong: Vec<&str> = k.wrong().collect();
        if k.strategy == Strategy::Typed || wrong.len() <= 20 {
            let list = if wrong.is_empty() {
                "none".to_string()
            } else {
                wrong.join(", ")
            };
            let _ = writeln!(out, "\n{} got wrong: {list}", k.label);
        } else {
            let _ = writeln!(out, "\n{} got {} pairs wrong", k.label, wrong.len());
        }
    }
    out
}

/// Left-aligned columns separated by two spaces.
fn render(headers: &[&str], rows: &[Vec<String>]) -> String {
    let widths: Vec<usize> = (0..headers.len())
        .map(|c| {
            rows.iter()
                .map(|r| r[c].chars().count())
                .chain([headers[c].chars().count()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: Vec<&str>| {
        let mut s = String::new();
        for (c, cell) in cells.iter().enumerate() {
            if c + 1 == cells.len() {
                s.push_str(cell);
            } else {
                let pad = widths[c] - cell.chars().count();
                s.push_str(cell);
                s.push_str(&" ".repeat(pad + 2));
            }
        }
        s.push('\n');
        s
    };
    let mut out = line(headers.to_vec());
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

fn num(n: usize) -> PyJson {
    PyJson::Num(n.to_string())
}

fn json(report: &Report, by_class: bool) -> String {
    let keyers = report
        .keyers
        .iter()
        .map(|k| keyer_json(report, k, by_class))
        .collect();
    let mut out = PyJson::Arr(keyers).dumps(Style::Indent, false);
    out.push('\n');
    out
}

fn keyer_json(report: &Report, k: &KeyerScore, by_class: bool) -> PyJson {
    let mut members = vec![
        ("keyer".to_string(), PyJson::str(k.strategy.name())),
        ("label".into(), PyJson::Str(k.label.clone())),
        ("bedrock_declared_types".into(), PyJson::Bool(k.bedrock)),
        ("retries_caught".into(), num(k.retries_caught)),
        ("retries_total".into(), num(k.retries_total)),
        ("fm_value_changed".into(), num(k.fm_value_changed)),
        ("value_changed_total".into(), num(k.value_changed_total)),
        ("fm_deliberate_repeat".into(), num(k.fm_deliberate_repeat)),
        (
            "deliberate_repeat_total".into(),
            num(k.deliberate_repeat_total),
        ),
        ("fm_adversarial".into(), num(k.fm_adversarial)),
        (
            "adversarial_distinct_total".into(),
            num(k.adversarial_distinct_total),
        ),
        ("adversarial_caught".into(), num(k.adversarial_caught)),
        (
            "adversarial_same_total".into(),
            num(k.adversarial_same_total),
        ),
        ("errors".into(), num(k.errors)),
        (
            "us_per_key".into(),
            PyJson::Num(format!("{:.4}", k.us_per_key)),
        ),
        (
            "ratio_to_canonical".into(),
            PyJson::Obj(vec![
                (
                    "median".into(),
                    PyJson::Num(format!("{:.4}", k.ratio_to_canonical.median)),
                ),
                (
                    "low".into(),
                    PyJson::Num(format!("{:.4}", k.ratio_to_canonical.low)),
                ),
                (
                    "high".into(),
                    PyJson::Num(format!("{:.4}", k.ratio_to_canonical.high)),
                ),
            ]),
        ),
        ("schemas".into(), PyJson::Bool(report.schemas)),
        ("runs".into(), num(report.runs)),
        ("iterations".into(), num(report.iterations)),
        (
            "harness_wall_clock_s".into(),
            PyJson::Num(format!("{:.3}", report.wall_clock.as_secs_f64())),
        ),
    ];
    if by_class {
        let classes = k
            .by_class
            .iter()
            .map(|c| {
                PyJson::Obj(vec![
                    ("section".into(), PyJson::Str(c.section.clone())),
                    ("class".into(), PyJson::Str(c.class.clone())),
                    ("expect".into(), PyJson::str(c.expect.name())),
                    ("total".into(), num(c.total)),
                    ("merged".into(), num(c.merged)),
                    ("noops".into(), num(c.noops)),
                    (
                        "wrong".into(),
                        PyJson::Arr(c.wrong.iter().map(|w| PyJson::Str(w.clone())).collect()),
                    ),
                ])
            })
            .collect();
        members.push(("by_class".into(), PyJson::Arr(classes)));
    }
    PyJson::Obj(members)
}
