//! Exact decimal numbers: `1500`, `1500.0`, `1500.00` and `1.5e3` are one value, and nothing is ever
//! rounded through a float, so `9007199254740993` stays distinct from `9007199254740992`.

use super::KeyError;

/// A number split into its parts, borrowing the source text.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Decimal<'a> {
    negative: bool,
    int_digits: &'a str,
    frac_digits: &'a str,
    exponent: i64,
}

/// Exponents beyond this are refused: a key must not depend on arithmetic we cannot do exactly.
const MAX_EXPONENT_DIGITS: usize = 15;

impl<'a> Decimal<'a> {
    /// Parses validated JSON number text (`-?int(.frac)?(e[+-]?exp)?`).
    pub(crate) fn from_json(text: &'a str) -> Result<Self, KeyError> {
        Self::parse(text, false).ok_or_else(|| KeyError::Number(text.to_string()))?
    }

    /// Parses a numeric string as a schema-typed number: also allows a leading `+`, leading zeros,
    /// `.5` and `5.`. Returns `None` when the text is not numeric at all.
    pub(crate) fn from_numeric_string(text: &'a str) -> Option<Result<Self, KeyError>> {
        Self::parse(text, true)
    }

    fn parse(text: &'a str, relaxed: bool) -> Option<Result<Self, KeyError>> {
        let b = text.as_bytes();
        let mut i = 0;
        let negative = match b.first() {
            Some(b'-') => {
                i += 1;
                true
            }
            Some(b'+') if relaxed => {
                i += 1;
                false
            }
            _ => false,
        };
        let int_start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        let int_digits = &text[int_start..i];
        let mut frac_digits = "";
        if b.get(i) == Some(&b'.') {
            let start = i + 1;
            i = start;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            frac_digits = &text[start..i];
        }
        if int_digits.is_empty() && frac_digits.is_empty() {
            return None;
        }
        if !relaxed
            && (int_digits.is_empty() || (int_digits.len() > 1 && int_digits.starts_with('0')))
        {
            return None;
        }
        let mut exponent = 0i64;
        if let Some(b'e' | b'E') = b.get(i) {
            i += 1;
            let exp_negative = match b.get(i) {
                Some(b'-') => {
                    i += 1;
                    true
                }
                Some(b'+') => {
                    i += 1;
                    false
                }
                _ => false,
            };
            let start = i;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            let digits = text[start..i].trim_start_matches('0');
            if i == start {
                return None;
            }
            if digits.len() > MAX_EXPONENT_DIGITS {
                return Some(Err(KeyError::Number(text.to_string())));
            }
            let magnitude: i64 = if digits.is_empty() {
                0
            } else {
                digits.parse().ok()?
            };
            exponent = if exp_negative { -magnitude } else { magnitude };
        }
        if i != b.len() {
            return None;
        }
        Some(Ok(Decimal {
            negative,
            int_digits,
            frac_digits,
            exponent,
        }))
    }

    fn digit(&self, index: usize) -> u8 {
        let int = self.int_digits.as_bytes();
        if index < int.len() {
            int[index]
        } else {
            self.frac_digits.as_bytes()[index - int.len()]
        }
    }

    /// Writes the canonical text: plain decimal when it is short, `d.ddde±x` otherwise. The form is
    /// injective: two numbers get the same text exactly when they are the same value.
    pub(crate) fn write_canonical(&self, out: &mut Vec<u8>) {
        let total = self.int_digits.len() + self.frac_digits.len();
        let lead = (0..total).take_while(|&i| self.digit(i) == b'0').count();
        if lead == total {
            out.push(b'0');
            return;
        }
        let trail = (lead..total)
            .rev()
            .take_while(|&i| self.digit(i) == b'0')
            .count();
        let sig = lead..total - trail;
        let n = sig.len() as i64;
        // value = sig × 10^e; point sits after `point` digits of sig.
        let e = self.exponent - self.frac_digits.len() as i64 + trail as i64;
        let point = n + e;
        if self.negative {
            out.push(b'-');
        }
        let digits = |out: &mut Vec<u8>, range: std::ops::Range<usize>| {
            for i in range {
                out.push(self.digit(i));
            }
        };
        const PLAIN_LIMIT: i64 = 40;
        if e >= 0 && point <= PLAIN_LIMIT {
            digits(out, sig.clone());
            out.extend(std::iter::repeat_n(b'0', e as usize));
        } else if e < 0 && point > 0 {
            let split = sig.start + point as usize;
            digits(out, sig.start..split);
            out.push(b'.');
            digits(out, split..sig.end);
        } else if e < 0 && -point < PLAIN_LIMIT {
            out.extend_from_slice(b"0.");
            out.extend(std::iter::repeat_n(b'0', (-point) as usize));
            digits(out, sig.clone());
        } else {
            out.push(self.digit(sig.start));
            if n > 1 {
                out.push(b'.');
                digits(out, sig.start + 1..sig.end);
            }
            out.push(b'e');
            out.extend_from_slice((point - 1).to_string().as_bytes());
        }
    }
}

