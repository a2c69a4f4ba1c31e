//! The bad-input catalogue (issue 8): what a model or an attacker can send, through the real
//! handler with the in-memory store and the in-process demo tool, and through the keyer and
//! `dedup key` where the input reaches them.
//!
//! An invalid call gets a clear error in the caller's format (a Bedrock REPROMPT or FAILURE that
//! says the call was not executed, or a Lambda `InvalidEvent` error when no Bedrock response can be
//! addressed), never a panic; the store is not touched and the tool is not called. Input the Lambda
//! runtime cannot deserialize into a `serde_json::Value` (invalid UTF-8, lone surrogates, nesting
//! past serde_json's limit of 128, `NaN`) never reaches the handler: the runtime answers it with its
//! own deserialization error, which `runtime_refuses` checks the same way the runtime reads events.
//!
//! Some hostile-looking input is valid and is keyed exactly rather than refused: `1e999999`, a
//! 10,000-digit integer. Those cases check that it executes once, replays, and never meets a
//! different number.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::fixture;

use serde_json::{Value, json};
use toolcall_dedup::config::Config;
use toolcall_dedup::dispatch::DispatchError;
use toolcall_dedup::handler::{Handled, Handler, HandlerError, Invocation};
use toolcall_dedup::internals::port::Forward;
use toolcall_dedup::key::{Call, KeyError, Keyer, Strategy};
use toolcall_dedup::stand_ins::demo::{DemoTool, InProcess, Ledger, StandIn};
use toolcall_dedup::store::{MemoryStore, Store};
use toolcall_dedup::telemetry::Outcome;

// ---------------------------------------------------------------------------------------------
// helpers

/// What the tool answers.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reply {
    /// The demo tool's real response.
    Demo,
    /// Fixed bytes that are not a Bedrock response for the call.
    Fixed(&'static [u8]),
}

/// The demo tool, counting invokes; optionally answering with fixed bytes instead.
struct Tool {
    demo: DemoTool,
    reply: Reply,
    invokes: AtomicU32,
}

impl Tool {
    fn new(reply: Reply) -> Tool {
        Tool {
            demo: DemoTool::new(Ledger::memory()),
            reply,
            invokes: AtomicU32::new(0),
        }
    }

    fn invokes(&self) -> u32 {
        self.invokes.load(Ordering::SeqCst)
    }

    fn ledger_len(&self) -> usize {
        self.demo.ledger().entries().unwrap().len()
    }
}

impl StandIn for Tool {
    async fn answer(
        &self,
        target: &str,
        forward: Forward,
        timeout: Duration,
    ) -> Result<Vec<u8>, DispatchError> {
        self.invokes.fetch_add(1, Ordering::SeqCst);
        let reply = self.demo.answer(target, forward, timeout).await;
        match self.reply {
            Reply::Demo => reply,
            Reply::Fixed(bytes) => Ok(bytes.to_vec()),
        }
    }
}

fn handler(reply: Reply) -> Handler<MemoryStore, InProcess<Tool>> {
    fixture::handler(
        MemoryStore::new(),
        InProcess::new(Tool::new(reply)),
        &Config::default(),
    )
}

/// The `charge_card` event file with `parameters` instead of its own.
fn event(parameters: Value) -> Value {
    let mut event = fixture::event("fd-charge_card.json");
    event["parameters"] = parameters;
    event
}

fn param(name: &str, declared: &str, value: impl Into<Value>) -> Value {
    json!({"name": name, "type": declared, "value": value.into()})
}

/// A valid call with `extra` as one more parameter.
fn charge_with(extra: Value) -> Value {
    event(json!([
        param("customer_id", "string", "cus_8842"),
        param("currency", "string", "USD"),
        extra
    ]))
}

/// Sends `event` to a fresh handler, checks that nothing was claimed, stored or executed, and
/// returns the answer.
async fn refused(event: &Value) -> Handled {
    let h = handler(Reply::Demo);
    let handled = h.handle(event, &Invocation::default()).await;
    assert_eq!(
        handled.outcome,
        Outcome::BadRequest,
        "{:?}",
        handled.response
    );
    assert_eq!(h.store().requests().total(), 0, "the store was touched");
    assert!(h.store().is_empty(), "a claim was left behind");
    assert_eq!(h.dispatcher().invokes(), 0, "the tool was called");
    assert_eq!(h.dispatcher().ledger_len(), 0, "a side effect happened");
    assert!(handled.key.is_none(), "a refused call has no key");
    handled
}

