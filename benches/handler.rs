//! The executor's CPU per invocation with the in-memory store and the in-process demo tool, split
//! into the stages the handler runs: parse, key, store, respond. `cargo bench --bench handler`.
//!
//! Budget (issue 8): under 10 µs of CPU beyond the keyer for a typical event. Everything here runs
//! on one thread with nothing to wait for, so wall time is CPU time. The summary printed at the end
//! (`cargo bench` only) lines the stages up in one run and says what the budget compares.

use toolcall_dedup::test_util::{cpu, harness as fixture};

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use serde_json::Value;
use serde_json::value::RawValue;
use toolcall_dedup::config::{CallerKeyScope, Scope};
use toolcall_dedup::dispatch::Dispatcher;
use toolcall_dedup::handler::Door;
use toolcall_dedup::handler::{ClientContext, Handler, Invocation};
use toolcall_dedup::internals::bedrock::{self, ActionGroupEvent};
use toolcall_dedup::internals::port::{Scoping, Sessionless};
use toolcall_dedup::key::{Call, Keyer, Schema, Strategy};
use toolcall_dedup::stand_ins::demo::{DemoTool, Ledger};
use toolcall_dedup::store::{CallAbout, ClaimOutcome, ClaimRequest, MemoryStore, Store};
use toolcall_dedup::telemetry::Telemetry;

/// A typical function-details event: five parameters of four declared types (an `array` among
/// them), as Bedrock sends it (the shape of `events/fd-charge_card.json`).
const EVENT: &str = r#"{
  "messageVersion": "1.0",
  "agent": {"name": "toolcall-dedup-demo-agent", "id": "K7QZ2M4RTB", "alias": "TSTALIASID", "version": "DRAFT"},
  "inputText": "Charge customer cus_8842 $42.50 for the two items in their cart and capture it now.",
  "sessionId": "sess-7f3c2a91-4b6e-4d1a-9c0e-2f5b8d1a6e34",
  "actionGroup": "payments",
  "function": "charge_card",
  "parameters": [
    {"name": "customer_id", "type": "string", "value": "cus_8842"},
    {"name": "amount", "type": "number", "value": "42.50"},
    {"name": "currency", "type": "string", "value": "USD"},
    {"name": "capture", "type": "boolean", "value": "true"},
    {"name": "line_items", "type": "array", "value": "[\"SKU-1042\",\"SKU-2210\"]"}
  ],
  "sessionAttributes": {},
  "promptSessionAttributes": {}
}"#;

/// The same event with its own step, so every copy is a first sight.
fn event_at_step(step: u64) -> Value {
    let mut event: Value = serde_json::from_str(EVENT).unwrap();
    event["sessionAttributes"]["dedup_step"] = Value::String(step.to_string());
    event
}

/// An AgentCore Gateway call at its own step (`events/agentcore/charge_card.json`).
fn agentcore_at_step(step: u64) -> Value {
    let mut event = fixture::event("agentcore/charge_card.json");
    event["dedup_step"] = Value::from(step);
    event
}

/// An invoke envelope at its own step (`events/envelope/charge_card.json`).
fn envelope_at_step(step: u64) -> Value {
    let mut event = fixture::event("envelope/charge_card.json");
    event["step"] = Value::from(step);
    event
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
}

fn handler(telemetry: Telemetry) -> Handler<MemoryStore, DemoTool> {
    fixture::demo_handler(telemetry)
}

/// What the parse stage produces and the later stages read.
struct Parsed {
    reply_to: bedrock::ReplyTo,
    tool: String,
    args: String,
    session_id: String,
    schema: Schema,
    step: Option<String>,
    namespace: String,
}

