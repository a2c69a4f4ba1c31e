//! The typed keyer's normalizer: walks the parsed arguments beside the tool's schema and policy and
//! writes one canonical JSON text. Object keys are sorted by UTF-8 bytes, numbers are exact decimals,
//! strings are minimally escaped UTF-8 (see the README's rules table for every rule and its risk).

use std::borrow::Cow;

use super::json::{self, Node};
use super::number::{Decimal, is_canonical_numeral};
use super::policy::PolicyNode;
use super::schema::{FieldMode, Format, Schema, Types};
use super::text::{
    ascii_shape, casefold, casefold_words, is_email, nfc_trim_collapse, write_casefolded_ascii,
    write_casefolded_ascii_words, write_json_string, write_shaped_json_string,
};
use super::timestamp::Timestamp;
use super::{KeyError, Rules};

pub(crate) struct Normalizer {
    pub(crate) keep_subseconds: bool,
    pub(crate) rules: Rules,
    /// Depth left for JSON embedded in strings (Bedrock `array` parameters).
    pub(crate) depth_left: usize,
}

impl Normalizer {
    pub(crate) fn new(keep_subseconds: bool, max_depth: usize) -> Self {
        Self {
            keep_subseconds,
            rules: Rules::default(),
            depth_left: max_depth,
        }
    }

