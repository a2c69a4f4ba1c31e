//! RFC 3339 / ISO 8601 date-times, read by a byte scanner (no regex on the hot path).
//!
//! Accepted: `YYYY-MM-DD`, then `T`, `t` or one space, then `HH:MM`, optional `:SS`, optional fraction,
//! then `Z`, `z`, `±HH:MM`, `±HHMM`, `±HH` or nothing. An offset time becomes the same UTC instant with
//! a `Z`; a naive time stays naive (it names a wall-clock time in an unknown zone, so it must not meet
//! the UTC instant with the same digits).

/// A parsed timestamp. `offset_minutes` is `None` for a naive time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Timestamp<'a> {
    year: i64,
    month: u32,
    day: u32,
    hour: u32,
    minute: u32,
    second: u32,
    fraction: &'a str,
    offset_minutes: Option<i32>,
}

fn digits(b: &[u8], at: usize, n: usize) -> Option<u32> {
    let slice = b.get(at..at + n)?;
    slice.iter().try_fold(0u32, |acc, &d| {
        d.is_ascii_digit().then(|| acc * 10 + (d - b'0') as u32)
    })
}

fn days_in_month(year: i64, month: u32) -> u32 {
    match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        _ => 28,
    }
}

/// Days since 1970-01-01 (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m as i64 + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
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

/// Two decimal digits (`n` < 100).
fn push_two(out: &mut Vec<u8>, n: u32) {
    out.extend_from_slice(&[b'0' + (n / 10) as u8, b'0' + (n % 10) as u8]);
}

impl<'a> Timestamp<'a> {
    pub(crate) fn parse(s: &'a str) -> Option<Self> {
        let b = s.as_bytes();
        if b.len() < 16 || b[4] != b'-' || b[7] != b'-' || b[13] != b':' {
            return None;
        }
        let year = digits(b, 0, 4)? as i64;
        let month = digits(b, 5, 2)?;
        let day = digits(b, 8, 2)?;
        if !matches!(b[10], b'T' | b't' | b' ') {
            return None;
        }
        let hour = digits(b, 11, 2)?;
        let minute = digits(b, 14, 2)?;
        let mut i = 16;
        let mut second = 0;
        if b.get(i) == Some(&b':') {
            second = digits(b, i + 1, 2)?;
            i += 3;
        }
        let mut fraction = "";
        if let Some(b'.' | b',') = b.get(i) {
            let start = i + 1;
            i = start;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            if i == start {
                return None;
            }
            fraction = &s[start..i];
        }
        let offset_minutes = match b.get(i) {
            None => None,
            Some(b'Z' | b'z') => {
                i += 1;
                Some(0)
            }
            Some(&sign @ (b'+' | b'-')) => {
                let hours = digits(b, i + 1, 2)?;
                i += 3;
                let minutes = match b.get(i) {
                    Some(b':') => {
                        i += 3;
                        digits(b, i - 2, 2)?
                    }
                    Some(b'0'..=b'9') => {
                        i += 2;
                        digits(b, i - 2, 2)?
                    }
                    _ => 0,
                };
                if hours > 23 || minutes > 59 {
                    return None;
                }
                let total = (hours * 60 + minutes) as i32;
                Some(if sign == b'-' { -total } else { total })
            }
            Some(_) => return None,
        };
        let valid = i == b.len()
            && (1..=12).contains(&month)
            && day >= 1
            && day <= days_in_month(year, month)
            && hour <= 23
            && minute <= 59
            && second <= 59;
        valid.then_some(Timestamp {
            year,
            month,
            day,
            hour,
            minute,
            second,
            fraction,
            offset_minutes,
        })
    }