/// A Bedrock response of the function flavour: `(responseState, body)`.
fn bedrock_answer(handled: &Handled) -> (String, Value) {
    let response = fixture::response(handled);
    assert_eq!(response["messageVersion"], "1.0");
    assert_eq!(response["response"]["actionGroup"], "payments");
    assert_eq!(response["response"]["function"], "charge_card");
    let state = fixture::state(handled).unwrap_or_default();
    (state, fixture::body(handled))
}

/// Asserts a REPROMPT or FAILURE whose message contains `needle` and says nothing ran.
fn assert_answer(handled: &Handled, state: &str, needle: &str) {
    let (got, body) = bedrock_answer(handled);
    assert_eq!(got, state, "{body}");
    let message = body["message"].as_str().unwrap();
    assert!(message.contains(needle), "{message:?} lacks {needle:?}");
    assert!(message.contains("not executed"), "{message:?}");
    assert!(
        message.len() < 400,
        "a message for a model stays short: {message}"
    );
}

/// Asserts the Lambda error the runtime reports for an event no Bedrock response can answer.
fn assert_lambda_error(handled: &Handled, needle: &str) {
    match &handled.response {
        Err(e @ HandlerError::InvalidEvent(_)) => {
            let d = lambda_runtime::Diagnostic::from(HandlerError::InvalidEvent(match e {
                HandlerError::InvalidEvent(inner) => inner.clone(),
                HandlerError::Internal(_) => unreachable!(),
            }));
            assert_eq!(d.error_type, "InvalidEvent");
            assert!(d.error_message.contains(needle), "{}", d.error_message);
        }
        other => panic!("expected an InvalidEvent Lambda error, got {other:?}"),
    }
}

/// The Lambda runtime reads an event with `serde_json::Deserializer::from_slice` into the
/// handler's payload type (`Value`); input it cannot read is answered with the runtime's
/// deserialization error and never reaches the handler.
fn runtime_refuses(bytes: &[u8], needle: &str) {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(_) => panic!("the runtime would accept this event"),
        Err(e) => assert!(e.to_string().contains(needle), "{e}"),
    }
}

fn key(args: &str) -> Result<String, KeyError> {
    Keyer::new()
        .key(
            Strategy::Typed,
            &Call {
                tool: "t",
                args,
                ..Call::default()
            },
        )
        .map(|k| k.to_string())
}

fn nested(depth: usize) -> String {
    "[".repeat(depth) + &"]".repeat(depth)
}

// ---------------------------------------------------------------------------------------------
// the catalogue

#[tokio::test]
async fn ten_thousand_deep_nesting() {
    // In an `array` parameter: deeper than the keyer reads, answered as a REPROMPT.
    let deep = nested(10_000);
    let handled = refused(&charge_with(param("line_items", "array", deep.as_str()))).await;
    assert_answer(
        &handled,
        "REPROMPT",
        "\"line_items\" nests deeper than 64 levels",
    );
    let handled = refused(&charge_with(param("line_items", "array", nested(65)))).await;
    assert_answer(&handled, "REPROMPT", "nests deeper than 64 levels");

    // In the event itself: serde_json stops at 128 levels, so the runtime refuses it.
    let text = EVENT_TEMPLATE.replace(
        "\"sessionAttributes\": {}",
        &format!("\"sessionAttributes\": {{\"x\": {deep}}}"),
    );
    runtime_refuses(text.as_bytes(), "recursion limit exceeded");

    // The keyer, for every strategy that parses (raw hashes bytes and needs no parse).
    for strategy in Strategy::ALL {
        let result = Keyer::new().key(
            strategy,
            &Call {
                tool: "t",
                args: &format!("{{\"a\":{deep}}}"),
                ..Call::default()
            },
        );
        match strategy {
            Strategy::Raw => assert!(result.is_ok()),
            _ => assert_eq!(result, Err(KeyError::TooDeep { limit: 64 }), "{strategy}"),
        }
    }
}

/// A valid event as text, for tests that must build broken bytes around it.
const EVENT_TEMPLATE: &str = r#"{"messageVersion": "1.0", "agent": {"id": "K7QZ2M4RTB"}, "sessionId": "sess-1",
  "actionGroup": "payments", "function": "charge_card", "inputText": "hi",
  "parameters": [{"name": "customer_id", "type": "string", "value": "VALUE"}],
  "sessionAttributes": {}, "promptSessionAttributes": {}}"#;

