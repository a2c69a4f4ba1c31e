//! The article's keyers A–D, reproduced exactly, flaws included: they are the baseline we score against.
//!
//! Python semantics emulated here: `json.loads` (duplicate keys: last wins; integers exact, other
//! numbers `float`), `json.dumps(sort_keys=True, separators=(",", ":"))` (ASCII-only output, `repr` for
//! floats), `str.strip`/`\s` (Python's `isspace`), `str.casefold`, and C's timestamp regex with the
//! article's fix (either case of `T` and `Z`). One deliberate narrowing: Python's `\d` and `int()` also
//! accept non-ASCII decimal digits (`"４２"`); we treat only ASCII digits as digits.

use std::sync::LazyLock;

use regex::Regex;
use unicode_normalization::UnicodeNormalization;

use super::canonical::{dumps_str, float_repr, int_text, sha256_key, tool_key};
use super::json::Node;
use super::text::is_python_space;
use super::{Key, KeyError};

/// A value as Python's `json.loads` would build it.
#[derive(Debug, Clone)]
enum PyValue {
    None,
    Bool(bool),
    /// Exact integer, as decimal text.
    Int(String),
    Float(f64),
    Str(String),
    List(Vec<PyValue>),
    /// Sorted by key, duplicates resolved (last wins).
    Dict(Vec<(String, PyValue)>),
}

impl PyValue {
    fn from_node(node: Node<'_>) -> PyValue {
        match node {
            Node::Null => PyValue::None,
            Node::Bool(b) => PyValue::Bool(b),
            Node::Number(text) if !text.contains(['.', 'e', 'E']) => PyValue::Int(int_text(text)),
            Node::Number(text) => PyValue::Float(text.parse().unwrap_or(f64::NAN)),
            Node::String(s) => PyValue::Str(s.into_owned()),
            Node::Array(items) => {
                PyValue::List(items.into_iter().map(PyValue::from_node).collect())
            }
            Node::Object(members) => {
                let mut entries: Vec<(String, PyValue)> = members
                    .into_iter()
                    .map(|(k, v)| (k.into_owned(), PyValue::from_node(v)))
                    .collect();
                // Stable sort keeps source order among equal keys, so the last one is kept.
                entries.sort_by(|a, b| a.0.cmp(&b.0));
                let mut deduped: Vec<(String, PyValue)> = Vec::with_capacity(entries.len());
                for entry in entries {
                    match deduped.last_mut() {
                        Some(last) if last.0 == entry.0 => *last = entry,
                        _ => deduped.push(entry),
                    }
                }
                PyValue::Dict(deduped)
            }
        }
    }
}

/// `str(int(f))` for an integral float, exact for any magnitude.
fn integral_float_text(f: f64) -> String {
    if f.abs() < 9.2e18 {
        return (f as i64).to_string();
    }
    let bits = f.abs().to_bits();
    let exponent = ((bits >> 52) & 0x7ff) as i32 - 1075;
    let mantissa = (bits & ((1 << 52) - 1)) | (1 << 52);
    // Base-1e9 limbs, little-endian: mantissa × 2^exponent (exponent > 0 here).
    let mut limbs: Vec<u64> = vec![
        mantissa % 1_000_000_000,
        mantissa / 1_000_000_000 % 1_000_000_000,
        mantissa / 1_000_000_000_000_000_000,
    ];
    for _ in 0..exponent {
        let mut carry = 0;
        for limb in limbs.iter_mut() {
            let v = *limb * 2 + carry;
            *limb = v % 1_000_000_000;
            carry = v / 1_000_000_000;
        }
        if carry > 0 {
            limbs.push(carry);
        }
    }
    // No zero limb to trim at the top: the value is at least 9.2e18, so the top limb is the last
    // carry pushed or, with none, the 1e18 limb, at least 9.
    let mut text = if f < 0.0 {
        "-".to_string()
    } else {
        String::new()
    };
    text.push_str(&limbs.last().unwrap_or(&0).to_string());
    for limb in limbs.iter().rev().skip(1) {
        text.push_str(&format!("{limb:09}"));
    }
    text
}

/// `json.dumps(obj, sort_keys=True, separators=(",", ":"))` with the default `ensure_ascii=True`.
fn dumps(value: &PyValue, out: &mut String) {
    match value {
        PyValue::None => out.push_str("null"),
        PyValue::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        PyValue::Int(text) => out.push_str(text),
        PyValue::Float(f) => out.push_str(&float_repr(*f)),
        PyValue::Str(s) => dumps_str(s, out),
        PyValue::List(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                dumps(item, out);
            }
            out.push(']');
        }
        PyValue::Dict(entries) => {
            out.push('{');
            for (i, (k, v)) in entries.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                dumps_str(k, out);
                out.push(':');
                dumps(v, out);
            }
            out.push('}');
        }
    }
}

static ISO: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^([0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2})(?:\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2})$")
        .expect("static regex")
});
static INT: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^-?[0-9]+$").expect("static regex"));
static DEC: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^-?[0-9]+\.[0-9]+$").expect("static regex"));

