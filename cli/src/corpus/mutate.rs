//! The article's eight mutations, each modelling one class of argument drift a re-prompted model shows.
//! Each is a pure function of the base value (and, for `add_null`, the tool's schema). A mutation that
//! finds nothing to change returns the base unchanged: the pair still counts, as in the article.

use super::pyjson::PyJson;

/// The mutation classes, in the article's order.
pub(crate) const CLASSES: [&str; 8] = [
    "key_order",
    "int_to_float",
    "case_fold",
    "drop_nulls",
    "add_null",
    "subsecond",
    "double_space",
    "number_strings",
];

/// Sub-second suffixes the `subsecond` mutation adds, chosen per base in turn (zero fractions too).
const FRACTIONS: [&str; 4] = [".123", ".5", ".000", ".987654"];

/// Applies mutation `class` to `base`. `optional` lists the tool's optional top-level fields in schema
/// order; `base_index` picks the sub-second suffix.
pub(crate) fn apply(class: &str, base: &PyJson, optional: &[String], base_index: usize) -> PyJson {
    match class {
        "key_order" => reverse_keys(base),
        "int_to_float" => map_numbers(base, &|n| {
            if is_int(n) {
                PyJson::Num(format!("{n}.0"))
            } else {
                PyJson::Num(n.to_string())
            }
        }),
        "case_fold" => map_strings(base, &|s| s.to_lowercase()),
        "drop_nulls" => drop_nulls(base),
        "add_null" => add_null(base, optional),
        "subsecond" => {
            let fraction = FRACTIONS[base_index % FRACTIONS.len()];
            map_strings(base, &|s| match utc_second_timestamp(s) {
                true => format!("{}{fraction}Z", &s[..s.len() - 1]),
                false => s.to_string(),
            })
        }
        "double_space" => map_strings(base, &|s| s.replace(' ', "  ")),
        "number_strings" => map_numbers(base, &|n| PyJson::Str(n.to_string())),
        other => panic!("unknown mutation class {other}"),
    }
}

/// Every object's members in reverse order, at every depth.
fn reverse_keys(v: &PyJson) -> PyJson {
    match v {
        PyJson::Obj(members) => PyJson::Obj(
            members
                .iter()
                .rev()
                .map(|(k, v)| (k.clone(), reverse_keys(v)))
                .collect(),
        ),
        PyJson::Arr(items) => PyJson::Arr(items.iter().map(reverse_keys).collect()),
        other => other.clone(),
    }
}

fn is_int(text: &str) -> bool {
    !text.contains(['.', 'e', 'E'])
}

/// Python's `float(x)` printed by `repr`, for the small integers the base calls hold.
fn map_numbers(v: &PyJson, f: &dyn Fn(&str) -> PyJson) -> PyJson {
    match v {
        PyJson::Num(n) => {
            assert!(
                !is_int(n) || n.trim_start_matches('-').len() < 16,
                "int-to-float assumes integers below 1e16, where repr(float(x)) is x.0"
            );
            f(n)
        }
        PyJson::Obj(members) => PyJson::Obj(
            members
                .iter()
                .map(|(k, v)| (k.clone(), map_numbers(v, f)))
                .collect(),
        ),
        PyJson::Arr(items) => PyJson::Arr(items.iter().map(|v| map_numbers(v, f)).collect()),
        other => other.clone(),
    }
}

/// Applies `f` to every string value (never to object keys).
fn map_strings(v: &PyJson, f: &dyn Fn(&str) -> String) -> PyJson {
    match v {
        PyJson::Str(s) => PyJson::Str(f(s)),
        PyJson::Obj(members) => PyJson::Obj(
            members
                .iter()
                .map(|(k, v)| (k.clone(), map_strings(v, f)))
                .collect(),
        ),
        PyJson::Arr(items) => PyJson::Arr(items.iter().map(|v| map_strings(v, f)).collect()),
        other => other.clone(),
    }
}

