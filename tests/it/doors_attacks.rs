//! Attacks on the doors restructure (commit d109063: `Door::open` asks the door question once,
//! `Gate::refuses` refuses a door not served or one through the wrong alias, the interceptor is a
//! `Door` variant, and `Dispatcher::route` returns one `Route { target, namespace, max_run_time }`
//! from routes the dispatcher alone holds). Each test is one suspicion; its doc comment says what
//! it attacks and which breaking change makes it fail.
//!
//! Breaks found (these tests fail on d109063 and are meant to until the product is fixed):
//! `every_handler_of_one_config_keys_a_call_in_the_namespace_its_routes_state` (a handler ignores
//! the namespace its config's routes state unless its dispatcher carries them: `dedup replay`
//! keys otherwise than the Lambda), `two_spellings_of_one_route_never_mix_one_targets_namespace_with_anothers_function`,
//! `an_unrecognised_events_error_names_every_door_it_looks_for`, `a_refusals_log_line_names_its_door`
//! and (older than d109063, liveness only) `a_function_a_refresh_routes_to_is_looked_up_like_the_others`.
//! The others hold and guard the promise they name.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_dynamodb::config::interceptors::BeforeTransmitInterceptorContextRef;
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_smithy_runtime_api::box_error::BoxError;
use lambda_runtime::Diagnostic;
use serde_json::{Value, json};
use toolcall_dedup::config::document::Document;
use toolcall_dedup::config::source::{ConfigSource, Loader};
use toolcall_dedup::config::{Config, Doors, Routes, StoreKind, TOOL_START_ALLOWANCE};
use toolcall_dedup::dispatch::{Dispatcher, LambdaDispatcher};
use toolcall_dedup::handler::{
    ClientContext, DoorName, Handled, Handler, HandlerError, Invocation,
};
use toolcall_dedup::internals::reload::Reloading;
use toolcall_dedup::store::{ManualClock, MemoryStore, Status, Store};
use toolcall_dedup::telemetry::{Outcome, Sink, Telemetry};

use crate::fake_lambda::FakeLambda;
use crate::fixture::{client_context, demo, event as event_file, ledger};
use crate::servers::{self, Backend};

const ALIAS: &str = "interceptor";
const QUALIFIERS: [Option<&str>; 5] = [None, Some("live"), Some(ALIAS), Some("$LATEST"), Some("7")];
const DOOR_SETS: [&str; 7] = [
    "none",
    "bedrock",
    "agentcore",
    "interceptor",
    "envelope",
    "bedrock,agentcore,envelope",
    "bedrock,agentcore,interceptor,envelope",
];

// ---------------------------------------------------------------------------------------------
// fixtures

fn config(doors: &str, alias: Option<&str>) -> Config {
    Config {
        doors: Doors::parse(doors).unwrap(),
        interceptor_alias: alias.map(str::to_string),
        ..Config::default()
    }
}

fn through(qualifier: Option<&str>) -> Invocation {
    Invocation {
        qualifier: qualifier.map(str::to_string),
        ..Invocation::default()
    }
}

fn emf_telemetry() -> (Telemetry, Arc<Mutex<Vec<String>>>) {
    let (sink, lines) = Sink::memory();
    let telemetry = Telemetry::quiet()
        .with_sink(sink)
        .with_emf(Some("NS".into()));
    (telemetry, lines)
}

fn last_line(lines: &Arc<Mutex<Vec<String>>>) -> Value {
    let lines = lines.lock().unwrap();
    serde_json::from_str(lines.last().expect("an EMF line")).unwrap()
}

