//! The key core: turns one tool call into a 128-bit idempotency key. Pure: no I/O, no async, no logging.
//!
//! Five strategies. `raw`, `canonical`, `normalized` and `scoped` are the article's keyers A–D, kept
//! exactly (flaws included) as the baseline. [`Strategy::Typed`] is ours and the default: exact
//! decimals, schema-typed coercions, safe schema-free heuristics, timestamps shifted to UTC, and a
//! length-prefixed, domain-separated hash of namespace, tool, run id, step and arguments.

mod article;
mod caller;
mod canonical;
mod json;
mod number;
pub mod policy;
pub mod schema;
mod text;
mod timestamp;
mod version;

/// The instant an RFC 3339 date-time with an offset names, in epoch milliseconds; `None` for
/// anything else (a naive time names no instant).
pub fn rfc3339_epoch_ms(text: &str) -> Option<i64> {
    timestamp::Timestamp::parse(text)?.epoch_ms()
}
mod typed;

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

pub use caller::{
    CALLER_KEYER_VERSION, CallerKeyError, CallerKeyScope, CallerKeyed, MAX_CALLER_KEY_BYTES,
    MAX_PATH_DIGESTS_BYTES, differing_paths,
};
pub use canonical::write_python_json_string;
pub use json::{Node, parse as parse_json};
pub use policy::{
    DEFAULT_FAILURE_TTL, DedupSwitch, Delivery, OnFailure, PolicyError, PolicySet, ToolPolicy,
    Undeclared, field_path,
};
pub use schema::{Definition, FieldMode, Schema, SchemaError, operation_names, tool_definitions};
pub use version::KeyerVersion;

/// Longest tool name keyed, in bytes: the store names each record's tool, within its label limit.
pub const MAX_TOOL_NAME_BYTES: usize = 1024;

/// The domain every typed key's hash starts with, whatever the [`KeyerVersion`]: a version move
/// then re-keys only the calls whose canonical form it changes. (It reads `typed/v1` because the
/// first version's keys were hashed under it; the keys of every version since are those keys.)
const TYPED_HASH_DOMAIN: &[u8] = b"toolcall-dedup/typed/v1\0";

/// Why a call could not be keyed. Every variant is the caller's input, never an internal fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// The arguments are not JSON.
    #[error("arguments are not valid JSON at byte {offset}: {message}")]
    Syntax {
        /// Byte offset of the first character the reader could not accept.
        offset: usize,
        /// What the reader expected there.
        message: String,
    },
    /// The arguments nest deeper than the limit.
    #[error("arguments nest deeper than {limit} levels")]
    TooDeep {
        /// The configured nesting limit ([`Limits::max_depth`]).
        limit: usize,
    },
    /// The arguments are larger than the limit.
    #[error("arguments are {bytes} bytes, over the {limit}-byte limit")]
    TooLarge {
        /// Size of the arguments text.
        bytes: usize,
        /// The configured size limit ([`Limits::max_bytes`]).
        limit: usize,
    },
    /// An object names the same member twice; which one the tool would read is undefined.
    #[error("duplicate object key {0:?} in arguments")]
    DuplicateKey(String),
    /// A number the keyer cannot compare exactly (an exponent of more than 15 digits).
    #[error("number {0:?} is out of the supported range")]
    Number(String),
    /// The arguments are JSON but not an object.
    #[error("tool arguments must be a JSON object")]
    NotAnObject,
    /// The call names no tool.
    #[error("the tool name is empty")]
    EmptyTool,
    /// The tool name is longer than [`MAX_TOOL_NAME_BYTES`] (a record names its tool).
    #[error("the tool name is {0} bytes, longer than the {MAX_TOOL_NAME_BYTES} a record holds")]
    ToolNameTooLong(usize),
    /// Keyer C converts an integer beyond `f64` range, which the article's Python raises on.
    #[error(
        "integer too large to convert to float (the article's keyer C fails here, as Python does)"
    )]
    ArticleOverflow,
}

/// A keying strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Strategy {
    /// A: hash of the raw argument bytes.
    Raw,
    /// B: hash of canonical JSON (sorted keys, tight separators).
    Canonical,
    /// C: canonical JSON after the article's value normalization.
    Normalized,
    /// D: C scoped by run id and step.
    Scoped,
    /// Ours: schema-typed normalization, safe heuristics, fully scoped.
    Typed,
}

