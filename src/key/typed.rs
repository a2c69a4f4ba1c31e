//! The typed keyer's normalizer: walks the parsed arguments beside the tool's schema and policy and
//! writes one canonical JSON text. Object keys are sorted by UTF-8 bytes, numbers are exact decimals,
//! strings are minimally escaped UTF-8 (see the README's rules table for every rule and its risk).

use std::borrow::Cow;
use std::cmp::Ordering;

use super::json::{self, Tape, Token};
use super::number::{Decimal, is_canonical_numeral};
use super::policy::PolicyNode;
use super::schema::{FieldMode, Format, Schema, Types};
use super::text::{
    AsciiShape, ascii_shape, casefold, casefold_words, is_email, nfc_and_whitespace,
    write_casefolded_ascii, write_casefolded_ascii_words, write_json_string,
    write_shaped_json_string,
};
use super::timestamp::Timestamp;
use super::{KeyError, KeyerVersion, Rules};

pub(crate) struct Normalizer {
    pub(crate) keep_subseconds: bool,
    pub(crate) rules: Rules,
    /// Depth left for JSON embedded in strings (Bedrock `array` parameters).
    pub(crate) depth_left: usize,
    /// The tool's policy says `undeclared: ignore`: members no schema declares leave the key.
    pub(crate) ignore_undeclared: bool,
    /// The keyer version whose rules apply.
    pub(crate) version: KeyerVersion,
}

impl Normalizer {
    pub(crate) fn new(keep_subseconds: bool, max_depth: usize) -> Self {
        Self {
            keep_subseconds,
            rules: Rules::default(),
            depth_left: max_depth,
            ignore_undeclared: false,
            version: KeyerVersion::default(),
        }
    }

    /// Writes the canonical form of the value at token `at` of `tape`.
    pub(crate) fn value(
        &mut self,
        tape: &Tape<'_>,
        at: usize,
        schema: Option<&Schema>,
        policy: Option<&PolicyNode>,
        out: &mut Vec<u8>,
    ) -> Result<(), KeyError> {
        match tape.token(at) {
            Token::Null => out.extend_from_slice(b"null"),
            Token::Bool(true) => out.extend_from_slice(b"true"),
            Token::Bool(false) => out.extend_from_slice(b"false"),
            number @ Token::Number { .. } => self.number(tape.number(number), schema, out)?,
            string @ Token::String { .. } => {
                let mode = policy
                    .and_then(|p| p.mode)
                    .or_else(|| schema.and_then(|s| s.mode));
                let s = tape.str(string);
                match mode {
                    Some(FieldMode::Exact) => write_json_string(out, s),
                    Some(FieldMode::Trim) => {
                        let trimmed = s.trim();
                        if trimmed.len() != s.len() {
                            self.rules.insert(Rules::WHITESPACE);
                        }
                        write_json_string(out, trimmed)
                    }
                    _ => self.string(s, schema, policy, mode, out)?,
                }
            }
            Token::Array { len, .. } => {
                let item_schema = schema.and_then(|s| s.items.as_deref());
                let mode = policy
                    .and_then(|p| p.mode)
                    .or_else(|| schema.and_then(|s| s.mode));
                if mode == Some(FieldMode::Unordered) {
                    return self.multiset(tape, at + 1, len, item_schema, policy, out);
                }
                out.push(b'[');
                let mut item = at + 1;
                for i in 0..len {
                    if i > 0 {
                        out.push(b',');
                    }
                    self.value(tape, item, item_schema, policy, out)?;
                    item = tape.skip(item);
                }
                out.push(b']');
            }
            Token::Object { len, .. } => self.object(tape, at, len, schema, policy, out)?,
        }
        Ok(())
    }

