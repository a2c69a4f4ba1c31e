//! A strict, allocation-light JSON reader (RFC 8259) for tool-call arguments.
//!
//! Why not `serde_json::Value`: we need the exact number text (integers beyond 2^53 must never be rounded),
//! we must see duplicate object keys (serde keeps the last one silently), and nesting must fail with an
//! error at a configured depth instead of recursing into a stack overflow.
//!
//! The reader writes a flat [`Tape`] of tokens that point into the input (strings with escapes are
//! decoded into one side buffer), so a document costs one or two allocations however it nests; the
//! typed keyer walks the tape directly. [`parse`] builds a [`Node`] tree from the tape.

use std::borrow::Cow;

use super::KeyError;

/// One parsed JSON value. Numbers keep their source text; object members keep their source order.
#[derive(Debug, Clone, PartialEq)]
pub enum Node<'a> {
    /// `null`.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// The number exactly as written (already validated against the JSON grammar).
    Number(&'a str),
    /// A string, unescaped (borrowed when it had no escapes).
    String(Cow<'a, str>),
    /// An array, in order.
    Array(Vec<Node<'a>>),
    /// An object's members in source order (duplicates are refused by the reader).
    Object(Vec<(Cow<'a, str>, Node<'a>)>),
}

/// Parses one JSON document. `max_depth` bounds nesting (arrays and objects); the caller bounds size.
pub fn parse(text: &str, max_depth: usize) -> Result<Node<'_>, KeyError> {
    let tape = parse_tape(text, max_depth)?;
    Ok(tape.node(0).0)
}

/// One token of a [`Tape`]. A value is one token, or a container token followed by its contents; an
/// object's contents are, per member, a `String` token (the name) and then the value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Token {
    Null,
    Bool(bool),
    /// The number's text is `text[start..end]`, exactly as written.
    Number {
        start: usize,
        end: usize,
    },
    /// The string is `text[start..end]`, or `decoded[start..end]` when it had escapes.
    String {
        start: usize,
        end: usize,
        escaped: bool,
    },
    /// `len` members; the object's last token is just before index `end`.
    Object {
        len: usize,
        end: usize,
    },
    /// `len` items; the array's last token is just before index `end`.
    Array {
        len: usize,
        end: usize,
    },
}

/// A parsed document: its tokens in document order, starting with the root value at index 0.
#[derive(Debug)]
pub(crate) struct Tape<'a> {
    text: &'a str,
    decoded: String,
    tokens: Vec<Token>,
}

impl<'a> Tape<'a> {
    #[inline]
    pub(crate) fn token(&self, at: usize) -> Token {
        self.tokens[at]
    }

    /// The index just past the value at `at`.
    #[inline]
    pub(crate) fn skip(&self, at: usize) -> usize {
        match self.tokens[at] {
            Token::Object { end, .. } | Token::Array { end, .. } => end,
            _ => at + 1,
        }
    }

    /// The text of a `String` token (empty for any other token).
    #[inline]
    pub(crate) fn str(&self, token: Token) -> &str {
        match token {
            Token::String {
                start,
                end,
                escaped: false,
            } => &self.text[start..end],
            Token::String { start, end, .. } => &self.decoded[start..end],
            _ => "",
        }
    }