impl Strategy {
    /// Every strategy, article's A–D first, in scoring order.
    pub const ALL: [Strategy; 5] = [
        Self::Raw,
        Self::Canonical,
        Self::Normalized,
        Self::Scoped,
        Self::Typed,
    ];

    /// The name the CLI and reports use (`raw`, `canonical`, `normalized`, `scoped`, `typed`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Raw => "raw",
            Self::Canonical => "canonical",
            Self::Normalized => "normalized",
            Self::Scoped => "scoped",
            Self::Typed => "typed",
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Strategy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|st| st.name() == s)
            .ok_or_else(|| {
                format!("unknown strategy {s:?} (raw|canonical|normalized|scoped|typed)")
            })
    }
}

/// A 128-bit key: SHA-256 truncated, shown as 32 lowercase hex characters.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key(pub [u8; 16]);

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

impl Key {
    /// The first 16 bytes of a SHA-256 digest (32 bytes).
    pub fn from_digest(digest: &[u8]) -> Key {
        let mut key = [0u8; 16];
        key.copy_from_slice(&digest[..16]);
        Key(key)
    }
}

impl FromStr for Key {
    type Err = String;
    /// Parses the 32-hex-character form that `Display` writes.
    fn from_str(s: &str) -> Result<Self, String> {
        let bytes = s.as_bytes();
        if bytes.len() != 32 {
            return Err(format!("a key is 32 hex characters, got {}", bytes.len()));
        }
        let mut key = [0u8; 16];
        for (i, pair) in bytes.chunks(2).enumerate() {
            let hex = std::str::from_utf8(pair).map_err(|e| e.to_string())?;
            key[i] = u8::from_str_radix(hex, 16).map_err(|_| format!("not hex: {s:?}"))?;
        }
        Ok(Key(key))
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({self})")
    }
}

/// Rules that changed a call's canonical form, as a bit set (cheap to compute on every call).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Rules(u32);

macro_rules! rules {
    ($($name:ident = $bit:expr, $label:literal;)*) => {
        impl Rules {
            $(#[doc = concat!("The `", $label, "` rule.")] pub const $name: Rules = Rules(1 << $bit);)*
            const LABELS: &'static [(Rules, &'static str)] = &[$((Rules::$name, $label)),*];
        }
    };
}

rules! {
    KEY_ORDER = 0, "key-order";
    NUMBER_CANONICAL = 1, "number-canonical";
    UNICODE_NFC = 2, "unicode-nfc";
    WHITESPACE = 3, "whitespace";
    CASEFOLD = 4, "casefold";
    ENUM_CASE = 5, "enum-case";
    TIMESTAMP_UTC = 6, "timestamp-utc";
    TIMESTAMP_SUBSECOND = 7, "timestamp-subsecond";
    TIMESTAMP_FORMAT = 8, "timestamp-format";
    NUMERIC_STRING = 9, "numeric-string";
    BOOLEAN_STRING = 10, "boolean-string";
    SCHEMA_COERCION = 11, "schema-coercion";
    NULL_DROPPED = 12, "null-dropped";
    FIELD_IGNORED = 13, "field-ignored";
    FIELD_NOT_KEYED = 14, "field-not-keyed";
    JSON_TEXT = 15, "json-text";
    SCHEMA_DEFAULT = 16, "schema-default";
    UNDECLARED_IGNORED = 17, "undeclared-ignored";
    LIST_ORDER = 18, "list-order";
}

impl Rules {
    /// Adds `other`'s rules to this set.
    pub fn insert(&mut self, other: Rules) {
        self.0 |= other.0;
    }
    /// Whether every rule in `other` is in this set.
    pub fn contains(self, other: Rules) -> bool {
        self.0 & other.0 == other.0
    }
    /// Whether no rule changed the call.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
    /// The raw bit set, for storing or logging compactly.
    pub fn bits(self) -> u32 {
        self.0
    }
    /// The set [`Rules::bits`] returned.
    pub fn from_bits(bits: u32) -> Rules {
        Rules(bits)
    }
    /// The rules set in either call but not both: what made two different texts meet.
    pub fn symmetric_difference(self, other: Rules) -> Rules {
        Rules(self.0 ^ other.0)
    }
    /// The rules in either set.
    pub fn union(self, other: Rules) -> Rules {
        Rules(self.0 | other.0)
    }
    /// The rule with this label (as [`Rules::names`] writes it).
    pub fn from_name(name: &str) -> Option<Rules> {
        Self::LABELS
            .iter()
            .find(|(_, label)| *label == name)
            .map(|(rule, _)| *rule)
    }

