//! µs per key for every strategy, on representative tool calls (the article's table, column 4) and on
//! every call of the replay corpus (`tests/corpus/*.jsonl`, both sides of every pair, read at start).
//! `cargo bench --bench keyers`; compare `typed` with `raw` inside one run (budget: typed ≤ 3× raw).
//! The summary printed at the end (`cargo bench` only) interleaves the strategies round by round so
//! that the ratios come from one stretch of a noisy machine.

use toolcall_dedup::test_util::cpu;

use std::collections::BTreeMap;
use std::path::Path;

use criterion::{BenchmarkId, Criterion, Throughput, black_box, criterion_group, criterion_main};
use serde_json::Value;
use toolcall_dedup::key::{Call, Keyer, Schema, Strategy};

const CALLS: [(&str, &str); 4] = [
    (
        "charge_card",
        r#"{"customer_id": "cus_4f9a2c", "amount": 4200, "currency": "USD", "description": "Order ord-10023", "capture": true, "metadata": {"order_id": "ord-10023", "channel": "web"}}"#,
    ),
    (
        "book_slot",
        r#"{"calendar_id": "cal_77", "start": "2026-08-11T09:00:00Z", "duration_minutes": 30, "attendees": ["alice@example.com", "bob@example.com"], "note": null}"#,
    ),
    (
        "send_email",
        r#"{"to": "Alice.Smith@Example.com", "subject": "Your refund is on its way", "body": "Hi Alice,\n\nWe refunded 42.50 EUR to your card.", "priority": "normal"}"#,
    ),
    (
        "provision_vm",
        r#"{"name": "build-runner-7", "region": "eu-west-1", "size": "m7g.large", "disk_gb": 100, "tags": {"team": "ci", "ttl": "24h"}}"#,
    ),
];

fn schema_for(tool: &str) -> Schema {
    let s = match tool {
        "charge_card" => {
            r#"{"type":"object","properties":{"customer_id":{"type":"string"},"amount":{"type":"integer"},"currency":{"type":"string","enum":["USD","EUR","GBP"]},"capture":{"type":"boolean"}}}"#
        }
        "book_slot" => {
            r#"{"type":"object","properties":{"start":{"type":"string","format":"date-time"},"duration_minutes":{"type":"integer"},"attendees":{"type":"array","items":{"type":"string","format":"email"}}}}"#
        }
        "send_email" => {
            r#"{"type":"object","properties":{"to":{"type":"string","format":"email"},"subject":{"type":"string","x-dedup":"casefold"},"priority":{"enum":["low","normal","high"]}}}"#
        }
        _ => {
            r#"{"type":"object","properties":{"region":{"type":"string","enum":["eu-west-1","us-east-1"]},"disk_gb":{"type":"integer"}}}"#
        }
    };
    Schema::from_json(&serde_json::from_str(s).unwrap()).unwrap()
}

fn keyers(c: &mut Criterion) {
    let keyer = Keyer::new();
    let schemas: Vec<Schema> = CALLS.iter().map(|(tool, _)| schema_for(tool)).collect();
    let bytes: usize = CALLS.iter().map(|(_, a)| a.len()).sum();
    let mut group = c.benchmark_group("key_per_call");
    group.throughput(Throughput::Elements(CALLS.len() as u64));
    for strategy in Strategy::ALL {
        group.bench_with_input(
            BenchmarkId::from_parameter(strategy.name()),
            &strategy,
            |b, &strategy| {
                b.iter(|| {
                    for ((tool, args), schema) in CALLS.iter().zip(&schemas) {
                        let call = Call {
                            tool,
                            args,
                            run_id: Some("run-1"),
                            step: Some("3"),
                            schema: Some(schema),
                            ..Call::default()
                        };
                        black_box(keyer.key(strategy, black_box(&call)).unwrap());
                    }
                })
            },
        );
    }
    group.bench_function("typed_without_schema", |b| {
        b.iter(|| {
            for (tool, args) in CALLS {
                let call = Call {
                    tool,
                    args,
                    run_id: Some("run-1"),
                    step: Some("3"),
                    ..Call::default()
                };
                black_box(keyer.key(Strategy::Typed, black_box(&call)).unwrap());
            }
        })
    });
    group.finish();
    eprintln!(
        "({} calls, {bytes} argument bytes per iteration)",
        CALLS.len()
    );
}

/// One corpus call: tool, arguments, run id and step.
struct CorpusCall {
    tool: String,
    args: String,
    run_id: String,
    step: String,
}

/// Both sides of every pair in `tests/corpus/*.jsonl`, and the tool schemas in
/// `tests/corpus/schemas/`.
fn corpus() -> (Vec<CorpusCall>, BTreeMap<String, Schema>) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus");
    let mut calls = Vec::new();
    for section in ["retries", "distinct", "adversarial"] {
        let text = std::fs::read_to_string(dir.join(format!("{section}.jsonl"))).unwrap();
        for line in text.lines() {
            let pair: Value = serde_json::from_str(line).unwrap();
            for side in ["a", "b"] {
                let side = &pair[side];
                calls.push(CorpusCall {
                    tool: pair["tool"].as_str().unwrap().to_string(),
                    args: side["args"].as_str().unwrap().to_string(),
                    run_id: side["run_id"].as_str().unwrap().to_string(),
                    step: side["step"].to_string(),
                });
            }
        }
    }
    let mut schemas = BTreeMap::new();
    for entry in std::fs::read_dir(dir.join("schemas")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "json") {
            let definition: Value =
                serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
            let tool = path.file_stem().unwrap().to_str().unwrap().to_string();
            schemas.insert(tool, Schema::from_tool_definition(&definition).unwrap().1);
        }
    }
    (calls, schemas)
}