#[tokio::test]
async fn a_six_megabyte_payload() {
    // Lambda's synchronous payload limit is 6 MB; the keyer refuses arguments over 256 KiB.
    let big = "x".repeat(6 * 1024 * 1024);
    let bytes = EVENT_TEMPLATE.replace("VALUE", &big);
    assert!(bytes.len() > 6 * 1024 * 1024);
    let started = Instant::now();
    let event: Value = serde_json::from_slice(bytes.as_bytes()).unwrap();
    let handled = refused(&event).await;
    assert_answer(&handled, "REPROMPT", "over the 262144-byte limit");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "a 6 MB event took {:?}",
        started.elapsed()
    );
    // The keyer refuses it before reading it, whatever the strategy.
    for strategy in Strategy::ALL {
        let result = Keyer::new().key(
            strategy,
            &Call {
                tool: "t",
                args: &big,
                ..Call::default()
            },
        );
        assert!(
            matches!(result, Err(KeyError::TooLarge { bytes, limit: 262_144 }) if bytes == big.len()),
            "{strategy}: {result:?}"
        );
    }
}

#[tokio::test]
async fn invalid_utf8_and_lone_surrogates() {
    // In the event: the runtime cannot read it into a Value.
    let mut bytes = EVENT_TEMPLATE.replace("VALUE", "cus_\u{1}").into_bytes();
    let at = bytes.iter().position(|&b| b == 1).unwrap();
    bytes[at] = 0xff;
    runtime_refuses(&bytes, "invalid unicode code point");
    for lone in [r"\ud800", r"\udc00", r"\ud800\u0041"] {
        // serde_json: "unexpected end of hex escape" / "lone leading surrogate in hex escape"
        runtime_refuses(
            EVENT_TEMPLATE.replace("VALUE", lone).as_bytes(),
            "hex escape",
        );
    }

    // In an `array` parameter's JSON text (a string the runtime did read): the text is not an
    // array the keyer can read, so it is keyed as the text it is, once; nothing fails open.
    let h = handler(Reply::Demo);
    let ev = charge_with(param("line_items", "array", r#"["\ud800"]"#));
    let first = h.handle(&ev, &Invocation::default()).await;
    let again = h.handle(&ev, &Invocation::default()).await;
    assert_eq!(
        (first.outcome, again.outcome),
        (Outcome::Executed, Outcome::Replayed)
    );
    assert_eq!(h.dispatcher().invokes(), 1);

    // The keyer reads JSON text strictly: a lone surrogate escape is a syntax error.
    for args in [
        r#"{"a":"\ud800"}"#,
        r#"{"a":"\udc00"}"#,
        r#"{"a":"\ud800\u0041"}"#,
    ] {
        match key(args) {
            Err(KeyError::Syntax { message, .. }) => {
                assert!(message.contains("lone surrogate"), "{message}")
            }
            other => panic!("{args}: {other:?}"),
        }
    }
}

#[tokio::test]
async fn duplicate_keys() {
    // The same parameter twice: a configuration-level problem, answered as FAILURE.
    let twice = event(json!([
        param("customer_id", "string", "cus_1"),
        param("customer_id", "string", "cus_2")
    ]));
    assert_answer(&refused(&twice).await, "FAILURE", "appears twice");

    // A duplicate key inside an `array` parameter's JSON: the model can fix it.
    let handled = refused(&charge_with(param(
        "line_items",
        "array",
        r#"[{"sku": "SKU-1", "sku": "SKU-2"}]"#,
    )))
    .await;
    assert_answer(&handled, "REPROMPT", "duplicate object key \"sku\"");

    // The keyer refuses duplicates wherever they are (serde_json would keep the last one).
    assert_eq!(
        key(r#"{"a": 1, "b": {"c": 1, "c": 1}}"#),
        Err(KeyError::DuplicateKey("c".into()))
    );
    assert_eq!(
        key(r#"{"b": 1, "a": 2, "b": 3}"#),
        Err(KeyError::DuplicateKey("b".into()))
    );

    // In the envelope itself the runtime's serde_json keeps the last value; the handler keys and
    // forwards that same Value, so what is keyed is what the tool gets.
    let text = EVENT_TEMPLATE.replace(
        r#""sessionId": "sess-1""#,
        r#""sessionId": "sess-1", "sessionId": "sess-2""#,
    );
    let ev: Value = serde_json::from_slice(text.as_bytes()).unwrap();
    assert_eq!(ev["sessionId"], "sess-2");
}

#[tokio::test]
async fn nan_infinity_and_huge_exponents() {
    for bad in ["NaN", "Infinity", "-Infinity", "inf", "1e", "0x10"] {
        let handled = refused(&charge_with(param("amount", "number", bad))).await;
        assert_answer(&handled, "REPROMPT", "\"amount\" must be a number");
    }
    // An exponent whose digits alone overflow: refused rather than rounded.
    let handled = refused(&charge_with(param(
        "amount",
        "number",
        "1e9999999999999999999",
    )))
    .await;
    assert_answer(&handled, "REPROMPT", "out of the supported range");
    // In an `array` parameter's JSON, NaN is not JSON: keyed as the text it is (see surrogates).
    // In the event, bare NaN is not JSON and 1e999999 is out of f64's range: the runtime refuses.
    runtime_refuses(
        EVENT_TEMPLATE.replace(r#""VALUE""#, "NaN").as_bytes(),
        "expected value",
    );
    runtime_refuses(
        EVENT_TEMPLATE.replace(r#""VALUE""#, "1e999999").as_bytes(),
        "number out of range",
    );

    // 1e999999 as a number parameter is a valid number: keyed exactly, executed once, and it
    // never meets a different number (no rounding to infinity).
    let h = handler(Reply::Demo);
    let send = |v: &str| {
        let ev = charge_with(param("amount", "number", v));
        let h = &h;
        async move { h.handle(&ev, &Invocation::default()).await }
    };
    let first = send("1e999999").await;
    assert_eq!(first.outcome, Outcome::Executed);
    assert_eq!(
        send("10e999998").await.outcome,
        Outcome::Replayed,
        "same value"
    );
    assert_eq!(
        send("1e999998").await.outcome,
        Outcome::Executed,
        "a different value"
    );
    assert_eq!(
        send("2e999999").await.outcome,
        Outcome::Executed,
        "a different value"
    );
    assert_eq!(h.dispatcher().invokes(), 3);

    // The keyer: NaN is a syntax error, 1e999999 an exact number.
    assert!(matches!(key(r#"{"x": NaN}"#), Err(KeyError::Syntax { .. })));
    assert!(matches!(
        key(r#"{"x": -Infinity}"#),
        Err(KeyError::Syntax { .. })
    ));
    assert_eq!(key(r#"{"x": 1e999999}"#), key(r#"{"x": 10.0e999998}"#));
    assert_ne!(key(r#"{"x": 1e999999}"#), key(r#"{"x": 1e999998}"#));
    assert!(matches!(
        key(r#"{"x": 1e9999999999999999999}"#),
        Err(KeyError::Number(_))
    ));
}

#[tokio::test]
async fn ten_thousand_digit_integers() {
    let huge = "9".repeat(10_000);
    let neighbour = "9".repeat(9_999) + "8";
    // As an integer parameter: valid, keyed exactly and quickly.
    let h = handler(Reply::Demo);
    let send = |v: &str| {
        let ev = charge_with(param("amount", "integer", v));
        let h = &h;
        async move { h.handle(&ev, &Invocation::default()).await }
    };
    let started = Instant::now();
    assert_eq!(send(&huge).await.outcome, Outcome::Executed);
    assert_eq!(send(&huge).await.outcome, Outcome::Replayed);
    assert_eq!(
        send(&neighbour).await.outcome,
        Outcome::Executed,
        "exact, not rounded"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(h.dispatcher().invokes(), 2);

    // As a bare JSON number in the event: beyond f64, so the runtime's serde_json refuses it.
    runtime_refuses(
        EVENT_TEMPLATE.replace(r#""VALUE""#, &huge).as_bytes(),
        "number out of range",
    );
    // The keyer: exact for every strategy that claims exactness; keyer C fails as Python does.
    let a = format!("{{\"n\": {huge}}}");
    let b = format!("{{\"n\": {neighbour}}}");
    assert_ne!(key(&a).unwrap(), key(&b).unwrap());
    assert_eq!(
        key(&a).unwrap(),
        key(&format!("{{\"n\": {huge}.000}}")).unwrap(),
        "one value, one key"
    );
    let normalized = Keyer::new().key(
        Strategy::Normalized,
        &Call {
            tool: "t",
            args: &a,
            ..Call::default()
        },
    );
    assert_eq!(normalized, Err(KeyError::ArticleOverflow));
}

#[tokio::test]
async fn an_empty_tool_name() {
    let mut ev = charge_with(param("amount", "number", "42.50"));
    ev["function"] = json!("");
    let handled = refused(&ev).await;
    assert_lambda_error(&handled, "function is empty");
    // OpenAPI flavour with an empty path.
    let mut ev = charge_with(param("amount", "number", "42.50"));
    ev.as_object_mut().unwrap().remove("function");
    ev["apiPath"] = json!("");
    ev["httpMethod"] = json!("POST");
    assert_lambda_error(&refused(&ev).await, "neither function nor apiPath");

    assert_eq!(
        Keyer::new().key(
            Strategy::Typed,
            &Call {
                tool: "",
                args: "{}",
                ..Call::default()
            }
        ),
        Err(KeyError::EmptyTool)
    );
}

#[tokio::test]
async fn a_missing_session_id() {
    let mut ev = charge_with(param("amount", "number", "42.50"));
    ev.as_object_mut().unwrap().remove("sessionId");
    assert_answer(&refused(&ev).await, "FAILURE", "no sessionId");
    ev["sessionId"] = json!("");
    assert_answer(&refused(&ev).await, "FAILURE", "no sessionId");
    // Not a string: the envelope cannot be read. (serde's message does not name the field.)
    ev["sessionId"] = json!(42);
    assert_lambda_error(&refused(&ev).await, "expected a string");
}

#[tokio::test]
async fn a_number_parameter_whose_value_is_abc() {
    let handled = refused(&charge_with(param("amount", "number", "abc"))).await;
    assert_answer(
        &handled,
        "REPROMPT",
        "parameter \"amount\" must be a number, got \"abc\"",
    );
    let handled = refused(&charge_with(param("amount", "integer", "12.5"))).await;
    assert_answer(&handled, "REPROMPT", "must be an integer");
}

#[tokio::test]
async fn an_array_parameter_that_is_not_json() {
    for bad in ["SKU-1, SKU-2", "{\"a\": 1}", "[1, 2", "", "null"] {
        let handled = refused(&charge_with(param("line_items", "array", bad))).await;
        assert_answer(&handled, "REPROMPT", "must be a JSON array");
    }
}

#[tokio::test]
async fn a_tool_reply_that_is_not_a_bedrock_response() {
    for reply in [
        &br#"{"statusCode": 200, "body": "ok"}"#[..],
        b"not json at all",
        br#"{"messageVersion": "1.0", "response": {"actionGroup": "other", "function": "charge_card", "functionResponse": {"responseBody": {"TEXT": {"body": "{}"}}}}}"#,
        br#"{"messageVersion": "1.0", "response": {"actionGroup": "payments", "function": "charge_card", "functionResponse": {"responseState": "MAYBE", "responseBody": {"TEXT": {"body": "{}"}}}}}"#,
    ] {
        let leaked: &'static [u8] = Box::leak(reply.to_vec().into_boxed_slice());
        let h = handler(Reply::Fixed(leaked));
        let ev = charge_with(param("amount", "number", "42.50"));
        let handled = h.handle(&ev, &Invocation::default()).await;
        assert_eq!(handled.outcome, Outcome::ToolError);
        let (state, body) = bedrock_answer(&handled);
        assert_eq!(state, "REPROMPT");
        assert_eq!(body["status"], "tool_error");
        assert!(body["message"].as_str().unwrap().contains("malformed response"));
        // The tool ran (its reply came back), so its side effect may have happened: nothing is
        // replayed, but the claim is kept until its lease ends and a retry does not reach the tool.
        assert_eq!(h.dispatcher().invokes(), 1);
        let h = h.with_settings(|s| s.wait = std::time::Duration::from_millis(50));
        let retry = h.handle(&ev, &Invocation::default()).await;
        assert_eq!(retry.outcome, Outcome::InProgress);
        assert_eq!(h.dispatcher().invokes(), 1);
        assert_eq!(h.store().len(), 1, "the claim is kept");
    }
}

/// A tool name longer than a record can hold is the caller's configuration, answered as such in
/// its format (`invalid_event`), never a store error; nothing is claimed or run.
#[tokio::test]
async fn a_tool_name_longer_than_a_record_holds() {
    let long = "charge_".repeat(200);
    let mut ev = charge_with(param("amount", "number", "42.50"));
    ev["function"] = json!(long);
    let handled = refused(&ev).await;
    assert_eq!(fixture::state(&handled).as_deref(), Some("FAILURE"));
    let body = fixture::body(&handled);
    assert_eq!(body["status"], "invalid_event", "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("1400 bytes"),
        "{body}"
    );
    let envelope = json!({"tool": long, "run_id": "r", "input": {"amount": 1}});
    let handled = refused(&envelope).await;
    let answer = fixture::response(&handled);
    assert_eq!(answer["error"]["type"], "invalid_event", "{answer}");
}
