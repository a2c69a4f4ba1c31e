//! Attacks on `DEDUP_INTERCEPTOR_ALIAS` (issue 48 item 5, one alias per trust domain): the promise
//! is that a forged `tools/list` RESPONSE from an envelope, Bedrock or Lambda-target invoker never
//! reaches a catalog, and that the interceptor's alias serves nothing else. Each test is one
//! attempt to break it: events two doors could claim, events that look like the interceptor's
//! without its marker, qualifiers near the alias, the real Lambda entry point reading the invoked
//! ARN, forged RESPONSEs against a live claim, `DEDUP_DOORS` combined with the alias, what a
//! refusal reports, and the settings that could set, clear or misspell the alias.

use std::collections::HashMap;

use lambda_runtime::{Context, Diagnostic, LambdaEvent};
use serde_json::{Value, json};
use toolcall_dedup::MemoryStore;
use toolcall_dedup::config::{Config, ConfigError, Doors, StoreKind, document};
use toolcall_dedup::dispatch::Dispatcher;
use toolcall_dedup::handler::DoorName;
use toolcall_dedup::handler::{ClientContext, Handled, Handler, HandlerError, Invocation};
use toolcall_dedup::internals::catalog_key;
use toolcall_dedup::stand_ins::demo::DemoTool;
use toolcall_dedup::store::{ManualClock, Status, Store};
use toolcall_dedup::telemetry::{Outcome, Sink, Telemetry};

use crate::fixture::{charges, client_context, demo, event as event_file, handler};
use crate::gateway::{self, response};
use crate::servers;

const ALIAS: &str = "interceptor";
const FUNCTION: &str = "arn:aws:lambda:us-east-1:123456789012:function:dedup";
/// Where the forged listing (`events/agentcore-interceptor/forged-tools_list.response.json`, no
/// gateway named) would be learned.
const CATALOG: &str = "interceptor:-/inventory";
/// The qualifiers a harness may invoke through, none of them the interceptor's alias.
const ELSEWHERE: [Option<&str>; 9] = [
    None,
    Some("live"),
    Some("$LATEST"),
    Some("1"),
    Some("Interceptor"),
    Some("INTERCEPTOR"),
    Some("interceptor "),
    Some("interceptor-live"),
    Some(""),
];

fn aliased(doors: &str) -> Config {
    Config {
        interceptor_alias: Some(ALIAS.into()),
        doors: Doors::parse(doors).unwrap(),
        ..Config::default()
    }
}

fn through(qualifier: Option<&str>) -> Invocation {
    Invocation {
        qualifier: qualifier.map(str::to_string),
        ..Invocation::default()
    }
}

fn demo_handler(config: &Config) -> Handler<MemoryStore, DemoTool> {
    handler(
        servers::memory_store(ManualClock::starting_now()),
        demo(),
        config,
    )
}

fn forged() -> Value {
    event_file("agentcore-interceptor/forged-tools_list.response.json")
}

/// `ev` (with `context`) through `qualifier`.
async fn invoke<S: Store, D: Dispatcher>(
    h: &Handler<S, D>,
    ev: &Value,
    qualifier: Option<&str>,
    context: Option<&ClientContext>,
) -> Handled {
    h.handle_with_context(ev, &through(qualifier), context)
        .await
}

fn refusal_text(h: &Handled) -> String {
    match &h.response {
        Err(e @ HandlerError::InvalidEvent(_)) => e.to_string(),
        other => panic!("expected a Lambda error, got {other:?}"),
    }
}

/// Refused before any store request, as the wrong alias for its door.
#[track_caller]
fn assert_wrong_alias(h: &Handled, what: &str) {
    assert_eq!(h.outcome, Outcome::DoorRefused, "{what}: {h:?}");
    let text = refusal_text(h);
    assert!(
        text.contains("alias serves the interceptor door"),
        "{what}: {text}"
    );
}

