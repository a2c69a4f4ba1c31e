//! The replay corpus and `dedup score`: the committed files are exactly what the generator builds, the
//! corpus has the article's shape, and the scores meet the issue's invariants. Timing numbers are never
//! compared: only that they are measured.

use std::collections::{BTreeMap, BTreeSet};

use dedup_cli::corpus::score::{self, KeyerScore, Options, Report};
use dedup_cli::corpus::{self, Corpus, Expect};
use serde_json::Value;
use toolcall_dedup::key::Strategy;

/// The replay corpus (data at the repository root, shared with the product's tests).
fn corpus_dir() -> std::path::PathBuf {
    crate::fixture::root().join("tests/corpus")
}

/// The pairs the typed keyer gets wrong without schemas: each needs a fact only a schema states
/// (tests/corpus/README.md explains each one).
const SCHEMA_FREE_LOSSES: [&str; 4] = [
    "adversarial/case_id/6",
    "adversarial/decimal_string/2",
    "adversarial/decimal_string/4",
    "adversarial/decimal_string/5",
];

/// The pairs the executor gets wrong from Bedrock events with no policy file: the declared types make
/// up for the top-level decimals, not for the git ref or a decimal inside an array's objects (the
/// README's Limits give the policy line for each; `tests/it/bedrock_declared.rs` replays them).
const BEDROCK_DECLARED_LOSSES: [&str; 2] =
    ["adversarial/case_id/6", "adversarial/decimal_string/4"];

fn load() -> Corpus {
    Corpus::load(&corpus_dir()).expect("corpus loads")
}

fn run(schemas: bool) -> Report {
    let options = Options {
        schemas: schemas.then(|| corpus::load_schemas(&corpus_dir().join("schemas")).unwrap()),
        runs: 1,
        iterations: 50,
        ..Options::default()
    };
    score::score(&load(), &options)
}

fn keyer(report: &Report, strategy: Strategy) -> &KeyerScore {
    report
        .keyers
        .iter()
        .find(|k| k.strategy == strategy)
        .expect("every strategy is scored")
}

#[test]
fn committed_corpus_is_what_the_generator_builds() {
    let dir = tempfile::tempdir().unwrap();
    let written = corpus::write(dir.path()).unwrap();
    assert_eq!(written.len(), 3 + 6, "three pair files and six schemas");
    for path in written {
        let relative = path.strip_prefix(dir.path()).unwrap();
        let committed = corpus_dir().join(relative);
        let fresh = std::fs::read(&path).unwrap();
        let old =
            std::fs::read(&committed).unwrap_or_else(|e| panic!("{}: {e}", committed.display()));
        assert!(
            fresh == old,
            "{} differs from the generator: run `dedup corpus`",
            committed.display()
        );
    }
    assert!(corpus::stale(&corpus_dir()).is_empty());
}

