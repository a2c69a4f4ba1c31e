//! String rules: Unicode NFC, whitespace, and case. Each returns `Cow::Borrowed` when nothing changes,
//! so the common ASCII argument costs a scan and no allocation.

use std::borrow::Cow;

use unicode_normalization::{IsNormalized, UnicodeNormalization, is_nfc_quick};

use super::json::find_string_special;
use super::version::LeadingSpace;

/// NFC-normalizes a string and applies the whitespace rule; reports which of the two changed it.
///
/// The whitespace rule keeps every space that can carry meaning:
/// - trailing whitespace goes, and so do leading blank lines;
/// - one token on one line (no inner whitespace: a path, a name, an id) is trimmed at the start
///   too; what several words on one line do with theirs is `leading`'s (the keyer version's): a
///   pad means nothing, indentation is meaning (a schema's `format` or `enum`, or the `trim` field
///   mode, trims them: see [`super::typed`]);
/// - between two words on a line, a run of spaces (or a non-ASCII space) becomes one space, except
///   inside quotes (`'...'`, `"..."`, `` `...` ``: a literal in SQL or code);
/// - everything else is kept exactly: line breaks, tabs, indentation at the start of a line, and
///   spaces next to a tab or a line break (alignment, Markdown's line-end break).
pub(crate) fn nfc_and_whitespace(s: &str, leading: LeadingSpace) -> (Cow<'_, str>, bool, bool) {
    let nfc: Cow<'_, str> = if s.is_ascii() || is_nfc_quick(s.chars()) == IsNormalized::Yes {
        Cow::Borrowed(s)
    } else {
        let normalized: String = s.nfc().collect();
        if normalized == s {
            Cow::Borrowed(s)
        } else {
            Cow::Owned(normalized)
        }
    };
    let nfc_changed = matches!(nfc, Cow::Owned(_));
    if !whitespace_rule_may_change(&nfc) {
        // The common case, multi-line text included: nothing to trim and no run of spaces.
        return (nfc, nfc_changed, false);
    }
    let spaced = apply_whitespace_rule(&nfc, leading);
    if spaced == nfc.as_ref() {
        return (nfc, nfc_changed, false);
    }
    (Cow::Owned(spaced), nfc_changed, true)
}

/// False only when [`apply_whitespace_rule`] would return `s` unchanged: for ASCII, nothing to trim
/// at either end and no two spaces in a row (one byte scan, no allocation).
fn whitespace_rule_may_change(s: &str) -> bool {
    if !s.is_ascii() {
        return needs_collapse(s);
    }
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (None, _) => false,
        (Some(first), Some(last)) if first.is_ascii_whitespace() || last.is_ascii_whitespace() => {
            true
        }
        // `is_ascii_whitespace` leaves out VT (0x0b), which `char::is_whitespace` trims.
        (Some(&first), Some(&last)) if first == 0x0b || last == 0x0b => true,
        _ => b.windows(2).any(|w| w == b"  "),
    }
}

fn is_line_break(c: char) -> bool {
    matches!(
        c,
        '\n' | '\r' | '\u{b}' | '\u{c}' | '\u{85}' | '\u{2028}' | '\u{2029}'
    )
}

/// Whitespace that is neither a line break nor a tab: what may be collapsed between words.
fn is_inline_space(c: char) -> bool {
    c.is_whitespace() && c != '\t' && !is_line_break(c)
}