async fn catalog<S: Store>(store: &S) -> bool {
    store.get(&catalog_key(CATALOG)).await.unwrap().is_some()
}

/// An event carrying the interceptor's marker and another door's members in its payload
/// (`actionGroup`, `tool`) is the interceptor's wherever it comes in: refused through any other
/// qualifier, and through the alias handled by the interceptor flow alone (the demo tool never
/// runs, whatever else the event says).
#[tokio::test]
async fn an_interceptor_event_dressed_as_another_door_is_still_the_interceptors() {
    let h = demo_handler(&aliased("bedrock,agentcore,interceptor,envelope"));
    let mut bedrock = forged();
    for (k, v) in event_file("fd-charge_card.json").as_object().unwrap() {
        bedrock[k] = v.clone();
    }
    let mut envelope = forged();
    for (k, v) in event_file("envelope/charge_card.json").as_object().unwrap() {
        envelope[k] = v.clone();
    }
    let hybrids = [("with actionGroup", bedrock), ("with tool", envelope)];
    for (what, ev) in &hybrids {
        for qualifier in ELSEWHERE {
            let refused = invoke(&h, ev, qualifier, None).await;
            assert_wrong_alias(&refused, &format!("{what} through {qualifier:?}"));
        }
    }
    assert!(h.store().is_empty(), "nothing read or written");
    for (what, ev) in &hybrids {
        let served = invoke(&h, ev, Some(ALIAS), None).await;
        assert_eq!(
            served.outcome,
            Outcome::PassedOn,
            "{what}: the interceptor flow"
        );
        assert!(served.response.is_ok(), "{what}");
    }
    assert_eq!(charges(h.dispatcher()), 0, "the alias runs no tool");
    assert!(
        catalog(h.store()).await,
        "the Gateway's own listing is learned"
    );
}

/// A Lambda-target invocation's payload is the tool's arguments, which the MCP client writes;
/// only its client context (`bedrockAgentCoreToolName`) is the Gateway's. Arguments shaped as a
/// `tools/list` RESPONSE interception (the marker, `mcp`, a `host` header naming another gateway)
/// are still a Lambda-target call: through the interceptor's alias (a gateway whose role may
/// invoke that alias alone, with the function as one of its Lambda targets) it must be refused,
/// and through any qualifier it must never reach a catalog. `door_name` checks the payload's
/// marker before the client context, so it is taken for an interception and learned, in the
/// namespace of the gateway its forged `host` header names; with that gateway trusted, the
/// forged `x-dedup: ignore` makes two different reservations one key.
#[tokio::test]
async fn a_gateway_targets_arguments_shaped_as_an_interception_never_reach_a_catalog() {
    const VICTIM: &str = "victim-gw";
    let host = format!("{VICTIM}.gateway.bedrock-agentcore.us-east-1.amazonaws.com");
    let config = Config {
        trusted_annotations: vec![VICTIM.into()],
        ..aliased("agentcore,interceptor")
    };
    let h = gateway::container(servers::memory_store(ManualClock::starting_now()), &config);
    // What an MCP client sends a Lambda target as `arguments`, and the Gateway's client context.
    let mut arguments = forged();
    arguments["mcp"]["gatewayRequest"]["headers"]["host"] = json!(host);
    let target = client_context("agentcore/charge_card.json").unwrap();
    let victim_catalog = catalog_key(&format!("interceptor:{VICTIM}/inventory"));
    let through_alias = invoke(&h, &arguments, Some(ALIAS), Some(&target)).await;
    assert_eq!(
        through_alias.outcome,
        Outcome::DoorRefused,
        "a Lambda-target call through the interceptor's alias: {through_alias:?}"
    );
    assert!(
        h.store().get(&victim_catalog).await.unwrap().is_none(),
        "the MCP client's forged listing reached the victim gateway's catalog"
    );
    // What the forged listing would do: the victim gateway's two different reservations.
    let reserve = |id: u64, quantity: u64| {
        let mut ev = gateway::request(
            "inventory___reserve_stock",
            Some("s-1"),
            id,
            json!({"sku": "SKU-1", "quantity": quantity}),
        );
        ev["mcp"]["gatewayRequest"]["headers"]["host"] = json!(host);
        ev
    };
    let five = reserve(1, 5);
    assert_eq!(
        invoke(&h, &five, Some(ALIAS), None).await.outcome,
        Outcome::Executed
    );
    invoke(&h, &response(&five, "reserved 5"), Some(ALIAS), None).await;
    let five_hundred = invoke(&h, &reserve(2, 500), Some(ALIAS), None).await;
    assert_eq!(
        five_hundred.outcome,
        Outcome::Executed,
        "500 units are not 5: {five_hundred:?}"
    );
}

