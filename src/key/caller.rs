//! Caller keys: a harness that has an idempotency key of its own (a Step Functions execution, a
//! Temporal activity id, an MCP client's request key) hands it to us, and the call is keyed by it
//! instead of by its arguments. The arguments still matter: a key reused with other arguments is
//! a mistake the payment APIs refuse (Stripe's `idempotency_key` mismatch, AWS's
//! `IdempotentParameterMismatch`, the IETF draft's 422), so the claim stores a fingerprint of the
//! arguments' *typed* canonical form, and a digest per leaf, from which the paths that differ are
//! told without any value. A repeat that differs only in ways the typed keyer makes equal (key
//! order, `4200` and `4200.0`, `"usd"` for an enum's `"USD"`) is a replay.
//!
//! **A key stays inside its caller** (Stripe scopes a key to one account): it is keyed by the
//! call's namespace (entry point included), its tool and its run. Order numbers collide across
//! tenants, and a Bedrock session attribute lasts the whole session, so a key scoped more widely
//! would answer one user with another's reply, or refuse a session's next tool as a reuse. Only a
//! harness whose keys are unique across its runs may widen the scope to the namespace
//! ([`CallerKeyScope::Namespace`]).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use sha2::{Digest, Sha256};

use super::json::{self, Node};
use super::{Call, Key, KeyError, Keyer, Strategy};

/// Longest caller key accepted, in bytes (DynamoDB's partition key would take more; a key that
/// long is a mistake, not an id).
pub const MAX_CALLER_KEY_BYTES: usize = 256;

/// Longest leaf-digest record stored with a claim; past it only the fingerprint is kept, and a
/// mismatch cannot name its paths.
pub const MAX_PATH_DIGESTS_BYTES: usize = 32 * 1024;

/// How far a caller's key reaches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum CallerKeyScope {
    /// One run (session) of one tool in one namespace: the default, and the only scope a key
    /// written into a session or by a model gets.
    #[default]
    Run,
    /// Every run of one tool in one namespace: for a harness whose keys are unique across runs
    /// (a Step Functions execution name, a Temporal activity id).
    Namespace,
}

/// A call keyed by its caller's key.
#[derive(Debug, Clone)]
pub struct CallerKeyed {
    /// The store key: the caller's key, scoped by the call's namespace (entry point included),
    /// tool and, unless the scope is widened, run.
    pub key: Key,
    /// The typed canonical form of the tool and arguments, hashed: equal for a true replay.
    pub fingerprint: Key,
    /// One digest per leaf of the typed canonical arguments (`{"/amount": "1a2b3c4d", ...}`),
    /// salted by the key; `None` when the record would be too large.
    pub path_digests: Option<String>,
    /// The strict fingerprint of the tool and arguments (canonical JSON, no value rules, no
    /// schema): equal for the same arguments whatever the tool's schema says, so a repeat keyed
    /// after the schema changed is still told from a call with other arguments.
    pub arguments: Key,
}

/// Why a caller key cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallerKeyError {
    /// Empty or blank.
    #[error("the idempotency key is empty")]
    Empty,
    /// Over [`MAX_CALLER_KEY_BYTES`].
    #[error("the idempotency key is {0} bytes, limit {MAX_CALLER_KEY_BYTES}")]
    TooLong(usize),
    /// The arguments could not be keyed.
    #[error(transparent)]
    Arguments(#[from] KeyError),
}

impl Keyer {
    /// Keys `call` by `caller_key` within its run (see the module docs). The call's step takes no
    /// part: within the run, the caller's key is the scope.
    pub fn caller_keyed(
        &self,
        call: &Call<'_>,
        caller_key: &str,
    ) -> Result<CallerKeyed, CallerKeyError> {
        self.caller_keyed_in(call, caller_key, CallerKeyScope::Run)
    }

