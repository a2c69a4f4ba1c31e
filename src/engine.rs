//! What every door's flow runs on: the executor (store and keyer), how the doors scope a call,
//! the catalogs the interceptor learns, and the telemetry. The handler owns one [`Engine`] and
//! hands it to the flow of the door an event came in by ([`crate::invoking`],
//! [`crate::doors::interceptor::flow`]).

use std::time::Duration;

use crate::catalog::Catalogs;
use crate::dispatch::{ErrorTypes, Routes};
use crate::doors::Gate;
use crate::doors::port::{Notice, NoticeKind, Scoping, ToolCall, refusal};
use crate::doors::port::{Scope, Sessionless};
use crate::executor::{CallerKey, Executor, Keyed, Settings};
use crate::key::CallerKeyScope;
use crate::key::{Call, CallerKeyError, Delivery, KeyError, Keyer};
use crate::store::Store;
use crate::telemetry::Telemetry;

/// The flows' shared state: what every door's flow runs on.
pub(crate) struct Engine<S> {
    pub(crate) executor: Executor<S>,
    pub(crate) doors: DoorSettings,
    pub(crate) catalogs: Catalogs,
    /// `DEDUP_ROUTES`: the one route table, which the dispatcher resolves each call by.
    pub(crate) routes: Routes,
    pub(crate) telemetry: Telemetry,
    /// Set once this handler has warned that no gateway names itself (see the interceptor flow).
    pub(crate) warned_gateway_unnamed: std::sync::atomic::AtomicBool,
}

impl<S: Store> Engine<S> {
    pub(crate) fn store(&self) -> &S {
        self.executor.store()
    }

    pub(crate) fn keyer(&self) -> &Keyer {
        self.executor.keyer()
    }

    pub(crate) fn settings(&self) -> &Settings {
        self.executor.settings()
    }
}

/// The handler's own knobs: how the doors scope a call, and which tool errors prove nothing ran.
#[derive(Debug, Clone)]
pub struct DoorSettings {
    /// `DEDUP_SCOPE`: a Bedrock call's step is its turn, or none.
    pub(crate) scope: Scope,
    /// `DEDUP_STEP_ATTRIBUTE`: the session attribute or argument that names the step.
    pub(crate) step_attribute: String,
    /// `DEDUP_RUN_ARGUMENT`: the argument an AgentCore call names its run by when the Gateway
    /// sends no session.
    pub(crate) run_argument: String,
    /// `DEDUP_ENVELOPE_NAMESPACES`: the namespaces an envelope may name (`None`: any).
    pub(crate) envelope_namespaces: Option<Vec<String>>,
    /// `DEDUP_RELEASE_ON_ERRORS`: tool error types that prove nothing ran; only these release
    /// the claim.
    pub(crate) release_on_errors: ErrorTypes,
    /// `DEDUP_RELEASE_ON_RPC_ERRORS`: a Gateway target's own JSON-RPC error codes that say
    /// nothing ran.
    pub(crate) release_on_rpc_errors: Vec<i64>,
    /// `DEDUP_TARGET_KEY_HEADER`: the header the interceptor hands a claimed call's key to its
    /// target in (`Idempotency-Key`), if any.
    pub(crate) target_key_header: Option<String>,
    /// `DEDUP_SESSIONLESS`: what a Gateway call that names no run gets.
    pub(crate) sessionless: Sessionless,
    /// `DEDUP_TRUSTED_ANNOTATIONS`: the gateways (by id) whose listings may loosen a key.
    pub(crate) trusted_annotations: Vec<String>,
    /// `DEDUP_DOORS`, `DEDUP_INTERCEPTOR_ALIAS`, `DEDUP_GATEWAY_ID`: which doors answer,
    /// through which alias, and the gateway an interception names when it names none.
    pub(crate) gate: Gate,
    /// `DEDUP_INTERCEPTOR_TIMEOUT_SECONDS`: the longest a Gateway target may take.
    pub(crate) interceptor_timeout: Duration,
    /// `DEDUP_REPLAY_MARKER`: mark replays on the doors where it changes what the caller reads.
    pub(crate) replay_marker: bool,
    /// `DEDUP_IDEMPOTENCY_KEY_NAME`: where a caller's own idempotency key travels.
    pub(crate) idempotency_key_name: String,
    /// `DEDUP_ENVELOPE_CALLER_KEY_SCOPE`: how far an envelope's caller key reaches.
    pub(crate) envelope_caller_key_scope: CallerKeyScope,
}