fn context(pairs: &[(&str, &str)]) -> ClientContext {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// One event of the matrix: the door `DoorName::of` must name, whether it is malformed for that
/// door, and, when malformed and served, whether the door's format carries the refusal.
struct Case {
    what: &'static str,
    door: Option<DoorName>,
    malformed: bool,
    in_format: bool,
    event: Value,
    context: Option<ClientContext>,
}

fn case(
    what: &'static str,
    door: Option<DoorName>,
    malformed: bool,
    in_format: bool,
    event: Value,
) -> Case {
    Case {
        what,
        door,
        malformed,
        in_format,
        event,
        context: None,
    }
}

fn agentcore_case(what: &'static str, file: &str, malformed: bool) -> Case {
    Case {
        what,
        door: Some(DoorName::AgentCore),
        malformed,
        in_format: true,
        event: event_file(file),
        context: Some(client_context(file).expect("a client context")),
    }
}

/// Every door's valid and malformed events (malformed for the door's parse, and for its call),
/// and events no door recognises.
fn cases() -> Vec<Case> {
    use DoorName::*;
    vec![
        case(
            "bedrock",
            Some(Bedrock),
            false,
            false,
            event_file("fd-charge_card.json"),
        ),
        case(
            "bedrock, empty function",
            Some(Bedrock),
            true,
            false,
            event_file("bad-empty-function.json"),
        ),
        case(
            "bedrock, no function",
            Some(Bedrock),
            true,
            false,
            event_file("bad-no-function-or-apipath.json"),
        ),
        case(
            "bedrock, no session",
            Some(Bedrock),
            true,
            true,
            event_file("bad-missing-session.json"),
        ),
        agentcore_case("agentcore", "agentcore/charge_card.json", false),
        agentcore_case(
            "agentcore, empty tool name",
            "agentcore/bad-empty-tool-name.json",
            true,
        ),
        agentcore_case(
            "agentcore, arguments not an object",
            "agentcore/bad-arguments-not-object.json",
            true,
        ),
        case(
            "interceptor REQUEST",
            Some(Interceptor),
            false,
            false,
            event_file("agentcore-interceptor/charge_card.request.json"),
        ),
        case(
            "interceptor tools/list RESPONSE",
            Some(Interceptor),
            false,
            false,
            event_file("agentcore-interceptor/forged-tools_list.response.json"),
        ),
        case(
            "interceptor, marker only",
            Some(Interceptor),
            true,
            false,
            json!({"interceptorInputVersion": "1.0"}),
        ),
        case(
            "interceptor, no gatewayRequest",
            Some(Interceptor),
            true,
            false,
            json!({"interceptorInputVersion": "1.0", "mcp": {}}),
        ),
        case(
            "envelope",
            Some(Envelope),
            false,
            false,
            event_file("envelope/charge_card.json"),
        ),
        case(
            "envelope, unknown field",
            Some(Envelope),
            true,
            true,
            event_file("envelope/bad-unknown-field.json"),
        ),
        case(
            "envelope, input and args",
            Some(Envelope),
            true,
            true,
            event_file("envelope/bad-input-and-args.json"),
        ),
        case(
            "envelope, no run id",
            Some(Envelope),
            true,
            true,
            event_file("envelope/bad-no-run-id.json"),
        ),
        case(
            "envelope, tool a number",
            Some(Envelope),
            true,
            true,
            json!({"tool": 7, "input": {}, "run_id": "r-1"}),
        ),
        case(
            "envelope, namespace a number",
            Some(Envelope),
            true,
            true,
            json!({"tool": "charge_card", "namespace": 7, "input": {}, "run_id": "r-1"}),
        ),
        case("empty object", None, true, false, json!({})),
        case(
            "array of a bedrock event",
            None,
            true,
            false,
            event_file("bad-not-object.json"),
        ),
        case("string", None, true, false, json!("tools/list")),
        case("null", None, true, false, Value::Null),
        case("number", None, true, false, json!(7)),
    ]
}

/// What the gate and the door must make of `case` under `doors`, `alias`, `qualifier`.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
enum Expect {
    /// Refused before any parse, as a `DoorNotServed` Lambda error.
    DoorRefused,
    /// Refused as malformed (or no door's), as an `InvalidEvent` Lambda error.
    BadEventLambdaError,
    /// Refused as malformed, answered in the door's own format.
    BadEventInFormat,
    /// Served.
    Served,
}

fn expect(case: &Case, doors: &str, alias: Option<&str>, qualifier: Option<&str>) -> Expect {
    let Some(door) = case.door else {
        return Expect::BadEventLambdaError;
    };
    if !Doors::parse(doors).unwrap().serves(door) {
        return Expect::DoorRefused;
    }
    if let Some(alias) = alias
        && (qualifier == Some(alias)) != (door == DoorName::Interceptor)
    {
        return Expect::DoorRefused;
    }
    match (case.malformed, case.in_format) {
        (false, _) => Expect::Served,
        (true, true) => Expect::BadEventInFormat,
        (true, false) => Expect::BadEventLambdaError,
    }
}

fn lambda_error_type(handled: Handled) -> Option<String> {
    match handled.response {
        Ok(_) => None,
        Err(e) => Some(Diagnostic::from(e).error_type),
    }
}

/// Counts the DynamoDB requests a store's client sends, beside the store's own counter.
#[derive(Debug, Clone, Default)]
struct CountRequests(Arc<AtomicU32>);

impl Intercept for CountRequests {
    fn name(&self) -> &'static str {
        "doors_attacks::CountRequests"
    }

    fn read_before_transmit(
        &self,
        _ctx: &BeforeTransmitInterceptorContextRef<'_>,
        _rc: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// a fake Lambda endpoint for the real `LambdaDispatcher`

/// A scripted reply: status and body; status 0 closes the connection instead (the invoke was
/// delivered, its answer lost: the claim is kept, so its lease can be read). An empty script
/// closes every connection. `configurations`: each function's timeout, in seconds.
async fn fake_lambda(
    replies: Vec<(u16, Vec<u8>)>,
    configurations: Vec<(&'static str, u64)>,
) -> FakeLambda {
    let replies = replies
        .into_iter()
        .map(|(status, body)| (status, vec![], body))
        .collect();
    let configurations = configurations
        .into_iter()
        .map(|(function, timeout)| {
            (
                function,
                json!({"FunctionName": function, "Timeout": timeout}),
            )
        })
        .collect();
    FakeLambda::scripted(replies, configurations, (0, vec![], Vec::new())).await
}

async fn lambda_dispatcher(url: &str) -> LambdaDispatcher {
    let client = toolcall_dedup::dispatch::build_client(Some(url)).await;
    LambdaDispatcher::new(&client)
}

/// The demo tool's Bedrock reply to `ev`: what the routed tool Lambda answers.
fn tool_reply(ev: &Value) -> Vec<u8> {
    serde_json::to_vec(&demo().handle(ev).unwrap()).unwrap()
}

/// `fd-charge_card.json` in action group `group`, function `function`, for `amount`.
fn bedrock_call(group: &str, function: &str, amount: &str) -> Value {
    let mut ev = event_file("fd-charge_card.json");
    ev["actionGroup"] = json!(group);
    ev["function"] = json!(function);
    ev["parameters"][1]["value"] = json!(amount);
    ev
}

async fn send<S: Store, D: Dispatcher>(h: &Handler<S, D>, ev: &Value) -> Handled {
    h.handle(ev, &Invocation::default()).await
}

// ---------------------------------------------------------------------------------------------
// promise 1: a door not served, or through the wrong alias, touches nothing

/// Every door set, with and without the interceptor's alias, every qualifier, every door's
/// valid and malformed events and events no door recognises: a refused event is a Lambda error
/// of the right type (`DoorNotServed` for the gate, `InvalidEvent` for an event no door can
/// answer), counted once under the right outcome and the event's door, with no store request,
/// no tool run and so no catalog written; a malformed event of a served door is `bad_request`,
/// in its door's format where that format can carry it.
///
/// Fails if the gate is asked after the parse (a malformed event of a refused door would be
/// `bad_request`), if a door escapes the gate (a served interceptor through `live`), if a
/// refusal touches the store or a tool, or if a refusal's EMF line names another door.
#[tokio::test]
async fn every_door_and_qualifier_is_refused_or_served_as_the_gate_says() {
    let cases = cases();
    for doors in DOOR_SETS {
        for alias in [None, Some(ALIAS)] {
            let (telemetry, lines) = emf_telemetry();
            let h = Handler::new(
                servers::memory_store(ManualClock::starting_now()),
                demo(),
                &config(doors, alias),
                telemetry,
            )
            .with_settings(|s| s.wait = Duration::ZERO);
            for qualifier in QUALIFIERS {
                for case in &cases {
                    let what = format!(
                        "{} with DEDUP_DOORS={doors}, alias {alias:?}, through {qualifier:?}",
                        case.what
                    );
                    let want = expect(case, doors, alias, qualifier);
                    let requests = h.store().requests().total();
                    let ran = ledger(h.dispatcher()).len();
                    let handled = h
                        .handle_with_context(
                            &case.event,
                            &through(qualifier),
                            case.context.as_ref(),
                        )
                        .await;
                    let line = last_line(&lines);
                    let door = case.door.map_or("none", DoorName::as_str);
                    assert_eq!(line["Door"], door, "{what}: {line}");
                    let outcome = handled.outcome;
                    match want {
                        Expect::DoorRefused => {
                            assert_eq!(outcome, Outcome::DoorRefused, "{what}");
                            assert_eq!(line["door_refused"], 1, "{what}: {line}");
                        }
                        Expect::BadEventLambdaError | Expect::BadEventInFormat => {
                            assert_eq!(outcome, Outcome::BadRequest, "{what}: {handled:?}");
                            assert_eq!(line["bad_request"], 1, "{what}: {line}");
                        }
                        Expect::Served => {
                            assert!(
                                !matches!(outcome, Outcome::DoorRefused | Outcome::BadRequest),
                                "{what}: {handled:?}"
                            );
                        }
                    }
                    if want != Expect::Served {
                        assert_eq!(
                            h.store().requests().total(),
                            requests,
                            "{what}: a refusal made a store request"
                        );
                        assert_eq!(ledger(h.dispatcher()).len(), ran, "{what}: a tool ran");
                        assert_eq!(handled.key, None, "{what}");
                    }
                    let error_type = lambda_error_type(handled);
                    match want {
                        Expect::DoorRefused => {
                            assert_eq!(error_type.as_deref(), Some("DoorNotServed"), "{what}")
                        }
                        Expect::BadEventLambdaError => {
                            assert_eq!(error_type.as_deref(), Some("InvalidEvent"), "{what}")
                        }
                        Expect::BadEventInFormat | Expect::Served => {
                            assert_eq!(error_type, None, "{what}: answered in its format")
                        }
                    }
                }
            }
        }
    }
}

/// The same refusals against a DynamoDB table (dynalite), counted at the SDK client rather than by
/// the store's own counter: not one request leaves for an event the gate refuses or no door can
/// answer, through any qualifier.
///
/// Fails if the handler (or the store, say a lazy table check) sends any request before the
/// door question is answered.
#[cfg_attr(
    not(feature = "local-servers"),
    ignore = "needs the local DynamoDB servers: run scripts/test"
)]
#[tokio::test]
async fn a_refused_event_sends_no_request_to_the_table() {
    let sent = CountRequests::default();
    let store = servers::dynamodb_store_with(
        Backend::Dynalite,
        ManualClock::starting_now(),
        servers::config(),
        vec![servers::with_interceptor(sent.clone())],
    )
    .await;
    let doors = "bedrock,agentcore,interceptor,envelope";
    let h = Handler::new(
        store,
        demo(),
        &config(doors, Some(ALIAS)),
        Telemetry::quiet(),
    );
    let before = sent.0.load(Ordering::SeqCst);
    let mut refused = 0;
    for qualifier in QUALIFIERS {
        for case in cases() {
            let want = expect(&case, doors, Some(ALIAS), qualifier);
            if matches!(want, Expect::Served | Expect::BadEventInFormat) {
                continue;
            }
            let handled = h
                .handle_with_context(&case.event, &through(qualifier), case.context.as_ref())
                .await;
            assert!(handled.response.is_err(), "{}: {handled:?}", case.what);
            refused += 1;
        }
    }
    assert!(refused > 40, "{refused} refusals tried");
    assert_eq!(
        sent.0.load(Ordering::SeqCst),
        before,
        "requests sent to the table"
    );
    assert_eq!(h.store().requests().total(), 0);
    assert!(ledger(h.dispatcher()).is_empty());
}

// ---------------------------------------------------------------------------------------------
// promise 2: a forged event cannot pick another door

/// A Lambda target's arguments (the MCP client's) shaped as an interception, with the Gateway's
/// client context in every spelling and with odd tool names, are the Lambda target's: never the
/// interceptor's, so through the interceptor's alias they are refused, and no catalog or claim
/// is written. A client context that names no Gateway tool (the interceptor's own REQUEST_ID and
/// GATEWAY_ARN, a misspelt key) leaves the event to its shape.
///
/// Fails if `DoorName::of` looks at the interceptor marker before the client context, or stops
/// reading the lower-case spelling (a lower-case Gateway call dressed as an interception would
/// reach the interceptor flow through its alias).
#[tokio::test]
async fn a_gateway_tool_in_the_client_context_always_makes_the_lambda_target_door() {
    let listing = event_file("agentcore-interceptor/forged-tools_list.response.json");
    let tool_names = ["inventory___get_stock", "", "   ", "___", "inventory___"];
    let spellings = ["bedrockAgentCoreToolName", "bedrockagentcoreToolName"];
    let h = Handler::new(
        servers::memory_store(ManualClock::starting_now()),
        demo(),
        &config("bedrock,agentcore,interceptor,envelope", Some(ALIAS)),
        Telemetry::quiet(),
    );
    for spelling in spellings {
        for name in tool_names {
            let custom = context(&[(spelling, name), ("bedrockAgentCoreGatewayId", "victim-gw")]);
            let what = format!("{spelling}={name:?}");
            assert_eq!(
                DoorName::of(&listing, Some(&custom)),
                Some(DoorName::AgentCore),
                "{what}"
            );
            let refused = h
                .handle_with_context(&listing, &through(Some(ALIAS)), Some(&custom))
                .await;
            assert_eq!(refused.outcome, Outcome::DoorRefused, "{what}: {refused:?}");
        }
    }
    assert!(h.store().is_empty(), "no catalog, no claim");
    for custom in [
        context(&[
            ("REQUEST_ID", "gw-req-1"),
            (
                "GATEWAY_ARN",
                "arn:aws:bedrock-agentcore:us-east-1:1:gateway/gw",
            ),
        ]),
        context(&[("BedrockAgentCoreToolName", "inventory___get_stock")]),
        context(&[("bedrockAgentCoreToolName ", "inventory___get_stock")]),
        ClientContext::new(),
    ] {
        assert_eq!(
            DoorName::of(&listing, Some(&custom)),
            Some(DoorName::Interceptor),
            "{custom:?}"
        );
        for qualifier in QUALIFIERS.into_iter().filter(|q| *q != Some(ALIAS)) {
            let refused = h
                .handle_with_context(&listing, &through(qualifier), Some(&custom))
                .await;
            assert_eq!(
                refused.outcome,
                Outcome::DoorRefused,
                "{custom:?} through {qualifier:?}"
            );
        }
    }
    assert!(h.store().is_empty());
}

/// An event that carries several doors' markers is the first one's, in the one order
/// (`interceptorInputVersion`, then `actionGroup`, then `tool`), so `DEDUP_DOORS` refuses it
/// when that door is not served even though the event is valid for a served one: an envelope
/// harness cannot reach the Bedrock door by adding `actionGroup`, nor the interceptor by adding
/// the marker, nor can a forged Gateway client context open the Lambda-target door where it is
/// not served. Nothing runs.
///
/// Fails if the door were chosen by which parse succeeds, or among served doors only.
#[tokio::test]
async fn several_doors_markers_open_only_the_first_doors_door() {
    let envelope = event_file("envelope/charge_card.json");
    let bedrock = event_file("fd-charge_card.json");
    let mut with_group = envelope.clone();
    with_group["actionGroup"] = json!("payments");
    let mut bedrock_with_tool = bedrock.clone();
    bedrock_with_tool["tool"] = json!("charge_card");
    bedrock_with_tool["run_id"] = json!("run-1");
    let mut everything = bedrock_with_tool.clone();
    everything["interceptorInputVersion"] = json!("1.0");
    let gateway = client_context("agentcore/charge_card.json").unwrap();
    let forged: [(&str, &Value, Option<&ClientContext>, DoorName, &str); 5] = [
        (
            "envelope with actionGroup",
            &with_group,
            None,
            DoorName::Bedrock,
            "envelope",
        ),
        (
            "bedrock with tool",
            &bedrock_with_tool,
            None,
            DoorName::Bedrock,
            "envelope",
        ),
        (
            "every marker",
            &everything,
            None,
            DoorName::Interceptor,
            "bedrock,agentcore,envelope",
        ),
        (
            "envelope with a Gateway tool",
            &envelope,
            Some(&gateway),
            DoorName::AgentCore,
            "bedrock,interceptor,envelope",
        ),
        (
            "every marker with a Gateway tool",
            &everything,
            Some(&gateway),
            DoorName::AgentCore,
            "bedrock,interceptor,envelope",
        ),
    ];
    for (what, ev, custom, door, served) in forged {
        assert_eq!(DoorName::of(ev, custom), Some(door), "{what}");
        for alias in [None, Some(ALIAS)] {
            let (telemetry, lines) = emf_telemetry();
            let h = Handler::new(
                MemoryStore::new(),
                demo(),
                &config(served, alias),
                telemetry,
            );
            for qualifier in QUALIFIERS {
                let refused = h.handle_with_context(ev, &through(qualifier), custom).await;
                assert_eq!(
                    refused.outcome,
                    Outcome::DoorRefused,
                    "{what} with DEDUP_DOORS={served}, alias {alias:?}, through {qualifier:?}"
                );
                assert_eq!(last_line(&lines)["Door"], door.as_str(), "{what}");
            }
            assert!(h.store().is_empty(), "{what}");
            assert!(ledger(h.dispatcher()).is_empty(), "{what}: a tool ran");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// promise 3: the routes in force give a call's namespace, target and lease together

/// The handler a config document describes, built as `src/main.rs` builds it on every refresh:
/// the configuration from the document, and the container's dispatcher under its routes.
fn build_like_main(
    store: MemoryStore,
    dispatcher: LambdaDispatcher,
) -> impl Fn(
    &Document,
) -> Result<Handler<MemoryStore, LambdaDispatcher>, toolcall_dedup::config::ConfigError>
+ Send
+ Sync {
    move |document: &Document| {
        let config = Config::from_lookup_and_document(|_| None, Some(document), StoreKind::Memory)?;
        Ok(Handler::new(
            store.clone(),
            dispatcher.clone(),
            &config,
            Telemetry::quiet(),
        )
        .with_settings(|s| s.wait = Duration::from_millis(50)))
    }
}

/// Across config refreshes that move the route (an exact route becomes a group route to another
/// function with another timeout, then a catch-all that states no namespace and no timeout),
/// each call's key namespace, invoked function and lease come from the routes in force when it
/// is made, all three from the same routes; and a retry across a refresh that keeps the stated
/// namespace replays instead of running the tool again.
///
/// Fails if `with_routes` (or the reload) kept the old routes for any of the three, or if the
/// namespace came from anything but the route the call takes (a second copy of the routes).
#[tokio::test]
async fn a_refresh_moves_a_calls_namespace_target_and_lease_together() {
    let first = bedrock_call("payments", "charge_card", "42.50");
    let second = bedrock_call("payments", "charge_card", "43.00");
    let third = bedrock_call("payments", "charge_card", "44.00");
    // The first call's tool answers; later invokes are delivered and their answers lost, so their
    // claims stay with the lease they were given.
    let fake = fake_lambda(vec![(200, tool_reply(&first))], vec![]).await;
    let path = std::env::temp_dir().join(format!(
        "dedup-doors-{}.json",
        uuid::Uuid::new_v4().simple()
    ));
    let write =
        |routes: Value| std::fs::write(&path, json!({"routes": routes}).to_string()).unwrap();
    write(
        json!({"payments/charge_card": {"function": "fn-a", "timeout_seconds": 120, "namespace": "pay"}}),
    );
    let loader = Loader::new(ConfigSource::File(path.clone()), None, None).await;
    let loaded = loader.load().await.unwrap();
    let store = MemoryStore::new();
    let dispatcher = lambda_dispatcher(&fake.url).await;
    let build = build_like_main(store.clone(), dispatcher);
    let reloading = Reloading::start(
        loader,
        loaded,
        build,
        Duration::from_secs(3600),
        Telemetry::quiet(),
    )
    .unwrap();
    let namespace = |key: &Option<String>| {
        let store = store.clone();
        let key = key.clone().expect("a key");
        async move {
            store
                .get(&key)
                .await
                .unwrap()
                .expect("a record")
                .about
                .namespace
        }
    };

    let ran = send(&reloading.current(), &first).await;
    assert_eq!(ran.outcome, Outcome::Executed, "{ran:?}");
    assert_eq!(namespace(&ran.key).await.as_deref(), Some("bedrock:pay"));
    assert_eq!(fake.invoked(), ["fn-a"]);

    // The route moves: another function, another timeout, a group route; the same namespace.
    write(
        json!({"payments/*": {"function": "fn-b", "timeout_seconds": 600, "namespace": "pay", "shared": true}}),
    );
    reloading
        .refresh()
        .await
        .expect("the new document is taken");
    let retry = send(&reloading.current(), &first).await;
    assert_eq!(retry.outcome, Outcome::Replayed, "{retry:?}");
    assert_eq!(retry.key, ran.key);
    assert_eq!(
        fake.invoked(),
        ["fn-a"],
        "the retry across the refresh ran the tool again"
    );
    let claimed_at = store.now_ms();
    let kept = send(&reloading.current(), &second).await;
    assert_eq!(kept.outcome, Outcome::ToolError, "{kept:?}");
    assert_eq!(fake.invoked(), ["fn-a", "fn-b"], "the new route's function");
    assert_eq!(namespace(&kept.key).await.as_deref(), Some("bedrock:pay"));
    let record = store
        .get(kept.key.as_deref().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.status, Status::InProgress);
    let lease = record.lease_until_ms - claimed_at;
    assert!(
        lease >= (600 + TOOL_START_ALLOWANCE.as_secs() as i64) * 1000,
        "a lease of {lease} ms under a route whose tool runs for 600 s"
    );

    // The namespace is no longer stated, nor the timeout: the door's namespace, Lambda's maximum.
    write(json!({"*": "fn-c"}));
    reloading
        .refresh()
        .await
        .expect("the new document is taken");
    let claimed_at = store.now_ms();
    let third_ran = send(&reloading.current(), &third).await;
    assert_eq!(third_ran.outcome, Outcome::ToolError, "{third_ran:?}");
    assert_eq!(fake.invoked(), ["fn-a", "fn-b", "fn-c"]);
    assert_eq!(
        namespace(&third_ran.key).await.as_deref(),
        Some("bedrock:K7QZ2M4RTB/payments")
    );
    let record = store
        .get(third_ran.key.as_deref().unwrap())
        .await
        .unwrap()
        .unwrap();
    let lease = record.lease_until_ms - claimed_at;
    assert!(
        lease >= (900 + TOOL_START_ALLOWANCE.as_secs() as i64) * 1000,
        "a lease of {lease} ms for a tool whose timeout is unknown"
    );
    std::fs::remove_file(&path).ok();
}

/// `dedup replay` "reads the same environment variables as the Lambda, so it behaves like the
/// deployed function" (docs/cli.md): it builds `Handler::new(store, DemoTool, &config, ..)` from
/// the same `DEDUP_ROUTES` (cli/src/commands/replay.rs), and so do the chaos soak's handlers.
/// Before d109063 the namespace a route states came from the config (`DoorSettings.routes`), so
/// every handler of one config keyed a call alike; now it comes from the dispatcher alone, and a
/// dispatcher that does not carry the routes (the demo tool's `Route::in_process`) silently keys
/// the call in the door's namespace while the config in hand states another. One config, one
/// event: the Lambda's handler and replay's must derive the same key.
///
/// Fails today: the config's routes state `"namespace": "pay"`, the Lambda keys in
/// `bedrock:pay`, replay in `bedrock:K7QZ2M4RTB/payments`.
#[tokio::test]
async fn every_handler_of_one_config_keys_a_call_in_the_namespace_its_routes_state() {
    let vars: HashMap<&str, &str> = [(
        "DEDUP_ROUTES",
        r#"{"payments/charge_card": {"function": "charge-fn", "namespace": "pay"}}"#,
    )]
    .into();
    let config =
        Config::from_lookup(|v| vars.get(v).map(|s| s.to_string()), StoreKind::Memory).unwrap();
    let ev = event_file("fd-charge_card.json");
    let fake = fake_lambda(vec![(200, tool_reply(&ev))], vec![]).await;
    // src/main.rs: the dispatcher from the config's routes.
    let client = toolcall_dedup::dispatch::build_client(Some(&fake.url)).await;
    let lambda = Handler::new(
        MemoryStore::new(),
        LambdaDispatcher::new(&client),
        &config,
        Telemetry::quiet(),
    );
    // cli/src/commands/replay.rs: the demo tool in-process, the same config.
    let replay = Handler::new(MemoryStore::new(), demo(), &config, Telemetry::quiet());
    let deployed = send(&lambda, &ev).await;
    assert_eq!(deployed.outcome, Outcome::Executed, "{deployed:?}");
    let replayed = send(&replay, &ev).await;
    assert_eq!(replayed.outcome, Outcome::Executed, "{replayed:?}");
    let namespace = |store: &MemoryStore, key: &Option<String>| {
        let (store, key) = (store.clone(), key.clone().expect("a key"));
        async move {
            store
                .get(&key)
                .await
                .unwrap()
                .expect("a record")
                .about
                .namespace
        }
    };
    let deployed_ns = namespace(lambda.store(), &deployed.key).await;
    assert_eq!(deployed_ns.as_deref(), Some("bedrock:pay"));
    let replay_ns = namespace(replay.store(), &replayed.key).await;
    assert_eq!(
        (replayed.key, replay_ns),
        (deployed.key, deployed_ns),
        "one config, one event, two keys: the handler ignores the namespace its config's routes state"
    );
}

/// Two spellings of one route (a padded pattern, or an OpenAPI method in both cases, which
/// `Routes::insert` files under one entry) must not give a call one entry's function and the
/// other's namespace: the table is either refused or consistent.
///
/// Fails today: `Routes::parse` files the later spelling's target over the earlier one's, but
/// keeps the earlier one's `"namespace"` beside it, so `take` (and `LambdaDispatcher::route`)
/// returns `fn-b` keyed in `ns-a`, a namespace no route to `fn-b` states.
#[tokio::test]
async fn two_spellings_of_one_route_never_mix_one_targets_namespace_with_anothers_function() {
    let tables = [
        (
            r#"{"payments/charge_card": {"function": "fn-a", "namespace": "ns-a"}, "payments/charge_card ": "fn-b"}"#,
            "payments",
            "charge_card",
        ),
        (
            r#"{"payments/POST /charges": {"function": "fn-a", "namespace": "ns-a"}, "payments/post /charges": "fn-b"}"#,
            "payments",
            "POST /charges",
        ),
        (
            r#"{" *": {"function": "fn-a", "namespace": "ns-a", "shared": true}, "*": "fn-b"}"#,
            "any",
            "tool",
        ),
    ];
    let fake = fake_lambda(vec![], vec![]).await;
    for (table, group, tool) in tables {
        let Ok(routes) = Routes::parse(table) else {
            continue; // refusing the ambiguity is fine
        };
        let taken = routes
            .take(group, tool)
            .map(|(t, ns)| (t.to_string(), ns.map(str::to_string)));
        let written = [
            Some(("fn-a".to_string(), Some("ns-a".to_string()))),
            Some(("fn-b".to_string(), None)),
        ];
        assert!(
            written.contains(&taken),
            "{table}: the route taken is {taken:?}"
        );
        let route = lambda_dispatcher(&fake.url)
            .await
            .route(&Routes::parse(table).unwrap(), group, tool)
            .unwrap();
        assert!(
            written.contains(&Some((route.target.clone(), route.namespace.clone()))),
            "{table}: {route:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// promise 4: the lease covers the tool's run time whichever route the call takes

/// For every route kind (exact, group, catch-all), a stated timeout and a looked-up one give the
/// route that run time plus the start allowance, and the claim's lease covers it; after a
/// refresh (`with_routes`) the looked-up timeouts still apply, and a function the new routes
/// bring in that was never looked up is leased for Lambda's maximum, never less than it runs.
///
/// Fails if `route` sized the run time by another route's function, if the executor's lease
/// ignored `Route::max_run_time`, or if `with_routes` dropped the looked-up timeouts.
#[tokio::test]
async fn every_route_kind_leases_past_its_tools_timeout() {
    let fake = fake_lambda(
        vec![],
        vec![("fn-x", 320), ("fn-y", 420), ("fn-z", 520), ("fn-new", 700)],
    )
    .await;
    let kinds = [
        ("pay", "exact_tool"),
        ("grp", "any_tool"),
        ("other", "any_tool"),
    ];
    let stated = Routes::parse(
        r#"{"pay/exact_tool": {"function": "fn-exact", "timeout_seconds": 300},
            "grp/*": {"function": "fn-group", "timeout_seconds": 400},
            "*": {"function": "fn-default", "timeout_seconds": 500}}"#,
    )
    .unwrap();
    let looked_up =
        Routes::parse(r#"{"pay/exact_tool": "fn-x", "grp/*": "fn-y", "*": "fn-z"}"#).unwrap();
    let dispatcher = lambda_dispatcher(&fake.url).await;
    dispatcher.look_up_timeouts(&looked_up).await;
    // A refresh: the same functions under other patterns, and one never looked up.
    let refreshed = Routes::parse(
        r#"{"pay/*": "fn-x", "grp/any_tool": "fn-y", "other/any_tool": "fn-new", "*": "fn-z"}"#,
    )
    .unwrap();
    // What each table routes the three kinds to: (seconds, function).
    type Table = (&'static str, Routes, [(u64, &'static str); 3]);
    let tables: [Table; 3] = [
        (
            "stated",
            stated,
            [(300, "fn-exact"), (400, "fn-group"), (500, "fn-default")],
        ),
        (
            "looked up",
            looked_up,
            [(320, "fn-x"), (420, "fn-y"), (520, "fn-z")],
        ),
        (
            "refreshed",
            refreshed,
            [(320, "fn-x"), (420, "fn-y"), (900, "fn-new")],
        ),
    ];
    for (what, routes, wants) in tables {
        for ((group, tool), (seconds, target)) in kinds.into_iter().zip(wants) {
            let route = dispatcher.route(&routes, group, tool).unwrap();
            assert_eq!(route.target, target, "{what} {group}/{tool}");
            assert_eq!(
                route.max_run_time,
                Duration::from_secs(seconds) + TOOL_START_ALLOWANCE,
                "{what} {group}/{tool}"
            );
        }
        let config = Config {
            routes,
            ..Config::default()
        };
        let h = Handler::new(
            MemoryStore::new(),
            dispatcher.clone(),
            &config,
            Telemetry::quiet(),
        );
        for ((group, tool), (seconds, _)) in kinds.into_iter().zip(wants) {
            let claimed_at = h.store().now_ms();
            let kept = send(&h, &bedrock_call(group, tool, "42.50")).await;
            assert_eq!(
                kept.outcome,
                Outcome::ToolError,
                "{what} {group}/{tool}: {kept:?}"
            );
            let record = h
                .store()
                .get(kept.key.as_deref().unwrap())
                .await
                .unwrap()
                .unwrap();
            assert_eq!(record.status, Status::InProgress, "{what} {group}/{tool}");
            let lease = record.lease_until_ms - claimed_at;
            let covered = ((seconds + TOOL_START_ALLOWANCE.as_secs()) * 1000) as i64;
            assert!(
                lease >= covered,
                "{what} {group}/{tool}: a lease of {lease} ms for a tool that runs {seconds} s"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// promise 5: refusals in the caller's format, named by door

/// A malformed event of a served door is answered in that door's format where the format can
/// carry it: the Lambda target's notice body, the envelope's `error` with `dedup.outcome`
/// `bad_request`, a Bedrock FAILURE addressed to the action group; and its EMF line names the
/// door.
///
/// Fails if a malformed event's refusal lost its door's format (a Lambda error where the caller
/// could have read an answer) or was counted under another door.
#[tokio::test]
async fn a_malformed_event_is_refused_in_its_doors_format_under_its_door() {
    let (telemetry, lines) = emf_telemetry();
    let h = Handler::new(MemoryStore::new(), demo(), &Config::default(), telemetry);
    let answer = |handled: &Handled| -> Value {
        serde_json::from_str(handled.response.as_ref().expect("an answer").get()).unwrap()
    };
    for file in [
        "agentcore/bad-empty-tool-name.json",
        "agentcore/bad-arguments-not-object.json",
    ] {
        let custom = client_context(file).unwrap();
        let handled = h
            .handle_with_context(&event_file(file), &Invocation::default(), Some(&custom))
            .await;
        assert_eq!(handled.outcome, Outcome::BadRequest, "{file}");
        let body = answer(&handled);
        assert!(
            body["status"].is_string() && body["message"].is_string(),
            "{file}: {body}"
        );
        assert_eq!(last_line(&lines)["Door"], "agentcore", "{file}");
    }
    let unparsable = [
        json!({"tool": 7, "input": {}, "run_id": "r-1"}),
        json!({"tool": "charge_card", "namespace": 7, "input": {}, "run_id": "r-1"}),
        json!({"tool": "charge_card", "input": {}, "run_id": {"not": "text"}}),
    ];
    let envelopes = [
        "envelope/bad-unknown-field.json",
        "envelope/bad-input-and-args.json",
        "envelope/bad-no-run-id.json",
    ]
    .into_iter()
    .map(|file| (file.to_string(), event_file(file)))
    .chain(unparsable.into_iter().map(|ev| (ev.to_string(), ev)));
    for (file, ev) in envelopes {
        let handled = send(&h, &ev).await;
        assert_eq!(handled.outcome, Outcome::BadRequest, "{file}");
        let body = answer(&handled);
        assert!(body["error"]["type"].is_string(), "{file}: {body}");
        assert_eq!(body["dedup"]["outcome"], "bad_request", "{file}: {body}");
        assert_eq!(last_line(&lines)["Door"], "envelope", "{file}");
    }
    let handled = send(&h, &event_file("bad-missing-session.json")).await;
    assert_eq!(handled.outcome, Outcome::BadRequest);
    let body = answer(&handled);
    assert_eq!(body["response"]["actionGroup"], "payments", "{body}");
    assert_eq!(
        body["response"]["functionResponse"]["responseState"], "FAILURE",
        "{body}"
    );
    assert_eq!(last_line(&lines)["Door"], "bedrock");
    assert!(h.store().is_empty());
}

/// The Lambda error of an event no door recognises says what each door looks for, "in this
/// order" as it claims: `DoorName::of` looks at four doors, the interceptor's marker second.
/// An operator (or a Gateway whose interceptor event lost its marker) reading the error must be
/// told about the interceptor door too.
///
/// Fails today: the message (`Unanswerable::NoEntryPoint`) lists the client context,
/// `actionGroup` and `tool` only, never `interceptorInputVersion`.
#[tokio::test]
async fn an_unrecognised_events_error_names_every_door_it_looks_for() {
    let h = Handler::new(
        MemoryStore::new(),
        demo(),
        &Config::default(),
        Telemetry::quiet(),
    );
    let handled = send(&h, &json!({"mcp": {"gatewayRequest": {}}})).await;
    assert_eq!(handled.outcome, Outcome::BadRequest);
    let message = match handled.response {
        Err(e @ HandlerError::InvalidEvent(_)) => e.to_string(),
        other => panic!("expected a Lambda error, got {other:?}"),
    };
    for marker in [
        "bedrockAgentCoreToolName",
        "interceptorInputVersion",
        "actionGroup",
        "\"tool\"",
    ] {
        assert!(message.contains(marker), "{marker} missing from: {message}");
    }
}

/// The `dedup invocation` log line of a refusal (the one Logs Insights queries by
/// `fields.reason`, docs/operations.md) names the door the refusal is counted under, in its
/// `door` field: a door-refused event, and a malformed event of each door.
///
/// Failed for a malformed Bedrock event (an `actionGroup` with an empty `function`): its EMF line
/// counted it under `Door: bedrock`, but every Bedrock parse failure was logged as "unrecognised
/// event", and the line had no `door` field at all.
#[tokio::test]
async fn a_refusals_log_line_names_its_door() {
    use crate::fixture::logged;
    let h = Handler::new(
        MemoryStore::new(),
        demo(),
        &config("bedrock,agentcore,envelope", Some(ALIAS)),
        Telemetry::quiet(),
    );
    let empty_tool = client_context("agentcore/bad-empty-tool-name.json").unwrap();
    let refusals: [(&str, Value, Option<&ClientContext>, Option<&str>); 5] = [
        (
            "interceptor",
            event_file("agentcore-interceptor/forged-tools_list.response.json"),
            None,
            Some(ALIAS),
        ),
        (
            "envelope",
            event_file("envelope/charge_card.json"),
            None,
            Some(ALIAS),
        ),
        (
            "agentcore",
            event_file("agentcore/bad-empty-tool-name.json"),
            Some(&empty_tool),
            Some("live"),
        ),
        (
            "envelope",
            json!({"tool": 7, "input": {}, "run_id": "r-1"}),
            None,
            Some("live"),
        ),
        (
            "bedrock",
            event_file("bad-empty-function.json"),
            None,
            Some("live"),
        ),
    ];
    for (door, ev, custom, qualifier) in refusals {
        let (handled, logs) = logged(h.handle_with_context(&ev, &through(qualifier), custom)).await;
        assert!(
            matches!(handled.outcome, Outcome::DoorRefused | Outcome::BadRequest),
            "{door}: {handled:?}"
        );
        let line = logs
            .lines()
            .find(|l| l.contains("dedup invocation"))
            .unwrap_or_else(|| panic!("{door}: no dedup invocation line in {logs}"));
        let refusal_lines: Vec<&str> = logs
            .lines()
            .filter(|l| l.contains("refused") || l.contains("dedup invocation"))
            .collect();
        assert!(
            refusal_lines
                .iter()
                .any(|l| l.to_ascii_lowercase().contains(door)),
            "{door}: the refusal's log names no door: {line}\n{logs}"
        );
        assert!(
            line.contains(&format!("door=\"{door}\""))
                || line.contains(&format!("\"door\":\"{door}\"")),
            "{door}: the dedup invocation line has no door field: {line}"
        );
    }
}

/// A function a refreshed config routes to is looked up like the others: the container looks up
/// timeouts in the background "at cold start and every five minutes" (`keep_timeouts_current`,
/// spawned by src/main.rs on the dispatcher it starts with), and a refresh only hands the
/// looked-up map to the new routes (`with_routes`). This is the liveness side of promise 4 (the
/// lease never falls short: an unknown timeout is leased for Lambda's maximum), and predates
/// d109063.
///
/// Fails today: the background lookup reads the start-up routes' functions only, so a function
/// first routed to by a refresh keeps a 911 s lease for the container's life (a killed call
/// blocks its key for 15 minutes instead of the tool's 2).
#[tokio::test]
async fn a_function_a_refresh_routes_to_is_looked_up_like_the_others() {
    let fake = fake_lambda(vec![], vec![("fn-old", 60), ("fn-new", 120)]).await;
    // src/main.rs: one dispatcher, whose clone keeps timeouts current for the start-up routes.
    let started = lambda_dispatcher(&fake.url).await;
    let start_routes = Routes::parse(r#"{"*": "fn-old"}"#).unwrap();
    // A refresh (src/main.rs's build closure): the handler's routes change, and a call is routed
    // to fn-new before its timeout is known (Lambda's maximum, the safe side).
    let refreshed = Routes::parse(r#"{"*": "fn-new"}"#).unwrap();
    assert_eq!(
        started.route(&refreshed, "g", "t").unwrap().max_run_time,
        Duration::from_secs(900) + TOOL_START_ALLOWANCE
    );
    // What the background task does every five minutes, with the start-up routes.
    started.look_up_timeouts(&start_routes).await;
    assert_eq!(
        started.route(&start_routes, "g", "t").unwrap().max_run_time,
        Duration::from_secs(60) + TOOL_START_ALLOWANCE
    );
    assert_eq!(
        started.route(&refreshed, "g", "t").unwrap().max_run_time,
        Duration::from_secs(120) + TOOL_START_ALLOWANCE,
        "fn-new, routed to since the refresh, is never looked up"
    );
}