fn apply_whitespace_rule(s: &str, several_words: LeadingSpace) -> String {
    let s = s.trim_end();
    let leading = s.len() - s.trim_start().len();
    let s = match s[..leading].rfind(is_line_break) {
        // Leading blank lines go; the first line keeps its indentation.
        Some(i) => &s[i + s[i..].chars().next().map_or(1, char::len_utf8)..],
        None => s,
    };
    // One line of one token (a path, a name, an id) loses its leading spaces: a stray space there
    // means nothing. One line of several words may be a line of code whose indentation is its
    // meaning (`    return None` is not `        return None`), or a value padded with a space
    // (`" Maria Lopez "`): one character is a pad, two or more may be indentation (v3).
    let trimmed = s.trim_start();
    let one_line = !s.contains(|c: char| c == '\t' || is_line_break(c));
    let trim = one_line
        && (!trimmed.contains(char::is_whitespace)
            || match several_words {
                LeadingSpace::Trim => true,
                LeadingSpace::Keep => false,
                LeadingSpace::TrimOnePad => s[..s.len() - trimmed.len()].chars().count() == 1,
            });
    let s = if trim { trimmed } else { s };
    let mut out = String::with_capacity(s.len());
    let mut quote: Option<char> = None;
    let mut previous: Option<char> = None;
    let mut chars = s.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if is_inline_space(c) {
            let mut end = i + c.len_utf8();
            while let Some(&(j, d)) = chars.peek() {
                if !is_inline_space(d) {
                    break;
                }
                end = j + d.len_utf8();
                chars.next();
            }
            let run = &s[i..end];
            let next = chars.peek().map(|&(_, d)| d);
            let between_words = previous.is_some_and(|p| !p.is_whitespace())
                && next.is_some_and(|n| !n.is_whitespace());
            if between_words && quote.is_none() {
                out.push(' ');
            } else {
                out.push_str(run);
            }
            previous = run.chars().last();
            continue;
        }
        if matches!(c, '"' | '`' | '\'') {
            let next = chars.peek().map(|&(_, d)| d);
            // An apostrophe inside a word (`don't`) opens nothing.
            let apostrophe = c == '\''
                && previous.is_some_and(char::is_alphanumeric)
                && next.is_some_and(char::is_alphanumeric);
            quote = match quote {
                Some(open) if open == c => None,
                None if !apostrophe => Some(c),
                other => other,
            };
        }
        out.push(c);
        previous = Some(c);
    }
    out
}

/// Whether `s` has outer whitespace, or whitespace other than single spaces between words: the
/// only strings the whitespace rule may change, and those [`ascii_shape`] leaves to the general path.
fn needs_collapse(s: &str) -> bool {
    if s.is_ascii() {
        // Byte scan: ASCII whitespace is tab, LF, VT, FF, CR and space.
        let b = s.as_bytes();
        let is_space = |c: u8| matches!(c, b' ' | b'\t'..=b'\r');
        return match (b.first(), b.last()) {
            (Some(&first), Some(&last)) if !is_space(first) && !is_space(last) => {
                b.windows(2).any(|w| {
                    (is_space(w[0]) && (w[0] != b' ' || is_space(w[1])))
                        || (w[1] != b' ' && is_space(w[1]))
                })
            }
            (None, _) => false,
            _ => true,
        };
    }
    let mut previous_space = true; // a leading space needs trimming
    for c in s.chars() {
        if c.is_whitespace() {
            if previous_space || c != ' ' {
                return true;
            }
            previous_space = true;
        } else {
            previous_space = false;
        }
    }
    previous_space && !s.is_empty()
}

/// What one byte scan of an ASCII string tells the string rules, so that each rule that cannot
/// apply is skipped instead of rescanning the string (see [`ascii_shape`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AsciiShape(u8);

impl AsciiShape {
    const UPPER: u8 = 1;
    const ESCAPE: u8 = 2;
    const AT: u8 = 4;
    /// A byte outside `[0-9.-]`: the string cannot be a numeral.
    const NOT_NUMERAL: u8 = 8;
    const SPACE: u8 = 16;
    const OTHER_SPACE: u8 = 32;
    const NON_ASCII: u8 = 64;

    /// Some ASCII letter is upper case.
    pub(crate) fn has_upper(self) -> bool {
        self.0 & Self::UPPER != 0
    }
    /// `write_json_string` would escape some byte.
    pub(crate) fn needs_escape(self) -> bool {
        self.0 & Self::ESCAPE != 0
    }
    pub(crate) fn has_at(self) -> bool {
        self.0 & Self::AT != 0
    }
    /// Only digits, `.` and `-`: [`crate::key::number::is_canonical_numeral`] may hold.
    pub(crate) fn may_be_numeral(self) -> bool {
        self.0 & Self::NOT_NUMERAL == 0
    }
}

const SHAPE: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        let b = i as u8;
        let mut bits = 0;
        if b >= 0x80 {
            bits |= AsciiShape::NON_ASCII;
        }
        if b.is_ascii_uppercase() {
            bits |= AsciiShape::UPPER;
        }
        if b < 0x20 || b == b'"' || b == b'\\' {
            bits |= AsciiShape::ESCAPE;
        }
        if b == b'@' {
            bits |= AsciiShape::AT;
        }
        if !(b.is_ascii_digit() || b == b'.' || b == b'-') {
            bits |= AsciiShape::NOT_NUMERAL;
        }
        if b == b' ' {
            bits |= AsciiShape::SPACE;
        }
        if b >= b'\t' && b <= b'\r' {
            bits |= AsciiShape::OTHER_SPACE;
        }
        table[i] = bits;
        i += 1;
    }
    table
};

