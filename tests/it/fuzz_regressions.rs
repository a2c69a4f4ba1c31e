//! Inputs the fuzz targets found (or that are kept as hard cases), replayed through the same
//! checks the targets run (`fuzz/checks.rs`) on every `cargo test`. `scripts/fuzz` saves a crash in
//! `fuzz/artifacts/<target>/`; copy it into `fuzz/regressions/<target>/` once it is fixed.

use toolcall_dedup::test_util::fuzz_checks as checks;

use std::path::Path;

fn inputs(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/regressions")
        .join(target);
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file() && p.file_name().is_some_and(|n| n != ".gitkeep"))
        .map(|p| (p.display().to_string(), std::fs::read(&p).unwrap()))
        .collect();
    files.sort();
    files
}

fn replay(target: &str, check: fn(&[u8])) {
    for (name, data) in inputs(target) {
        let outcome = std::panic::catch_unwind(|| check(&data));
        assert!(outcome.is_ok(), "{name} fails the {target} checks again");
    }
}

#[test]
fn keyer_regressions() {
    replay("keyer", checks::keyer);
}

#[test]
fn bedrock_event_regressions() {
    replay("bedrock_event", checks::bedrock_event);
}

/// Found by the keyer target: without a schema a canonical numeral string becomes a number, but one
/// past 40 digits was written digit for digit while the same JSON number is written in scientific
/// form, so the canonical form was not idempotent and `"5…5"` never met `5…5`.
#[test]
fn a_long_numeral_string_meets_the_same_number() {
    use toolcall_dedup::key::{Call, Keyer, Strategy};
    let keyer = Keyer::new();
    let key = |args: &str| {
        keyer
            .key(
                Strategy::Typed,
                &Call {
                    tool: "t",
                    args,
                    ..Call::default()
                },
            )
            .unwrap()
    };
    for digits in [
        "5".repeat(41),
        "5".repeat(111),
        format!("-{}", "9".repeat(60)),
    ] {
        assert_eq!(
            key(&format!(r#"{{"amount": "{digits} "}}"#)),
            key(&format!(r#"{{"amount": {digits}}}"#)),
            "{digits}"
        );
    }
    let tiny = format!("0.{}1", "0".repeat(45));
    assert_eq!(
        key(&format!(r#"{{"x": "{tiny}"}}"#)),
        key(&format!(r#"{{"x": {tiny}}}"#))
    );
    // Up to 40 digits the numeral is its own canonical text.
    let forty = "7".repeat(40);
    let explained = keyer
        .explain(
            Strategy::Typed,
            &Call {
                tool: "t",
                args: &format!(r#"{{"n": "{forty}"}}"#),
                ..Call::default()
            },
        )
        .unwrap();
    assert_eq!(explained.canonical, format!(r#"{{"n":{forty}}}"#));
}