    /// Keys `call` by `caller_key` within `scope`.
    pub fn caller_keyed_in(
        &self,
        call: &Call<'_>,
        caller_key: &str,
        scope: CallerKeyScope,
    ) -> Result<CallerKeyed, CallerKeyError> {
        if caller_key.trim().is_empty() {
            return Err(CallerKeyError::Empty);
        }
        if caller_key.len() > MAX_CALLER_KEY_BYTES {
            return Err(CallerKeyError::TooLong(caller_key.len()));
        }
        let typed = self.explain(Strategy::Typed, call)?;
        // A run of its own is told from no run ("run:" + id, or "-").
        let run = match (scope, call.run_id) {
            (CallerKeyScope::Run, Some(run)) => format!("run:{run}"),
            (CallerKeyScope::Run, None) => "-".to_string(),
            (CallerKeyScope::Namespace, _) => "*".to_string(),
        };
        let key = hash_versioned(
            CALLER_KEYER_VERSION,
            &[call.namespace.unwrap_or(""), call.tool, &run, caller_key],
        );
        let fingerprint = hash(
            b"toolcall-dedup/caller-args/v1\0",
            &[call.tool, &typed.canonical],
        );
        // The canonical form is the keyer's own output: it parses, within the reader's hard bound.
        let root = json::parse(&typed.canonical, super::HARD_MAX_DEPTH)?;
        let mut digests = BTreeMap::new();
        leaves(&root, &mut String::new(), &key, &mut digests);
        let mut text = String::from("{");
        for (i, (path, digest)) in digests.iter().enumerate() {
            if i > 0 {
                text.push(',');
            }
            super::push_json_str(&mut text, path);
            let _ = write!(text, ":\"{digest}\"");
        }
        text.push('}');
        Ok(CallerKeyed {
            key,
            fingerprint,
            path_digests: (text.len() <= MAX_PATH_DIGESTS_BYTES).then_some(text),
            arguments: self.fingerprint(call)?,
        })
    }
}

/// The paths (JSON Pointers) whose values differ between two leaf-digest records, sorted; a path
/// present in only one of them differs. `None` when either record is missing or unreadable.
pub fn differing_paths(stored: Option<&str>, current: Option<&str>) -> Option<Vec<String>> {
    let read = |text: &str| -> Option<BTreeMap<String, String>> {
        match json::parse(text, 2).ok()? {
            Node::Object(members) => members
                .into_iter()
                .map(|(path, digest)| match digest {
                    Node::String(d) => Some((path.into_owned(), d.into_owned())),
                    _ => None,
                })
                .collect(),
            _ => None,
        }
    };
    let (stored, current) = (read(stored?)?, read(current?)?);
    let mut paths: Vec<String> = stored
        .iter()
        .filter(|(path, digest)| current.get(*path) != Some(*digest))
        .map(|(path, _)| path.clone())
        .chain(
            current
                .keys()
                .filter(|path| !stored.contains_key(*path))
                .cloned(),
        )
        .collect();
    paths.sort();
    Some(paths)
}

/// Every leaf (a scalar, or an empty array or object) under `path`, with its digest.
fn leaves(node: &Node<'_>, path: &mut String, salt: &Key, out: &mut BTreeMap<String, String>) {
    let children: Vec<(String, &Node<'_>)> = match node {
        Node::Object(members) if !members.is_empty() => members
            .iter()
            .map(|(name, value)| (pointer_token(name), value))
            .collect(),
        Node::Array(items) if !items.is_empty() => items
            .iter()
            .enumerate()
            .map(|(i, value)| (i.to_string(), value))
            .collect(),
        leaf => {
            let mut text = String::new();
            write_leaf(leaf, &mut text);
            let digest = hash(
                b"toolcall-dedup/leaf/v1\0",
                &[&salt.to_string(), path, &text],
            );
            out.insert(path.clone(), digest.to_string()[..8].to_string());
            return;
        }
    };
    for (token, child) in children {
        let len = path.len();
        path.push('/');
        path.push_str(&token);
        leaves(child, path, salt, out);
        path.truncate(len);
    }
}

fn write_leaf(node: &Node<'_>, out: &mut String) {
    match node {
        Node::Null => out.push_str("null"),
        Node::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Node::Number(n) => out.push_str(n),
        Node::String(s) => super::push_json_str(out, s),
        Node::Array(_) => out.push_str("[]"),
        Node::Object(_) => out.push_str("{}"),
    }
}

/// RFC 6901: `~` is `~0` and `/` is `~1` in a reference token.
fn pointer_token(name: &str) -> String {
    name.replace('~', "~0").replace('/', "~1")
}

/// SHA-256 over a tag and length-prefixed fields, truncated to a [`Key`].
/// The caller-key keyer's version: part of every caller-keyed key's hash, and what a record says
/// keyed it.
pub const CALLER_KEYER_VERSION: &str = "caller/v2";

/// [`hash`] under the tag `toolcall-dedup/<version>\0`.
fn hash_versioned(version: &str, fields: &[&str]) -> Key {
    hash(format!("toolcall-dedup/{version}\0").as_bytes(), fields)
}