/// One scan of `s`. `None` unless `s` is ASCII and already trimmed with single spaces between
/// words, so that [`nfc_and_whitespace`] returns it unchanged; callers then take the general path.
pub(crate) fn ascii_shape(s: &str) -> Option<AsciiShape> {
    let b = s.as_bytes();
    let bits = b.iter().fold(0u8, |acc, &c| acc | SHAPE[c as usize]);
    if bits & (AsciiShape::NON_ASCII | AsciiShape::OTHER_SPACE) != 0 {
        return None;
    }
    if bits & AsciiShape::SPACE != 0
        && (b[0] == b' ' || b[b.len() - 1] == b' ' || b.windows(2).any(|w| w == b"  "))
    {
        return None;
    }
    Some(AsciiShape(bits))
}

/// [`casefold_words`] for a string with an [`ascii_shape`], written straight into `out` as a JSON
/// string; returns whether any word changed. Falls back to the general path when escapes are needed.
pub(crate) fn write_casefolded_ascii_words(out: &mut Vec<u8>, s: &str, shape: AsciiShape) -> bool {
    if !shape.has_upper() {
        write_shaped_json_string(out, s, shape);
        return false;
    }
    if shape.needs_escape() {
        let folded = casefold_words(s);
        write_json_string(out, &folded);
        return matches!(folded, Cow::Owned(_));
    }
    let mut changed = false;
    out.push(b'"');
    let start = out.len();
    out.extend_from_slice(s.as_bytes());
    for token in out[start..].split_mut(|&b| b == b' ') {
        if token.iter().any(u8::is_ascii_uppercase) && is_casefoldable_ascii_word(token) {
            changed = true;
            token.make_ascii_lowercase();
        }
    }
    out.push(b'"');
    changed
}

/// [`casefold`] for a string with an [`ascii_shape`], written straight into `out` as a JSON string;
/// returns whether it changed.
pub(crate) fn write_casefolded_ascii(out: &mut Vec<u8>, s: &str, shape: AsciiShape) -> bool {
    if !shape.has_upper() {
        write_shaped_json_string(out, s, shape);
        return false;
    }
    if shape.needs_escape() {
        write_json_string(out, &s.to_ascii_lowercase());
    } else {
        out.push(b'"');
        let start = out.len();
        out.extend_from_slice(s.as_bytes());
        out[start..].make_ascii_lowercase();
        out.push(b'"');
    }
    true
}

/// [`write_json_string`] when the shape already says whether anything needs escaping.
pub(crate) fn write_shaped_json_string(out: &mut Vec<u8>, s: &str, shape: AsciiShape) {
    if shape.needs_escape() {
        write_json_string(out, s);
    } else {
        write_plain_json_string(out, s);
    }
}

fn write_plain_json_string(out: &mut Vec<u8>, s: &str) {
    out.reserve(s.len() + 2);
    out.push(b'"');
    out.extend_from_slice(s.as_bytes());
    out.push(b'"');
}

/// Full Unicode case folding (`ß` → `ss`), the comparison `str.casefold()` gives in Python.
pub(crate) fn casefold(s: &str) -> Cow<'_, str> {
    if s.is_ascii() {
        if s.bytes().any(|b| b.is_ascii_uppercase()) {
            Cow::Owned(s.to_ascii_lowercase())
        } else {
            Cow::Borrowed(s)
        }
    } else {
        let folded = caseless::default_case_fold_str(s);
        if folded == s {
            Cow::Borrowed(s)
        } else {
            Cow::Owned(folded)
        }
    }
}

