//! The typed keyer's versions. A version names one set of rules; a record stores the version that
//! keyed it. Every version hashes under one domain, so moving from one to another re-keys only the
//! calls whose canonical form the move changes (`dedup key --compare-keyer` lists them), never all.

use std::fmt;
use std::str::FromStr;

/// A version of the typed keyer's rules.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum KeyerVersion {
    /// `typed/v1`: one line of text is trimmed at both ends, whatever it holds.
    V1,
    /// `typed/v2`: one line of several words keeps its leading whitespace (it may be a line of
    /// code's indentation); an enum's or a format's value is trimmed. What a deployment that pins
    /// no version keys with: the rules every build before pinning used.
    #[default]
    V2,
    /// `typed/v3`: as v2, but a single leading whitespace character on one line of several words
    /// is a pad and goes (`" Maria Lopez "` is `"Maria Lopez"`); a longer run stays.
    V3,
}

/// What one line of several words does with its leading whitespace: the rule the versions differ
/// in (a single token on a line is trimmed by every version).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LeadingSpace {
    /// Trimmed (v1).
    Trim,
    /// Kept: it may be indentation (v2).
    Keep,
    /// A run of one character is a pad and goes; a longer run may be indentation and stays (v3).
    TrimOnePad,
}

impl KeyerVersion {
    /// Every version, oldest first.
    pub const ALL: [KeyerVersion; 3] = [Self::V1, Self::V2, Self::V3];
    /// The newest rules: what `dedup config init` and `from-agent` pin in a new document.
    pub const NEWEST: KeyerVersion = Self::V3;

    /// The name a record, a config document and the CLI use (`typed/v3`).
    pub const fn name(self) -> &'static str {
        match self {
            Self::V1 => "typed/v1",
            Self::V2 => "typed/v2",
            Self::V3 => "typed/v3",
        }
    }

    /// What a caller-keyed record says keyed it: the caller-key keyer, and this version, which
    /// typed the arguments' fingerprint the record keeps (a retry typed under another version
    /// then compares the strict arguments instead: a pin move is never "other arguments").
    pub const fn caller_label(self) -> &'static str {
        match self {
            Self::V1 => "caller/v2+typed/v1",
            Self::V2 => "caller/v2+typed/v2",
            Self::V3 => "caller/v2+typed/v3",
        }
    }

    /// What this version changed from the one before it, in a line.
    pub const fn changed(self) -> &'static str {
        match self {
            Self::V1 => "the first typed rules: one line of text is trimmed at both ends",
            Self::V2 => {
                "one line of several words keeps its leading whitespace (indentation); an enum's \
                 or a format's value is still trimmed"
            }
            Self::V3 => {
                "one leading whitespace character on one line of several words is a pad and goes; \
                 two or more stay (indentation)"
            }
        }
    }

    pub(crate) const fn leading_space(self) -> LeadingSpace {
        match self {
            Self::V1 => LeadingSpace::Trim,
            Self::V2 => LeadingSpace::Keep,
            Self::V3 => LeadingSpace::TrimOnePad,
        }
    }

    /// Whether an enum's or a format's value loses its leading whitespace even where the line rule
    /// keeps it (from v2 on; v1 trimmed one-line text anyway and kept multi-line text as it was).
    pub(crate) const fn trims_named_values(self) -> bool {
        !matches!(self, Self::V1)
    }
}

impl fmt::Display for KeyerVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for KeyerVersion {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|v| v.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Self::ALL.iter().map(|v| v.name()).collect();
                format!("unknown keyer version {s:?} ({})", names.join("|"))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_version_is_read_back_from_its_name() {
        for version in KeyerVersion::ALL {
            assert_eq!(version.name().parse::<KeyerVersion>(), Ok(version));
        }
        assert!("typed/v0".parse::<KeyerVersion>().is_err());
        assert_eq!(KeyerVersion::ALL.last(), Some(&KeyerVersion::NEWEST));
        for version in KeyerVersion::ALL {
            let label = version.caller_label();
            assert_eq!(
                label,
                format!("{}+{}", crate::key::CALLER_KEYER_VERSION, version.name())
            );
        }
    }
}