fn calls_of<'a>(
    corpus: &'a [CorpusCall],
    schemas: Option<&'a BTreeMap<String, Schema>>,
) -> Vec<Call<'a>> {
    corpus
        .iter()
        .map(|c| Call {
            tool: &c.tool,
            args: &c.args,
            namespace: Some("AGENT/payments"),
            run_id: Some(&c.run_id),
            step: Some(&c.step),
            schema: schemas.and_then(|s| s.get(&c.tool)),
            policy: None,
        })
        .collect()
}

/// Keys every call once; errors (keyer C's overflow on purpose) count like keys.
fn key_all(keyer: &Keyer, strategy: Strategy, calls: &[Call<'_>]) {
    for call in calls {
        let _ = black_box(keyer.key(strategy, black_box(call)));
    }
}

fn corpus_keyers(c: &mut Criterion) {
    let keyer = Keyer::new();
    let (corpus, schemas) = corpus();
    let plain = calls_of(&corpus, None);
    let typed = calls_of(&corpus, Some(&schemas));
    let mut group = c.benchmark_group("key_per_corpus_call");
    group.throughput(Throughput::Elements(plain.len() as u64));
    for strategy in Strategy::ALL {
        group.bench_with_input(
            BenchmarkId::from_parameter(strategy.name()),
            &strategy,
            |b, &strategy| b.iter(|| key_all(&keyer, strategy, &plain)),
        );
    }
    group.bench_function("typed_with_schemas", |b| {
        b.iter(|| key_all(&keyer, Strategy::Typed, &typed))
    });
    group.finish();
}

/// µs/key per strategy and the ratio to `raw`, on the corpus and on the representative calls: the
/// median over interleaved rounds of ~1 ms batches, timed in this thread's CPU time.
fn corpus_summary(_: &mut Criterion) {
    if !std::env::args().any(|a| a == "--bench") {
        return; // `cargo test --benches` runs each benchmark once; skip the long summary
    }
    let keyer = Keyer::new();
    let clock = cpu::Clock::new();
    let (corpus, schemas) = corpus();
    let plain = calls_of(&corpus, None);
    let typed = calls_of(&corpus, Some(&schemas));
    let bytes: usize = corpus.iter().map(|c| c.args.len()).sum();
    let representative_schemas: Vec<Schema> = CALLS.iter().map(|(t, _)| schema_for(t)).collect();
    let representative = |with_schema: bool| -> Vec<Call<'_>> {
        CALLS
            .iter()
            .zip(&representative_schemas)
            .map(|((tool, args), schema)| Call {
                tool,
                args,
                run_id: Some("run-1"),
                step: Some("3"),
                schema: with_schema.then_some(schema),
                ..Call::default()
            })
            .collect()
    };
    let (rep_plain, rep_typed) = (representative(false), representative(true));
    let mut rows: Vec<(String, Strategy, &[Call<'_>])> = Strategy::ALL
        .into_iter()
        .map(|s| (format!("corpus {}", s.name()), s, plain.as_slice()))
        .collect();
    rows.push((
        "corpus typed, schemas".into(),
        Strategy::Typed,
        typed.as_slice(),
    ));
    for s in Strategy::ALL {
        rows.push((format!("4 calls {}", s.name()), s, rep_plain.as_slice()));
    }
    rows.push((
        "4 calls typed, schemas".into(),
        Strategy::Typed,
        rep_typed.as_slice(),
    ));
    // Repeats per batch so that each batch takes about a millisecond.
    let repeats: Vec<usize> = rows
        .iter()
        .map(|(_, strategy, calls)| {
            let once = clock.time(|| key_all(&keyer, *strategy, calls));
            ((1e-3 / once.as_secs_f64().max(1e-9)).round() as usize).max(1)
        })
        .collect();
    let rounds = 101;
    let mut samples = vec![Vec::with_capacity(rounds); rows.len()];
    for _ in 0..rounds {
        for (i, (_, strategy, calls)) in rows.iter().enumerate() {
            let took = clock.time(|| {
                for _ in 0..repeats[i] {
                    key_all(&keyer, *strategy, calls);
                }
            });
            samples[i].push(took.as_secs_f64() * 1e6 / (repeats[i] * calls.len()) as f64);
        }
    }
    let medians: Vec<f64> = samples.iter_mut().map(|s| cpu::median(s)).collect();
    eprintln!(
        "\nµs/key, median of {rounds} interleaved rounds of ~1 ms batches, {}; corpus: {} calls, \
         {:.0} argument bytes on average; 4 calls: {} bytes on average",
        clock.name(),
        plain.len(),
        bytes as f64 / plain.len() as f64,
        CALLS.iter().map(|(_, a)| a.len()).sum::<usize>() / CALLS.len(),
    );
    for (i, (name, _, _)) in rows.iter().enumerate() {
        let raw = if name.starts_with("corpus") {
            medians[0]
        } else {
            medians[Strategy::ALL.len() + 1]
        };
        eprintln!(
            "  {name:<24} {:>8.3} µs/key  {:>6.2}× raw",
            medians[i],
            medians[i] / raw
        );
    }
}

criterion_group!(benches, keyers, corpus_keyers, corpus_summary);
criterion_main!(benches);