/// A natural-language word or an all-caps code, which we may casefold without a schema: letters only
/// (an inner apostrophe allowed, trailing sentence punctuation allowed), and no capital after the first
/// letter unless every letter is a capital. Anything else is identifier-like (`cus_Ab12Xy`, `C04ABCD`,
/// `iPhone`, `ORD-7`, URLs) and keeps its case: case carries meaning in identifiers.
pub(crate) fn is_casefoldable_word(token: &str) -> bool {
    if token.is_ascii() {
        return is_casefoldable_ascii_word(token.as_bytes());
    }
    let body = token.trim_end_matches(['.', ',', '!', '?', ';', ':']);
    if body.is_empty() {
        return false;
    }
    let mut letters = 0usize;
    let mut upper_after_first = false;
    let mut any_lower = false;
    for (i, c) in body.chars().enumerate() {
        if c.is_alphabetic() {
            letters += 1;
            if c.is_lowercase() {
                any_lower = true;
            } else if c.is_uppercase() && i > 0 {
                upper_after_first = true;
            }
        } else if c == '\'' && i > 0 {
            continue;
        } else {
            return false;
        }
    }
    letters > 0 && !(upper_after_first && any_lower)
}

/// [`is_casefoldable_word`] for ASCII, on bytes.
fn is_casefoldable_ascii_word(token: &[u8]) -> bool {
    let mut end = token.len();
    while end > 0 && matches!(token[end - 1], b'.' | b',' | b'!' | b'?' | b';' | b':') {
        end -= 1;
    }
    let body = &token[..end];
    if body.is_empty() || !body[0].is_ascii_alphabetic() {
        return false;
    }
    let (mut upper_after_first, mut any_lower) = (false, body[0].is_ascii_lowercase());
    for &c in &body[1..] {
        match c {
            b'a'..=b'z' => any_lower = true,
            b'A'..=b'Z' => upper_after_first = true,
            b'\'' => {}
            _ => return false,
        }
    }
    !(upper_after_first && any_lower)
}

/// Casefolds the words of a string and leaves identifier-like tokens, and all whitespace, alone.
pub(crate) fn casefold_words(s: &str) -> Cow<'_, str> {
    if s.is_ascii() {
        // ASCII case folding is lower-casing: one pass over the bytes (multi-line text comes here).
        if !s.bytes().any(|b| b.is_ascii_uppercase()) {
            return Cow::Borrowed(s);
        }
        let mut bytes = s.as_bytes().to_vec();
        let mut changed = false;
        for token in bytes.split_mut(u8::is_ascii_whitespace) {
            if token.iter().any(u8::is_ascii_uppercase) && is_casefoldable_ascii_word(token) {
                token.make_ascii_lowercase();
                changed = true;
            }
        }
        return if changed {
            Cow::Owned(String::from_utf8(bytes).expect("ASCII stays ASCII"))
        } else {
            Cow::Borrowed(s)
        };
    }
    let needs = s
        .split(char::is_whitespace)
        .any(|t| is_casefoldable_word(t) && matches!(casefold(t), Cow::Owned(_)));
    if !needs {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while !rest.is_empty() {
        let word_end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        let (token, tail) = rest.split_at(word_end);
        if is_casefoldable_word(token) {
            out.push_str(&casefold(token))
        } else {
            out.push_str(token)
        }
        let space_end = tail
            .find(|c: char| !c.is_whitespace())
            .unwrap_or(tail.len());
        out.push_str(&tail[..space_end]);
        rest = &tail[space_end..];
    }
    Cow::Owned(out)
}

/// `local@domain.tld` with no whitespace: mail addresses compare case-insensitively in practice
/// (domains always; local parts on every major provider).
pub(crate) fn is_email(s: &str) -> bool {
    let Some((local, domain)) = s.split_once('@') else {
        return false;
    };
    !local.is_empty()
        && !domain.contains('@')
        && domain.contains('.')
        && !domain.starts_with('.')
        && !domain.ends_with('.')
        && if s.is_ascii() {
            !s.bytes().any(|b| b <= b' ' || b == 0x7f)
        } else {
            !s.chars().any(|c| c.is_whitespace() || c.is_control())
        }
}

/// Python's `str.isspace()`, which is what the article's `\s` and `strip()` mean.
pub(crate) fn is_python_space(c: char) -> bool {
    matches!(
        c,
        '\t' | '\n'
            | '\u{b}'
            | '\u{c}'
            | '\r'
            | '\u{1c}'..='\u{1f}'
            | ' '
            | '\u{85}'
            | '\u{a0}'
            | '\u{1680}'
            | '\u{2000}'..='\u{200a}'
            | '\u{2028}'
            | '\u{2029}'
            | '\u{202f}'
            | '\u{205f}'
            | '\u{3000}'
    )
}