    /// Writes `YYYY-MM-DDTHH:MM:SS[.fff][Z]`, shifted to UTC when an offset was given.
    /// `keep_subseconds` keeps the fraction without its trailing zeros; otherwise it is truncated.
    pub(crate) fn write_normalized(&self, out: &mut Vec<u8>, keep_subseconds: bool) {
        let (mut y, mut mo, mut d, mut h, mut mi) =
            (self.year, self.month, self.day, self.hour, self.minute);
        if let Some(offset) = self.offset_minutes.filter(|&o| o != 0) {
            let minutes = days_from_civil(y, mo, d) * 1440 + (h * 60 + mi) as i64 - offset as i64;
            let days = minutes.div_euclid(1440);
            let rest = minutes.rem_euclid(1440);
            (y, mo, d) = civil_from_days(days);
            h = (rest / 60) as u32;
            mi = (rest % 60) as u32;
        }
        if (0..=9999).contains(&y) {
            let y = y as u32;
            push_two(out, y / 100);
            push_two(out, y % 100);
        } else {
            use std::io::Write;
            if y < 0 {
                let _ = write!(out, "-{:04}", -y);
            } else {
                let _ = write!(out, "{y:04}");
            }
        }
        for (sep, n) in [
            (b'-', mo),
            (b'-', d),
            (b'T', h),
            (b':', mi),
            (b':', self.second),
        ] {
            out.push(sep);
            push_two(out, n);
        }
        let fraction = self.fraction.trim_end_matches('0');
        if keep_subseconds && !fraction.is_empty() {
            out.push(b'.');
            out.extend_from_slice(fraction.as_bytes());
        }
        if self.offset_minutes.is_some() {
            out.push(b'Z');
        }
    }

    /// The instant in epoch milliseconds (the fraction's first three digits); `None` for a naive
    /// time, which names no instant.
    pub(crate) fn epoch_ms(&self) -> Option<i64> {
        let offset = i64::from(self.offset_minutes?);
        let minutes = days_from_civil(self.year, self.month, self.day) * 1440
            + i64::from(self.hour * 60 + self.minute)
            - offset;
        let millis: i64 = format!("{:0<3}", &self.fraction[..self.fraction.len().min(3)])
            .parse()
            .unwrap_or(0);
        Some((minutes * 60 + i64::from(self.second)) * 1000 + millis)
    }

    pub(crate) fn has_fraction(&self) -> bool {
        !self.fraction.is_empty()
    }

    pub(crate) fn has_nonzero_offset(&self) -> bool {
        self.offset_minutes.is_some_and(|o| o != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn norm(s: &str) -> Option<String> {
        let ts = Timestamp::parse(s)?;
        let mut out = Vec::new();
        ts.write_normalized(&mut out, false);
        Some(String::from_utf8(out).unwrap())
    }

    #[test]
    fn separators_zones_and_subseconds() {
        for s in [
            "2026-08-11T09:00:00Z",
            "2026-08-11t09:00:00z",
            "2026-08-11 09:00:00Z",
            "2026-08-11T09:00:00.123Z",
            "2026-08-11T09:00Z",
            "2026-08-11T11:00:00+02:00",
            "2026-08-11T11:00:00.999+0200",
            "2026-08-11T04:30:00-04:30",
            "2026-08-11T10:00:00+01",
        ] {
            assert_eq!(norm(s).as_deref(), Some("2026-08-11T09:00:00Z"), "{s}");
        }
    }

    #[test]
    fn naive_stays_naive() {
        assert_eq!(
            norm("2026-08-11T09:00:00.000").as_deref(),
            Some("2026-08-11T09:00:00")
        );
        assert_eq!(
            norm("2026-08-11 09:00").as_deref(),
            Some("2026-08-11T09:00:00")
        );
    }

    #[test]
    fn crosses_day_month_and_year_boundaries() {
        assert_eq!(
            norm("2027-01-01T01:00:00+02:00").as_deref(),
            Some("2026-12-31T23:00:00Z")
        );
        assert_eq!(
            norm("2024-02-28T23:30:00-01:00").as_deref(),
            Some("2024-02-29T00:30:00Z")
        );
    }

    #[test]
    fn rejects_non_timestamps() {
        for s in [
            "2026-08-11",
            "2026-13-01T00:00:00Z",
            "2026-02-30T00:00:00Z",
            "2026-08-11T24:00:00Z",
            "2026-08-11T09:00:00Q",
            "2026-08-11T09:00:00+25:00",
            "2026-08-11X09:00:00Z",
            "hello world 2026-08",
            "2026-08-11T09:00:00.",
            "2026-08-11T09:00:00Z extra",
        ] {
            assert_eq!(norm(s), None, "{s}");
        }
    }

    #[test]
    fn keeps_subseconds_when_asked() {
        let ts = Timestamp::parse("2026-08-11T09:00:00.1230+00:00").unwrap();
        let mut out = Vec::new();
        ts.write_normalized(&mut out, true);
        assert_eq!(out, b"2026-08-11T09:00:00.123Z");
    }
}