impl DoorSettings {
    /// Whether `gateway`'s listings may loosen a key (annotations acted on, `x-dedup` field modes
    /// applied); `gateway` is its id, as keys name it.
    pub(crate) fn trusts_gateway(&self, gateway: &str) -> bool {
        self.trusted_annotations
            .iter()
            .any(|g| g == "*" || g == gateway)
    }

    pub(crate) fn scoping(&self) -> Scoping<'_> {
        Scoping {
            step_attribute: &self.step_attribute,
            run_argument: &self.run_argument,
            scope: self.scope,
            envelope_namespaces: self.envelope_namespaces.as_deref(),
            sessionless: self.sessionless,
            caller_key_name: &self.idempotency_key_name,
            envelope_caller_key_scope: self.envelope_caller_key_scope,
        }
    }
}

// A tool name the keyer accepts is one a record can hold.
const _: () = assert!(crate::key::MAX_TOOL_NAME_BYTES <= crate::store::MAX_LABEL_BYTES);

/// A call's store key and fingerprint: the caller's own key when it sent one (its arguments'
/// typed form as the fingerprint, and their leaf digests), else the typed key.
pub(crate) struct CallKey {
    pub(crate) key: String,
    fingerprint: String,
    /// For a caller-keyed call: its leaf digests (`None` inside: too many to store) and the
    /// strict fingerprint of its arguments.
    caller: Option<(Option<String>, String)>,
}

impl CallKey {
    /// Keys `call` (`key_call` is its key-core view); the notice refuses what cannot be keyed.
    pub(crate) fn derive(
        keyer: &Keyer,
        call: &ToolCall,
        key_call: &Call<'_>,
    ) -> Result<CallKey, Notice> {
        // What the model can correct (its arguments) is a reprompt; what only the caller's
        // configuration can (an over-long tool name) is an invalid event.
        let invalid_arguments = |e: &KeyError| {
            let kind = if e.in_arguments() {
                NoticeKind::InvalidArguments
            } else {
                NoticeKind::InvalidEvent
            };
            refusal(kind, &e.to_string())
        };
        match &call.caller_key {
            Some(caller_key) => {
                match keyer.caller_keyed_in(key_call, caller_key, call.caller_key_scope) {
                    Ok(keyed) => Ok(CallKey {
                        key: keyed.key.to_string(),
                        fingerprint: keyed.fingerprint.to_string(),
                        caller: Some((keyed.path_digests, keyed.arguments.to_string())),
                    }),
                    Err(CallerKeyError::Arguments(e)) => Err(invalid_arguments(&e)),
                    Err(e) => Err(refusal(NoticeKind::InvalidEvent, &e.to_string())),
                }
            }
            None => {
                let (key, fingerprint) = keyer
                    .key_and_fingerprint(key_call)
                    .map_err(|e| invalid_arguments(&e))?;
                Ok(CallKey {
                    key: key.to_string(),
                    fingerprint: fingerprint.to_string(),
                    caller: None,
                })
            }
        }
    }

    pub(crate) fn keyed<'a>(&'a self, call: &'a Call<'a>, delivery: Delivery) -> Keyed<'a> {
        Keyed {
            key: &self.key,
            fingerprint: &self.fingerprint,
            call,
            delivery,
            caller: self.caller.as_ref().map(|(digests, arguments)| CallerKey {
                path_digests: digests.as_deref(),
                arguments,
            }),
        }
    }
}