/// Removes null-valued members at every depth (nulls inside arrays stay: they hold a position).
fn drop_nulls(v: &PyJson) -> PyJson {
    match v {
        PyJson::Obj(members) => PyJson::Obj(
            members
                .iter()
                .filter(|(_, v)| *v != PyJson::Null)
                .map(|(k, v)| (k.clone(), drop_nulls(v)))
                .collect(),
        ),
        PyJson::Arr(items) => PyJson::Arr(items.iter().map(drop_nulls).collect()),
        other => other.clone(),
    }
}

/// Appends the first optional field (in schema order) that the base omits, as an explicit null.
fn add_null(v: &PyJson, optional: &[String]) -> PyJson {
    let mut out = v.clone();
    if let PyJson::Obj(members) = &mut out
        && let Some(name) = optional
            .iter()
            .find(|name| !members.iter().any(|(k, _)| k == *name))
    {
        members.push((name.clone(), PyJson::Null));
    }
    out
}

/// `YYYY-MM-DDTHH:MM:SSZ` exactly: the form every base timestamp has.
fn utc_second_timestamp(s: &str) -> bool {
    let b = s.as_bytes();
    let digit = |i: usize| b[i].is_ascii_digit();
    b.len() == 20
        && (0..4).all(digit)
        && b[4] == b'-'
        && (5..7).all(digit)
        && b[7] == b'-'
        && (8..10).all(digit)
        && b[10] == b'T'
        && (11..13).all(digit)
        && b[13] == b':'
        && (14..16).all(digit)
        && b[16] == b':'
        && (17..19).all(digit)
        && b[19] == b'Z'
}

#[cfg(test)]
mod tests {
    use super::super::pyjson::Style;
    use super::*;

    fn run(class: &str, text: &str) -> String {
        apply(
            class,
            &PyJson::parse(text),
            &["memo".into(), "cc".into()],
            0,
        )
        .dumps(Style::Compact, true)
    }

    #[test]
    fn each_mutation_does_what_it_says() {
        let base = r#"{"a": 1, "b": {"c": 2.5, "d": null}, "s": "Hi  There 2026-08-11T09:00:00Z", "t": "2026-08-11T09:00:00Z", "l": [null, 3]}"#;
        assert_eq!(
            run("key_order", base),
            r#"{"l":[null,3],"t":"2026-08-11T09:00:00Z","s":"Hi  There 2026-08-11T09:00:00Z","b":{"d":null,"c":2.5},"a":1}"#
        );
        assert_eq!(
            run("int_to_float", base),
            r#"{"a":1.0,"b":{"c":2.5,"d":null},"s":"Hi  There 2026-08-11T09:00:00Z","t":"2026-08-11T09:00:00Z","l":[null,3.0]}"#
        );
        assert_eq!(
            run("case_fold", base),
            r#"{"a":1,"b":{"c":2.5,"d":null},"s":"hi  there 2026-08-11t09:00:00z","t":"2026-08-11t09:00:00z","l":[null,3]}"#
        );
        assert_eq!(
            run("drop_nulls", base),
            r#"{"a":1,"b":{"c":2.5},"s":"Hi  There 2026-08-11T09:00:00Z","t":"2026-08-11T09:00:00Z","l":[null,3]}"#
        );
        assert_eq!(
            run("add_null", base),
            r#"{"a":1,"b":{"c":2.5,"d":null},"s":"Hi  There 2026-08-11T09:00:00Z","t":"2026-08-11T09:00:00Z","l":[null,3],"memo":null}"#
        );
        assert_eq!(
            run("subsecond", base),
            r#"{"a":1,"b":{"c":2.5,"d":null},"s":"Hi  There 2026-08-11T09:00:00Z","t":"2026-08-11T09:00:00.123Z","l":[null,3]}"#
        );
        assert_eq!(
            run("double_space", base),
            r#"{"a":1,"b":{"c":2.5,"d":null},"s":"Hi    There  2026-08-11T09:00:00Z","t":"2026-08-11T09:00:00Z","l":[null,3]}"#
        );
        assert_eq!(
            run("number_strings", base),
            r#"{"a":"1","b":{"c":"2.5","d":null},"s":"Hi  There 2026-08-11T09:00:00Z","t":"2026-08-11T09:00:00Z","l":[null,"3"]}"#
        );
    }
}
