//! `scripts/peer-powertools` installs Powertools and drives both systems for about a minute, so CI
//! does not run it. This runs its summary code (`scripts/peer/summary.py`) on a recorded run's raw
//! output (`tests/fixtures/peer-powertools/raw.jsonl`) and checks the JSON line against figures
//! recomputed here from the raw records, and that docs/powertools.md shows exactly the table the
//! recorded run produces. Re-record with `scripts/peer-powertools` and copy
//! `target/peer-powertools/raw.jsonl` over the fixture; then update the table in docs/powertools.md.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const RAW: &str = "tests/fixtures/peer-powertools/raw.jsonl";

/// The script's output on the recorded run: (stdout, stderr).
fn summary() -> (String, String) {
    let out = Command::new("python3")
        .args(["scripts/peer/summary.py", RAW, "--json"])
        .current_dir(ROOT)
        .output()
        .expect("python3 runs");
    let (stdout, stderr) = (
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    );
    assert!(out.status.success(), "summary.py failed: {stderr}");
    (stdout, stderr)
}

fn records() -> Vec<Value> {
    std::fs::read_to_string(Path::new(ROOT).join(RAW))
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn of<'a>(records: &'a [Value], kind: &str, system: &str) -> Vec<&'a Value> {
    records
        .iter()
        .filter(|r| r["kind"] == kind && r["system"] == system)
        .collect()
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    }
}

/// One system's figures, recomputed from the raw records.
fn expected(records: &[Value], system: &str) -> Vec<(&'static str, f64)> {
    let pairs = of(records, "pair", system);
    let count = |class: &str, executions: fn(u64) -> bool| {
        pairs
            .iter()
            .filter(|p| p["class"] == class && executions(p["executions"].as_u64().unwrap()))
            .count() as f64
    };
    let timing = of(records, "timing", system);
    let phase = |phase: &str| -> Vec<&Value> {
        timing
            .iter()
            .copied()
            .filter(|r| r["phase"] == phase)
            .collect()
    };
    let requests = |phase_rows: Vec<&Value>| {
        let total: u64 = phase_rows
            .iter()
            .flat_map(|r| r["requests"].as_object().unwrap().values())
            .map(|n| n.as_u64().unwrap())
            .sum();
        total as f64 / phase_rows.len() as f64
    };
    let overhead = |phase_rows: Vec<&Value>| {
        median(
            phase_rows
                .iter()
                .map(|r| r["handler_cpu_us"].as_f64().unwrap() - r["tool_cpu_us"].as_f64().unwrap())
                .collect(),
        )
    };
    vec![
        ("retries_caught", count("retry", |n| n == 1)),
        ("retries_total", count("retry", |_| true)),
        ("false_merges", count("deliberate_repeat", |n| n < 2)),
        ("distinct_total", count("deliberate_repeat", |_| true)),
        ("requests_first_sight", requests(phase("first_sight"))),
        ("requests_repeat", requests(phase("repeat"))),
        ("overhead_us_first_sight", overhead(phase("first_sight"))),
        ("overhead_us_repeat", overhead(phase("repeat"))),
    ]
}

#[test]
fn the_json_line_holds_the_figures_of_the_recorded_run() {
    let (stdout, stderr) = summary();
    assert!(
        !stderr.contains("unexpected"),
        "the recorded run has failed invocations: {stderr}"
    );
    let last: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    let mut keys: Vec<&str> = last
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "cold_start",
            "outage",
            "overhead_ratio_first_sight",
            "overhead_ratio_repeat",
            "systems"
        ]
    );
    let records = records();
    for system in ["powertools", "toolcall_dedup"] {
        let got = &last["outage"][system];
        let runs = of(&records, "outage", system);
        assert!(
            runs.len() >= 5,
            "{system}: at least five interleaved outage runs"
        );
        let each: Vec<f64> = runs
            .iter()
            .map(|r| r["fail_closed_ms"].as_f64().unwrap())
            .collect();
        assert_eq!(got["fail_closed_ms"].as_f64(), Some(median(each.clone())));
        let listed: Vec<f64> = got["runs_ms"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        assert_eq!(listed, each, "{system}: every run's figure is kept");
        let requests = median(
            runs.iter()
                .map(|r| r["requests"].as_f64().unwrap())
                .collect(),
        );
        assert_eq!(got["requests"].as_f64(), Some(requests));
        assert_eq!(got["tool_called"], 0, "{system}: fail closed runs nothing");
    }
    for system in ["powertools", "toolcall_dedup"] {
        let starts = of(&records, "cold_start", system);
        let got = &last["cold_start"][system];
        assert_eq!(got["starts"].as_u64(), Some(starts.len() as u64));
        for key in ["first_answer_ms", "rss_mb"] {
            let want = median(starts.iter().map(|r| r[key].as_f64().unwrap()).collect());
            let v = got[key].as_f64().unwrap();
            assert!(
                (v - want).abs() < 0.06,
                "cold_start.{system}.{key}: {v} != {want}"
            );
        }
    }
    for system in ["powertools", "toolcall_dedup"] {
        let got = last["systems"][system].as_object().unwrap();
        let want = expected(&records, system);
        assert_eq!(got.len(), want.len(), "{system}: {got:?}");
        for (key, value) in want {
            let v = got[key].as_f64().unwrap();
            assert!((v - value).abs() < 0.06, "{system}.{key}: {v} != {value}");
        }
    }
    for (ratio, key) in [
        ("overhead_ratio_first_sight", "overhead_us_first_sight"),
        ("overhead_ratio_repeat", "overhead_us_repeat"),
    ] {
        let ours = last["systems"]["toolcall_dedup"][key].as_f64().unwrap();
        let theirs = last["systems"]["powertools"][key].as_f64().unwrap();
        assert!((last[ratio].as_f64().unwrap() - ours / theirs).abs() < 0.001);
    }
}

#[test]
fn toolcall_dedup_is_ahead_on_recall_and_false_merges_in_the_recorded_run() {
    let (stdout, _) = summary();
    let last: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    let (ours, theirs) = (
        &last["systems"]["toolcall_dedup"],
        &last["systems"]["powertools"],
    );
    assert_eq!(ours["retries_total"], theirs["retries_total"]);
    assert!(ours["retries_caught"].as_u64() > theirs["retries_caught"].as_u64());
    assert_eq!(ours["false_merges"], 0);
    assert!(ours["false_merges"].as_u64() <= theirs["false_merges"].as_u64());
}

#[test]
fn the_comparison_page_shows_the_table_of_the_recorded_run() {
    let (stdout, _) = summary();
    let table: Vec<&str> = stdout.lines().filter(|l| l.starts_with('|')).collect();
    assert!(table.len() > 10, "{stdout}");
    for behaviour in ["in-progress", "raises", "lease", "400 KB", "outage"] {
        assert!(
            table.iter().any(|row| row.contains(behaviour)),
            "no {behaviour} row"
        );
    }
    let page = std::fs::read_to_string(Path::new(ROOT).join("docs/powertools.md")).unwrap();
    let block = table.join("\n");
    assert!(
        page.contains(&block),
        "docs/powertools.md does not show the recorded run's table; paste this:\n{block}"
    );
}