#[test]
fn corpus_has_the_articles_shape() {
    let corpus = load();
    let ids: BTreeSet<&str> = corpus.pairs.iter().map(|p| p.id.as_str()).collect();
    assert_eq!(ids.len(), corpus.pairs.len(), "pair ids are unique");
    for pair in &corpus.pairs {
        for side in [&pair.a, &pair.b] {
            let args: Value = serde_json::from_str(&side.args)
                .unwrap_or_else(|e| panic!("{}: args are not JSON: {e}", pair.id));
            assert!(args.is_object(), "{}", pair.id);
        }
    }

    // 96 retries: twelve bases under eight mutations, at the original's run and step.
    let retries: Vec<_> = corpus.section("retries").collect();
    assert_eq!(retries.len(), 96);
    let mut per_class = BTreeMap::<&str, usize>::new();
    let mut per_base = BTreeMap::<&str, usize>::new();
    let mut per_serializer = BTreeMap::<&str, usize>::new();
    let mut per_tool = BTreeMap::<&str, usize>::new();
    for p in &retries {
        assert_eq!(p.expect, Expect::Same);
        assert_eq!((&p.a.run_id, p.a.step), (&p.b.run_id, p.b.step), "{}", p.id);
        assert!(
            !p.a.args.contains('\n') && p.a.args.contains("\": "),
            "{}: original side is json.dumps default",
            p.id
        );
        assert!(p.noop.is_some(), "{}", p.id);
        *per_class.entry(&p.class).or_default() += 1;
        *per_base.entry(&p.base).or_default() += 1;
        *per_serializer
            .entry(p.serializer.as_deref().unwrap())
            .or_default() += 1;
        *per_tool.entry(&p.tool).or_default() += 1;
    }
    assert_eq!(per_class.len(), 8);
    assert!(per_class.values().all(|&n| n == 12), "{per_class:?}");
    assert_eq!(per_base.len(), 12);
    assert!(per_base.values().all(|&n| n == 8));
    assert_eq!(
        per_serializer,
        BTreeMap::from([("compact", 32), ("default", 32), ("indent", 32)])
    );
    assert_eq!(per_tool.len(), 6);
    assert!(
        retries
            .iter()
            .filter(|p| p.class == "key_order")
            .all(|p| p.noop == Some(false)),
        "reordering always reorders"
    );

    // 24 distinct: 12 changed values at the same step, 12 byte-identical repeats at a later step.
    let distinct: Vec<_> = corpus.section("distinct").collect();
    assert_eq!(distinct.len(), 24);
    for p in &distinct {
        assert_eq!(p.expect, Expect::Distinct);
        assert_eq!(p.a.run_id, p.b.run_id, "{}", p.id);
        match p.class.as_str() {
            "value_changed" => {
                assert_eq!(p.a.step, p.b.step, "{}", p.id);
                assert_ne!(p.a.args, p.b.args, "{}", p.id);
                assert!(p.change.is_some(), "{}", p.id);
            }
            "deliberate_repeat" => {
                assert!(p.b.step > p.a.step, "{}", p.id);
                assert_eq!(p.a.args, p.b.args, "{}: byte-identical", p.id);
            }
            other => panic!("unexpected distinct class {other}"),
        }
    }
    assert_eq!(
        distinct
            .iter()
            .filter(|p| p.class == "value_changed")
            .count(),
        12
    );

    // Adversarial: at least 40 pairs, every one from a stated rule, every class the issue names.
    let adversarial: Vec<_> = corpus.section("adversarial").collect();
    assert!(adversarial.len() >= 40, "{}", adversarial.len());
    let mut classes = BTreeMap::<&str, (Expect, usize)>::new();
    for p in &adversarial {
        assert!(
            p.rule.as_deref().is_some_and(|r| r.len() > 20),
            "{}: needs its rule",
            p.id
        );
        assert_eq!((&p.a.run_id, p.a.step), (&p.b.run_id, p.b.step), "{}", p.id);
        assert_ne!(p.a.args, p.b.args, "{}", p.id);
        let entry = classes.entry(&p.class).or_insert((p.expect, 0));
        assert_eq!(entry.0, p.expect, "{}: one expectation per class", p.id);
        entry.1 += 1;
    }
    let expected = [
        ("zero_padded_id", Expect::Distinct),
        ("version_string", Expect::Distinct),
        ("big_int", Expect::Distinct),
        ("case_id", Expect::Distinct),
        ("naive_timestamp", Expect::Same),
        ("offset_timestamp", Expect::Same),
        ("bool_string", Expect::Same),
        ("decimal_string", Expect::Same),
        ("array_order", Expect::Distinct),
        ("nfd_text", Expect::Same),
    ];
    for (class, expect) in expected {
        let (e, n) = classes
            .get(class)
            .unwrap_or_else(|| panic!("missing class {class}"));
        assert_eq!(*e, expect, "{class}");
        assert!(*n >= 4, "{class}: {n} pairs");
    }
}

#[test]
fn every_tool_has_a_schema_the_keyer_reads() {
    let schemas = corpus::load_schemas(&corpus_dir().join("schemas")).unwrap();
    let tools: BTreeSet<String> = load().pairs.iter().map(|p| p.tool.clone()).collect();
    assert_eq!(
        schemas.keys().cloned().collect::<BTreeSet<_>>(),
        tools,
        "one schema per tool"
    );
}

