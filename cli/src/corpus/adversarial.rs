//! The adversarial section: the cases the article says its corpus lacked or got wrong. Each class states
//! one general rule about what the values mean; every pair is an instance of that rule, set into a base
//! call so it sits among realistic arguments. Nothing here was chosen by looking at a keyer's output.

/// One adversarial class: its expectation, its rule, and its pairs.
pub(crate) struct Class {
    pub(crate) name: &'static str,
    /// `true`: the two calls are one call (a retry); `false`: they must stay distinct.
    pub(crate) same: bool,
    pub(crate) rule: &'static str,
    pub(crate) pairs: &'static [Edit],
}

/// One pair: the base call, and the fields set to one value on side `a` and another on side `b`
/// (`(dotted path, a's JSON, b's JSON)`).
pub(crate) struct Edit {
    pub(crate) base: &'static str,
    pub(crate) fields: &'static [(&'static str, &'static str, &'static str)],
}

const fn edit(
    base: &'static str,
    fields: &'static [(&'static str, &'static str, &'static str)],
) -> Edit {
    Edit { base, fields }
}

pub(crate) const CLASSES: &[Class] = &[
    Class {
        name: "zero_padded_id",
        same: false,
        rule: "Leading zeros are part of a string identifier: \"01001\" and \"1001\" are different postal codes, order numbers, phone extensions and cost centres.",
        pairs: &[
            edit(
                "charge_card.1",
                &[(
                    "billing_address",
                    r#"{"line1": "48 Elm St", "city": "Agawam", "zip": "01001", "country": "US"}"#,
                    r#"{"line1": "48 Elm St", "city": "Agawam", "zip": "1001", "country": "US"}"#,
                )],
            ),
            edit(
                "charge_card.1",
                &[("metadata.order_id", r#""004417""#, r#""4417""#)],
            ),
            edit(
                "book_slot.2",
                &[("patient.phone_ext", r#""0071""#, r#""71""#)],
            ),
            edit("refund.1", &[("order_id", r#""00981""#, r#""981""#)]),
            edit(
                "provision_vm.1",
                &[("tags.cost_center", r#""0410""#, r#""410""#)],
            ),
        ],
    },
    Class {
        name: "version_string",
        same: false,
        rule: "A dotted version is a string, not a decimal number: \"1.10\" comes after \"1.9\" and is not \"1.1\"; \"2.0\" is not \"2\".",
        pairs: &[
            edit(
                "provision_vm.1",
                &[("image_version", r#""1.10""#, r#""1.1""#)],
            ),
            edit(
                "provision_vm.2",
                &[("kubernetes_version", r#""1.30""#, r#""1.3""#)],
            ),
            edit(
                "create_ticket.1",
                &[("app_version", r#""4.10""#, r#""4.1""#)],
            ),
            edit("create_ticket.2", &[("app_version", r#""2.0""#, r#""2""#)]),
            edit(
                "send_email.2",
                &[("template_version", r#""3.20""#, r#""3.2""#)],
            ),
        ],
    },
    Class {
        name: "big_int",
        same: false,
        rule: "Integers beyond 2^53 are exact values: two that differ in the last digit are different ids even though both round to the same IEEE-754 double, also when written with a trailing .0.",
        pairs: &[
            edit(
                "charge_card.1",
                &[(
                    "metadata.external_ref",
                    "9007199254740993",
                    "9007199254740992",
                )],
            ),
            edit(
                "refund.2",
                &[(
                    "ledger_entry_id",
                    "12345678901234567891",
                    "12345678901234567890",
                )],
            ),
            edit(
                "send_email.1",
                &[("thread_id", "1790324567890123457", "1790324567890123456")],
            ),
            edit(
                "book_slot.1",
                &[(
                    "calendar_event_id",
                    "18014398509481985",
                    "18014398509481984",
                )],
            ),
            edit(
                "charge_card.2",
                &[(
                    "metadata",
                    r#"{"external_ref": 9007199254740993.0}"#,
                    r#"{"external_ref": 9007199254740992.0}"#,
                )],
            ),
        ],
    },
    Class {
        name: "case_id",
        same: false,
        rule: "Identifiers are case-sensitive: customer ids, payment-method tokens, template ids, chat user ids, S3 keys and git refs that differ only by case name different objects.",
        pairs: &[
            edit(
                "charge_card.1",
                &[("customer_id", r#""cus_Ab12Xy""#, r#""cus_ab12xy""#)],
            ),
            edit(
                "charge_card.2",
                &[(
                    "payment_methods",
                    r#"["pm_1NqXz2LkT"]"#,
                    r#"["pm_1nqxz2lkt"]"#,
                )],
            ),
            edit(
                "send_email.2",
                &[("template_id", r#""tmpl_R4nD0m""#, r#""tmpl_r4nd0m""#)],
            ),
            edit(
                "create_ticket.1",
                &[("assignee", r#""U02ABCDEF""#, r#""u02abcdef""#)],
            ),
            edit(
                "provision_vm.2",
                &[(
                    "bootstrap_script",
                    r#""s3://ml-bootstrap/Setup.sh""#,
                    r#""s3://ml-bootstrap/setup.sh""#,
                )],
            ),
            edit(
                "provision_vm.1",
                &[("git_ref", r#""Release""#, r#""release""#)],
            ),
        ],
    },
    Class {
        name: "naive_timestamp",
        same: true,
        rule: "A timestamp without an offset names a wall-clock time; zero or dropped sub-second digits (the article's sub-second drift), a space or lowercase t for T, or omitted zero seconds do not change the time it names.",
        pairs: &[
            edit(
                "book_slot.1",
                &[
                    (
                        "start",
                        r#""2026-08-11T09:00:00""#,
                        r#""2026-08-11T09:00:00.000""#,
                    ),
                    (
                        "end",
                        r#""2026-08-11T09:30:00""#,
                        r#""2026-08-11T09:30:00.000""#,
                    ),
                ],
            ),
            edit(
                "book_slot.2",
                &[
                    (
                        "start",
                        r#""2026-09-02T14:15:00""#,
                        r#""2026-09-02 14:15:00""#,
                    ),
                    (
                        "end",
                        r#""2026-09-02T15:00:00""#,
                        r#""2026-09-02 15:00:00""#,
                    ),
                ],
            ),
            edit(
                "create_ticket.1",
                &[(
                    "due_at",
                    r#""2026-08-14T17:00:00""#,
                    r#""2026-08-14T17:00""#,
                )],
            ),
            edit(
                "send_email.2",
                &[(
                    "send_at",
                    r#""2026-08-15T18:00:00""#,
                    r#""2026-08-15t18:00:00""#,
                )],
            ),
            edit(
                "provision_vm.1",
                &[(
                    "expires_at",
                    r#""2026-08-12T06:00:00""#,
                    r#""2026-08-12T06:00:00.250""#,
                )],
            ),
        ],
    },
    Class {
        name: "offset_timestamp",
        same: true,
        rule: "A timestamp with an offset names an instant: the same instant written with Z, +00:00 or any other offset is the same value.",
        pairs: &[
            edit(
                "book_slot.1",
                &[
                    (
                        "start",
                        r#""2026-08-11T09:00:00Z""#,
                        r#""2026-08-11T11:00:00+02:00""#,
                    ),
                    (
                        "end",
                        r#""2026-08-11T09:30:00Z""#,
                        r#""2026-08-11T11:30:00+02:00""#,
                    ),
                ],
            ),
            edit(
                "book_slot.2",
                &[
                    (
                        "start",
                        r#""2026-09-02T14:15:00Z""#,
                        r#""2026-09-02T14:15:00+00:00""#,
                    ),
                    (
                        "end",
                        r#""2026-09-02T15:00:00Z""#,
                        r#""2026-09-02T15:00:00+00:00""#,
                    ),
                ],
            ),
            edit(
                "create_ticket.1",
                &[(
                    "due_at",
                    r#""2026-08-14T17:00:00Z""#,
                    r#""2026-08-14T13:00:00-04:00""#,
                )],
            ),
            edit(
                "send_email.2",
                &[(
                    "send_at",
                    r#""2026-08-15T18:00:00Z""#,
                    r#""2026-08-16T03:00:00+09:00""#,
                )],
            ),
            edit(
                "provision_vm.1",
                &[(
                    "expires_at",
                    r#""2026-08-12T06:00:00Z""#,
                    r#""2026-08-12T11:30:00+05:30""#,
                )],
            ),
        ],
    },
    Class {
        name: "bool_string",
        same: true,
        rule: "A boolean emitted as the string \"true\" or \"false\", in any letter case, is that boolean.",
        pairs: &[
            edit("charge_card.1", &[("capture", "true", r#""true""#)]),
            edit("charge_card.2", &[("capture", "false", r#""False""#)]),
            edit("refund.1", &[("notify_customer", "true", r#""TRUE""#)]),
            edit("refund.2", &[("notify_customer", "false", r#""false""#)]),
            edit("provision_vm.1", &[("spot", "true", r#""True""#)]),
        ],
    },
    Class {
        name: "decimal_string",
        same: true,
        rule: "A decimal number emitted as a string is the same number; trailing zeros in the fraction do not change it (64.5 = \"64.50\", 40 = \"40.00\").",
        pairs: &[
            edit("refund.1", &[("amount", "19.99", r#""19.99""#)]),
            edit("refund.2", &[("amount", "64.5", r#""64.50""#)]),
            edit(
                "refund.2",
                &[("line_items.0.amount", "12.25", r#""12.25""#)],
            ),
            edit("refund.2", &[("line_items.1.amount", "40", r#""40.00""#)]),
            edit(
                "provision_vm.1",
                &[("max_price_per_hour", "0.17", r#""0.170""#)],
            ),
        ],
    },
    Class {
        name: "nfd_text",
        same: true,
        rule: "Text in Unicode NFD (decomposed accents, as macOS and some keyboards produce) is the same text as its NFC form.",
        pairs: &[
            edit(
                "book_slot.2",
                &[(
                    "patient.name",
                    r#""Jos\u00e9 \u00c1lvarez""#,
                    r#""Jose\u0301 A\u0301lvarez""#,
                )],
            ),
            edit(
                "charge_card.1",
                &[(
                    "description",
                    r#""Cr\u00e8me br\u00fbl\u00e9e workshop, 2 seats""#,
                    r#""Cre\u0300me bru\u0302le\u0301e workshop, 2 seats""#,
                )],
            ),
            edit(
                "create_ticket.2",
                &[(
                    "title",
                    r#""Caf\u00e9 kiosk card terminal offline""#,
                    r#""Cafe\u0301 kiosk card terminal offline""#,
                )],
            ),
            edit(
                "send_email.1",
                &[(
                    "subject",
                    r#""Your r\u00e9sum\u00e9 was received""#,
                    r#""Your re\u0301sume\u0301 was received""#,
                )],
            ),
            edit(
                "provision_vm.2",
                &[(
                    "tags.project",
                    r#""Mod\u00e8le de fraude, r\u00e9entra\u00eenement""#,
                    r#""Mode\u0300le de fraude, re\u0301entrai\u0302nement""#,
                )],
            ),
        ],
    },
    Class {
        name: "array_order",
        same: false,
        rule: "A JSON array is a sequence: failover order, reproduction steps, boot order, resolver order and preference lists in another order are another instruction.",
        pairs: &[
            edit(
                "charge_card.1",
                &[(
                    "payment_methods",
                    r#"["pm_card_visa_4242", "pm_card_amex_0005"]"#,
                    r#"["pm_card_amex_0005", "pm_card_visa_4242"]"#,
                )],
            ),
            edit(
                "create_ticket.1",
                &[(
                    "steps_to_reproduce",
                    r#"["Open the print queue", "Send a double-sided job", "Cancel it after the first page"]"#,
                    r#"["Open the print queue", "Cancel it after the first page", "Send a double-sided job"]"#,
                )],
            ),
            edit(
                "provision_vm.1",
                &[(
                    "boot_order",
                    r#"["network", "disk"]"#,
                    r#"["disk", "network"]"#,
                )],
            ),
            edit(
                "provision_vm.2",
                &[(
                    "dns_servers",
                    r#"["10.0.0.2", "1.1.1.1"]"#,
                    r#"["1.1.1.1", "10.0.0.2"]"#,
                )],
            ),
            edit(
                "book_slot.1",
                &[(
                    "preferred_slots",
                    r#"["2026-08-11T09:00:00Z", "2026-08-12T14:00:00Z"]"#,
                    r#"["2026-08-12T14:00:00Z", "2026-08-11T09:00:00Z"]"#,
                )],
            ),
        ],
    },
];
