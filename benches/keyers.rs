//! µs per key for every strategy on representative tool calls (the article's table, column 4).
//! `cargo bench --bench keyers`; compare `typed` with `raw` inside one run (budget: typed ≤ 3× raw).

use criterion::{BenchmarkId, Criterion, Throughput, black_box, criterion_group, criterion_main};
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

criterion_group!(benches, keyers);
criterion_main!(benches);
