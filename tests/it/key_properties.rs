//! Properties of the typed keyer, over generated tool calls and their schemas.
//!
//! A generated call is a model of typed fields; `render` writes it as a model would, under a set of
//! drift mutations. The article's lesson is that rules interfere, so every mutation is tested alone and
//! composed with every other one.

use proptest::prelude::*;
use serde_json::{Value, json};
use toolcall_dedup::key::{Call, Keyer, Schema, Strategy as KeyStrategy};
use unicode_normalization::UnicodeNormalization;

#[derive(Debug, Clone)]
enum Kind {
    Int(i64),
    Cents(i64),
    Enum { members: Vec<String>, pick: usize },
    DateTime { secs: i64 },
    Email(String),
    FreeText(String),
    Ident(String),
    Bool(bool),
    Nested(Vec<Field>),
    IntArray(Vec<i64>),
}

#[derive(Debug, Clone)]
struct Field {
    name: String,
    kind: Kind,
}

/// The drift mutations a re-prompted model produces.
const MUTATIONS: [&str; 10] = [
    "reorder",
    "int_as_float",
    "numbers_as_strings",
    "case",
    "drop_nulls",
    "add_null",
    "subsecond",
    "whitespace",
    "nfd",
    "style",
];

#[derive(Debug, Clone, Copy, Default)]
struct Drift(u16);

impl Drift {
    fn has(self, m: &str) -> bool {
        let i = MUTATIONS
            .iter()
            .position(|x| *x == m)
            .expect("known mutation");
        self.0 & (1 << i) != 0
    }
}

fn field_name() -> impl Strategy<Value = String> {
    "[a-z][a-z_]{0,8}"
}

fn leaf_kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        any::<i64>().prop_map(|n| Kind::Int(n / 4)),
        (-10_000_000i64..10_000_000).prop_map(Kind::Cents),
        (
            prop::sample::subsequence(
                vec!["USD", "EUR", "Standard", "express", "eu-west-1", "HIGH"],
                1..4
            ),
            any::<prop::sample::Index>()
        )
            .prop_map(|(m, i)| Kind::Enum {
                pick: i.index(m.len()),
                members: m.into_iter().map(String::from).collect()
            }),
        (0i64..4_000_000_000).prop_map(|secs| Kind::DateTime { secs }),
        "[A-Za-z][A-Za-z.]{0,6}@[A-Za-z]{1,6}\\.(com|io|De)".prop_map(Kind::Email),
        prop::collection::vec("[A-Za-zéÅß]{1,7}", 1..5).prop_map(|w| Kind::FreeText(w.join(" "))),
        "[a-z]{2,4}_[A-Za-z0-9]{3,8}".prop_map(Kind::Ident),
        any::<bool>().prop_map(Kind::Bool),
        prop::collection::vec(-1000i64..1000, 0..4).prop_map(Kind::IntArray),
    ]
}

fn fields(depth: u32) -> BoxedStrategy<Vec<Field>> {
    let kind = if depth == 0 {
        leaf_kind().boxed()
    } else {
        prop_oneof![4 => leaf_kind(), 1 => fields(depth - 1).prop_map(Kind::Nested)].boxed()
    };
    prop::collection::btree_map(field_name(), kind, 1..6)
        .prop_map(|m| {
            m.into_iter()
                .map(|(name, kind)| Field { name, kind })
                .collect()
        })
        .boxed()
}

fn schema_of(fields: &[Field]) -> Value {
    let mut props = serde_json::Map::new();
    for f in fields {
        let s = match &f.kind {
            Kind::Int(_) => json!({"type": "integer"}),
            Kind::Cents(_) => json!({"type": "number"}),
            Kind::Enum { members, .. } => json!({"type": "string", "enum": members}),
            Kind::DateTime { .. } => json!({"type": "string", "format": "date-time"}),
            Kind::Email(_) => json!({"type": "string", "format": "email"}),
            Kind::FreeText(_) => json!({"type": "string", "x-dedup": "casefold"}),
            Kind::Ident(_) => json!({"type": "string"}),
            Kind::Bool(_) => json!({"type": "boolean"}),
            Kind::Nested(inner) => schema_of(inner),
            Kind::IntArray(_) => json!({"type": "array", "items": {"type": "integer"}}),
        };
        props.insert(f.name.clone(), s);
    }
    // Optional and nullable, with `default: null`: the schema says null is "none", so a retry may
    // write it or leave it out (without the default, null would be a value of its own).
    props.insert(
        "note".into(),
        json!({"type": ["string", "null"], "default": null}),
    );
    props.insert(
        "zz_optional".into(),
        json!({"type": ["string", "null"], "default": null}),
    );
    json!({"type": "object", "properties": props})
}

/// Renders JSON text by hand so that key order, number spelling and layout are under our control.
struct Writer {
    out: String,
    drift: Drift,
    style: usize,
}

impl Writer {
    fn number(&mut self, text: String) {
        if self.drift.has("numbers_as_strings") {
            self.out.push('"');
            self.out.push_str(&text);
            self.out.push('"');
        } else {
            self.out.push_str(&text);
        }
    }