#[test]
fn scores_meet_the_issues_invariants_with_schemas() {
    let report = run(true);
    assert_eq!(report.keyers.len(), 6);
    assert!(report.schemas);
    for k in &report.keyers {
        assert_eq!(k.retries_total, 96, "{}", k.label);
        assert_eq!(k.value_changed_total, 12);
        assert_eq!(k.deliberate_repeat_total, 12);
        assert_eq!(
            k.adversarial_distinct_total + k.adversarial_same_total,
            load().section("adversarial").count()
        );
        assert_eq!(k.errors, 0, "{}: no keyer refuses a corpus call", k.label);
        assert!(k.us_per_key.is_finite() && k.us_per_key > 0.0);
        assert_eq!(k.fm_value_changed, 0, "{}", k.label);
    }
    let (a, b, c, d) = (
        keyer(&report, Strategy::Raw),
        keyer(&report, Strategy::Canonical),
        keyer(&report, Strategy::Normalized),
        keyer(&report, Strategy::Scoped),
    );
    // The article's keyers behave as the article reports.
    assert_eq!(c.retries_caught, 96);
    assert_eq!(d.retries_caught, 96);
    assert_eq!(c.fm_deliberate_repeat, 12);
    assert_eq!(d.fm_deliberate_repeat, 0);
    assert_eq!(a.fm_deliberate_repeat, 12);
    assert_eq!(b.fm_deliberate_repeat, 12);
    // A catches exactly the no-op retries that kept the default serializer; B every no-op plus every
    // reordering.
    let corpus = load();
    let noops: Vec<_> = corpus
        .section("retries")
        .filter(|p| p.noop == Some(true))
        .collect();
    assert_eq!(
        a.retries_caught,
        noops
            .iter()
            .filter(|p| p.serializer.as_deref() == Some("default"))
            .count()
    );
    assert_eq!(b.retries_caught, noops.len() + 12);
    // The article's admitted weak spot: C merges zero-padded identifiers.
    let class = |k: &KeyerScore, name: &str| {
        k.by_class
            .iter()
            .find(|c| c.class == name)
            .cloned()
            .unwrap()
    };
    assert_eq!(class(c, "zero_padded_id").merged, 5);

    // Ours: everything, with zero false merges in every column.
    let typed = keyer(&report, Strategy::Typed);
    assert_eq!(typed.retries_caught, 96);
    assert_eq!(typed.fm_value_changed, 0);
    assert_eq!(typed.fm_deliberate_repeat, 0);
    assert_eq!(typed.fm_adversarial, 0);
    assert_eq!(typed.adversarial_caught, typed.adversarial_same_total);
    assert_eq!(typed.wrong().count(), 0);
}

#[test]
fn without_schemas_typed_loses_only_the_listed_pairs() {
    let report = run(false);
    assert!(!report.schemas);
    let typed = keyer(&report, Strategy::Typed);
    assert_eq!(typed.retries_caught, 96);
    assert_eq!(typed.fm_value_changed, 0);
    assert_eq!(typed.fm_deliberate_repeat, 0);
    let wrong: Vec<&str> = typed.wrong().collect();
    assert_eq!(wrong, SCHEMA_FREE_LOSSES);

    let bedrock = report.keyers.last().unwrap();
    assert!(bedrock.bedrock && bedrock.strategy == Strategy::Typed);
    assert_eq!(bedrock.label, score::BEDROCK_LABEL);
    assert_eq!((bedrock.retries_caught, bedrock.errors), (96, 0));
    assert_eq!(bedrock.wrong().collect::<Vec<_>>(), BEDROCK_DECLARED_LOSSES);
    let readme = std::fs::read_to_string(corpus_dir().join("README.md")).unwrap();
    for id in SCHEMA_FREE_LOSSES {
        assert!(readme.contains(id), "README must list {id}");
    }
}