/// Parse: the runtime's bytes → `Value`, then the envelope, the typed parameters, the step and the
/// declared-type schema (what `Handler::run` does before it keys).
fn parse(bytes: &[u8]) -> Parsed {
    let event: Value = serde_json::from_slice(bytes).unwrap();
    let envelope = ActionGroupEvent::parse(&event).unwrap();
    let call = envelope.tool_call().unwrap();
    let schema = Schema::from_declared_types(call.declared_types()).unwrap();
    let step = bedrock::step(&call, "dedup_step", Scope::Turn);
    Parsed {
        reply_to: call.reply_to.clone(),
        tool: call.tool().to_string(),
        session_id: call.session_id.to_string(),
        namespace: call.namespace(),
        args: call.args,
        schema,
        step,
    }
}

fn key_call(p: &Parsed) -> Call<'_> {
    Call {
        tool: &p.tool,
        args: &p.args,
        namespace: Some(&p.namespace),
        run_id: Some(&p.session_id),
        step: p.step.as_deref(),
        schema: Some(&p.schema),
        policy: None,
    }
}

/// Key: the typed key and the strict fingerprint stored beside it, as hex.
fn key(keyer: &Keyer, call: &Call<'_>) -> (String, String) {
    let key = keyer.key(Strategy::Typed, call).unwrap().to_string();
    let fingerprint = keyer.fingerprint(call).unwrap().to_string();
    (key, fingerprint)
}

fn claim_request<'a>(key: &'a str, fingerprint: &'a str, now_ms: i64) -> ClaimRequest<'a> {
    ClaimRequest {
        key,
        fingerprint,
        tool: "charge_card",
        lease_until_ms: now_ms + 65_000,
        expires_at_s: expiry(now_ms),
        owner: None,
        at_most_once: false,
        on_failure: Default::default(),
        path_digests: None,
        about: CallAbout::default(),
    }
}

/// A record life of one day from `now_ms`.
fn expiry(now_ms: i64) -> i64 {
    now_ms / 1000 + 86_400
}

/// Median over `rounds` of the mean time of `f` over `n` calls, in µs.
fn median_us(rounds: usize, n: usize, mut f: impl FnMut(usize) -> Duration) -> f64 {
    let mut samples: Vec<f64> = (0..rounds)
        .map(|_| f(n).as_secs_f64() * 1e6 / n as f64)
        .collect();
    cpu::median(&mut samples)
}

fn stages(c: &mut Criterion) {
    let rt = runtime();
    let bytes = EVENT.as_bytes();
    let keyer = Keyer::new();
    let parsed = parse(bytes);
    let call = key_call(&parsed);
    let (k, fp) = key(&keyer, &call);
    let event: Value = serde_json::from_slice(bytes).unwrap();
    let tool = DemoTool::new(Ledger::memory());
    let reply = rt
        .block_on(tool.invoke(
            "demo",
            serde_json::to_vec(&event).unwrap(),
            Duration::from_secs(5),
        ))
        .unwrap();

    let mut group = c.benchmark_group("handler_stage");
    group.bench_function("event_to_value", |b| {
        b.iter(|| black_box(serde_json::from_slice::<Value>(black_box(bytes)).unwrap()))
    });
    group.bench_function("parse", |b| b.iter(|| black_box(parse(black_box(bytes)))));
    group.bench_function("key", |b| {
        b.iter(|| black_box(key(&keyer, black_box(&call))))
    });
    group.bench_function("store_first_sight", |b| {
        // claim, then complete with the reply (a fresh key each time, on one store per sample)
        b.iter_custom(|iters| {
            let store = MemoryStore::new();
            let keys: Vec<String> = (0..iters).map(|i| format!("{k}-{i}")).collect();
            let now = store.now_ms();
            rt.block_on(async {
                let start = Instant::now();
                for key in &keys {
                    let token = match store.claim(claim_request(key, &fp, now)).await.unwrap() {
                        ClaimOutcome::Claimed { token } => token,
                        other => panic!("{other:?}"),
                    };
                    store
                        .complete(key, &token, &reply, expiry(now))
                        .await
                        .unwrap();
                }
                start.elapsed()
            })
        })
    });
    group.bench_function("store_repeat", |b| {
        let store = MemoryStore::new();
        let now = store.now_ms();
        rt.block_on(async {
            let ClaimOutcome::Claimed { token } =
                store.claim(claim_request(&k, &fp, now)).await.unwrap()
            else {
                unreachable!()
            };
            store
                .complete(&k, &token, &reply, expiry(now))
                .await
                .unwrap();
        });
        b.iter_custom(|iters| {
            rt.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    let outcome = store.claim(claim_request(&k, &fp, now)).await.unwrap();
                    assert!(matches!(outcome, ClaimOutcome::Completed(_)));
                    black_box(outcome);
                }
                start.elapsed()
            })
        })
    });
    group.bench_function("respond_first_sight", |b| {
        // forward the event with the key added, check the tool's reply, answer it
        b.iter(|| {
            let payload = bedrock::forward_bytes(black_box(&event), Some(&k)).unwrap();
            let class = bedrock::validate_reply(&reply, &parsed.reply_to).unwrap();
            let answer = RawValue::from_string(String::from_utf8(reply.clone()).unwrap()).unwrap();
            black_box((payload, class, answer))
        })
    });
    group.bench_function("respond_repeat", |b| {
        b.iter(|| {
            black_box(RawValue::from_string(
                String::from_utf8(black_box(&reply).clone()).unwrap(),
            ))
        })
    });
    group.bench_function("demo_tool_invoke", |b| {
        // the tool's own work, which the first sight pays for but the executor does not
        b.iter(|| {
            let payload = serde_json::to_vec(&event).unwrap();
            black_box(
                rt.block_on(tool.invoke("demo", payload, Duration::from_secs(5)))
                    .unwrap(),
            )
        })
    });
    group.finish();
}