    /// The labels of the rules in this set, in bit order.
    pub fn names(self) -> impl Iterator<Item = &'static str> {
        Self::LABELS
            .iter()
            .filter(move |(r, _)| self.contains(*r))
            .map(|(_, label)| *label)
    }
}

/// One tool call to key. `args` is the arguments' JSON text as the model wrote it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Call<'a> {
    /// The tool's name as the agent called it.
    pub tool: &'a str,
    /// The arguments' JSON text.
    pub args: &'a str,
    /// Who owns the tool (e.g. agent id + action group); part of the typed key only.
    pub namespace: Option<&'a str>,
    /// The agent run (session) the call belongs to; keyers D and typed scope by it.
    pub run_id: Option<&'a str>,
    /// The step within the run, where the harness numbers them; scoped like `run_id`.
    pub step: Option<&'a str>,
    /// The tool's input schema; overrides the policy file's schema for this tool.
    pub schema: Option<&'a Schema>,
    /// The name the policy file knows the tool by, when it is not `tool` (an AgentCore Gateway
    /// tool's `target___tool`, so that one target's policy never applies to another's tool).
    pub policy: Option<&'a str>,
}

impl Call<'_> {
    /// The name this call's policy entry is looked up by.
    pub fn policy_name(&self) -> &str {
        self.policy.unwrap_or(self.tool)
    }
}

impl KeyError {
    /// Whether the model can correct it in its arguments (else only the caller's configuration
    /// can: an empty or over-long tool name).
    pub fn in_arguments(&self) -> bool {
        !matches!(self, KeyError::EmptyTool | KeyError::ToolNameTooLong(_))
    }
}

/// Input bounds: a call over them is refused with an error, never a panic or a stack overflow.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Largest arguments text accepted, in bytes.
    pub max_bytes: usize,
    /// Deepest nesting of arrays and objects accepted.
    pub max_depth: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_bytes: 256 * 1024,
            max_depth: 64,
        }
    }
}

/// Recursion in the reader and normalizer is bounded by this, whatever the configuration says.
const HARD_MAX_DEPTH: usize = 512;

/// A key with the canonical form it hashed and the rules that shaped that form.
#[derive(Debug, Clone)]
pub struct Explanation {
    /// The key.
    pub key: Key,
    /// The strategy that derived it.
    pub strategy: Strategy,
    /// The normalized argument text (for `raw`, the arguments as given).
    pub canonical: String,
    /// The rules that changed the arguments on the way to `canonical`.
    pub rules: Rules,
}

/// Derives keys. Build once (policies compiled), then share: `&self` methods only.
#[derive(Debug, Clone, Default)]
pub struct Keyer {
    limits: Limits,
    policies: PolicySet,
    keep_subseconds: bool,
    version: KeyerVersion,
}

impl Keyer {
    /// A keyer with default limits and no policies.
    pub fn new() -> Self {
        Self::default()
    }

    /// Keys each tool by its policy (schema, ignored fields, field modes).
    pub fn with_policies(mut self, policies: PolicySet) -> Self {
        self.policies = policies;
        self
    }

