//! Inputs the fuzz targets found (or that are kept as hard cases), replayed through the same
//! checks the targets run (`fuzz/checks.rs`) on every `cargo test`. `scripts/fuzz` saves a crash in
//! `fuzz/artifacts/<target>/`; copy it into `fuzz/regressions/<target>/` once it is fixed.

#[path = "../fuzz/checks.rs"]
mod checks;

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