    pub(crate) fn value(
        &mut self,
        node: &mut Node<'_>,
        schema: Option<&Schema>,
        policy: Option<&PolicyNode>,
        out: &mut Vec<u8>,
    ) -> Result<(), KeyError> {
        let mode = policy
            .and_then(|p| p.mode)
            .or_else(|| schema.and_then(|s| s.mode));
        match node {
            Node::Null => out.extend_from_slice(b"null"),
            Node::Bool(true) => out.extend_from_slice(b"true"),
            Node::Bool(false) => out.extend_from_slice(b"false"),
            Node::Number(text) => {
                let wants_string_only = schema.is_some_and(|s| s.types == Types::STRING);
                if is_plain_integer(text) {
                    // Already canonical: skip the decimal arithmetic.
                    if wants_string_only {
                        self.rules.insert(Rules::SCHEMA_COERCION);
                        out.push(b'"');
                        out.extend_from_slice(text.as_bytes());
                        out.push(b'"');
                    } else {
                        out.extend_from_slice(text.as_bytes());
                    }
                    return Ok(());
                }
                let decimal = Decimal::from_json(text)?;
                if wants_string_only {
                    // The schema says string: the model dropped the quotes.
                    self.rules.insert(Rules::SCHEMA_COERCION);
                    out.push(b'"');
                    decimal.write_canonical(out);
                    out.push(b'"');
                } else {
                    let start = out.len();
                    decimal.write_canonical(out);
                    if out[start..] != *text.as_bytes() {
                        self.rules.insert(Rules::NUMBER_CANONICAL);
                    }
                }
            }
            Node::String(s) => {
                if mode == Some(FieldMode::Exact) {
                    write_json_string(out, s);
                } else {
                    self.string(s, schema, policy, mode, out)?;
                }
            }
            Node::Array(items) => {
                let item_schema = schema.and_then(|s| s.items.as_deref());
                out.push(b'[');
                for (i, item) in items.iter_mut().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    self.value(item, item_schema, policy, out)?;
                }
                out.push(b']');
            }
            Node::Object(members) => self.object(members, schema, policy, out)?,
        }
        Ok(())
    }

    fn object(
        &mut self,
        members: &mut [(Cow<'_, str>, Node<'_>)],
        schema: Option<&Schema>,
        policy: Option<&PolicyNode>,
        out: &mut Vec<u8>,
    ) -> Result<(), KeyError> {
        out.push(b'{');
        let mut first = true;
        // Strictly ascending means sorted and free of duplicates: one pass, no sort.
        if members.is_sorted_by(|a, b| a.0.as_bytes() < b.0.as_bytes()) {
            for (name, value) in members.iter_mut() {
                self.member(name, value, schema, policy, &mut first, out)?;
            }
        } else if members.len() <= SMALL_OBJECT {
            // Sort 16-byte (name prefix, index) pairs instead of moving the members: most names
            // differ in their first eight bytes, so most comparisons are one integer compare.
            let mut order = [(0u64, 0u32); SMALL_OBJECT];
            let order = &mut order[..members.len()];
            for (slot, (i, (name, _))) in order.iter_mut().zip(members.iter().enumerate()) {
                *slot = (name_prefix(name), i as u32);
            }
            let by_name = |a: &(u64, u32), b: &(u64, u32)| {
                a.0.cmp(&b.0).then_with(|| {
                    let (x, y) = (&members[a.1 as usize].0, &members[b.1 as usize].0);
                    x.as_bytes().cmp(y.as_bytes())
                })
            };
            order.sort_unstable_by(by_name);
            if let Some(pair) = order
                .windows(2)
                .find(|w| by_name(&w[0], &w[1]) == std::cmp::Ordering::Equal)
            {
                return Err(KeyError::DuplicateKey(
                    members[pair[0].1 as usize].0.to_string(),
                ));
            }
            // Not strictly ascending and no duplicates: out of order.
            self.rules.insert(Rules::KEY_ORDER);
            for &(_, i) in order.iter() {
                let (name, value) = &mut members[i as usize];
                self.member(name, value, schema, policy, &mut first, out)?;
            }
        } else {
            if !members.is_sorted_by(|a, b| a.0 <= b.0) {
                self.rules.insert(Rules::KEY_ORDER);
                members.sort_unstable_by(|a, b| a.0.cmp(&b.0));
            }
            if let Some(pair) = members.windows(2).find(|w| w[0].0 == w[1].0) {
                return Err(KeyError::DuplicateKey(pair[0].0.to_string()));
            }
            for (name, value) in members.iter_mut() {
                self.member(name, value, schema, policy, &mut first, out)?;
            }
        }
        out.push(b'}');
        Ok(())
    }

    /// One object member, in sorted position: dropped, ignored or written as `"name":value`.
    fn member(
        &mut self,
        name: &str,
        value: &mut Node<'_>,
        schema: Option<&Schema>,
        policy: Option<&PolicyNode>,
        first: &mut bool,
        out: &mut Vec<u8>,
    ) -> Result<(), KeyError> {
        if matches!(value, Node::Null) {
            self.rules.insert(Rules::NULL_DROPPED);
            return Ok(());
        }
        let child_policy = policy.and_then(|p| p.child(name));
        if policy.is_some_and(|p| !p.admits(child_policy)) {
            self.rules.insert(Rules::FIELD_NOT_KEYED);
            return Ok(());
        }
        let child_schema = schema.and_then(|s| s.property(name));
        let mode = child_policy
            .and_then(|p| p.mode)
            .or_else(|| child_schema.and_then(|s| s.mode));
        if mode == Some(FieldMode::Ignore) {
            self.rules.insert(Rules::FIELD_IGNORED);
            return Ok(());
        }
        if !*first {
            out.push(b',');
        }
        *first = false;
        write_json_string(out, name);
        out.push(b':');
        self.value(value, child_schema, child_policy, out)
    }

    fn string(
        &mut self,
        raw: &str,
        schema: Option<&Schema>,
        policy: Option<&PolicyNode>,
        mode: Option<FieldMode>,
        out: &mut Vec<u8>,
    ) -> Result<(), KeyError> {
        // One scan decides which rules can apply to an ASCII string (the common case); the general
        // path below gives the same answers, only slower.
        let mut shape = ascii_shape(raw);
        let (s, nfc_changed, ws_changed) = match shape {
            Some(_) => (Cow::Borrowed(raw), false, false),
            None => nfc_trim_collapse(raw),
        };
        if shape.is_none() {
            shape = ascii_shape(&s);
        }
        if nfc_changed {
            self.rules.insert(Rules::UNICODE_NFC);
        }
        if ws_changed {
            self.rules.insert(Rules::WHITESPACE);
        }
        let types = schema.map(|s| s.types).unwrap_or_default();
        let typed_not_string = !types.is_unknown() && !types.contains(Types::STRING);

        if typed_not_string {
            if types.contains(Types::NUMBER) {
                if let Some(decimal) = Decimal::from_numeric_string(&s) {
                    self.rules.insert(Rules::SCHEMA_COERCION);
                    decimal?.write_canonical(out);
                    return Ok(());
                }
            }
            if types.contains(Types::BOOLEAN) {
                if let Some(b) = parse_bool(&s) {
                    self.rules.insert(Rules::SCHEMA_COERCION);
                    out.extend_from_slice(if b { b"true" } else { b"false" });
                    return Ok(());
                }
            }
            if (types.contains(Types::ARRAY) && s.starts_with('['))
                || (types.contains(Types::OBJECT) && s.starts_with('{'))
            {
                // Bedrock sends `array` parameters as JSON text inside a string.
                if let Ok(mut embedded) = json::parse(&s, self.depth_left) {
                    self.rules.insert(Rules::SCHEMA_COERCION);
                    return self.value(&mut embedded, schema, policy, out);
                }
            }
        }

        let format = schema.map(|s| s.format).unwrap_or_default();
        if let Some(member) = schema.and_then(|sc| enum_member(sc, &s)) {
            if member != s.as_ref() {
                self.rules.insert(Rules::ENUM_CASE);
            }
            write_json_string(out, member);
            return Ok(());
        }
        if let Some(ts) = Timestamp::parse(&s) {
            // The timestamp rule applies to every string in date-time grammar unless the field is exact:
            // the grammar is specific enough that no identifier or prose matches it.
            out.push(b'"');
            let start = out.len();
            ts.write_normalized(out, self.keep_subseconds);
            if out[start..] != *s.as_bytes() {
                self.rules.insert(if ts.has_nonzero_offset() {
                    Rules::TIMESTAMP_UTC
                } else if ts.has_fraction() && !self.keep_subseconds {
                    Rules::TIMESTAMP_SUBSECOND
                } else {
                    Rules::TIMESTAMP_FORMAT
                });
            }
            out.push(b'"');
            return Ok(());
        }
        if mode == Some(FieldMode::Casefold) || format == Format::CaseInsensitive {
            if let Some(shape) = shape {
                if write_casefolded_ascii(out, &s, shape) {
                    self.rules.insert(Rules::CASEFOLD);
                }
                return Ok(());
            }
            return self.write_folded(casefold(&s), Rules::CASEFOLD, out);
        }
        if types.contains(Types::STRING) || typed_not_string {
            match shape {
                Some(shape) => write_shaped_json_string(out, &s, shape),
                None => write_json_string(out, &s),
            }
            return Ok(());
        }
        // No schema: only safe heuristics (documented in the README's rules table).
        if shape.is_none_or(|shape| shape.may_be_numeral()) && is_canonical_numeral(&s) {
            self.rules.insert(Rules::NUMERIC_STRING);
            out.extend_from_slice(s.as_bytes());
            return Ok(());
        }
        if let Some(b) = parse_bool(&s) {
            self.rules.insert(Rules::BOOLEAN_STRING);
            out.extend_from_slice(if b { b"true" } else { b"false" });
            return Ok(());
        }
        if let Some(shape) = shape {
            let changed = if shape.has_at() && is_email(&s) {
                write_casefolded_ascii(out, &s, shape)
            } else {
                write_casefolded_ascii_words(out, &s, shape)
            };
            if changed {
                self.rules.insert(Rules::CASEFOLD);
            }
            return Ok(());
        }
        if is_email(&s) {
            return self.write_folded(casefold(&s), Rules::CASEFOLD, out);
        }
        self.write_folded(casefold_words(&s), Rules::CASEFOLD, out)
    }

    fn write_folded(
        &mut self,
        folded: Cow<'_, str>,
        rule: Rules,
        out: &mut Vec<u8>,
    ) -> Result<(), KeyError> {
        if let Cow::Owned(_) = folded {
            self.rules.insert(rule);
        }
        // Case folding can leave a non-NFC sequence behind; compose again so the rule stays idempotent.
        let (folded, _, _) = nfc_trim_collapse(&folded);
        write_json_string(out, &folded);
        Ok(())
    }
}