fn hash(tag: &[u8], fields: &[&str]) -> Key {
    let mut hasher = Sha256::new();
    hasher.update(tag);
    for field in fields {
        hasher.update((field.len() as u64).to_be_bytes());
        hasher.update(field.as_bytes());
    }
    Key::from_digest(&hasher.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::PolicySet;

    fn keyed(keyer: &Keyer, args: &str, caller_key: &str) -> CallerKeyed {
        let call = Call {
            tool: "charge_card",
            args,
            namespace: Some("envelope:payments"),
            run_id: Some("run-1"),
            ..Call::default()
        };
        keyer.caller_keyed(&call, caller_key).unwrap()
    }

    #[test]
    fn a_reused_key_is_one_call_and_its_paths_tell_what_differs_without_values() {
        let schema = r#"{"tools": {"charge_card": {"schema": {"type": "object", "properties": {
            "currency": {"enum": ["USD", "EUR"]}, "amount": {"type": "number"},
            "items": {"type": "array"}}}}}}"#;
        let keyer = Keyer::new().with_policies(PolicySet::parse(schema, false).unwrap());
        let first = keyed(
            &keyer,
            r#"{"amount": 4200, "currency": "USD", "items": [{"sku": "a/b"}]}"#,
            "k1",
        );
        let retry = keyed(
            &keyer,
            r#"{"items": [{"sku": "a/b"}], "currency": "usd", "amount": 4200.0}"#,
            "k1",
        );
        assert_eq!(first.key, retry.key);
        assert_eq!(
            first.fingerprint, retry.fingerprint,
            "typed-equal is a replay"
        );
        let other = keyed(
            &keyer,
            r#"{"amount": 4300, "currency": "USD", "items": [{"sku": "a/c"}], "memo": "x"}"#,
            "k1",
        );
        assert_eq!(first.key, other.key);
        assert_ne!(first.fingerprint, other.fingerprint);
        let paths =
            differing_paths(first.path_digests.as_deref(), other.path_digests.as_deref()).unwrap();
        assert_eq!(paths, ["/amount", "/items/0/sku", "/memo"]);
        assert!(!other.path_digests.unwrap().contains("4300"));
        assert_ne!(first.key, keyed(&keyer, r#"{"amount": 4200}"#, "k2").key);
    }

    #[test]
    fn the_key_is_scoped_by_namespace_tool_and_run_unless_widened() {
        let keyer = Keyer::new();
        let call = |namespace, run_id, tool| Call {
            tool,
            args: "{}",
            namespace: Some(namespace),
            run_id,
            ..Call::default()
        };
        let key = |c: Call<'_>| keyer.caller_keyed(&c, "k").unwrap().key;
        let a = key(call("envelope:a", Some("run-1"), "t"));
        assert_eq!(a, key(call("envelope:a", Some("run-1"), "t")));
        assert_ne!(
            a,
            key(call("envelope:a", Some("run-2"), "t")),
            "another run"
        );
        assert_ne!(
            a,
            key(call("envelope:b", Some("run-1"), "t")),
            "another namespace"
        );
        assert_ne!(
            a,
            key(call("envelope:a", Some("run-1"), "u")),
            "another tool"
        );
        assert_ne!(a, key(call("envelope:a", None, "t")), "no run is not a run");
        assert_ne!(
            key(call("envelope:a", None, "t")),
            key(call("envelope:a", Some("-"), "t")),
            "a run named like the no-run marker"
        );

        let widened = |c: Call<'_>| {
            keyer
                .caller_keyed_in(&c, "k", CallerKeyScope::Namespace)
                .unwrap()
                .key
        };
        let w = widened(call("envelope:a", Some("run-1"), "t"));
        assert_eq!(w, widened(call("envelope:a", Some("run-2"), "t")));
        assert_eq!(w, widened(call("envelope:a", None, "t")));
        assert_ne!(w, widened(call("envelope:a", Some("run-1"), "u")));
        assert_ne!(w, widened(call("envelope:b", Some("run-1"), "t")));
        assert_ne!(w, a, "a widened key never meets a run's");
    }

    #[test]
    fn bad_keys_are_refused() {
        let keyer = Keyer::new();
        let call = Call {
            tool: "t",
            args: "{}",
            ..Call::default()
        };
        assert_eq!(
            keyer.caller_keyed(&call, " ").unwrap_err(),
            CallerKeyError::Empty
        );
        assert_eq!(
            keyer.caller_keyed(&call, &"k".repeat(257)).unwrap_err(),
            CallerKeyError::TooLong(257)
        );
        assert!(differing_paths(Some("not json"), Some("{}")).is_none());
        assert_eq!(
            differing_paths(Some(r#"{"/a~1b":"00"}"#), Some("{}")).unwrap(),
            ["/a~1b"]
        );
    }
}