    /// Sets the input bounds; the depth is capped at an internal hard limit whatever is asked.
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = Limits {
            max_depth: limits.max_depth.min(HARD_MAX_DEPTH),
            ..limits
        };
        self
    }

    /// Keys under `version`'s rules (the default is [`KeyerVersion::default`], what a deployment
    /// that pins none keys with).
    pub fn with_version(mut self, version: KeyerVersion) -> Self {
        self.version = version;
        self
    }

    /// The version whose rules this keyer applies: what a record it keys says keyed it.
    pub fn version(&self) -> KeyerVersion {
        self.version
    }

    /// Keep sub-second digits of timestamps instead of truncating to the second.
    pub fn keep_subseconds(mut self, keep: bool) -> Self {
        self.keep_subseconds = keep;
        self
    }

    /// Whether `tool`'s calls are deduplicated (its policy may say `dedup = "off"`).
    pub fn dedups(&self, tool: &str) -> bool {
        self.policies
            .get(tool)
            .is_none_or(|p| p.dedup == DedupSwitch::On)
    }

    /// What an unknown outcome of `tool`'s calls allows, as its policy says
    /// ([`Delivery::AtLeastOnce`] for a tool the policy file does not name).
    pub fn delivery(&self, tool: &str) -> Delivery {
        self.policies
            .get(tool)
            .map_or(Delivery::AtLeastOnce, |p| p.delivery)
    }

    /// The policies this keyer applies.
    pub fn policies(&self) -> &PolicySet {
        &self.policies
    }

    /// The typed key of `call` and its strict fingerprint (keyer B), the pair every claim stores:
    /// the one keying step of the handler and the guard.
    /// One parse serves both.
    pub fn key_and_fingerprint(&self, call: &Call<'_>) -> Result<(Key, Key), KeyError> {
        self.check_bounds(call)?;
        let tape = json::parse_tape(call.args, self.limits.max_depth)?;
        let (key, _, _) = self.typed_from(&tape, call, false)?;
        Ok((key, fingerprint_of(call.tool, &tape)))
    }

    /// The key of `call` under `strategy`.
    pub fn key(&self, strategy: Strategy, call: &Call<'_>) -> Result<Key, KeyError> {
        self.derive(strategy, call, false).map(|e| e.key)
    }

    /// The key with its canonical form and the rules that fired.
    pub fn explain(&self, strategy: Strategy, call: &Call<'_>) -> Result<Explanation, KeyError> {
        self.derive(strategy, call, true)
    }

    /// The key under every strategy, in [`Strategy::ALL`] order (`None` where a strategy fails on these
    /// arguments), and the rules the typed keyer applied: what a tool-call log records. One derivation
    /// per strategy; the typed rules come with its key.
    pub fn every_key(&self, call: &Call<'_>) -> ([Option<Key>; 5], Rules) {
        let mut keys = [None; 5];
        let mut rules = Rules::default();
        for (slot, strategy) in keys.iter_mut().zip(Strategy::ALL) {
            if let Ok(derived) = self.derive(strategy, call, false) {
                *slot = Some(derived.key);
                if strategy == Strategy::Typed {
                    rules = derived.rules;
                }
            }
        }
        (keys, rules)
    }

    /// The fingerprint of `tool`'s policy ([`ToolPolicy::fingerprint`]), when it has one: what a
    /// record stores beside the keyer's version.
    pub fn policy_fingerprint(&self, tool: &str) -> Option<&str> {
        self.policies
            .get(tool)
            .map(|p| p.fingerprint.as_str())
            .filter(|f| !f.is_empty())
    }

    /// A strict fingerprint of the arguments alone (canonical JSON, no value rules, no scope): keyer
    /// B's key. Stored with a claim so a replay can tell which rules made two different calls meet.
    pub fn fingerprint(&self, call: &Call<'_>) -> Result<Key, KeyError> {
        self.check_bounds(call)?;
        let tape = json::parse_tape(call.args, self.limits.max_depth)?;
        Ok(fingerprint_of(call.tool, &tape))
    }

    /// The bounds every strategy checks before reading the arguments.
    fn check_bounds(&self, call: &Call<'_>) -> Result<(), KeyError> {
        if call.tool.is_empty() {
            return Err(KeyError::EmptyTool);
        }
        if call.tool.len() > MAX_TOOL_NAME_BYTES {
            return Err(KeyError::ToolNameTooLong(call.tool.len()));
        }
        if call.args.len() > self.limits.max_bytes {
            return Err(KeyError::TooLarge {
                bytes: call.args.len(),
                limit: self.limits.max_bytes,
            });
        }
        Ok(())
    }

    fn derive(
        &self,
        strategy: Strategy,
        call: &Call<'_>,
        explain: bool,
    ) -> Result<Explanation, KeyError> {
        self.check_bounds(call)?;
        let (key, canonical, rules) = match strategy {
            Strategy::Raw => {
                let canonical = if explain {
                    call.args.to_string()
                } else {
                    String::new()
                };
                let key = article::key_raw(call.tool, call.args);
                (key, canonical, Rules::default())
            }
            Strategy::Typed => {
                let tape = json::parse_tape(call.args, self.limits.max_depth)?;
                self.typed_from(&tape, call, explain)?
            }
            Strategy::Canonical => {
                let tape = json::parse_tape(call.args, self.limits.max_depth)?;
                let text = canonical::canonical_text(&tape);
                let key = canonical::tool_key(call.tool, &text);
                (key, text, Rules::default())
            }
            Strategy::Normalized | Strategy::Scoped => {
                let root = json::parse(call.args, self.limits.max_depth)?;
                let text = article::normalized_text(root)?;
                let inner = canonical::tool_key(call.tool, &text);
                let key = if strategy == Strategy::Scoped {
                    article::key_scoped(call.run_id, call.step, inner)
                } else {
                    inner
                };
                (key, text, Rules::default())
            }
        };
        Ok(Explanation {
            key,
            strategy,
            canonical,
            rules,
        })
    }

    /// Our keyer: the arguments (read into `tape`) normalized as their schema (and the policy) say,
    /// scoped and hashed.
    fn typed_from(
        &self,
        tape: &json::Tape<'_>,
        call: &Call<'_>,
        explain: bool,
    ) -> Result<(Key, String, Rules), KeyError> {
        if !matches!(tape.token(0), json::Token::Object { .. }) {
            return Err(KeyError::NotAnObject);
        }
        let policy = self.policies.get(call.policy_name());
        let schema = overlaid(call.schema, policy.and_then(|p| p.schema.as_ref()));
        let mut normalizer = typed::Normalizer::new(self.keep_subseconds, self.limits.max_depth);
        normalizer.ignore_undeclared =
            policy.is_some_and(|p| p.undeclared == policy::Undeclared::Ignore);
        normalizer.version = self.version;
        let mut out = Vec::with_capacity(call.args.len() + 16);
        normalizer.value(
            tape,
            0,
            schema.as_deref(),
            policy.map(|p| &p.root),
            &mut out,
        )?;
        let key = typed_hash(call, &out);
        let canonical = if explain {
            String::from_utf8(out).unwrap_or_default()
        } else {
            String::new()
        };
        Ok((key, canonical, normalizer.rules))
    }
}