    /// The text of a `Number` token (empty for any other token).
    #[inline]
    pub(crate) fn number(&self, token: Token) -> &'a str {
        match token {
            Token::Number { start, end } => &self.text[start..end],
            _ => "",
        }
    }

    /// The value at `at` as a tree, and the index just past it. Strings without escapes borrow the
    /// input.
    fn node(&self, at: usize) -> (Node<'a>, usize) {
        let string = |token: Token| -> Cow<'a, str> {
            match token {
                Token::String {
                    start,
                    end,
                    escaped: false,
                } => Cow::Borrowed(&self.text[start..end]),
                Token::String { start, end, .. } => {
                    Cow::Owned(self.decoded[start..end].to_string())
                }
                _ => Cow::Borrowed(""),
            }
        };
        match self.tokens[at] {
            Token::Null => (Node::Null, at + 1),
            Token::Bool(b) => (Node::Bool(b), at + 1),
            number @ Token::Number { .. } => (Node::Number(self.number(number)), at + 1),
            text @ Token::String { .. } => (Node::String(string(text)), at + 1),
            Token::Array { len, end } => {
                let mut items = Vec::with_capacity(len);
                let mut i = at + 1;
                for _ in 0..len {
                    let (item, next) = self.node(i);
                    items.push(item);
                    i = next;
                }
                (Node::Array(items), end)
            }
            Token::Object { len, end } => {
                let mut members = Vec::with_capacity(len);
                let mut i = at + 1;
                for _ in 0..len {
                    let name = string(self.tokens[i]);
                    let (value, next) = self.node(i + 1);
                    members.push((name, value));
                    i = next;
                }
                (Node::Object(members), end)
            }
        }
    }
}

/// Parses one JSON document into a [`Tape`]; errors exactly as [`parse`].
pub(crate) fn parse_tape(text: &str, max_depth: usize) -> Result<Tape<'_>, KeyError> {
    let mut parser = Parser {
        bytes: text.as_bytes(),
        text,
        pos: 0,
        max_depth,
        tokens: Vec::with_capacity(text.len() / 6 + 2),
        decoded: String::new(),
    };
    parser.skip_whitespace();
    parser.value(0)?;
    parser.skip_whitespace();
    if parser.pos != parser.bytes.len() {
        return Err(parser.error("trailing characters after the JSON value"));
    }
    Ok(Tape {
        text,
        decoded: parser.decoded,
        tokens: parser.tokens,
    })
}

/// Bytes that end the plain run of a string: quote, backslash and control characters.
const STRING_SPECIAL: [bool; 256] = {
    let mut table = [false; 256];
    let mut i = 0;
    while i < 0x20 {
        table[i] = true;
        i += 1;
    }
    table[b'"' as usize] = true;
    table[b'\\' as usize] = true;
    table
};

