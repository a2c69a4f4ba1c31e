//! The typed keyer's normalizer: walks the parsed arguments beside the tool's schema and policy and
//! writes one canonical JSON text. Object keys are sorted by UTF-8 bytes, numbers are exact decimals,
//! strings are minimally escaped UTF-8 (see the README's rules table for every rule and its risk).

use std::borrow::Cow;

use super::json::{self, Node};
use super::number::{Decimal, is_canonical_numeral};
use super::policy::PolicyNode;
use super::schema::{FieldMode, Format, Schema, Types};
use super::text::{casefold, casefold_words, is_email, nfc_trim_collapse, write_json_string};
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
                let decimal = Decimal::from_json(text)?;
                let wants_string_only = schema.is_some_and(|s| s.types == Types::STRING);
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
        if !members.is_sorted_by(|a, b| a.0 <= b.0) {
            self.rules.insert(Rules::KEY_ORDER);
            members.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        }
        if let Some(pair) = members.windows(2).find(|w| w[0].0 == w[1].0) {
            return Err(KeyError::DuplicateKey(pair[0].0.to_string()));
        }
        out.push(b'{');
        let mut first = true;
        for (name, value) in members.iter_mut() {
            if matches!(value, Node::Null) {
                self.rules.insert(Rules::NULL_DROPPED);
                continue;
            }
            let child_policy = policy.and_then(|p| p.child(name));
            if policy.is_some_and(|p| !p.admits(child_policy)) {
                self.rules.insert(Rules::FIELD_NOT_KEYED);
                continue;
            }
            let child_schema = schema.and_then(|s| s.property(name));
            let mode = child_policy
                .and_then(|p| p.mode)
                .or_else(|| child_schema.and_then(|s| s.mode));
            if mode == Some(FieldMode::Ignore) {
                self.rules.insert(Rules::FIELD_IGNORED);
                continue;
            }
            if !first {
                out.push(b',');
            }
            first = false;
            write_json_string(out, name);
            out.push(b':');
            self.value(value, child_schema, child_policy, out)?;
        }
        out.push(b'}');
        Ok(())
    }

    fn string(
        &mut self,
        raw: &str,
        schema: Option<&Schema>,
        policy: Option<&PolicyNode>,
        mode: Option<FieldMode>,
        out: &mut Vec<u8>,
    ) -> Result<(), KeyError> {
        let (s, nfc_changed, ws_changed) = nfc_trim_collapse(raw);
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
            return self.write_folded(casefold(&s), Rules::CASEFOLD, out);
        }
        if types.contains(Types::STRING) || typed_not_string {
            write_json_string(out, &s);
            return Ok(());
        }
        // No schema: only safe heuristics (documented in the README's rules table).
        if is_canonical_numeral(&s) {
            self.rules.insert(Rules::NUMERIC_STRING);
            out.extend_from_slice(s.as_bytes());
            return Ok(());
        }
        if let Some(b) = parse_bool(&s) {
            self.rules.insert(Rules::BOOLEAN_STRING);
            out.extend_from_slice(if b { b"true" } else { b"false" });
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