/// The schema a call is keyed under: the one it declares with the policy file's schema for the tool
/// laid over it (which wins per property where it states a type), or whichever of the two there is.
/// Only a call that declares a schema while the policy has one too pays for a copy.
fn overlaid<'s>(
    declared: Option<&'s Schema>,
    policy: Option<&'s Schema>,
) -> Option<Cow<'s, Schema>> {
    match (declared, policy) {
        (Some(declared), Some(policy)) => Some(Cow::Owned(declared.clone().overlay(policy))),
        (Some(schema), None) | (None, Some(schema)) => Some(Cow::Borrowed(schema)),
        (None, None) => None,
    }
}

/// SHA-256 over a version tag and five length-prefixed fields; an absent field is tagged apart from an
/// empty one. Unlike a `|` join, no two different field tuples can produce the same bytes.
fn typed_hash(call: &Call<'_>, canonical_args: &[u8]) -> Key {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    hasher.update(TYPED_HASH_DOMAIN);
    for field in [call.namespace, Some(call.tool), call.run_id, call.step] {
        match field {
            None => hasher.update([0u8]),
            Some(value) => {
                hasher.update([1u8]);
                hasher.update((value.len() as u64).to_be_bytes());
                hasher.update(value.as_bytes());
            }
        }
    }
    hasher.update((canonical_args.len() as u64).to_be_bytes());
    hasher.update(canonical_args);
    Key::from_digest(&hasher.finalize())
}

/// Keyer B's key of `tool`'s arguments, read into `tape`: the strict fingerprint.
fn fingerprint_of(tool: &str, tape: &json::Tape<'_>) -> Key {
    canonical::tool_key(tool, &canonical::canonical_text(tape))
}

