use toolcall_dedup::key::{Call, Keyer, Strategy};
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
    let strategy: Strategy = std::env::args()
        .nth(1)
        .unwrap_or("typed".into())
        .parse()
        .unwrap();
    let mut x = 0u8;
    for _ in 0..20000 {
        for (tool, args) in calls {
            let k = keyer
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
                .unwrap();
            x ^= k.0[0];
        }
    }
    println!("{x}");
}
