//! Canonical JSON text (keyer B's): keys sorted, duplicates resolved to the last, integers exact,
//! other numbers as Python's `repr` of a float, strings as Python's `json.dumps` writes them. The
//! strict fingerprint every claim stores is this text's hash, so it lives apart from the article's
//! baseline module: the baseline uses it, and a change to the baseline cannot move a fingerprint.

use super::Key;
use super::json::{Tape, Token};

/// `str(int(text))`: drops leading zeros and the sign of zero.
pub(crate) fn int_text(text: &str) -> String {
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let digits = digits.trim_start_matches('0');
    match (negative, digits.is_empty()) {
        (_, true) => "0".to_string(),
        (true, false) => format!("-{digits}"),
        (false, false) => digits.to_string(),
    }
}

/// `repr(float)`: shortest round-trip digits, exponent form outside `1e-4 <= |x| < 1e16`.
pub(crate) fn float_repr(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 {
            "Infinity".into()
        } else {
            "-Infinity".into()
        };
    }
    let sci = format!("{:e}", f.abs()); // e.g. "1.5e3"
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let n = digits.len() as i32;
    let decpt = exp + 1;
    let sign = if f.is_sign_negative() { "-" } else { "" };
    let body = if decpt <= -4 || decpt > 16 {
        let rest = if n > 1 {
            format!(".{}", &digits[1..])
        } else {
            String::new()
        };
        let esign = if exp < 0 { '-' } else { '+' };
        format!("{}{rest}e{esign}{:02}", &digits[..1], exp.abs())
    } else if decpt <= 0 {
        format!("0.{}{digits}", "0".repeat((-decpt) as usize))
    } else if decpt >= n {
        format!("{digits}{}.0", "0".repeat((decpt - n) as usize))
    } else {
        format!(
            "{}.{}",
            &digits[..decpt as usize],
            &digits[decpt as usize..]
        )
    };
    format!("{sign}{body}")
}

pub(crate) fn dumps_str(s: &str, out: &mut String) {
    write_python_json_string(out, s, true);
}

/// Python's `json.dumps` string encoding: short escapes for `"` `\` and five controls, `\u00XX` for
/// the other controls, and with `ensure_ascii` (Python's default) every character outside `' '..='~'`
/// as `\uXXXX` (lowercase hex, UTF-16 surrogate pairs above the BMP).
pub fn write_python_json_string(out: &mut String, s: &str, ensure_ascii: bool) {
    out.push('"');
    if s.bytes()
        .all(|b| matches!(b, b' '..=b'~') && b != b'"' && b != b'\\')
    {
        // Printable ASCII without a quote or backslash: written as it is.
        out.push_str(s);
        out.push('"');
        return;
    }
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (ensure_ascii && !(' '..='~').contains(&c)) => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// `hashlib.sha256(s.encode()).hexdigest()[:32]`.
pub(crate) fn sha256_key(parts: &[&[u8]]) -> Key {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update(part);
    }
    Key::from_digest(&hasher.finalize())
}

/// `_h(tool + "|" + text)`: how keyers A to D, and the strict fingerprint, hash a call.
pub(crate) fn tool_key(tool: &str, text: &str) -> Key {
    sha256_key(&[tool.as_bytes(), b"|", text.as_bytes()])
}

/// B's canonical text, written straight from the token tape: what `dumps(PyValue::from_node(..))`
/// writes (keys sorted, duplicates resolved to the last, ints by `int_text`, other numbers by
/// `float_repr`), without building the intermediate values.
pub(crate) fn canonical_text(tape: &Tape<'_>) -> String {
    let mut out = String::new();
    dumps_tape(tape, 0, &mut out);
    out
}

pub(crate) fn dumps_tape(tape: &Tape<'_>, at: usize, out: &mut String) {
    match tape.token(at) {
        Token::Null => out.push_str("null"),
        Token::Bool(b) => out.push_str(if b { "true" } else { "false" }),
        number @ Token::Number { .. } => {
            let text = tape.number(number);
            if text.contains(['.', 'e', 'E']) {
                out.push_str(&float_repr(text.parse().unwrap_or(f64::NAN)));
            } else {
                out.push_str(&int_text(text));
            }
        }
        string @ Token::String { .. } => dumps_str(tape.str(string), out),
        Token::Array { len, .. } => {
            out.push('[');
            let mut item = at + 1;
            for i in 0..len {
                if i > 0 {
                    out.push(',');
                }
                dumps_tape(tape, item, out);
                item = tape.skip(item);
            }
            out.push(']');
        }
        Token::Object { len, .. } => {
            // (name, index of the value token), in source order; a stable sort keeps equal names
            // in source order, and the last of each run wins, as in a Python dict.
            let mut members: Vec<(&str, usize)> = Vec::with_capacity(len);
            let mut name = at + 1;
            for _ in 0..len {
                members.push((tape.str(tape.token(name)), name + 1));
                name = tape.skip(name + 1);
            }
            members.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            let mut first = true;
            for (i, &(name, value)) in members.iter().enumerate() {
                if members.get(i + 1).is_some_and(|next| next.0 == name) {
                    continue;
                }
                if !first {
                    out.push(',');
                }
                first = false;
                dumps_str(name, out);
                out.push(':');
                dumps_tape(tape, value, out);
            }
            out.push('}');
        }
    }
}
