use std::time::Instant;
use toolcall_dedup::key::{Call, Keyer, Strategy, json};
fn main() {
    let calls = [
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
    ];
    let keyer = Keyer::new();
    let n = 200_000;
    let time = |name: &str, f: &dyn Fn()| {
        for _ in 0..n / 10 {
            f()
        }
        let t = Instant::now();
        for _ in 0..n {
            f()
        }
        println!(
            "{name:>10}: {:.3} µs/key",
            t.elapsed().as_secs_f64() * 1e6 / n as f64 / 3.0
        );
    };
    for strategy in [Strategy::Raw, Strategy::Typed] {
        time(strategy.name(), &|| {
            for (tool, args) in calls {
                std::hint::black_box(
                    keyer
                        .key(
                            strategy,
                            &Call {
                                tool,
                                args,
                                run_id: Some("r"),
                                step: Some("1"),
                                ..Call::default()
                            },
                        )
                        .unwrap(),
                );
            }
        });
    }
    time("parse", &|| {
        for (_, args) in calls {
            std::hint::black_box(json::parse(args, 64).unwrap());
        }
    });
}