/// C's `_norm`.
fn norm(value: PyValue) -> Result<PyValue, KeyError> {
    Ok(match value {
        v @ (PyValue::None | PyValue::Bool(_)) => v,
        PyValue::Int(text) => {
            // `float(v).is_integer()` raises OverflowError for ints beyond the float range.
            if text.parse::<f64>().map_or(true, f64::is_infinite) {
                return Err(KeyError::ArticleOverflow);
            }
            PyValue::Int(text)
        }
        PyValue::Float(f) if f.is_finite() && f.fract() == 0.0 => {
            PyValue::Int(integral_float_text(f))
        }
        v @ PyValue::Float(_) => v,
        PyValue::Str(s) => norm_str(&s),
        PyValue::List(items) => {
            PyValue::List(items.into_iter().map(norm).collect::<Result<_, _>>()?)
        }
        PyValue::Dict(entries) => PyValue::Dict(
            entries
                .into_iter()
                .filter(|(_, v)| !matches!(v, PyValue::None))
                .map(|(k, v)| Ok((k, norm(v)?)))
                .collect::<Result<_, KeyError>>()?,
        ),
    })
}

fn norm_str(s: &str) -> PyValue {
    let nfc: String = s.nfc().collect();
    let stripped = nfc.trim_matches(is_python_space);
    let mut collapsed = String::with_capacity(stripped.len());
    let mut in_space = false;
    for c in stripped.chars() {
        if is_python_space(c) {
            if !in_space {
                collapsed.push(' ');
            }
            in_space = true;
        } else {
            collapsed.push(c);
            in_space = false;
        }
    }
    let s = collapsed;
    if let Some(m) = ISO.captures(&s) {
        let head = &m[1];
        let tz = &m[2];
        let tz = if tz == "Z" || tz == "z" { "Z" } else { tz };
        return PyValue::Str(format!("{}T{}{tz}", &head[..10], &head[11..]));
    }
    if INT.is_match(&s) {
        return PyValue::Int(int_text(&s));
    }
    if DEC.is_match(&s) {
        let f: f64 = s.parse().unwrap_or(f64::NAN);
        return if f.is_finite() && f.fract() == 0.0 {
            PyValue::Int(integral_float_text(f))
        } else {
            PyValue::Float(f)
        };
    }
    PyValue::Str(caseless::default_case_fold_str(&s))
}

/// A: `_h(tool + "|" + raw)`.
pub(crate) fn key_raw(tool: &str, raw: &str) -> Key {
    tool_key(tool, raw)
}

/// C's canonical text (top level must be an object, as `json.loads(raw).items()` demands).
pub(crate) fn normalized_text(root: Node<'_>) -> Result<String, KeyError> {
    let PyValue::Dict(entries) = PyValue::from_node(root) else {
        return Err(KeyError::NotAnObject);
    };
    let normalized = norm(PyValue::Dict(entries))?;
    let mut out = String::new();
    dumps(&normalized, &mut out);
    Ok(out)
}

/// D: `_h(f"{run_id}|{step}|{C-key}")`, `-` for a missing part.
pub(crate) fn key_scoped(run_id: Option<&str>, step: Option<&str>, inner: Key) -> Key {
    let inner = inner.to_string();
    sha256_key(&[
        run_id.unwrap_or("-").as_bytes(),
        b"|",
        step.unwrap_or("-").as_bytes(),
        b"|",
        inner.as_bytes(),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Python's `str(int(f))` for floats past `i64`, where the text is built from limbs.
    #[test]
    fn large_integral_floats_are_written_exactly() {
        for (f, text) in [
            (2f64.powi(100), "1267650600228229401496703205376"),
            (1e22, "10000000000000000000000"),
            (-9.3e18, "-9300000000000000000"),
            (2f64.powi(63), "9223372036854775808"),
        ] {
            assert_eq!(integral_float_text(f), text, "{f}");
        }
    }

    #[test]
    fn float_repr_matches_python() {
        // Values checked against CPython 3.11's repr().
        for (f, repr) in [
            (4200.5, "4200.5"),
            (0.1, "0.1"),
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (1.5e-5, "1.5e-05"),
            (0.0001, "0.0001"),
            (-2.5, "-2.5"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (123456789.125, "123456789.125"),
        ] {
            assert_eq!(float_repr(f), repr);
        }
    }

    #[test]
    fn integral_floats_print_their_exact_integer() {
        assert_eq!(integral_float_text(4200.0), "4200");
        assert_eq!(integral_float_text(-3.0), "-3");
        assert_eq!(integral_float_text(1e20), "100000000000000000000");
        // int(1e23) in Python: the nearest double is not 10^23.
        assert_eq!(integral_float_text(1e23), "99999999999999991611392");
    }

    #[test]
    fn dumps_escapes_like_python() {
        let mut out = String::new();
        dumps_str("é😀\"\n\u{7f}", &mut out);
        assert_eq!(out, r#""\u00e9\ud83d\ude00\"\n\u007f""#);
    }

    #[test]
    fn int_text_drops_padding() {
        assert_eq!(int_text("-0"), "0");
        assert_eq!(int_text("01234"), "1234");
        assert_eq!(int_text("-007"), "-7");
    }
}
