//! The keyer never panics, and the same input always gives the same key (twice, and from a clone).
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolcall_dedup::key::{Call, Keyer, Schema, Strategy};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    // Split the input into a schema part and an args part so both are explored.
    let (schema_text, args) = text.split_once('\u{1}').unwrap_or(("", text));
    let schema = serde_json::from_str(schema_text).ok().and_then(|v| Schema::from_tool_definition(&v).ok()).map(|s| s.1);
    let keyer = Keyer::new();
    for strategy in Strategy::ALL {
        let call = Call { tool: "fuzz", args, run_id: Some("r"), step: Some("1"), schema: schema.as_ref(), ..Call::default() };
        let first = keyer.explain(strategy, &call);
        let second = keyer.clone().explain(strategy, &call);
        match (first, second) {
            (Ok(a), Ok(b)) => {
                assert_eq!(a.key, b.key);
                if strategy == Strategy::Typed {
                    // Idempotence: the canonical form keys to itself.
                    let again = keyer.explain(strategy, &Call { args: &a.canonical, ..call }).expect("canonical form is valid");
                    assert_eq!(again.canonical, a.canonical);
                }
            }
            (Err(a), Err(b)) => assert_eq!(a, b),
            (a, b) => panic!("nondeterministic: {a:?} vs {b:?}"),
        }
    }
});