    fn string(&mut self, s: &str) {
        self.out.push_str(&serde_json::to_string(s).unwrap());
    }

    fn fields(&mut self, fields: &[Field], indent: usize, top: bool) {
        let mut members: Vec<(String, Option<&Kind>)> = fields
            .iter()
            .map(|f| (f.name.clone(), Some(&f.kind)))
            .collect();
        if top {
            if !self.drift.has("drop_nulls") {
                members.push(("note".into(), None));
            }
            if self.drift.has("add_null") {
                members.push(("zz_optional".into(), None));
            }
        }
        if self.drift.has("reorder") {
            members.reverse();
        }
        let (sep, colon, nl) = match self.style {
            0 => (", ", ": ", false),
            1 => (",", ":", false),
            _ => (",", ": ", true),
        };
        self.out.push('{');
        for (i, (name, kind)) in members.iter().enumerate() {
            if i > 0 {
                self.out.push_str(sep);
            }
            if nl {
                self.out.push('\n');
                self.out.push_str(&"  ".repeat(indent + 1));
            }
            self.string(name);
            self.out.push_str(colon);
            match kind {
                None => self.out.push_str("null"),
                Some(k) => self.kind(k, indent + 1),
            }
        }
        if nl {
            self.out.push('\n');
            self.out.push_str(&"  ".repeat(indent));
        }
        self.out.push('}');
    }

    fn text(&self, s: &str) -> String {
        let mut s = s.to_string();
        if self.drift.has("case") {
            s = s.to_lowercase();
        }
        if self.drift.has("whitespace") {
            // Words doubled apart and a space after; a space before only for one token: before
            // several words, spaces may be indentation, which keys apart.
            let before = if s.contains(' ') { "" } else { " " };
            s = format!("{before}{} ", s.replace(' ', "  "));
        }
        if self.drift.has("nfd") {
            s = s.nfd().collect();
        }
        s
    }

    fn kind(&mut self, kind: &Kind, indent: usize) {
        let float = self.drift.has("int_as_float");
        match kind {
            Kind::Int(n) => self.number(if float {
                format!("{n}.0")
            } else {
                n.to_string()
            }),
            Kind::Cents(c) => {
                let sign = if *c < 0 { "-" } else { "" };
                let text = format!("{sign}{}.{:02}", c.abs() / 100, c.abs() % 100);
                self.number(if float { format!("{text}0") } else { text })
            }
            Kind::Enum { members, pick } => {
                let s = self.text(&members[*pick]);
                self.string(&s)
            }
            Kind::DateTime { secs } => {
                let days = secs / 86_400;
                let rem = secs % 86_400;
                // A fixed epoch-day mapping is enough here: 1970-01-01 + days, via the civil algorithm.
                let (y, m, d) = civil(days);
                let mut s = format!(
                    "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}",
                    rem / 3600,
                    rem / 60 % 60,
                    rem % 60
                );
                if self.drift.has("subsecond") {
                    s.push_str(".123456");
                }
                s.push('Z');
                let s = self.text(&s);
                self.string(&s)
            }
            Kind::Email(e) => {
                let s = self.text(e);
                self.string(&s)
            }
            Kind::FreeText(t) => {
                let s = self.text(t);
                self.string(&s)
            }
            Kind::Ident(id) => {
                // Identifiers are copied, not re-typed: only padding whitespace drifts.
                let s = if self.drift.has("whitespace") {
                    format!(" {id} ")
                } else {
                    id.clone()
                };
                self.string(&s)
            }
            Kind::Bool(b) => {
                if self.drift.has("numbers_as_strings") {
                    self.string(&b.to_string())
                } else {
                    self.out.push_str(&b.to_string())
                }
            }
            Kind::Nested(inner) => self.fields(inner, indent, false),
            Kind::IntArray(items) => {
                self.out.push('[');
                for (i, n) in items.iter().enumerate() {
                    if i > 0 {
                        self.out.push(',');
                    }
                    self.number(if float {
                        format!("{n}.0")
                    } else {
                        n.to_string()
                    });
                }
                self.out.push(']');
            }
        }
    }
}

fn civil(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (
        if m <= 2 {
            yoe + era * 400 + 1
        } else {
            yoe + era * 400
        },
        m,
        d,
    )
}

fn render(fields: &[Field], drift: Drift) -> String {
    let mut w = Writer {
        out: String::new(),
        drift,
        style: if drift.has("style") { 2 } else { 0 },
    };
    w.fields(fields, 0, true);
    w.out
}

fn typed_key(args: &str, schema: &Schema) -> String {
    let call = Call {
        tool: "tool",
        args,
        run_id: Some("run"),
        step: Some("1"),
        schema: Some(schema),
        ..Call::default()
    };
    Keyer::new()
        .key(KeyStrategy::Typed, &call)
        .unwrap_or_else(|e| panic!("{e}: {args}"))
        .to_string()
}