/// A numeral a person or program would only write for a number: `-?(0|[1-9]\d*)(\.\d*[1-9])?`, not `-0`.
/// Without a schema only these strings become numbers, so `"01234"`, `"1.10"`, `"2.0"` and `"1e3"` stay
/// strings: padding, trailing zeros and exponents carry meaning in identifiers and version strings.
pub(crate) fn is_canonical_numeral(s: &str) -> bool {
    let b = s.as_bytes();
    let body = if b.first() == Some(&b'-') { &b[1..] } else { b };
    let (int, frac) = match body.iter().position(|&c| c == b'.') {
        Some(p) => (&body[..p], Some(&body[p + 1..])),
        None => (body, None),
    };
    let int_ok =
        !int.is_empty() && int.iter().all(u8::is_ascii_digit) && (int.len() == 1 || int[0] != b'0');
    let frac_ok = match frac {
        None => true,
        Some(f) => !f.is_empty() && f.iter().all(u8::is_ascii_digit) && f.last() != Some(&b'0'),
    };
    let negative_zero = b.first() == Some(&b'-') && int == b"0" && frac.is_none();
    int_ok && frac_ok && !negative_zero
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canon(text: &str) -> String {
        let mut out = Vec::new();
        Decimal::from_json(text).unwrap().write_canonical(&mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn equal_values_share_one_text() {
        for t in [
            "1500",
            "1500.0",
            "1500.00",
            "1.5e3",
            "15E2",
            "150000e-2",
            "0.15e4",
        ] {
            assert_eq!(canon(t), "1500", "{t}");
        }
        assert_eq!(canon("-0"), "0");
        assert_eq!(canon("-0.0e5"), "0");
        assert_eq!(canon("0.050"), "0.05");
        assert_eq!(canon("-12.250"), "-12.25");
        assert_eq!(canon("1e-7"), "0.0000001");
    }

    #[test]
    fn big_integers_are_exact() {
        assert_eq!(canon("9007199254740993"), "9007199254740993");
        assert_ne!(canon("9007199254740993"), canon("9007199254740992"));
        let huge = "1".repeat(10_000);
        assert_eq!(
            canon(&huge).len(),
            1 + 1 + 9_999 + 1 + 4,
            "long integers switch to scientific form"
        );
    }

    #[test]
    fn huge_exponents_use_scientific_form() {
        assert_eq!(canon("1e999999"), "1e999999");
        assert_eq!(canon("10e999998"), "1e999999");
        assert_eq!(canon("-2.50e-100"), "-2.5e-100");
        assert!(Decimal::from_json("1e9999999999999999999").is_err());
    }

    #[test]
    fn canonical_numerals() {
        for yes in ["0", "7", "-7", "4200", "0.5", "-12.25", "1234"] {
            assert!(is_canonical_numeral(yes), "{yes}");
        }
        for no in [
            "01234", "1.10", "2.0", "1e3", "-0", "+1", ".5", "5.", "", "-", "1,000", "12a", "0x1f",
        ] {
            assert!(!is_canonical_numeral(no), "{no}");
        }
    }

    #[test]
    fn relaxed_numeric_strings() {
        let mut out = Vec::new();
        Decimal::from_numeric_string("+004200.0")
            .unwrap()
            .unwrap()
            .write_canonical(&mut out);
        assert_eq!(out, b"4200");
        assert!(Decimal::from_numeric_string("abc").is_none());
        assert!(Decimal::from_numeric_string("1.2.3").is_none());
        assert!(Decimal::from_numeric_string(".").is_none());
    }
}