/// The index of the first byte at or after `from` that is a quote, a backslash or a control
/// character (`bytes.len()` if none): eight bytes at a time, then one at a time.
pub(crate) fn find_string_special(bytes: &[u8], from: usize) -> usize {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
    const QUOTES: u64 = u64::from_ne_bytes([b'"'; 8]);
    const BACKSLASHES: u64 = u64::from_ne_bytes([b'\\'; 8]);
    const SPACES: u64 = u64::from_ne_bytes([0x20; 8]);
    let mut i = from;
    while let Some(chunk) = bytes.get(i..i + 8) {
        let w = u64::from_le_bytes(chunk.try_into().expect("eight bytes"));
        // The high bit of a byte of `found` is set for a byte equal to '"' or '\\' or below 0x20
        // (the classic "has zero byte" trick; a borrow can only mark bytes above a real match, so
        // the lowest marked byte is exact).
        let q = w ^ QUOTES;
        let b = w ^ BACKSLASHES;
        let found = (q.wrapping_sub(ONES) & !q)
            | (b.wrapping_sub(ONES) & !b)
            | (w.wrapping_sub(SPACES) & !w);
        let found = found & HIGH;
        if found != 0 {
            return i + (found.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while i < bytes.len() && !STRING_SPECIAL[bytes[i] as usize] {
        i += 1;
    }
    i
}

struct Parser<'a> {
    bytes: &'a [u8],
    text: &'a str,
    pos: usize,
    max_depth: usize,
    tokens: Vec<Token>,
    decoded: String,
}

impl<'a> Parser<'a> {
    fn error(&self, what: &str) -> KeyError {
        KeyError::Syntax {
            offset: self.pos,
            message: what.to_string(),
        }
    }

    #[inline]
    fn skip_whitespace(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.bytes.get(self.pos) {
            self.pos += 1;
        }
    }

    fn value(&mut self, depth: usize) -> Result<(), KeyError> {
        let token = match self.bytes.get(self.pos) {
            None => return Err(self.error("unexpected end of input")),
            Some(b'{') => return self.object(depth + 1),
            Some(b'[') => return self.array(depth + 1),
            Some(b'"') => self.string()?,
            Some(b't') => self.literal("true", Token::Bool(true))?,
            Some(b'f') => self.literal("false", Token::Bool(false))?,
            Some(b'n') => self.literal("null", Token::Null)?,
            Some(b'-' | b'0'..=b'9') => self.number()?,
            Some(b'N' | b'I') => return Err(self.error("NaN and Infinity are not JSON numbers")),
            Some(_) => return Err(self.error("expected a JSON value")),
        };
        self.tokens.push(token);
        Ok(())
    }

    #[inline]
    fn literal(&mut self, word: &str, token: Token) -> Result<Token, KeyError> {
        if self.bytes[self.pos..].starts_with(word.as_bytes()) {
            self.pos += word.len();
            Ok(token)
        } else {
            Err(self.error("invalid literal"))
        }
    }

    fn enter(&self, depth: usize) -> Result<(), KeyError> {
        if depth > self.max_depth {
            Err(KeyError::TooDeep {
                limit: self.max_depth,
            })
        } else {
            Ok(())
        }
    }

    fn object(&mut self, depth: usize) -> Result<(), KeyError> {
        self.enter(depth)?;
        self.pos += 1;
        let at = self.tokens.len();
        self.tokens.push(Token::Object { len: 0, end: 0 });
        let mut len = 0;
        self.skip_whitespace();
        if self.bytes.get(self.pos) == Some(&b'}') {
            self.pos += 1;
            self.tokens[at] = Token::Object {
                len,
                end: self.tokens.len(),
            };
            return Ok(());
        }
        loop {
            self.skip_whitespace();
            if self.bytes.get(self.pos) != Some(&b'"') {
                return Err(self.error("expected a string object key"));
            }
            let name = self.string()?;
            self.tokens.push(name);
            self.skip_whitespace();
            if self.bytes.get(self.pos) != Some(&b':') {
                return Err(self.error("expected ':' after object key"));
            }
            self.pos += 1;
            self.skip_whitespace();
            self.value(depth)?;
            len += 1;
            self.skip_whitespace();
            match self.bytes.get(self.pos) {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    self.tokens[at] = Token::Object {
                        len,
                        end: self.tokens.len(),
                    };
                    return Ok(());
                }
                _ => return Err(self.error("expected ',' or '}' in object")),
            }
        }
    }

    fn array(&mut self, depth: usize) -> Result<(), KeyError> {
        self.enter(depth)?;
        self.pos += 1;
        let at = self.tokens.len();
        self.tokens.push(Token::Array { len: 0, end: 0 });
        let mut len = 0;
        self.skip_whitespace();
        if self.bytes.get(self.pos) == Some(&b']') {
            self.pos += 1;
            self.tokens[at] = Token::Array {
                len,
                end: self.tokens.len(),
            };
            return Ok(());
        }
        loop {
            self.skip_whitespace();
            self.value(depth)?;
            len += 1;
            self.skip_whitespace();
            match self.bytes.get(self.pos) {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    self.tokens[at] = Token::Array {
                        len,
                        end: self.tokens.len(),
                    };
                    return Ok(());
                }
                _ => return Err(self.error("expected ',' or ']' in array")),
            }
        }
    }

    #[inline]
    fn number(&mut self) -> Result<Token, KeyError> {
        let start = self.pos;
        let b = self.bytes;
        let mut i = self.pos;
        if b.get(i) == Some(&b'-') {
            i += 1;
        }
        match b.get(i) {
            Some(b'0') => i += 1,
            Some(b'1'..=b'9') => {
                while let Some(b'0'..=b'9') = b.get(i) {
                    i += 1;
                }
            }
            Some(b'I') => return Err(self.error("NaN and Infinity are not JSON numbers")),
            _ => return Err(self.error("invalid number")),
        }
        if b.get(i) == Some(&b'.') {
            i += 1;
            let digits = i;
            while let Some(b'0'..=b'9') = b.get(i) {
                i += 1;
            }
            if i == digits {
                self.pos = i;
                return Err(self.error("a decimal point must be followed by digits"));
            }
        }
        if let Some(b'e' | b'E') = b.get(i) {
            i += 1;
            if let Some(b'+' | b'-') = b.get(i) {
                i += 1;
            }
            let digits = i;
            while let Some(b'0'..=b'9') = b.get(i) {
                i += 1;
            }
            if i == digits {
                self.pos = i;
                return Err(self.error("an exponent must have digits"));
            }
        }
        if let Some(b'0'..=b'9') = b.get(i) {
            self.pos = i;
            return Err(self.error("leading zeros are not allowed in JSON numbers"));
        }
        self.pos = i;
        Ok(Token::Number { start, end: i })
    }

    #[inline]
    fn string(&mut self) -> Result<Token, KeyError> {
        self.pos += 1; // opening quote
        let start = self.pos;
        // Fast path: no escapes, point into the input.
        loop {
            self.pos = find_string_special(self.bytes, self.pos);
            match self.bytes.get(self.pos) {
                None => return Err(self.error("unterminated string")),
                Some(b'"') => {
                    let end = self.pos;
                    self.pos += 1;
                    return Ok(Token::String {
                        start,
                        end,
                        escaped: false,
                    });
                }
                Some(b'\\') => break,
                Some(0x00..=0x1f) => return Err(self.error("control character in string")),
                Some(_) => self.pos += 1,
            }
        }
        // Escapes: decode into the side buffer (taken out of `self` while `self` reads on).
        let mut out = std::mem::take(&mut self.decoded);
        let decoded_start = out.len();
        out.push_str(&self.text[start..self.pos]);
        loop {
            match self.bytes.get(self.pos) {
                None => return Err(self.error("unterminated string")),
                Some(b'"') => {
                    self.pos += 1;
                    let end = out.len();
                    self.decoded = out;
                    return Ok(Token::String {
                        start: decoded_start,
                        end,
                        escaped: true,
                    });
                }
                Some(b'\\') => {
                    self.pos += 1;
                    let escaped = match self.bytes.get(self.pos) {
                        Some(b'"') => '"',
                        Some(b'\\') => '\\',
                        Some(b'/') => '/',
                        Some(b'b') => '\u{8}',
                        Some(b'f') => '\u{c}',
                        Some(b'n') => '\n',
                        Some(b'r') => '\r',
                        Some(b't') => '\t',
                        Some(b'u') => {
                            self.pos += 1;
                            let c = self.unicode_escape()?;
                            out.push(c);
                            continue;
                        }
                        _ => return Err(self.error("invalid escape sequence")),
                    };
                    out.push(escaped);
                    self.pos += 1;
                }
                Some(0x00..=0x1f) => return Err(self.error("control character in string")),
                Some(_) => {
                    // Copy the run of plain characters up to the next quote or backslash.
                    let run = self.pos;
                    self.pos = find_string_special(self.bytes, self.pos);
                    out.push_str(&self.text[run..self.pos]);
                }
            }
        }
    }

    /// Reads the four hex digits after `\u` (and a low surrogate after a high one).
    fn unicode_escape(&mut self) -> Result<char, KeyError> {
        let high = self.hex4()?;
        let code = match high {
            0xD800..=0xDBFF => {
                if !self.bytes[self.pos..].starts_with(b"\\u") {
                    return Err(self.error("lone surrogate in \\u escape"));
                }
                self.pos += 2;
                let low = self.hex4()?;
                if !(0xDC00..=0xDFFF).contains(&low) {
                    return Err(self.error("lone surrogate in \\u escape"));
                }
                0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00)
            }
            0xDC00..=0xDFFF => return Err(self.error("lone surrogate in \\u escape")),
            c => c,
        };
        char::from_u32(code).ok_or_else(|| self.error("invalid \\u escape"))
    }

    fn hex4(&mut self) -> Result<u32, KeyError> {
        let digits = self
            .bytes
            .get(self.pos..self.pos + 4)
            .ok_or_else(|| self.error("short \\u escape"))?;
        let mut value = 0u32;
        for &d in digits {
            let v = (d as char)
                .to_digit(16)
                .ok_or_else(|| self.error("invalid hex digit in \\u escape"))?;
            value = value * 16 + v;
        }
        self.pos += 4;
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<Node<'_>, KeyError> {
        parse(s, 64)
    }

    #[test]
    fn keeps_number_text_and_member_order() {
        let node = p(r#"{"b": 9007199254740993, "a": [1.50e3, -0.0]}"#).unwrap();
        let Node::Object(members) = node else {
            panic!("object expected")
        };
        assert_eq!(members[0].0, "b");
        assert_eq!(members[0].1, Node::Number("9007199254740993"));
        assert_eq!(
            members[1].1,
            Node::Array(vec![Node::Number("1.50e3"), Node::Number("-0.0")])
        );
    }

    #[test]
    fn decodes_escapes_and_surrogate_pairs() {
        assert_eq!(
            p(r#""a\"b\\c\u00e9\ud83d\ude00""#).unwrap(),
            Node::String("a\"b\\cé😀".into())
        );
    }

    #[test]
    fn rejects_what_json_rejects() {
        for bad in [
            "",
            "{",
            "[1,]",
            "{\"a\":1,}",
            "01",
            "1.",
            ".5",
            "1e",
            "NaN",
            "Infinity",
            "-Infinity",
            "tru",
            "\"\\x\"",
            "\"\\ud800\"",
            "\"\\udc00\"",
            "\"\\ud800\\u0041\"",
            "\"a\nb\"",
            "{} {}",
            "{'a':1}",
        ] {
            assert!(p(bad).is_err(), "accepted {bad:?}");
        }
    }

    #[test]
    fn the_word_scanner_finds_the_first_special_byte() {
        let naive = |b: &[u8], from: usize| {
            (from..b.len())
                .find(|&i| STRING_SPECIAL[b[i] as usize])
                .unwrap_or(b.len())
        };
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let alphabet = [
            b'a', b'"', b'\\', 0x1f, 0x20, 0x00, 0x7f, 0x80, 0xff, b'!', 0x21, 0x5b, 0x5d,
        ];
        for len in 0..40 {
            for _ in 0..200 {
                let bytes: Vec<u8> = (0..len)
                    .map(|_| {
                        rng ^= rng << 13;
                        rng ^= rng >> 7;
                        rng ^= rng << 17;
                        alphabet[(rng % alphabet.len() as u64) as usize]
                    })
                    .collect();
                for from in 0..=len {
                    assert_eq!(
                        find_string_special(&bytes, from),
                        naive(&bytes, from),
                        "{bytes:?} from {from}"
                    );
                }
            }
        }
        for b in 0..=255u8 {
            let mut bytes = vec![b'x'; 17];
            bytes[11] = b;
            assert_eq!(
                find_string_special(&bytes, 0),
                naive(&bytes, 0),
                "byte {b:#x}"
            );
        }
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_stack_overflow() {
        let deep = "[".repeat(10_000) + &"]".repeat(10_000);
        assert!(matches!(p(&deep), Err(KeyError::TooDeep { limit: 64 })));
        let ok = "[".repeat(64) + &"]".repeat(64);
        assert!(p(&ok).is_ok());
    }
}
