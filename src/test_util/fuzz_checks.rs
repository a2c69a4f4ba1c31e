//! The properties the fuzz targets check, shared with `tests/it/fuzz_regressions.rs` (which replays
//! the inputs saved in `fuzz/regressions/<target>/` through the same functions on every
//! `cargo test`).

use std::sync::OnceLock;

use crate::config::{Config, Scope};
use crate::doors::bedrock::{self, ActionGroupEvent};
use crate::handler::{Handler, HandlerError, Invocation};
use crate::key::{Call, Keyer, Schema, Strategy};
use crate::stand_ins::demo::{DemoTool, Ledger};
use crate::store::MemoryStore;
use crate::telemetry::{Outcome, Telemetry};
use serde_json::Value;

/// Every strategy: no panic; the same input always gives the same answer (twice, and from a
/// clone); the typed canonical form is valid input that keys to itself (idempotence). The input
/// is `schema \x01 args` (a tool definition or JSON Schema, then the arguments) or just the args.
pub fn keyer(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (schema_text, args) = text.split_once('\u{1}').unwrap_or(("", text));
    let schema = serde_json::from_str(schema_text)
        .ok()
        .and_then(|v| Schema::from_tool_definition(&v).ok())
        .map(|s| s.1);
    let keyer = Keyer::new();
    for strategy in Strategy::ALL {
        let call = Call {
            tool: "fuzz",
            args,
            run_id: Some("r"),
            step: Some("1"),
            schema: schema.as_ref(),
            ..Call::default()
        };
        let first = keyer.explain(strategy, &call);
        let second = keyer.clone().explain(strategy, &call);
        match (first, second) {
            (Ok(a), Ok(b)) => {
                assert_eq!(a.key, b.key);
                assert_eq!(
                    keyer.key(strategy, &call),
                    Ok(a.key),
                    "key and explain agree"
                );
                if strategy == Strategy::Typed {
                    let again = keyer
                        .explain(
                            strategy,
                            &Call {
                                args: &a.canonical,
                                ..call
                            },
                        )
                        .expect("the canonical form is valid input");
                    assert_eq!(again.canonical, a.canonical, "not idempotent");
                }
            }
            (Err(a), Err(b)) => assert_eq!(a, b),
            (a, b) => panic!("nondeterministic: {a:?} vs {b:?}"),
        }
    }
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap()
    })
}

/// Event bytes read as the Lambda runtime reads them (`serde_json` into a `Value`), then the
/// envelope, the checked parameters, the declared-type schema, the typed key (deterministic), the
/// reply check, and the real handler with the in-memory store and the demo tool: no panic; the
/// answer is a Bedrock response or an `InvalidEvent` error; a refused call leaves no claim and no
/// side effect.
pub fn bedrock_event(data: &[u8]) {
    let Ok(event) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    if let Ok(envelope) = ActionGroupEvent::parse(&event) {
        let _ = bedrock::validate_reply(data, &envelope.reply_to);
        if let Ok(call) = envelope.tool_call() {
            assert!(!call.tool().is_empty());
            if let Ok(schema) = Schema::from_declared_types(call.declared_types()) {
                let step = bedrock::step(&call, "dedup_step", Scope::Turn);
                let namespace = call.namespace();
                let key_call = Call {
                    tool: call.tool(),
                    args: &call.args,
                    namespace: Some(&namespace),
                    run_id: Some(call.session_id),
                    step: step.as_deref(),
                    schema: Some(&schema),
                    policy: None,
                };
                let keyer = Keyer::new();
                let key = keyer.key(Strategy::Typed, &key_call);
                assert_eq!(key, keyer.key(Strategy::Typed, &key_call), "deterministic");
                let _ = keyer.fingerprint(&key_call);
            }
        }
    }
    bedrock::forward_bytes(&event, Some("0123456789abcdef0123456789abcdef"))
        .expect("a parsed event serializes again");

    let handler = Handler::new(
        MemoryStore::new(),
        DemoTool::new(Ledger::memory()),
        &Config::default(),
        Telemetry::quiet(),
    );
    let handled = runtime().block_on(handler.handle(&event, &Invocation::default()));
    match &handled.response {
        Ok(raw) => {
            let reply: Value = serde_json::from_str(raw.get()).expect("the answer is JSON");
            assert!(
                reply.get("response").is_some(),
                "not a Bedrock response: {reply}"
            );
        }
        Err(HandlerError::InvalidEvent(_)) => assert_eq!(handled.outcome, Outcome::BadRequest),
        Err(e) => panic!("unexpected handler error: {e}"),
    }
    if handled.outcome == Outcome::BadRequest {
        assert!(handler.store().is_empty(), "a refused call left a claim");
        let entries = handler.dispatcher().ledger().entries().unwrap();
        assert!(entries.is_empty(), "a refused call had a side effect");
    }
}