/// Appends `s` as a JSON string with the minimal escapes (quote, backslash, control characters).
pub(crate) fn write_json_string(out: &mut Vec<u8>, s: &str) {
    let bytes = s.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    let mut run = 0;
    let mut i = find_string_special(bytes, 0);
    while i < bytes.len() {
        out.extend_from_slice(&bytes[run..i]);
        match bytes[i] {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.extend_from_slice(&[
                    b'\\',
                    b'u',
                    b'0',
                    b'0',
                    HEX[(b >> 4) as usize],
                    HEX[(b & 15) as usize],
                ]);
            }
        }
        run = i + 1;
        i = find_string_special(bytes, run);
    }
    out.extend_from_slice(&bytes[run..]);
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;

    const EVERY_RULE: [LeadingSpace; 3] = [
        LeadingSpace::Trim,
        LeadingSpace::Keep,
        LeadingSpace::TrimOnePad,
    ];

    #[test]
    fn one_line_text_is_trimmed_and_its_word_gaps_collapse() {
        let rule = |s| nfc_and_whitespace(s, LeadingSpace::Keep).0.into_owned();
        assert_eq!(rule("a  b\u{3000}\u{a0}c  "), "a b c");
        assert_eq!(rule("  /tmp/report.csv "), "/tmp/report.csv");
        // Several words: the leading spaces may be indentation, and indentation is meaning.
        assert_eq!(rule("    return None"), "    return None");
        assert_eq!(rule("        return  None "), "        return None");
        assert_ne!(rule("    return None"), rule("        return None"));
        assert!(matches!(
            nfc_and_whitespace("a b c", LeadingSpace::Keep).0,
            Cow::Borrowed(_)
        ));
        assert_eq!(rule(""), "");
        assert_eq!(rule("   "), "");
        assert_eq!(rule("\n\n"), "");
    }

    /// v3: a value padded with one character merges with the bare value; indentation (two or more)
    /// stays apart, with any trailing space; v1 trimmed both, v2 kept both.
    #[test]
    fn a_pad_goes_and_indentation_stays() {
        let rule = |s, leading| nfc_and_whitespace(s, leading).0.into_owned();
        let pad = LeadingSpace::TrimOnePad;
        assert_eq!(rule(" Maria Lopez ", pad), "Maria Lopez");
        assert_eq!(
            rule(" Remember to buy milk. ", pad),
            "Remember to buy milk."
        );
        assert_eq!(rule("\u{a0}Maria Lopez", pad), "Maria Lopez");
        assert_eq!(rule("    return None", pad), "    return None");
        assert_eq!(rule("        return None ", pad), "        return None");
        assert_eq!(rule("  two  pads ", pad), "  two pads");
        // A first line's indentation in several lines is structure, pad or not.
        assert_eq!(rule(" a:\n b", pad), " a:\n b");
        assert_eq!(rule(" Maria Lopez ", LeadingSpace::Keep), " Maria Lopez");
        assert_eq!(rule("    return None", LeadingSpace::Trim), "return None");
    }

    #[test]
    fn whitespace_that_carries_meaning_is_kept() {
        let rule = |s| nfc_and_whitespace(s, LeadingSpace::Keep).0.into_owned();
        // Indentation (YAML, Python), tabs (Makefiles), line structure.
        for kept in [
            "server:\n  port: 8080",
            "server:\nport: 8080",
            "all:\n\tcc -o app main.c",
            "all:\n        cc -o app main.c",
            "def f():\n    return 1",
            "  indented first line\nsecond",
            "a \tb",
            "line one  \nline two",
        ] {
            assert_eq!(rule(kept), kept, "{kept:?}");
        }
        // Quoted literals keep their inner spaces; apostrophes inside words open no quote.
        assert_eq!(
            rule("SELECT *  FROM t WHERE name = 'a  b'"),
            "SELECT * FROM t WHERE name = 'a  b'"
        );
        assert_eq!(rule(r#"say  "x  y"  now"#), r#"say "x  y" now"#);
        assert_eq!(rule("don't  stop  it's  fine"), "don't stop it's fine");
        // Between words on a line, and at the ends, spaces still go.
        assert_eq!(
            rule("Hi  Priya,\n\nYour  invoice\n"),
            "Hi Priya,\n\nYour invoice"
        );
        assert_eq!(rule("\n\n  body\n  more  \n"), "  body\n  more");
    }

    #[test]
    fn the_quick_check_never_skips_a_change() {
        for s in [
            "a", "a b", "a\nb", " a", "a ", "a  b", "a\n\n", "\u{b}a", "a\u{b}", "x\t y", "\n a",
            "a\u{a0}b", "'a  b'", "a \n b", "",
        ] {
            for leading in EVERY_RULE {
                let changed = apply_whitespace_rule(s, leading) != s;
                assert!(!changed || whitespace_rule_may_change(s), "{s:?}");
            }
        }
    }

    #[test]
    fn the_whitespace_rule_is_idempotent() {
        for s in [
            "\n  a",
            "  a\n",
            "a  'b  c' d",
            "x\u{a0}\u{a0}y\tz",
            "'  lead",
            "\t a  b",
            "a \u{2028} b",
        ] {
            for leading in EVERY_RULE {
                let once = nfc_and_whitespace(s, leading).0.into_owned();
                assert_eq!(nfc_and_whitespace(&once, leading).0, once, "{s:?}");
            }
        }
    }

    #[test]
    fn nfc_composes() {
        let (s, nfc, _) = nfc_and_whitespace("Cafe\u{301}", LeadingSpace::Keep);
        assert_eq!(s, "Café");
        assert!(nfc);
    }

    #[test]
    fn words_fold_identifiers_do_not() {
        for w in [
            "USD", "usd", "Usd", "Paris", "don't", "Hello,", "STRASSE", "Straße",
        ] {
            assert!(is_casefoldable_word(w), "{w}");
        }
        for id in [
            "cus_Ab12Xy",
            "C04ABCD",
            "iPhone",
            "ORD-7",
            "https://x.io/A",
            "1234",
            "a1",
            "",
            "McDonald",
        ] {
            assert!(!is_casefoldable_word(id), "{id}");
        }
        assert_eq!(
            casefold_words("Refund ORD-7A for Alice"),
            "refund ORD-7A for alice"
        );
        assert_eq!(
            casefold_words("Hi Priya,\n\n\tYour ORD-7A"),
            "hi priya,\n\n\tyour ORD-7A"
        );
        assert_eq!(casefold("STRASSE"), casefold("straße"));
    }

    #[test]
    fn the_ascii_shape_agrees_with_the_rules_it_stands_for() {
        let expected = |s: &str| -> Option<AsciiShape> {
            if !s.is_ascii() || needs_collapse(s) {
                return None;
            }
            let any = |f: fn(u8) -> bool| s.bytes().any(f);
            let mut bits = 0;
            for (yes, bit) in [
                (any(|b| b.is_ascii_uppercase()), AsciiShape::UPPER),
                (
                    any(|b| b < 0x20 || b == b'"' || b == b'\\'),
                    AsciiShape::ESCAPE,
                ),
                (any(|b| b == b'@'), AsciiShape::AT),
                (
                    any(|b| !(b.is_ascii_digit() || b == b'.' || b == b'-')),
                    AsciiShape::NOT_NUMERAL,
                ),
                (any(|b| b == b' '), AsciiShape::SPACE),
            ] {
                if yes {
                    bits |= bit;
                }
            }
            Some(AsciiShape(bits))
        };
        for b in 0..=127u8 {
            for len in [1, 5, 9] {
                for at in [0, len / 2, len - 1] {
                    let mut bytes = vec![b'x'; len];
                    bytes[at] = b;
                    let s = std::str::from_utf8(&bytes).unwrap();
                    assert_eq!(ascii_shape(s), expected(s), "{s:?}");
                }
            }
        }
        for s in [
            "",
            " ",
            "a  b",
            "a b",
            " a",
            "a ",
            "USD",
            "12.5",
            "-7",
            "1/2",
            "a@b.co",
            "x\ty",
            "Annual Pro plan renewal",
            "0123456789-.",
            "é",
            "naïve text",
            "\"q\"",
            "b\\s",
        ] {
            assert_eq!(ascii_shape(s), expected(s), "{s:?}");
        }
    }

    #[test]
    fn emails() {
        assert!(is_email("Alice.Smith@Example.COM"));
        for no in ["alice", "a@b", "@x.io", "a b@x.io", "a@@x.io", "a@x.io."] {
            assert!(!is_email(no), "{no}");
        }
    }

    #[test]
    fn json_string_escapes() {
        let mut out = Vec::new();
        write_json_string(&mut out, "a\"b\\c\n\u{1}é");
        assert_eq!(String::from_utf8(out).unwrap(), r#""a\"b\\c\u000a\u0001é""#);
    }
}