/// Invocations of `handle` on `events` (fresh handler, not timed), timed together.
fn time_handle(
    rt: &tokio::runtime::Runtime,
    now: &dyn Fn() -> Duration,
    telemetry: &Telemetry,
    events: &[Value],
    repeat: bool,
) -> Duration {
    time_handle_with(rt, now, telemetry, events, repeat, None)
}

fn time_handle_with(
    rt: &tokio::runtime::Runtime,
    now: &dyn Fn() -> Duration,
    telemetry: &Telemetry,
    events: &[Value],
    repeat: bool,
    client_context: Option<&ClientContext>,
) -> Duration {
    let h = handler(telemetry.clone());
    let invocation = Invocation::default();
    rt.block_on(async {
        if repeat {
            h.handle_with_context(&events[0], &invocation, client_context)
                .await;
        }
        let start = now();
        for event in events {
            black_box(
                h.handle_with_context(black_box(event), &invocation, client_context)
                    .await,
            );
        }
        now().saturating_sub(start)
    })
}

fn whole(c: &mut Criterion) {
    let rt = runtime();
    let wall = Instant::now();
    let now = move || wall.elapsed();
    const CHUNK: u64 = 2048;
    let mut group = c.benchmark_group("handler_invocation");
    for (name, telemetry) in [
        ("quiet", Telemetry::quiet()),
        (
            "emf",
            Telemetry::quiet().with_emf(Some("ToolcallDedup".into())),
        ),
    ] {
        group.bench_with_input(
            BenchmarkId::new("first_sight", name),
            &telemetry,
            |b, telemetry| {
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    let mut done = 0;
                    while done < iters {
                        let n = (iters - done).min(CHUNK);
                        let events: Vec<Value> = (done..done + n).map(event_at_step).collect();
                        total += time_handle(&rt, &now, telemetry, &events, false);
                        done += n;
                    }
                    total
                })
            },
        );
        group.bench_with_input(
            BenchmarkId::new("repeat", name),
            &telemetry,
            |b, telemetry| {
                b.iter_custom(|iters| {
                    let events = vec![event_at_step(0); iters as usize];
                    time_handle(&rt, &now, telemetry, &events, true)
                })
            },
        );
    }
    group.finish();
}