/// Objects up to this many members are sorted through a small index on the stack.
const SMALL_OBJECT: usize = 32;

/// The first eight bytes of a name, zero-padded, as a big-endian integer: ordering these orders the
/// names by their first eight bytes (ties are broken on the whole name).
fn name_prefix(name: &str) -> u64 {
    let b = name.as_bytes();
    let mut prefix = [0u8; 8];
    let n = b.len().min(8);
    prefix[..n].copy_from_slice(&b[..n]);
    u64::from_be_bytes(prefix)
}

/// `-?[1-9][0-9]*` with at most 40 digits, or `0`: JSON number text that
/// [`Decimal::write_canonical`] writes back unchanged.
fn is_plain_integer(text: &str) -> bool {
    let b = text.as_bytes();
    let digits = match b.first() {
        Some(b'-') => &b[1..],
        _ => b,
    };
    match digits.first() {
        Some(b'0') => b.len() == 1,
        Some(b'1'..=b'9') => digits.len() <= 40 && digits.iter().all(u8::is_ascii_digit),
        _ => false,
    }
}

fn parse_bool(s: &str) -> Option<bool> {
    if s.eq_ignore_ascii_case("true") {
        Some(true)
    } else if s.eq_ignore_ascii_case("false") {
        Some(false)
    } else {
        None
    }
}

/// The enum member a string names, exactly or up to case.
fn enum_member<'s>(schema: &'s Schema, s: &str) -> Option<&'s str> {
    if schema.enum_strings.is_empty() {
        return None;
    }
    if let Some(exact) = schema.enum_strings.iter().find(|m| m.as_str() == s) {
        return Some(exact);
    }
    let folded = casefold(s);
    let mut matches = schema.enum_strings.iter().filter(|m| casefold(m) == folded);
    let first = matches.next()?;
    // Two members that differ only by case are distinct values; refuse to guess between them.
    matches.next().is_none().then_some(first.as_str())
}
