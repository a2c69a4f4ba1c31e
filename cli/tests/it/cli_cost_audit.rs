//! `dedup cost` reproduces the article's figures; `dedup audit` reads both log formats.

fn dedup(args: &[&str]) -> (String, bool) {
    let out = crate::dedup().args(args).output().expect("dedup runs");
    (String::from_utf8(out.stdout).unwrap(), out.status.success())
}

#[test]
fn cost_prints_the_articles_five_figures_and_the_corrected_model() {
    let (out, ok) = dedup(&["cost", "--sweep"]);
    assert!(ok, "{out}");
    for figure in [
        "$0.001482",
        "$0.007422",
        "$222.66",
        "$1.25",
        "35:1 to 534:1",
    ] {
        assert!(out.contains(figure), "missing {figure} in:\n{out}");
    }
    assert!(out.contains("corrected store"));
    assert!(
        out.contains("stand-in"),
        "must say o200k_base is a stand-in for Claude's tokenizer"
    );
    // Changing an input changes the figures: they are computed, not printed.
    let (doubled, _) = dedup(&["cost", "--output-price", "30"]);
    assert!(!doubled.contains("$0.001482"));
}

#[test]
fn cost_draws_an_svg() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("ratio.svg");
    let (_, ok) = dedup(&["cost", "--plot", svg.to_str().unwrap()]);
    assert!(ok);
    let text = std::fs::read_to_string(svg).unwrap();
    assert!(text.starts_with("<svg") && text.contains("Waste-to-store"));
}

#[test]
fn audit_reads_key_input_lines_and_exports_a_scorable_corpus() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("calls.jsonl");
    let line = |run: &str, step: u32, args: &str| {
        serde_json::json!({"tool": "charge_card", "args": args, "run_id": run, "step": step})
            .to_string()
    };
    let lines = [
        line("r1", 1, r#"{"amount": 4200, "currency": "USD"}"#),
        line("r1", 1, r#"{"currency": "usd", "amount": 4200.0}"#),
        line("r1", 2, r#"{"amount": 4200, "currency": "USD"}"#),
    ];
    std::fs::write(&log, lines.join("\n")).unwrap();
    let corpus = dir.path().join("corpus");
    let (out, ok) = dedup(&[
        "audit",
        "--json",
        "--export-corpus",
        corpus.to_str().unwrap(),
        log.to_str().unwrap(),
    ]);
    assert!(ok, "{out}");
    let rows: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    let typed = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["strategy"] == "typed")
        .unwrap();
    assert_eq!(typed["retries_caught"], 1);
    assert_eq!(typed["retries_total"], 1);
    assert_eq!(typed["repeats_merged"], 0);
    assert_eq!(typed["repeats_total"], 1);
    let raw = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["strategy"] == "raw")
        .unwrap();
    assert_eq!(
        (
            raw["retries_caught"].as_u64(),
            raw["repeats_merged"].as_u64()
        ),
        (Some(0), Some(1))
    );
    let (scored, ok) = dedup(&[
        "score",
        "--corpus",
        corpus.to_str().unwrap(),
        "--no-schemas",
        "--json",
        "--iterations",
        "10",
    ]);
    assert!(ok, "{scored}");
}