fn dedup(args: &[&str]) -> std::process::Output {
    let output = crate::dedup()
        .args(args)
        .current_dir(crate::fixture::root())
        .output()
        .expect("dedup runs");
    assert!(
        output.status.success(),
        "dedup {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

#[test]
fn score_json_has_one_object_per_keyer() {
    let output = dedup(&[
        "score",
        "--json",
        "--by-class",
        "--runs",
        "1",
        "--iterations",
        "20",
    ]);
    let rows: Vec<Value> = serde_json::from_slice(&output.stdout).expect("JSON array");
    let names: Vec<&str> = rows.iter().map(|r| r["keyer"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["raw", "canonical", "normalized", "scoped", "typed", "typed"]
    );
    assert_eq!(rows[5]["bedrock_declared_types"], true);
    assert_eq!(rows[4]["bedrock_declared_types"], false);
    for row in &rows {
        for field in [
            "retries_caught",
            "retries_total",
            "fm_value_changed",
            "fm_deliberate_repeat",
            "fm_adversarial",
            "adversarial_caught",
            "adversarial_same_total",
        ] {
            assert!(row[field].is_u64(), "{field} in {row}");
        }
        assert!(row["us_per_key"].as_f64().is_some_and(|us| us > 0.0));
        assert!(row["by_class"].as_array().is_some_and(|c| c.len() == 20));
        assert_eq!(row["retries_total"], 96);
    }
    let typed = &rows[4];
    assert_eq!(typed["schemas"], true);
    assert_eq!(typed["retries_caught"], 96);
    assert_eq!(typed["fm_adversarial"], 0);
    assert_eq!(rows[3]["fm_deliberate_repeat"], 0);
    assert_eq!(rows[2]["fm_deliberate_repeat"], 12);
}

#[test]
fn score_table_and_corpus_check_run() {
    let output = dedup(&[
        "score",
        "--no-schemas",
        "--by-class",
        "--runs",
        "1",
        "--iterations",
        "20",
    ]);
    let text = String::from_utf8(output.stdout).unwrap();
    for needle in [
        "Retries caught",
        "FM: value changed",
        "FM: deliberate repeat",
        "FM: adversarial",
        "µs/key",
        "A raw-bytes hash",
        "D = C + (run_id, step)",
        "typed (ours, no schemas)",
        "typed (ours, Bedrock declared types only)",
        "typed/Bedrock",
        "wall clock",
        "number_strings",
        "array_order",
    ] {
        assert!(text.contains(needle), "{needle} missing from:\n{text}");
    }
    let check = dedup(&["corpus", "--check"]);
    assert!(String::from_utf8_lossy(&check.stdout).contains("up to date"));
}

/// A corpus from other sources (`dedup audit --export-corpus`, or hand-written) may hold runs the
/// spec has no user turn for, no serializer, and arguments no event can carry: the Bedrock row keys
/// what it can and counts the rest as errors, as every other row does.
#[test]
fn the_bedrock_row_scores_any_corpus() {
    let dir = tempfile::tempdir().unwrap();
    let pair = |id: &str, a: &str, b: &str| {
        serde_json::json!({"id": id, "section": "retries", "class": "observed", "expect": "same",
            "tool": "charge_card", "base": "observed:r9",
            "a": {"run_id": "r9", "step": 1, "args": a}, "b": {"run_id": "r9", "step": 1, "args": b}})
        .to_string()
    };
    let retries = [
        pair(
            "retries/ok",
            r#"{"amount": 4200, "currency": "USD"}"#,
            r#"{"currency": "usd", "amount": 4200.0}"#,
        ),
        pair("retries/not-an-object", "[1]", r#"{"amount": 1}"#),
    ];
    std::fs::write(dir.path().join("retries.jsonl"), retries.join("\n") + "\n").unwrap();
    for empty in ["distinct.jsonl", "adversarial.jsonl"] {
        std::fs::write(dir.path().join(empty), "").unwrap();
    }
    let corpus = Corpus::load(dir.path()).unwrap();
    let options = Options {
        schemas: None,
        runs: 1,
        iterations: 10,
        ..Options::default()
    };
    let report = score::score(&corpus, &options);
    let bedrock = report.keyers.last().unwrap();
    assert!(bedrock.bedrock);
    assert_eq!((bedrock.retries_caught, bedrock.errors), (1, 1));
}