/// The same arguments, shaped as a `tools/call` REQUEST and then its RESPONSE, make a claim in
/// the victim gateway's namespace and settle it with the MCP client's own "result": the victim's
/// genuine call (its REQUEST through the alias, with the Gateway's `GATEWAY_ARN` and
/// `REQUEST_ID`) is then answered with the forged result and never reaches its target.
#[tokio::test]
async fn a_gateway_targets_arguments_shaped_as_an_interception_never_settle_a_call() {
    let host = "victim-gw.gateway.bedrock-agentcore.us-east-1.amazonaws.com";
    let h = gateway::container(
        servers::memory_store(ManualClock::starting_now()),
        &aliased("agentcore,interceptor"),
    );
    let target = client_context("agentcore/charge_card.json").unwrap();
    let mut call = gateway::request(
        "inventory___reserve_stock",
        Some("s-1"),
        1,
        json!({"sku": "SKU-1", "quantity": 7}),
    );
    call["mcp"]["gatewayRequest"]["headers"]["host"] = json!(host);
    for ev in [call.clone(), response(&call, "reserved 7 (forged)")] {
        let answered = invoke(&h, &ev, Some(ALIAS), Some(&target)).await;
        assert_eq!(
            answered.outcome,
            Outcome::DoorRefused,
            "a Lambda-target call through the interceptor's alias: {answered:?}"
        );
    }
    assert!(h.store().is_empty(), "no claim, no result");
    let mut genuine = call.clone();
    genuine["mcp"]["gatewayRequest"]["body"]["id"] = json!(9);
    let gateway_context: ClientContext = [
        ("REQUEST_ID", "gw-request-1"),
        (
            "GATEWAY_ARN",
            "arn:aws:bedrock-agentcore:us-east-1:123456789012:gateway/victim-gw",
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let answered = invoke(&h, &genuine, Some(ALIAS), Some(&gateway_context)).await;
    assert_eq!(answered.outcome, Outcome::Executed, "{answered:?}");
}

/// Events that look like an interceptor invocation but lack its exact marker (another spelling,
/// the marker nested, the event wrapped in an array or a string) are no door's through any
/// qualifier: never learned, never served, nothing read. One with the marker set to `null` is
/// the interceptor's (refused elsewhere), and through the alias is passed on unread, unlearned.
#[tokio::test]
async fn interceptor_lookalikes_never_reach_a_catalog() {
    let h = demo_handler(&aliased("bedrock,agentcore,interceptor,envelope"));
    let listing = forged();
    let mut respelled = listing.clone();
    let version = respelled
        .as_object_mut()
        .unwrap()
        .remove("interceptorInputVersion")
        .unwrap();
    let mut capital = respelled.clone();
    capital["InterceptorInputVersion"] = version.clone();
    let mut snake = respelled.clone();
    snake["interceptor_input_version"] = version.clone();
    let mut nested = respelled.clone();
    nested["mcp"]["interceptorInputVersion"] = version;
    let lookalikes = [
        ("capitalised marker", capital),
        ("snake-case marker", snake),
        ("marker inside mcp", nested),
        ("no marker", respelled),
        ("wrapped in an array", json!([listing])),
        ("as a JSON string", json!(listing.to_string())),
        ("under a payload member", json!({"payload": listing})),
    ];
    for (what, ev) in &lookalikes {
        for qualifier in ELSEWHERE.iter().copied().chain([Some(ALIAS)]) {
            let answered = invoke(&h, ev, qualifier, None).await;
            assert!(
                matches!(answered.outcome, Outcome::BadRequest | Outcome::DoorRefused),
                "{what} through {qualifier:?}: {answered:?}"
            );
            assert!(answered.response.is_err(), "{what} through {qualifier:?}");
        }
    }
    assert!(h.store().is_empty(), "nothing read or written");
    let mut null_marker = forged();
    null_marker["interceptorInputVersion"] = Value::Null;
    for qualifier in ELSEWHERE {
        assert_wrong_alias(
            &invoke(&h, &null_marker, qualifier, None).await,
            "a null marker",
        );
    }
    let unread = invoke(&h, &null_marker, Some(ALIAS), None).await;
    assert_eq!(unread.outcome, Outcome::PassedUnread);
    assert!(
        !catalog(h.store()).await,
        "an unread version teaches nothing"
    );
}

/// The alias is matched exactly: a case variant, a padded name, another alias, `$LATEST`, a
/// version number (the one the alias points to included) or no qualifier at all is not it. The
/// interceptor is refused through each, and the envelope served through each.
#[tokio::test]
async fn only_the_exact_alias_is_the_interceptors() {
    let h = demo_handler(&aliased("interceptor,envelope"));
    for qualifier in ELSEWHERE {
        assert_wrong_alias(
            &invoke(&h, &forged(), qualifier, None).await,
            &format!("{qualifier:?}"),
        );
    }
    assert!(h.store().is_empty());
    assert!(!catalog(h.store()).await);
    for (i, qualifier) in ELSEWHERE.into_iter().enumerate() {
        let mut ev = event_file("envelope/charge_card.json");
        ev["run_id"] = json!(format!("run-{i}"));
        let served = invoke(&h, &ev, qualifier, None).await;
        assert_eq!(
            served.outcome,
            Outcome::Executed,
            "{qualifier:?}: {served:?}"
        );
    }
}

/// The qualifier is read from every ARN shape Lambda writes in the invoked-function ARN: an
/// alias, a version, `$LATEST`, none, in every partition.
#[test]
fn the_qualifier_is_read_from_every_arn_lambda_writes() {
    let read = |arn: &str| {
        let mut ctx = Context::default();
        ctx.invoked_function_arn = arn.into();
        Invocation::from_context(&ctx).qualifier
    };
    for partition in ["aws", "aws-cn", "aws-us-gov", "aws-iso-b"] {
        let function = format!("arn:{partition}:lambda:us-east-1:123456789012:function:dedup");
        assert_eq!(read(&function), None, "{function}");
        for qualifier in ["interceptor", "live", "7", "$LATEST", "Interceptor"] {
            assert_eq!(
                read(&format!("{function}:{qualifier}")).as_deref(),
                Some(qualifier),
                "{function}:{qualifier}"
            );
        }
    }
}

/// The Lambda entry point (`Handler::lambda`; the function's own loop, `serve`, reads the invoked
/// ARN through the same `Invocation` code) takes the qualifier from the invoked ARN: the forged listing is a
/// `DoorNotServed` Lambda error through every other ARN and learned only through the alias's; a
/// Lambda-target call (its tool in the client context) is refused through the alias's ARN.
#[tokio::test]
async fn the_lambda_entry_point_reads_the_alias_from_the_invoked_arn() {
    let h = demo_handler(&aliased("bedrock,agentcore,interceptor,envelope"));
    let event = |payload: &Value, qualifier: Option<&str>, custom: Option<&ClientContext>| {
        let mut ctx = Context::default();
        ctx.request_id = "req-1".into();
        ctx.invoked_function_arn = match qualifier {
            Some(q) => format!("{FUNCTION}:{q}"),
            None => FUNCTION.to_string(),
        };
        ctx.client_context = custom.map(|custom| {
            serde_json::from_value(json!({"custom": custom})).expect("a client context")
        });
        LambdaEvent::new(payload.clone(), ctx)
    };
    for qualifier in [
        None,
        Some("live"),
        Some("$LATEST"),
        Some("3"),
        Some("Interceptor"),
    ] {
        let refused = h
            .lambda(event(&forged(), qualifier, None))
            .await
            .expect_err("refused");
        let diagnostic = Diagnostic::from(refused);
        assert_eq!(diagnostic.error_type, "DoorNotServed", "{qualifier:?}");
        assert!(
            diagnostic
                .error_message
                .contains(&format!("came through {}", qualifier.unwrap_or("$LATEST"))),
            "{qualifier:?}: {}",
            diagnostic.error_message
        );
    }
    assert!(h.store().is_empty());
    let gateway_tool = client_context("agentcore/charge_card.json").unwrap();
    let target_call = event_file("agentcore/charge_card.json");
    let refused = h
        .lambda(event(&target_call, Some(ALIAS), Some(&gateway_tool)))
        .await
        .expect_err("a Lambda-target call through the interceptor's alias");
    assert_eq!(Diagnostic::from(refused).error_type, "DoorNotServed");
    assert!(h.store().is_empty());
    assert_eq!(charges(h.dispatcher()), 0);
    h.lambda(event(&forged(), Some(ALIAS), None))
        .await
        .expect("the Gateway's listing through its alias");
    assert!(catalog(h.store()).await);
    h.lambda(event(&target_call, Some("live"), Some(&gateway_tool)))
        .await
        .expect("the Lambda-target call through live");
    assert_eq!(charges(h.dispatcher()), 1);
}

/// Every other door's event through the interceptor's alias is refused before anything runs or
/// is read: Bedrock, the Lambda target, the envelope, and the malformed events of each (which
/// would otherwise be answered in their door's format).
#[tokio::test]
async fn the_interceptors_alias_serves_no_other_door() {
    let h = demo_handler(&aliased("bedrock,agentcore,interceptor,envelope"));
    let gateway_tool = client_context("agentcore/charge_card.json").unwrap();
    let bad_target = client_context("agentcore/bad-empty-tool-name.json").unwrap();
    let others = [
        ("bedrock", event_file("fd-charge_card.json"), None),
        (
            "bedrock, malformed",
            event_file("bad-missing-session.json"),
            None,
        ),
        (
            "agentcore",
            event_file("agentcore/charge_card.json"),
            Some(&gateway_tool),
        ),
        (
            "agentcore, malformed",
            event_file("agentcore/bad-empty-tool-name.json"),
            Some(&bad_target),
        ),
        ("envelope", event_file("envelope/charge_card.json"), None),
        (
            "envelope, malformed",
            event_file("envelope/bad-no-run-id.json"),
            None,
        ),
    ];
    for (door, ev, context) in &others {
        let refused = invoke(&h, ev, Some(ALIAS), *context).await;
        assert_wrong_alias(&refused, door);
    }
    assert!(h.store().is_empty(), "nothing read or written");
    assert_eq!(charges(h.dispatcher()), 0, "no tool ran");
    // An event no door recognises is served by none, through the alias as anywhere.
    for ev in [json!({}), json!([1]), json!("tools/list"), json!(null)] {
        let answered = invoke(&h, &ev, Some(ALIAS), None).await;
        assert!(answered.response.is_err(), "{ev}: {answered:?}");
        assert_ne!(answered.outcome, Outcome::Executed);
    }
    assert!(h.store().is_empty());
}

/// A forged RESPONSE through another qualifier cannot settle the Gateway's claim with a forged
/// result (a retry would replay it), nor can a forged REQUEST there take the claim first: each is
/// refused before any store request, the Gateway's own RESPONSE settles, and its retry replays
/// the target's answer.
#[tokio::test]
async fn a_forged_response_elsewhere_cannot_settle_the_gateways_claim() {
    let h = gateway::container(
        servers::memory_store(ManualClock::starting_now()),
        &aliased("interceptor"),
    );
    let call = gateway::request(
        "inventory___reserve_stock",
        Some("s-9"),
        3,
        json!({"sku": "SKU-1", "quantity": 2}),
    );
    for qualifier in ELSEWHERE {
        assert_wrong_alias(
            &invoke(&h, &call, qualifier, None).await,
            "a forged REQUEST",
        );
    }
    assert_eq!(h.store().requests().total(), 0);
    let claimed = invoke(&h, &call, Some(ALIAS), None).await;
    assert_eq!(
        claimed.outcome,
        Outcome::Executed,
        "the Gateway's REQUEST claims"
    );
    let key = claimed.key.clone().expect("a key");
    let before = h.store().requests().total();
    let forged_answer = response(&call, "reserved 0 (forged)");
    for qualifier in ELSEWHERE {
        assert_wrong_alias(
            &invoke(&h, &forged_answer, qualifier, None).await,
            "a forged RESPONSE",
        );
    }
    assert_eq!(
        h.store().requests().total(),
        before,
        "refused before the store"
    );
    let record = h.store().get(&key).await.unwrap().expect("the claim");
    assert_eq!(
        record.status,
        Status::InProgress,
        "still the Gateway's claim"
    );
    let settled = invoke(&h, &response(&call, "reserved 2"), Some(ALIAS), None).await;
    assert_eq!(settled.outcome, Outcome::Executed);
    let mut retry = call.clone();
    retry["mcp"]["gatewayRequest"]["body"]["id"] = json!(4);
    let replayed = invoke(&h, &retry, Some(ALIAS), None).await;
    assert_eq!(replayed.outcome, Outcome::Replayed);
    let text = replayed.response.as_ref().unwrap().get().to_string();
    assert!(
        text.contains("reserved 2") && !text.contains("forged"),
        "{text}"
    );
}

/// `DEDUP_DOORS` and the alias compose: whichever check refuses first, an event is served only
/// when its door is served *and* it came through the right alias, and the catalog is written only
/// by the interceptor door through its alias.
#[tokio::test]
async fn doors_and_the_alias_compose() {
    let envelope = event_file("envelope/charge_card.json");
    let bedrock = event_file("fd-charge_card.json");
    for doors in [
        "none",
        "envelope",
        "interceptor",
        "interceptor,envelope",
        "bedrock,agentcore,interceptor,envelope",
    ] {
        let served = Doors::parse(doors).unwrap();
        let h = demo_handler(&aliased(doors));
        for (name, ev) in [
            ("interceptor", forged()),
            ("envelope", envelope.clone()),
            ("bedrock", bedrock.clone()),
        ] {
            for qualifier in [Some(ALIAS), Some("live"), None] {
                let answered = invoke(&h, &ev, qualifier, None).await;
                let right_alias = (qualifier == Some(ALIAS)) == (name == "interceptor");
                let door = DoorName::parse(name).unwrap();
                let should_serve = served.serves(door) && right_alias;
                assert_eq!(
                    answered.outcome != Outcome::DoorRefused,
                    should_serve,
                    "DEDUP_DOORS={doors}, {name} through {qualifier:?}: {answered:?}"
                );
            }
        }
        assert_eq!(
            catalog(h.store()).await,
            served.serves(DoorName::Interceptor),
            "DEDUP_DOORS={doors}: learned only by the served interceptor door through its alias"
        );
    }
}

/// A refusal is one `door_refused` count under the event's door, with no store request, no tool
/// and no key: an operator sees a harness knocking at the wrong alias, and nothing else moves.
#[tokio::test]
async fn a_refusal_is_counted_once_and_moves_nothing() {
    let (sink, lines) = Sink::memory();
    let h = Handler::new(
        servers::memory_store(ManualClock::starting_now()),
        demo(),
        &aliased("interceptor,envelope"),
        Telemetry::quiet()
            .with_sink(sink)
            .with_emf(Some("NS".into())),
    );
    let refused = invoke(&h, &forged(), Some("live"), None).await;
    assert_wrong_alias(&refused, "forged through live");
    assert_eq!(refused.key, None);
    let refused = invoke(
        &h,
        &event_file("envelope/charge_card.json"),
        Some(ALIAS),
        None,
    )
    .await;
    assert_wrong_alias(&refused, "envelope through the alias");
    let lines: Vec<Value> = lines
        .lock()
        .unwrap()
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    for (line, door) in lines.iter().zip(["interceptor", "envelope"]) {
        assert_eq!(line["Door"], door, "{line}");
        assert_eq!(line["door_refused"], 1, "{line}");
        assert_eq!(line["executed"], 0, "{line}");
        assert_eq!(line["store_requests"], 0, "{line}");
        assert!(line.get("tool").is_none(), "{line}");
    }
    assert!(h.store().is_empty());
}

fn config_with(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
    let vars: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Config::from_lookup(|name| vars.get(name).cloned(), StoreKind::Memory)
}

/// `DEDUP_INTERCEPTOR_ALIAS` takes Lambda alias names only: never a version number, `$LATEST`,
/// an alias ARN or anything with a character Lambda refuses (which no qualifier could equal, and
/// would lock the Gateway out while looking configured). Blank means unset.
#[test]
fn the_alias_setting_takes_lambda_alias_names_only() {
    let read = |value: &str| config_with(&[("DEDUP_INTERCEPTOR_ALIAS", value)]);
    let longest = "a".repeat(128);
    for name in [
        "interceptor",
        "Interceptor-2",
        "gw_1",
        "7a",
        "a",
        longest.as_str(),
    ] {
        assert_eq!(
            read(name).unwrap().interceptor_alias.as_deref(),
            Some(name),
            "{name}"
        );
    }
    assert_eq!(
        read("  interceptor\n")
            .unwrap()
            .interceptor_alias
            .as_deref(),
        Some("interceptor")
    );
    assert_eq!(read("   ").unwrap().interceptor_alias, None);
    let too_long = "a".repeat(129);
    for name in [
        "7",
        "007",
        "$LATEST",
        "inter:ceptor",
        "arn:aws:lambda:us-east-1:123456789012:function:dedup:interceptor",
        "dedup:interceptor",
        "inter ceptor",
        "inter.ceptor",
        "inter/ceptor",
        "intercéptor",
        "*",
        too_long.as_str(),
    ] {
        match read(name) {
            Err(ConfigError::Invalid { var, .. }) => {
                assert_eq!(var, "DEDUP_INTERCEPTOR_ALIAS", "{name}")
            }
            other => panic!("{name:?} accepted: {other:?}"),
        }
    }
}

/// The alias is the stack's wiring: a config document (`DEDUP_CONFIG`, which a refresh reads
/// again) can neither set nor clear it, nor widen `DEDUP_DOORS`; the environment's alias holds
/// whatever document is in force.
#[test]
fn a_config_document_cannot_set_or_clear_the_alias() {
    for text in [
        "settings: {interceptor_alias: live}",
        "settings: {interceptor_alias: \"\"}",
        "settings: {doors: envelope}",
    ] {
        assert!(document::parse(text).is_err(), "{text}");
    }
    let doc = document::parse("settings: {mode: shadow, gateway_id: gw-1}").unwrap();
    let env: HashMap<&str, &str> = [("DEDUP_INTERCEPTOR_ALIAS", ALIAS)].into();
    let config = Config::from_lookup_and_document(
        |name| env.get(name).map(|v| v.to_string()),
        Some(&doc),
        StoreKind::Memory,
    )
    .unwrap();
    assert_eq!(config.interceptor_alias.as_deref(), Some(ALIAS));
}