fn canonical(args: &str, schema: Option<&Schema>) -> String {
    let call = Call {
        tool: "tool",
        args,
        schema,
        ..Call::default()
    };
    Keyer::new()
        .explain(KeyStrategy::Typed, &call)
        .unwrap_or_else(|e| panic!("{e}: {args}"))
        .canonical
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn every_drift_and_every_pair_of_drifts_keeps_the_key(fields in fields(2)) {
        let schema = Schema::from_json(&schema_of(&fields)).unwrap();
        let base = typed_key(&render(&fields, Drift::default()), &schema);
        for (i, first) in MUTATIONS.iter().enumerate() {
            for (j, second) in MUTATIONS.iter().enumerate().skip(i) {
                let drift = Drift((1 << i) | (1 << j));
                let args = render(&fields, drift);
                prop_assert_eq!(&typed_key(&args, &schema), &base, "{} + {}: {}", first, second, args);
            }
        }
        let everything = Drift((1 << MUTATIONS.len()) - 1);
        prop_assert_eq!(typed_key(&render(&fields, everything), &schema), base);
    }

    #[test]
    fn normalization_is_idempotent_with_a_schema(fields in fields(2), drift in 0u16..1024) {
        let schema = Schema::from_json(&schema_of(&fields)).unwrap();
        let once = canonical(&render(&fields, Drift(drift)), Some(&schema));
        prop_assert_eq!(canonical(&once, Some(&schema)), once);
    }

    #[test]
    fn normalization_is_idempotent_without_a_schema(value in arbitrary_object()) {
        let text = value.to_string();
        let once = canonical(&text, None);
        prop_assert_eq!(canonical(&once, None), once.clone(), "from {}", text);
    }

    /// Bedrock's declared `string` is no evidence: a call whose parameters are all declared `string`
    /// (objects and arrays as JSON text, as Bedrock sends them) keys exactly as the same call written
    /// as plain JSON with no schema at all.
    #[test]
    fn declared_text_keys_like_no_schema(value in arbitrary_object()) {
        let Value::Object(members) = &value else { unreachable!() };
        // A top-level string that is itself JSON text would be read as JSON; the generator's strings
        // almost never are, and the golden vectors cover that case.
        prop_assume!(members.values().all(|v| !v.as_str().is_some_and(|s| s.starts_with(['{', '[']))));
        let as_text: serde_json::Map<String, Value> = members
            .iter()
            .map(|(name, v)| {
                let sent = match v {
                    Value::Array(_) | Value::Object(_) => Value::String(v.to_string()),
                    other => other.clone(),
                };
                (name.clone(), sent)
            })
            .collect();
        let declared = Schema::from_declared_types(members.keys().map(|n| (n.as_str(), "string"))).unwrap();
        prop_assert_eq!(
            canonical(&Value::Object(as_text).to_string(), Some(&declared)),
            canonical(&value.to_string(), None)
        );
    }

    #[test]
    fn changes_that_matter_change_the_key(fields in fields(1), n in any::<i64>(), id in "[a-z]{2}_[A-Za-z0-9]{4}") {
        let schema_value = schema_of(&fields);
        let with = |extra: Kind| {
            let mut f = fields.clone();
            f.retain(|x| x.name != "zz_changed");
            f.push(Field { name: "zz_changed".into(), kind: extra });
            let mut s = schema_value.clone();
            let field_schema = schema_of(&f)["properties"]["zz_changed"].clone();
            s["properties"]["zz_changed"] = field_schema;
            typed_key(&render(&f, Drift::default()), &Schema::from_json(&s).unwrap())
        };
        let n = n / 4;
        prop_assert_ne!(with(Kind::Int(n)), with(Kind::Int(n + 1)));
        prop_assert_ne!(with(Kind::Ident(id.clone())), with(Kind::Ident(format!("{id}x"))));
        prop_assert_ne!(with(Kind::Ident(format!("{}", n.unsigned_abs()))), with(Kind::Ident(format!("0{}", n.unsigned_abs()))));
        prop_assert_ne!(with(Kind::IntArray(vec![n, n + 1])), with(Kind::IntArray(vec![n + 1, n])));
        let swapped: String = id.chars().map(|c| if c.is_ascii_lowercase() { c.to_ascii_uppercase() } else { c.to_ascii_lowercase() }).collect();
        if swapped != id {
            prop_assert_ne!(with(Kind::Ident(id.clone())), with(Kind::Ident(swapped)));
        }
    }
}

fn arbitrary_object() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        "\\PC{0,12}".prop_map(Value::String),
        prop_oneof![
            Just("2026-08-11T09:00:00.5+02:00"),
            Just(" TRUE "),
            Just("01234"),
            Just("4200"),
            Just("USD  Wire"),
            Just("Alice@Example.com"),
            Just("Cafe\u{301}"),
            Just("ǅemal"),
            Just("İstanbul"),
            Just("ﬁne"),
        ]
        .prop_map(|s| Value::String(s.into())),
    ];
    let value = leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-zA-Z]{1,4}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    });
    prop::collection::btree_map("[a-z]{1,4}", value, 0..5)
        .prop_map(|m| Value::Object(m.into_iter().collect()))
}
