//! The lease token: written by each claim, the fence every later write of the claim is held to.

use std::fmt;

/// Random token written by each claim; `complete` and `release` are fenced on it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LeaseToken(String);

/// What [`LeaseToken::settling_for`] puts before a token's random part.
const SETTLING: &str = "settling-";

impl LeaseToken {
    /// A fresh random token (UUID v4).
    pub fn random() -> Self {
        LeaseToken(uuid::Uuid::new_v4().to_string())
    }

    /// A fresh random token, prefixed by `owner` when there is one (`<owner>.<uuid>`): the
    /// request that took the claim can tell it later ([`LeaseToken::owner`]), while two claims of
    /// one owner still differ.
    pub fn for_owner(owner: Option<&str>) -> Self {
        match owner {
            Some(owner) => LeaseToken(format!("{owner}.{}", uuid::Uuid::new_v4())),
            None => LeaseToken::random(),
        }
    }

    /// The owner named by [`LeaseToken::for_owner`], if any.
    pub fn owner(&self) -> Option<&str> {
        self.0.rsplit_once('.').map(|(owner, _)| owner)
    }

    /// A fresh token of `owner` for settling its claim once the target ran (an interceptor
    /// RESPONSE takes the claim under it first): the owner still names it, but a REQUEST of that
    /// owner never resumes it ([`LeaseToken::is_settling`]).
    pub(crate) fn settling_for(owner: &str) -> Self {
        LeaseToken(format!("{owner}.{SETTLING}{}", uuid::Uuid::new_v4()))
    }

    /// Taken to settle a claim whose target ran: not a claim to go on under.
    pub(crate) fn is_settling(&self) -> bool {
        self.0
            .rsplit_once('.')
            .is_some_and(|(_, tail)| tail.starts_with(SETTLING))
    }

    /// Wraps a token read back from somewhere else (a log, a test).
    pub fn new(token: impl Into<String>) -> Self {
        LeaseToken(token.into())
    }

    /// The token's text, as stored.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for LeaseToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A settling token names its owner, as a REQUEST's does, and only it is settling; an owner
    /// whose name holds the marker does not make its claims settling.
    #[test]
    fn a_settling_token_names_its_owner_and_only_it_is_settling() {
        let settling = LeaseToken::settling_for("r1");
        assert_eq!(settling.owner(), Some("r1"));
        assert!(settling.is_settling());
        for token in [
            LeaseToken::for_owner(Some("r1")),
            LeaseToken::for_owner(Some("r1.settling-x")),
            LeaseToken::for_owner(None),
        ] {
            assert!(!token.is_settling(), "{token}");
        }
    }
}