/// One run, every stage interleaved: the figures `docs/performance.md` quotes.
fn summary(_: &mut Criterion) {
    if !std::env::args().any(|a| a == "--bench") {
        return; // `cargo test --benches` runs each benchmark once; skip the long summary
    }
    let rt = runtime();
    let clock = cpu::Clock::new();
    let cpu_now = || clock.now();
    let bytes = EVENT.as_bytes();
    let keyer = Keyer::new();
    let parsed = parse(bytes);
    let call = key_call(&parsed);
    let (k, fp) = key(&keyer, &call);
    let event: Value = serde_json::from_slice(bytes).unwrap();
    let tool = DemoTool::new(Ledger::memory());
    let reply = rt
        .block_on(tool.invoke(
            "demo",
            serde_json::to_vec(&event).unwrap(),
            Duration::from_secs(5),
        ))
        .unwrap();
    let quiet = Telemetry::quiet();
    let emf = Telemetry::quiet().with_emf(Some("ToolcallDedup".into()));
    let timed = |n: usize, mut f: Box<dyn FnMut() + '_>| {
        clock.time(|| {
            for _ in 0..n {
                f();
            }
        })
    };
    let (rounds, n) = (21, 500);
    let mut rows: Vec<(&str, f64)> = Vec::new();
    rows.push((
        "parse (bytes → Value → envelope → params → schema)",
        median_us(rounds, n, |n| {
            timed(
                n,
                Box::new(|| {
                    black_box(parse(black_box(bytes)));
                }),
            )
        }),
    ));
    rows.push((
        "  of which bytes → serde_json::Value",
        median_us(rounds, n, |n| {
            timed(
                n,
                Box::new(|| {
                    black_box(serde_json::from_slice::<Value>(black_box(bytes)).unwrap());
                }),
            )
        }),
    ));
    rows.push((
        "key (typed key + fingerprint)",
        median_us(rounds, n, |n| {
            timed(
                n,
                Box::new(|| {
                    black_box(key(&keyer, black_box(&call)));
                }),
            )
        }),
    ));
    rows.push((
        "store, first sight (claim + complete)",
        median_us(rounds, n, |n| {
            let store = MemoryStore::new();
            let keys: Vec<String> = (0..n).map(|i| format!("{k}-{i}")).collect();
            let now = store.now_ms();
            rt.block_on(async {
                let start = cpu_now();
                for key in &keys {
                    let ClaimOutcome::Claimed { token } =
                        store.claim(claim_request(key, &fp, now)).await.unwrap()
                    else {
                        unreachable!()
                    };
                    store
                        .complete(key, &token, &reply, expiry(now))
                        .await
                        .unwrap();
                }
                cpu_now().saturating_sub(start)
            })
        }),
    ));
    rows.push((
        "store, repeat (claim → completed record)",
        median_us(rounds, n, |n| {
            let store = MemoryStore::new();
            let now = store.now_ms();
            rt.block_on(async {
                let ClaimOutcome::Claimed { token } =
                    store.claim(claim_request(&k, &fp, now)).await.unwrap()
                else {
                    unreachable!()
                };
                store
                    .complete(&k, &token, &reply, expiry(now))
                    .await
                    .unwrap();
                let start = cpu_now();
                for _ in 0..n {
                    black_box(store.claim(claim_request(&k, &fp, now)).await.unwrap());
                }
                cpu_now().saturating_sub(start)
            })
        }),
    ));
    rows.push((
        "respond, first sight (forward event, check reply, answer)",
        median_us(rounds, n, |n| {
            timed(
                n,
                Box::new(|| {
                    let payload = bedrock::forward_bytes(black_box(&event), Some(&k)).unwrap();
                    let class = bedrock::validate_reply(&reply, &parsed.reply_to).unwrap();
                    let answer =
                        RawValue::from_string(String::from_utf8(reply.clone()).unwrap()).unwrap();
                    black_box((payload, class, answer));
                }),
            )
        }),
    ));
    rows.push((
        "respond, repeat (stored reply → answer)",
        median_us(rounds, n, |n| {
            timed(
                n,
                Box::new(|| {
                    black_box(RawValue::from_string(
                        String::from_utf8(black_box(&reply).clone()).unwrap(),
                    ))
                    .ok();
                }),
            )
        }),
    ));
    rows.push((
        "demo tool invoke (the tool's work, not the executor's)",
        median_us(rounds, n, |n| {
            timed(
                n,
                Box::new(|| {
                    let payload = serde_json::to_vec(&event).unwrap();
                    black_box(
                        rt.block_on(tool.invoke("demo", payload, Duration::from_secs(5)))
                            .unwrap(),
                    );
                }),
            )
        }),
    ));
    let first = |t: &Telemetry| {
        median_us(rounds, n, |n| {
            let events: Vec<Value> = (0..n as u64).map(event_at_step).collect();
            time_handle(&rt, &cpu_now, t, &events, false)
        })
    };
    let repeat = |t: &Telemetry| {
        median_us(rounds, n, |n| {
            let events = vec![event_at_step(0); n];
            time_handle(&rt, &cpu_now, t, &events, true)
        })
    };
    let (first_quiet, repeat_quiet) = (first(&quiet), repeat(&quiet));
    let (first_emf, repeat_emf) = (first(&emf), repeat(&emf));
    // What the Lambda adds on top: the runtime's tracing subscriber formats the per-invocation
    // INFO line (here written to a sink instead of stdout).
    let lambda_log = || {
        tracing_subscriber::fmt()
            .with_target(false)
            .without_time()
            .with_writer(std::io::sink)
            .finish()
    };
    let first_logged = tracing::subscriber::with_default(lambda_log(), || first(&emf));
    let repeat_logged = tracing::subscriber::with_default(lambda_log(), || repeat(&emf));
    // With Lambda tracing on and every invocation sampled: the stage spans sent to a daemon (a
    // local socket nobody reads) as well.
    let daemon = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let traced = || {
        use tracing_subscriber::layer::SubscriberExt;
        let xray =
            toolcall_dedup::internals::xray::XrayLayer::new(daemon.local_addr().unwrap(), || {
                Some(
                    "Root=1-6752c0de-0123456789abcdef01234567;Parent=53995c3f42cd8ad8;Sampled=1"
                        .into(),
                )
            })
            .unwrap();
        lambda_log().with(xray)
    };
    let first_traced = tracing::subscriber::with_default(traced(), || first(&emf));
    rows.push(("handle(), first sight, quiet telemetry", first_quiet));
    rows.push(("handle(), repeat, quiet telemetry", repeat_quiet));
    rows.push(("handle(), first sight, EMF line built", first_emf));
    rows.push(("handle(), repeat, EMF line built", repeat_emf));
    rows.push((
        "handle(), first sight, EMF + log line formatted",
        first_logged,
    ));
    rows.push(("handle(), repeat, EMF + log line formatted", repeat_logged));
    rows.push((
        "handle(), first sight, EMF + log line + X-Ray subsegments",
        first_traced,
    ));

    let get = |name: &str| rows.iter().find(|r| r.0.starts_with(name)).unwrap().1;
    let (key_us, tool_us) = (get("key "), get("demo tool"));
    eprintln!(
        "\nhandler CPU per invocation, µs (median of {rounds} rounds of {n}, {}):",
        clock.name()
    );
    for (name, us) in &rows {
        eprintln!("  {name:<60} {us:>8.2}");
    }
    let value_us = get("  of which bytes");
    eprintln!(
        "  beyond the keyer, with the runtime's bytes → Value: first sight {:.2} µs (value + handle − key − tool), \
         repeat {:.2} µs (value + handle − key); with EMF {:.2} / {:.2} µs; with EMF and the log line {:.2} / {:.2} µs; \
         first sight traced to X-Ray {:.2} µs",
        value_us + first_quiet - key_us - tool_us,
        value_us + repeat_quiet - key_us,
        value_us + first_emf - key_us - tool_us,
        value_us + repeat_emf - key_us,
        value_us + first_logged - key_us - tool_us,
        value_us + repeat_logged - key_us,
        value_us + first_traced - key_us - tool_us,
    );
    // Every entry point, the same way: the runtime's bytes → Value, the adapter's call keyed, the
    // demo tool's own work, and handle() at first sight with EMF and the log line.
    let scoping = Scoping {
        step_attribute: "dedup_step",
        run_argument: "dedup_run_id",
        scope: Scope::Turn,
        envelope_namespaces: None,
        sessionless: Sessionless::Refuse,
        caller_key_name: "idempotency_key",
        envelope_caller_key_scope: CallerKeyScope::Run,
    };
    type Flavour = (&'static str, fn(u64) -> Value, Option<ClientContext>);
    let flavours: [Flavour; 3] = [
        ("Bedrock action group", event_at_step, None),
        (
            "AgentCore Gateway",
            agentcore_at_step,
            fixture::client_context("agentcore/charge_card.json"),
        ),
        ("invoke envelope", envelope_at_step, None),
    ];
    eprintln!("  per entry point, first sight, EMF + log line, µs:");
    for (name, make, client_context) in &flavours {
        let event = make(1);
        let bytes = serde_json::to_vec(&event).unwrap();
        let detected = Door::detect(&event, client_context.as_ref()).unwrap();
        let door = detected
            .entry_point()
            .expect("a door that invokes the tool");
        let call = door.call(scoping).unwrap();
        let key_call = call.key_call();
        let (k, _) = key(&keyer, &key_call);
        let (group, tool_name) = door.route();
        let target = tool
            .route(&Default::default(), group, tool_name)
            .unwrap()
            .target;
        let value = median_us(rounds, n, |n| {
            timed(
                n,
                Box::new(|| {
                    black_box(serde_json::from_slice::<Value>(black_box(&bytes)).unwrap());
                }),
            )
        });
        let keyed = median_us(rounds, n, |n| {
            timed(
                n,
                Box::new(|| {
                    black_box(key(&keyer, black_box(&key_call)));
                }),
            )
        });
        // The tool's own work only: the forwarded payload is built once, outside the timing.
        let forwarded = door.forward(Some(&k), scoping).unwrap();
        let tool_us = median_us(rounds, n, |n| {
            timed(
                n,
                Box::new(|| {
                    let forward = forwarded.clone();
                    black_box(
                        rt.block_on(tool.invoke_forward(&target, forward, Duration::from_secs(5)))
                            .unwrap(),
                    );
                }),
            )
        });
        let handled = tracing::subscriber::with_default(lambda_log(), || {
            median_us(rounds, n, |n| {
                let events: Vec<Value> = (0..n as u64).map(make).collect();
                time_handle_with(&rt, &cpu_now, &emf, &events, false, client_context.as_ref())
            })
        });
        eprintln!(
            "    {name:<22} handle {handled:>7.2}, key {keyed:>6.2}, tool {tool_us:>6.2}, bytes → Value {value:>5.2}: \
             beyond the keyer {:>6.2}",
            value + handled - keyed - tool_us
        );
    }
    let h = handler(Telemetry::quiet());
    let invocation = Invocation::default();
    let ev = event_at_step(1);
    let counts = rt.block_on(async {
        let before = h.store().requests();
        h.handle(&ev, &invocation).await;
        let mid = h.store().requests();
        h.handle(&ev, &invocation).await;
        let after = h.store().requests();
        (
            (mid.total() - before.total()),
            (after.total() - mid.total()),
        )
    });
    eprintln!(
        "  store requests: first sight {}, repeat {}",
        counts.0, counts.1
    );
}

criterion_group!(benches, stages, whole, summary);
criterion_main!(benches);