    /// An array whose order the tool ignores: its items' canonical texts sorted, duplicates kept.
    fn multiset(
        &mut self,
        tape: &Tape<'_>,
        first_item: usize,
        len: usize,
        item_schema: Option<&Schema>,
        policy: Option<&PolicyNode>,
        out: &mut Vec<u8>,
    ) -> Result<(), KeyError> {
        let mut items = Vec::with_capacity(len);
        let mut item = first_item;
        for _ in 0..len {
            let mut text = Vec::new();
            self.value(tape, item, item_schema, policy, &mut text)?;
            items.push(text);
            item = tape.skip(item);
        }
        if !items.is_sorted() {
            items.sort_unstable();
            self.rules.insert(Rules::LIST_ORDER);
        }
        out.push(b'[');
        for (i, text) in items.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(text);
        }
        out.push(b']');
        Ok(())
    }

    fn number(
        &mut self,
        text: &str,
        schema: Option<&Schema>,
        out: &mut Vec<u8>,
    ) -> Result<(), KeyError> {
        let wants_string = schema
            .is_some_and(|s| s.types.contains(Types::STRING) && !s.types.contains(Types::NUMBER));
        if wants_string {
            // The schema says string: the model dropped the quotes. The digits are kept as written,
            // as the string would keep them (`-74.0060` is not `-74.006` to a string field).
            self.rules.insert(Rules::SCHEMA_COERCION);
            out.push(b'"');
            out.extend_from_slice(text.as_bytes());
            out.push(b'"');
            return Ok(());
        }
        if is_plain_integer(text) {
            // Already canonical: skip the decimal arithmetic.
            out.extend_from_slice(text.as_bytes());
            return Ok(());
        }
        let decimal = Decimal::from_json(text)?;
        {
            let start = out.len();
            decimal.write_canonical(out);
            if out[start..] != *text.as_bytes() {
                self.rules.insert(Rules::NUMBER_CANONICAL);
            }
        }
        Ok(())
    }

    /// An object of `len` members at token `at`, written with its names in UTF-8 byte order.
    fn object(
        &mut self,
        tape: &Tape<'_>,
        at: usize,
        len: usize,
        schema: Option<&Schema>,
        policy: Option<&PolicyNode>,
        out: &mut Vec<u8>,
    ) -> Result<(), KeyError> {
        // (name prefix, index of the name token) per member, in source order. Sorting these pairs
        // orders the members: most names differ in their first eight bytes, so most comparisons
        // are one integer compare.
        let mut small = [(0u64, 0usize); SMALL_OBJECT];
        let mut large = Vec::new();
        let order: &mut [(u64, usize)] = if len <= SMALL_OBJECT {
            &mut small[..len]
        } else {
            large.resize(len, (0, 0));
            &mut large
        };
        let mut name = at + 1;
        for slot in order.iter_mut() {
            *slot = (name_prefix(tape.str(tape.token(name))), name);
            name = tape.skip(name + 1);
        }
        let by_name = |a: &(u64, usize), b: &(u64, usize)| {
            a.0.cmp(&b.0).then_with(|| {
                let (x, y) = (tape.str(tape.token(a.1)), tape.str(tape.token(b.1)));
                x.as_bytes().cmp(y.as_bytes())
            })
        };
        // Strictly ascending (the usual case for machine-written JSON) means sorted and free of
        // duplicates; otherwise sort, and two equal neighbours are a duplicate.
        if !order.is_sorted_by(|a, b| by_name(a, b) == Ordering::Less) {
            order.sort_unstable_by(by_name);
            if let Some(pair) = order
                .windows(2)
                .find(|w| by_name(&w[0], &w[1]) == Ordering::Equal)
            {
                return Err(KeyError::DuplicateKey(
                    tape.str(tape.token(pair[0].1)).to_string(),
                ));
            }
            self.rules.insert(Rules::KEY_ORDER);
        }
        out.push(b'{');
        let mut first = true;
        match schema.filter(|s| s.fills_defaults) {
            None => {
                for &(_, name) in order.iter() {
                    self.member(tape, name, schema, policy, &mut first, out)?;
                }
            }
            Some(schema) => self.members_with_defaults(tape, order, schema, policy, out)?,
        }
        out.push(b'}');
        Ok(())
    }

    /// The members (`order`: sorted by name) and the defaults of left-out properties, merged in
    /// name order: a property left out keys as its default, as does one whose `null` means "left
    /// out".
    fn members_with_defaults(
        &mut self,
        tape: &Tape<'_>,
        order: &[(u64, usize)],
        schema: &Schema,
        policy: Option<&PolicyNode>,
        out: &mut Vec<u8>,
    ) -> Result<(), KeyError> {
        let mut first = true;
        let mut defaults = schema.defaults().peekable();
        for &(_, name) in order {
            let present = tape.str(tape.token(name));
            while let Some((default_name, property, default)) =
                defaults.next_if(|(n, _, _)| n.as_bytes() < present.as_bytes())
            {
                self.default(default_name, property, default, policy, &mut first, out)?;
            }
            let written = self.member(tape, name, Some(schema), policy, &mut first, out)?;
            if let Some((default_name, property, default)) =
                defaults.next_if(|(n, _, _)| *n == present)
                && written == Member::DroppedNull
            {
                self.default(default_name, property, default, policy, &mut first, out)?;
            }
        }
        for (default_name, property, default) in defaults {
            self.default(default_name, property, default, policy, &mut first, out)?;
        }
        Ok(())
    }

    /// A property's default in place of a left-out member, unless the policy leaves it out.
    fn default(
        &mut self,
        name: &str,
        schema: &Schema,
        default: &str,
        policy: Option<&PolicyNode>,
        first: &mut bool,
        out: &mut Vec<u8>,
    ) -> Result<(), KeyError> {
        let child_policy = policy.and_then(|p| p.child(name));
        let mode = child_policy.and_then(|p| p.mode).or(schema.mode);
        if policy.is_some_and(|p| !p.admits(child_policy)) || mode == Some(FieldMode::Ignore) {
            return Ok(());
        }
        // Written by serde_json from the schema, so it parses; a default that does not is skipped
        // rather than failing every call of the tool.
        let Ok(tape) = json::parse_tape(default, self.depth_left) else {
            return Ok(());
        };
        self.rules.insert(Rules::SCHEMA_DEFAULT);
        if !*first {
            out.push(b',');
        }
        *first = false;
        write_json_string(out, name);
        out.push(b':');
        self.value(&tape, 0, Some(schema), child_policy, out)
    }

    /// One object member (its name at token `name`, its value next): dropped, ignored, or written
    /// as `"name":value`.
    fn member(
        &mut self,
        tape: &Tape<'_>,
        name: usize,
        schema: Option<&Schema>,
        policy: Option<&PolicyNode>,
        first: &mut bool,
        out: &mut Vec<u8>,
    ) -> Result<Member, KeyError> {
        let value = name + 1;
        let name_token = tape.token(name);
        let name = tape.str(name_token);
        let child_schema = schema.and_then(|s| s.property(name));
        let ignoring = self.ignore_undeclared || schema.is_some_and(|s| s.ignores_undeclared);
        if ignoring && child_schema.is_none() && schema.is_some_and(Schema::declares_properties) {
            // A member the tool does not declare, which it ignores.
            self.rules.insert(Rules::UNDECLARED_IGNORED);
            return Ok(Member::NotKeyed);
        }
        if tape.token(value) == Token::Null && !child_schema.is_some_and(Schema::keeps_null) {
            // `null` is "left out" unless the schema makes it a value of its own.
            self.rules.insert(Rules::NULL_DROPPED);
            return Ok(Member::DroppedNull);
        }
        let child_policy = policy.and_then(|p| p.child(name));
        if policy.is_some_and(|p| !p.admits(child_policy)) {
            self.rules.insert(Rules::FIELD_NOT_KEYED);
            return Ok(Member::NotKeyed);
        }
        let mode = child_policy
            .and_then(|p| p.mode)
            .or_else(|| child_schema.and_then(|s| s.mode));
        if mode == Some(FieldMode::Ignore) {
            self.rules.insert(Rules::FIELD_IGNORED);
            return Ok(Member::NotKeyed);
        }
        if !*first {
            out.push(b',');
        }
        *first = false;
        if matches!(name_token, Token::String { escaped: false, .. }) {
            // The reader stopped at every quote, backslash and control character: none to escape.
            out.push(b'"');
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b"\":");
        } else {
            write_json_string(out, name);
            out.push(b':');
        }
        self.value(tape, value, child_schema, child_policy, out)?;
        Ok(Member::Written)
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
            None => nfc_and_whitespace(raw, self.version.leading_space()),
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
        // An enum or a format names a value, never a line of code: its leading spaces go too.
        let s = match schema {
            Some(sc)
                if self.version.trims_named_values()
                    && (!sc.enum_strings.is_empty() || sc.format != Format::None)
                    && s.starts_with(char::is_whitespace) =>
            {
                self.rules.insert(Rules::WHITESPACE);
                Cow::Owned(s.trim_start().to_string())
            }
            _ => s,
        };
        let types = schema.map(|s| s.types).unwrap_or_default();
        let typed_not_string = !types.is_unknown() && !types.contains(Types::STRING);
        if typed_not_string && let Some(written) = self.coerced(raw, &s, types, schema, policy, out)
        {
            return written;
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
            self.timestamp(&ts, &s, out);
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
        if types.contains(Types::TEXT) && is_json_text(raw, &['{', '[']) {
            // Declared only as text: a transport without an object type (Bedrock) sends objects as
            // JSON text, so JSON text is keyed as the value it writes, as if it had come unquoted.
            if let Ok(embedded) = json::parse_tape(raw.trim(), self.depth_left) {
                self.rules.insert(Rules::JSON_TEXT);
                return self.value(&embedded, 0, None, policy, out);
            }
        }
        if types.contains(Types::STRING) || typed_not_string {
            match shape {
                Some(shape) => write_shaped_json_string(out, &s, shape),
                None => write_json_string(out, &s),
            }
            return Ok(());
        }
        self.schema_free(&s, shape, out)
    }

    /// A string where the schema says a number, a boolean, an array or an object: the value it
    /// spells, or `None` when it spells none. `s` is the string after the text rules; JSON text is
    /// read from `raw`, since those rules read quotes as prose does, not as JSON escapes them.
    fn coerced(
        &mut self,
        raw: &str,
        s: &str,
        types: Types,
        schema: Option<&Schema>,
        policy: Option<&PolicyNode>,
        out: &mut Vec<u8>,
    ) -> Option<Result<(), KeyError>> {
        if types.contains(Types::NUMBER)
            && let Some(decimal) = Decimal::from_numeric_string(s)
        {
            self.rules.insert(Rules::SCHEMA_COERCION);
            return Some(decimal.map(|d| d.write_canonical(out)));
        }
        if types.contains(Types::BOOLEAN)
            && let Some(b) = parse_bool(s)
        {
            self.rules.insert(Rules::SCHEMA_COERCION);
            out.extend_from_slice(if b { b"true" } else { b"false" });
            return Some(Ok(()));
        }
        if (types.contains(Types::ARRAY) && is_json_text(raw, &['[']))
            || (types.contains(Types::OBJECT) && is_json_text(raw, &['{']))
        {
            // Bedrock sends `array` parameters as JSON text inside a string.
            if let Ok(embedded) = json::parse_tape(raw.trim(), self.depth_left) {
                self.rules.insert(Rules::SCHEMA_COERCION);
                return Some(self.value(&embedded, 0, schema, policy, out));
            }
        }
        None
    }

    /// A string in date-time grammar, as the instant it names. The rule applies to every such
    /// string unless the field is exact: the grammar is specific enough that no identifier or
    /// prose matches it.
    fn timestamp(&mut self, ts: &Timestamp, s: &str, out: &mut Vec<u8>) {
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
    }

    /// No schema: only safe heuristics (documented in the README's rules table).
    fn schema_free(
        &mut self,
        s: &str,
        shape: Option<AsciiShape>,
        out: &mut Vec<u8>,
    ) -> Result<(), KeyError> {
        if shape.is_none_or(|shape| shape.may_be_numeral()) && is_canonical_numeral(s) {
            self.rules.insert(Rules::NUMERIC_STRING);
            // The number's canonical text, as a JSON number with the same digits gets: the numeral
            // itself, except past 40 digits, where the canonical form is scientific (found by the
            // keyer fuzz target: written as-is, the output was not idempotent and the string never
            // met the number).
            match Decimal::from_numeric_string(s) {
                Some(Ok(decimal)) if s.len() > 40 => decimal.write_canonical(out),
                _ => out.extend_from_slice(s.as_bytes()),
            }
            return Ok(());
        }
        if let Some(b) = parse_bool(s) {
            self.rules.insert(Rules::BOOLEAN_STRING);
            out.extend_from_slice(if b { b"true" } else { b"false" });
            return Ok(());
        }
        if let Some(shape) = shape {
            let changed = if shape.has_at() && is_email(s) {
                write_casefolded_ascii(out, s, shape)
            } else {
                write_casefolded_ascii_words(out, s, shape)
            };
            if changed {
                self.rules.insert(Rules::CASEFOLD);
            }
            return Ok(());
        }
        if is_email(s) {
            return self.write_folded(casefold(s), Rules::CASEFOLD, out);
        }
        self.write_folded(casefold_words(s), Rules::CASEFOLD, out)
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
        let (folded, _, _) = nfc_and_whitespace(&folded, self.version.leading_space());
        write_json_string(out, &folded);
        Ok(())
    }
}

/// What became of one object member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Member {
    Written,
    /// Its value was a `null` that means "left out".
    DroppedNull,
    /// The policy leaves it out of the key.
    NotKeyed,
}

/// Objects up to this many members are sorted through an index on the stack, larger ones on the heap.
const SMALL_OBJECT: usize = 32;

/// The first eight bytes of a name, zero-padded, as a big-endian integer: ordering these orders the
/// names by their first eight bytes (ties are broken on the whole name).
fn name_prefix(name: &str) -> u64 {
    let b = name.as_bytes();
    match b.first_chunk::<8>() {
        Some(head) => u64::from_be_bytes(*head),
        None => b
            .iter()
            .enumerate()
            .fold(0, |prefix, (i, &c)| prefix | u64::from(c) << (56 - 8 * i)),
    }
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

/// Whether `raw` may be JSON text opening with one of `opens` (whitespace around it means nothing).
/// JSON text is read before the text rules, whose quote-awareness would misread its escapes.
fn is_json_text(raw: &str, opens: &[char]) -> bool {
    raw.trim_start().starts_with(opens)
}