/// Appends `s` as a JSON string literal.
pub fn push_json_str(out: &mut String, s: &str) {
    // serde_json's escaper, into a string of its own: writing into `out`'s bytes would need a UTF-8
    // check of all of `out` afterwards, on every call.
    out.push_str(&serde_json::to_string(s).unwrap_or_default());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rule_sets_go_through_their_names_and_bits_unchanged() {
        for (rule, label) in Rules::LABELS {
            assert_eq!(Rules::from_name(label), Some(*rule), "{label}");
            assert_eq!(rule.names().collect::<Vec<_>>(), [*label]);
        }
        assert_eq!(Rules::from_name("no-such-rule"), None);
        let mut set = Rules::default();
        set.insert(Rules::CASEFOLD);
        set.insert(Rules::WHITESPACE);
        assert!(set.contains(Rules::CASEFOLD) && !set.contains(Rules::KEY_ORDER));
        assert!(!set.contains(Rules::CASEFOLD.union(Rules::KEY_ORDER)));
        assert_ne!(set.bits(), 0);
        assert_eq!(Rules::from_bits(set.bits()), set);
        let met = set.symmetric_difference(Rules::CASEFOLD.union(Rules::KEY_ORDER));
        assert_eq!(met.names().collect::<Vec<_>>(), ["key-order", "whitespace"]);
    }

    #[test]
    fn a_strategy_is_read_back_from_its_name() {
        for strategy in Strategy::ALL {
            assert_eq!(strategy.name().parse::<Strategy>(), Ok(strategy));
        }
        assert!("fastest".parse::<Strategy>().is_err());
    }

    #[test]
    fn a_keyer_answers_with_the_policies_it_was_given() {
        let mut policies = PolicySet::default();
        policies.insert("charge_card", ToolPolicy::with_schema(Schema::default()));
        let keyer = Keyer::new().with_policies(policies);
        assert!(keyer.policies().get("charge_card").is_some());
        assert!(keyer.policies().get("refund").is_none());
    }

    /// JSON text in a declared string is read before the text rules: an escaped quote in it is
    /// JSON's, not an opening quote of prose, so a space after it is kept as the unquoted value
    /// keeps it (found by `declared_text_keys_like_no_schema`).
    #[test]
    fn declared_json_text_keys_as_the_value_it_writes() {
        let declared = Schema::from_declared_types([("a", "string"), ("b", "array")]).unwrap();
        let keyer = Keyer::new();
        let key = |args: &str, schema| {
            let call = Call {
                tool: "t",
                args,
                schema,
                ..Call::default()
            };
            keyer.explain(Strategy::Typed, &call).unwrap().canonical
        };
        let plain = key(r#"{"a": ["\"\u2000x"], "b": ["\" y"]}"#, None);
        let as_text = key(
            r#"{"a": "[\"\\\"\u2000x\"]", "b": " [\"\\\" y\"] "}"#,
            Some(&declared),
        );
        assert_eq!(as_text, plain);
    }

    /// However deep a caller allows, the reader never recurses past the hard limit.
    #[test]
    fn the_nesting_limit_is_capped_whatever_is_asked() {
        let keyer = Keyer::new().with_limits(Limits {
            max_bytes: 1 << 20,
            max_depth: usize::MAX,
        });
        let deep = "[".repeat(HARD_MAX_DEPTH + 1) + &"]".repeat(HARD_MAX_DEPTH + 1);
        let call = Call {
            tool: "t",
            args: &deep,
            ..Call::default()
        };
        assert_eq!(
            keyer.key(Strategy::Typed, &call),
            Err(KeyError::TooDeep {
                limit: HARD_MAX_DEPTH
            })
        );
    }

    /// What a tool-call log records: each strategy's own key, and the typed keyer's rules.
    #[test]
    fn every_key_is_each_strategys_key_with_the_typed_rules() {
        let keyer = Keyer::new();
        let call = Call {
            tool: "charge_card",
            args: r#"{"currency": "usd", "amount": 4200.0}"#,
            run_id: Some("run"),
            step: Some("1"),
            ..Call::default()
        };
        let (keys, rules) = keyer.every_key(&call);
        for (key, strategy) in keys.iter().zip(Strategy::ALL) {
            assert_eq!(*key, keyer.key(strategy, &call).ok(), "{strategy}");
        }
        let typed = keyer.explain(Strategy::Typed, &call).unwrap();
        assert_eq!(rules, typed.rules);
        assert!(!rules.is_empty());
    }
}
