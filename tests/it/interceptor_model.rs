//! The Gateway interceptor's protocol, model-checked with stateright: what can change while a call
//! is in flight (issue 48), where the REQUEST that claims a call and the RESPONSE that settles it
//! are separate invocations, in any container.
//!
//! Two requests for one call (the client's first and its retry, with new JSON-RPC ids) meet two
//! containers sharing one store. Modelled:
//! - a REQUEST whose claim applied but every answer to it was lost (the container remembers the
//!   claim, to release it, fenced, at its next call), and one whose answer to the Gateway was lost
//!   after it claimed and noted: either way the Gateway sends the same REQUEST again, to either
//!   container, which finds the request's own claim and goes on under it;
//! - a release of those lost claims that fails (the call fails closed, the list is kept);
//! - a configuration change between a REQUEST and its RESPONSE that re-keys the call (a refresh,
//!   a new listing, an S3 schema), so a key derived again would be another key;
//! - the target's effect within its timeout, RESPONSEs in either container, leases ending and
//!   claims taken over;
//! - a multi-round-trip leg (MCP 2026-07-28): the target answers `input_required` before acting,
//!   and the client retries the original request with its input, as a new request (a new
//!   JSON-RPC id) that claims the call again.
//!
//! Every decision is the product's: `Record::is_claimable` for a claim's fate,
//! `ClaimRequest::record_expiry` for what it writes, `decide::decide` for what a REQUEST does with
//! it (including resuming its own claim), and the store's fence (a write applies while the record
//! is live, in progress and carries the writer's token) for every settling write.
//!
//! Invariants:
//! - **at most once**: a second effect happens only after a takeover the protocol allows (a lease
//!   ended whose owner can no longer act), or for a retry keyed under another configuration (the
//!   documented window: docs/configuration.md);
//! - **no lost result**: a request whose RESPONSE was handled never leaves its own claim in
//!   progress (the RESPONSE settles the claim the REQUEST made, not one derived again);
//! - **replies come from effects** (an interim `input_required` answer is none);
//! - **no interim leg holds a claim**: once a leg answered `input_required`, no claim of it stays
//!   in progress.
//!
//! Two fixed bugs come back behind [`Bug`] and the checker must find each: a resumed claim that
//! keeps its old token (a lost claim's release in the other container frees it, and the retry
//! runs the target again), and a RESPONSE that derives its key again (a configuration change in
//! between leaves the claim in progress and the result lost).

use std::time::Duration;

use stateright::{Model, Property};
use toolcall_dedup::config::Mode;
use toolcall_dedup::internals::decide::{NextAction, decide};
use toolcall_dedup::store::{
    CallAbout, ClaimOutcome, ClaimRequest, LeaseToken, Record, Status, StoreError,
};

const TICK_MS: i64 = 1_000;
const REQUESTS: usize = 2;
const CONTAINERS: usize = 2;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Bug {
    /// A REQUEST that finds its own request's claim goes on under the claim's old token.
    ResumeKeepsToken,
    /// A RESPONSE derives the key again from the configuration in force.
    ResponseDerivesKey,
    /// An `input_required` answer is stored as the call's outcome.
    InterimStored,
    /// A RESPONSE that settles a call as outcome unknown writes under the token it read, instead
    /// of taking the claim under one of its own first: a second RESPONSE for the request (the
    /// Gateway's re-send, side by side) meets the first's settle as a retry of its own would,
    /// succeeds, and announces the call again (the code before stop 61).
    SettlesUnderTheReadToken,
}

#[derive(Debug, Clone)]
struct Interceptor {
    ticks: u8,
    /// Invocations of one request's REQUEST at most (the first and the Gateway's re-sends).
    invocations: u8,
    /// The target's timeout, in ticks: its effect happens within it.
    run_ticks: u8,
    margin_ticks: u8,
    ttl_ticks: u8,
    /// The tool is `at_most_once` and the target's every answer leaves the outcome unknown (an
    /// internal error): each RESPONSE, which the Gateway may send twice side by side, reads the
    /// request's claims, then settles them as outcome unknown and announces each.
    unknown_outcomes: bool,
    /// Legs the target may answer `input_required` (bounds the model).
    interims: u8,
    bug: Option<Bug>,
}

/// One record: the call's claim under one key (one per configuration version).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Stored {
    status: Status,
    /// `(request, serial)`: the owner its token names, and which claim of it this is.
    token: (u8, u8),
    lease_until_ms: i64,
    expires_at_s: i64,
    result: Option<u8>,
    /// Settled as outcome unknown.
    unknown: bool,
    at_most_once: bool,
    /// The serial of the claim that wrote it: which call's life this is, whoever holds it now.
    life: u8,
}

/// What a RESPONSE invocation read before settling: the request, the leg it answers (the
/// token the request passed under), and each claim of it in progress as
/// `(key, token, lease_until_ms)`.
type ResponseRead = (usize, (u8, u8), Vec<(u8, (u8, u8), i64)>);

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Phase {
    /// Its REQUEST has not been answered (the Gateway sends it, or sends it again).
    Pending,
    /// The REQUEST let it through under the claim of `key` with `token` at tick `at`: the Gateway
    /// calls the target, whose effect happens within its timeout.
    Passed {
        key: u8,
        token: (u8, u8),
        at: u8,
        effect: Option<u8>,
    },
    /// Its RESPONSE was handled.
    Settled { key: u8, token: (u8, u8) },
    /// Answered without the target: a stored reply (`Some(effect)`) or a refusal.
    Answered(Option<u8>),
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct State {
    tick: u8,
    /// The configuration version in force: the key a call derives now.
    version: u8,
    records: [Option<Stored>; 2],
    /// What each request's REQUESTs noted: every key they claimed.
    notes: [Vec<u8>; REQUESTS],
    /// Each container's claims whose answers were lost: `(key, token)`.
    lost: [Vec<(u8, (u8, u8))>; CONTAINERS],
    requests: [Phase; REQUESTS],
    /// Invocations of each request's REQUEST the Gateway may still make.
    invocations_left: [u8; REQUESTS],
    /// Effects that happened: the token each ran under.
    effects: Vec<(u8, u8)>,
    next_serial: u8,
    rerun_allowed: bool,
    /// The tokens of legs that answered `input_required`.
    interim: Vec<(u8, u8)>,
    /// Interim answers the target may still give (bounds the model).
    interims_left: u8,
    /// The two RESPONSE invocations' reads, not yet settled ([`Interceptor::unknown_outcomes`]).
    responses: [Option<ResponseRead>; 2],
    /// The calls announced as outcome unknown: `(key, life)`.
    announced: Vec<(u8, u8)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Lost {
    /// Every answer arrives.
    Nothing,
    /// The claim applies, and every answer to it is lost: the call fails closed.
    ClaimAnswer,
    /// The invocation claims and notes, and its answer to the Gateway is lost.
    GatewayAnswer,
    /// The release of the container's lost claims fails: the call fails closed.
    Release,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Action {
    Tick,
    ChangeConfig,
    Request {
        request: usize,
        container: usize,
        lost: Lost,
    },
    Effect(usize),
    Response {
        request: usize,
    },
    /// The target answers this leg `input_required` before acting; its RESPONSE passes by, and
    /// the client retries the original request with its input as a new request.
    InputRequired {
        request: usize,
    },
    /// A RESPONSE invocation (`reader`, of two) reads the request's claims, its target's answer
    /// leaving the outcome unknown.
    UnknownRead {
        request: usize,
        reader: usize,
    },
    /// That invocation settles what it read as outcome unknown, and announces each call it settled.
    UnknownSettle {
        reader: usize,
    },
}

fn owner(request: usize, key: u8) -> String {
    format!("r{request}k{key}")
}

impl Interceptor {
    fn now_ms(state: &State) -> i64 {
        i64::from(state.tick) * TICK_MS
    }

    fn lease_ms(&self) -> i64 {
        i64::from(self.run_ticks + self.margin_ticks) * TICK_MS
    }

    fn product_record(key: u8, stored: &Stored) -> Record {
        Record {
            key: key.to_string(),
            status: stored.status,
            expires_at_s: stored.expires_at_s,
            lease_until_ms: stored.lease_until_ms,
            token: LeaseToken::new(format!(
                "{}.{}",
                owner(usize::from(stored.token.0), key),
                stored.token.1
            )),
            fingerprint: "f".into(),
            tool: "charge_card".into(),
            created_at_ms: 0,
            result: stored.result.map(|effect| vec![effect]),
            omitted_result_bytes: None,
            outcome_unknown: stored.unknown,
            at_most_once: stored.at_most_once,
            on_failure: Default::default(),
            path_digests: None,
            offloaded: None,
            about: Default::default(),
        }
    }

    /// The store's fence.
    fn held_by(state: &State, key: u8, token: (u8, u8)) -> bool {
        state.records[usize::from(key)].as_ref().is_some_and(|r| {
            r.status == Status::InProgress
                && r.token == token
                && !Self::product_record(key, r).is_expired(Self::now_ms(state))
        })
    }

    /// Whether the request holding `token` can no longer act: its target's window is over.
    fn owner_cannot_act(&self, state: &State, token: (u8, u8)) -> bool {
        state.requests.iter().all(|p| match p {
            Phase::Passed { token: t, at, .. } if *t == token => state.tick > at + self.run_ticks,
            _ => true,
        })
    }

    fn new_token(state: &mut State, request: usize) -> (u8, u8) {
        state.next_serial += 1;
        (u8::try_from(request).unwrap(), state.next_serial)
    }

    fn lease(&self, state: &State) -> (i64, i64) {
        let now_ms = Self::now_ms(state);
        let request = ClaimRequest {
            key: "k",
            fingerprint: "f",
            tool: "charge_card",
            lease_until_ms: now_ms + self.lease_ms(),
            expires_at_s: now_ms.div_euclid(1000) + i64::from(self.ttl_ticks),
            owner: None,
            at_most_once: self.unknown_outcomes,
            on_failure: Default::default(),
            path_digests: None,
            about: CallAbout::default(),
        };
        (request.lease_until_ms, request.record_expiry())
    }

    /// The store's conditional claim of `key` for `request`, as the product rules it.
    fn claim(&self, state: &mut State, request: usize, key: u8) -> ClaimOutcome {
        let now_ms = Self::now_ms(state);
        if let Some(existing) = &state.records[usize::from(key)] {
            let record = Self::product_record(key, existing);
            if !record.is_claimable(now_ms) {
                return match record.status {
                    Status::Completed => ClaimOutcome::Completed(record),
                    Status::InProgress => ClaimOutcome::InProgress(record),
                };
            }
            if self.owner_cannot_act(state, existing.token) {
                state.rerun_allowed = true;
            }
        }
        let other = usize::from(1 - key);
        if state.records[other].is_some() {
            // A call keyed under another configuration: the documented window.
            state.rerun_allowed = true;
        }
        let token = Self::new_token(state, request);
        let (lease_until_ms, expires_at_s) = self.lease(state);
        state.records[usize::from(key)] = Some(Stored {
            status: Status::InProgress,
            token,
            lease_until_ms,
            expires_at_s,
            result: None,
            unknown: false,
            at_most_once: self.unknown_outcomes,
            // Only where announcements are modelled: elsewhere it would split equal states.
            life: if self.unknown_outcomes { token.1 } else { 0 },
        });
        ClaimOutcome::Claimed {
            token: LeaseToken::new(format!("{}.{}", owner(request, key), token.1)),
        }
    }

    /// The REQUEST notes the key it claimed, beside any an earlier invocation of the request
    /// noted (a configuration change between the two re-keyed it); none is released.
    fn note(state: &mut State, request: usize, key: u8) {
        if !state.notes[request].contains(&key) {
            state.notes[request].push(key);
        }
    }

    fn request(&self, state: &mut State, request: usize, container: usize, lost: Lost) {
        // The lost claims first, fenced; a failing release fails the call closed.
        if lost == Lost::Release {
            return;
        }
        for (key, token) in std::mem::take(&mut state.lost[container]) {
            if Self::held_by(state, key, token) {
                state.records[usize::from(key)] = None;
            }
        }
        let key = state.version;
        let claim = match (lost, self.claim(state, request, key)) {
            (Lost::ClaimAnswer, ClaimOutcome::Claimed { .. }) => {
                let token = state.records[usize::from(key)].as_ref().unwrap().token;
                state.lost[container].push((key, token));
                return;
            }
            (Lost::ClaimAnswer, _) => return,
            (_, outcome) => Ok::<_, StoreError>(outcome),
        };
        let now_ms = Self::now_ms(state);
        let own = owner(request, key);
        let token = match decide(
            claim,
            Mode::Enforce,
            Duration::ZERO,
            now_ms,
            None,
            Some(&own),
        ) {
            NextAction::Execute { .. } => state.records[usize::from(key)].as_ref().unwrap().token,
            NextAction::Resume(_) if self.bug == Some(Bug::ResumeKeepsToken) => {
                state.records[usize::from(key)].as_ref().unwrap().token
            }
            NextAction::Resume(_) => {
                let token = Self::new_token(state, request);
                let (lease_until_ms, expires_at_s) = self.lease(state);
                let record = state.records[usize::from(key)].as_mut().unwrap();
                record.token = token;
                record.lease_until_ms = lease_until_ms;
                record.expires_at_s = record.expires_at_s.max(expires_at_s);
                token
            }
            NextAction::Replay(record) => {
                state.requests[request] = Phase::Answered(record.result.as_deref().map(|r| r[0]));
                return;
            }
            NextAction::Busy(_)
            | NextAction::Wait(_)
            | NextAction::Unknown(_)
            | NextAction::Mismatch(_)
            | NextAction::StoreDown(_) => {
                state.requests[request] = Phase::Answered(None);
                return;
            }
            NextAction::Shadow { .. } => unreachable!("enforce mode"),
        };
        Self::note(state, request, key);
        if lost == Lost::GatewayAnswer {
            return;
        }
        state.requests[request] = Phase::Passed {
            key,
            token,
            at: state.tick,
            effect: None,
        };
    }

    /// The RESPONSE of a leg the target answered `input_required` (nothing acted): the product
    /// classes it as "nothing ran" (`Interception::target_reply`), so each claim the leg's note
    /// names, held by the request, is released; [`Bug::InterimStored`] completes it with the
    /// interim answer (effect 0). The client then retries the original request with its input: a
    /// new request (a new JSON-RPC id), so the note starts afresh.
    fn input_required(&self, state: &mut State, request: usize) {
        let Phase::Passed {
            token,
            effect: None,
            ..
        } = state.requests[request].clone()
        else {
            return;
        };
        state.interims_left -= 1;
        let now_ms = Self::now_ms(state);
        for key in std::mem::take(&mut state.notes[request]) {
            let Some(record) = state.records[usize::from(key)].as_mut() else {
                continue;
            };
            let live = !Self::product_record(key, record).is_expired(now_ms);
            if live && record.status == Status::InProgress && usize::from(record.token.0) == request
            {
                if self.bug == Some(Bug::InterimStored) {
                    record.status = Status::Completed;
                    record.result = Some(0);
                } else {
                    state.records[usize::from(key)] = None;
                }
            }
        }
        state.interim.push(token);
        state.requests[request] = Phase::Pending;
        // The continuation, sent once (its re-sends are the first leg's, already explored).
        state.invocations_left[request] = 1;
    }

    fn response(&self, state: &mut State, request: usize) {
        let Phase::Passed {
            key,
            token,
            effect: Some(effect),
            ..
        } = state.requests[request].clone()
        else {
            return;
        };
        let settled: Vec<u8> = match self.bug {
            Some(Bug::ResponseDerivesKey) => vec![state.version],
            _ => state.notes[request].clone(),
        };
        let now_ms = Self::now_ms(state);
        let life_s = now_ms.div_euclid(1000) + i64::from(self.ttl_ticks);
        for settled_key in settled {
            let Some(record) = state.records[usize::from(settled_key)].as_mut() else {
                continue;
            };
            let live = !Self::product_record(settled_key, record).is_expired(now_ms);
            // The owner check, then the fence: the record's token names this request.
            if live && record.status == Status::InProgress && usize::from(record.token.0) == request
            {
                record.status = Status::Completed;
                record.result = Some(effect);
                record.expires_at_s = life_s;
            }
        }
        state.requests[request] = Phase::Settled { key, token };
    }
}

impl Interceptor {
    /// A RESPONSE reads the request's claims in progress (the owner check: the token names it).
    fn unknown_read(&self, state: &mut State, request: usize, reader: usize) -> Option<()> {
        let Phase::Passed { token: leg, .. } = state.requests[request] else {
            return None;
        };
        let now_ms = Self::now_ms(state);
        let read = state.notes[request]
            .iter()
            .filter_map(|&key| {
                let record = state.records[usize::from(key)].as_ref()?;
                let live = !Self::product_record(key, record).is_expired(now_ms);
                (live
                    && record.status == Status::InProgress
                    && usize::from(record.token.0) == request)
                    .then_some((key, record.token, record.lease_until_ms))
            })
            .collect();
        state.responses[reader] = Some((request, leg, read));
        Some(())
    }

    /// The RESPONSE settles what it read as outcome unknown: takes each claim under a token of its
    /// own (fenced by the token and lease it read), then settles under that token; it announces
    /// each call whose settle applied.
    fn unknown_settle(&self, state: &mut State, reader: usize) -> Option<()> {
        let (request, leg, read) = state.responses[reader].take()?;
        let now_ms = Self::now_ms(state);
        for (key, token, lease) in read {
            let held = Self::held_by(state, key, token);
            let record = state.records[usize::from(key)].as_mut()?;
            let settled = match self.bug {
                Some(Bug::SettlesUnderTheReadToken) => {
                    // The store answers a settle met already settled under its token as a retry.
                    let retried = record.unknown
                        && record.token == token
                        && !Self::product_record(key, record).is_expired(now_ms);
                    held || retried
                }
                _ => held && record.lease_until_ms == lease,
            };
            if !settled {
                continue;
            }
            if self.bug != Some(Bug::SettlesUnderTheReadToken) {
                state.next_serial += 1;
                record.token = (u8::try_from(request).unwrap(), state.next_serial);
            }
            record.status = Status::Completed;
            record.unknown = true;
            record.result = None;
            state.announced.push((key, record.life));
        }
        // Its leg is answered (a stale RESPONSE of an earlier leg answers nothing now).
        if let Phase::Passed { key, token, .. } = state.requests[request]
            && token == leg
        {
            state.requests[request] = Phase::Settled { key, token };
        }
        Some(())
    }
}

impl Model for Interceptor {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            tick: 0,
            version: 0,
            records: [None, None],
            notes: Default::default(),
            lost: Default::default(),
            requests: [Phase::Pending, Phase::Pending],
            invocations_left: [self.invocations; REQUESTS],
            effects: Vec::new(),
            next_serial: 0,
            rerun_allowed: false,
            interim: Vec::new(),
            interims_left: self.interims,
            responses: [None, None],
            announced: Vec::new(),
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        if state.tick < self.ticks {
            actions.push(Action::Tick);
        }
        if state.version == 0 {
            actions.push(Action::ChangeConfig);
        }
        for (reader, read) in state.responses.iter().enumerate() {
            if read.is_some() {
                actions.push(Action::UnknownSettle { reader });
            }
        }
        for (request, phase) in state.requests.iter().enumerate() {
            match phase {
                Phase::Pending if state.invocations_left[request] > 0 => {
                    for container in 0..CONTAINERS {
                        for lost in [Lost::Nothing, Lost::ClaimAnswer, Lost::GatewayAnswer] {
                            actions.push(Action::Request {
                                request,
                                container,
                                lost,
                            });
                        }
                        if !state.lost[container].is_empty() {
                            actions.push(Action::Request {
                                request,
                                container,
                                lost: Lost::Release,
                            });
                        }
                    }
                }
                Phase::Passed { at, effect, .. } => {
                    if effect.is_none() && state.tick <= at + self.run_ticks {
                        actions.push(Action::Effect(request));
                        // One leg of the first request may answer `input_required` (bounds the
                        // model: the retry pair meets every other interleaving without it).
                        if state.interims_left > 0 && request == 0 {
                            actions.push(Action::InputRequired { request });
                        }
                    }
                    if self.unknown_outcomes {
                        for reader in 0..2 {
                            if state.responses[reader].is_none() {
                                actions.push(Action::UnknownRead { request, reader });
                            }
                        }
                    } else if effect.is_some() {
                        actions.push(Action::Response { request });
                    }
                }
                _ => {}
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        match action {
            Action::Tick => state.tick += 1,
            Action::ChangeConfig => state.version = 1,
            Action::Request {
                request,
                container,
                lost,
            } => {
                state.invocations_left[request] -= 1;
                self.request(&mut state, request, container, lost)
            }
            Action::Effect(request) => {
                let Phase::Passed { token, effect, .. } = &mut state.requests[request] else {
                    return None;
                };
                state.effects.push(*token);
                *effect = Some(u8::try_from(state.effects.len()).unwrap());
            }
            Action::Response { request } => self.response(&mut state, request),
            Action::InputRequired { request } => self.input_required(&mut state, request),
            Action::UnknownRead { request, reader } => {
                self.unknown_read(&mut state, request, reader)?
            }
            Action::UnknownSettle { reader } => self.unknown_settle(&mut state, reader)?,
        }
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("at most once", |_, s: &State| {
                s.effects.len() <= 1 || s.rerun_allowed
            }),
            Property::always("no lost result", |_, s: &State| {
                s.requests.iter().all(|p| match p {
                    Phase::Settled { key, token } => !s.records[usize::from(*key)]
                        .as_ref()
                        .is_some_and(|r| r.status == Status::InProgress && r.token == *token),
                    _ => true,
                })
            }),
            Property::always("replies come from effects", |_, s: &State| {
                s.requests.iter().all(|p| match p {
                    Phase::Answered(Some(e)) => *e >= 1 && usize::from(*e) <= s.effects.len(),
                    _ => true,
                })
            }),
            // Per call life: by the RESPONSE whose settle applied, and by no other.
            Property::always("a call left unknown is announced once", |_, s: &State| {
                let mut lives = s.announced.clone();
                lives.sort_unstable();
                lives.dedup();
                let unannounced = s.records.iter().enumerate().any(|(key, r)| {
                    r.as_ref().is_some_and(|r| {
                        r.unknown && !s.announced.contains(&(u8::try_from(key).unwrap(), r.life))
                    })
                });
                lives.len() == s.announced.len() && !unannounced
            }),
            Property::always("no interim leg holds a claim", |_, s: &State| {
                s.records
                    .iter()
                    .flatten()
                    .all(|r| r.status != Status::InProgress || !s.interim.contains(&r.token))
            }),
        ]
    }
}

fn interceptor(bug: Option<Bug>) -> Interceptor {
    Interceptor {
        ticks: std::env::var("DEDUP_MODEL_TICKS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(4),
        invocations: 3,
        run_ticks: 1,
        margin_ticks: 1,
        ttl_ticks: 9,
        unknown_outcomes: false,
        interims: 1,
        bug,
    }
}

/// The tool `at_most_once`, every target answer an unknown outcome, and each RESPONSE possibly
/// sent twice side by side.
fn unknown_outcomes(bug: Option<Bug>) -> Interceptor {
    // Smaller than the default: two RESPONSE invocations per request multiply the interleavings
    // (with 4 ticks, 3 invocations and an interim leg, 4.6 million states, two minutes).
    Interceptor {
        unknown_outcomes: true,
        invocations: 2,
        interims: 0,
        ticks: 3,
        ..interceptor(bug)
    }
}

#[test]
fn responses_sent_twice_side_by_side_announce_an_unknown_outcome_once() {
    crate::protocol_model::assert_every_property(
        unknown_outcomes(None),
        "interceptor, unknown outcomes",
    );
}

#[test]
fn a_response_settling_under_the_token_it_read_is_found_with_a_trace() {
    let found = trace(
        unknown_outcomes(Some(Bug::SettlesUnderTheReadToken)),
        "a call left unknown is announced once",
    )
    .expect("the checker must find the call announced by both RESPONSEs");
    eprintln!("{found}");
    assert!(
        found.contains("UnknownSettle { reader: 0 }")
            && found.contains("UnknownSettle { reader: 1 }"),
        "{found}"
    );
}

/// The counterexample for `property`, with the records and effects where it breaks.
fn trace(model: Interceptor, property: &'static str) -> Option<String> {
    crate::protocol_model::counterexample(model, property, |state| {
        format!(
            "tick {}: effects ran under claims {:?}; records {:?}",
            state.tick, state.effects, state.records
        )
    })
}

#[test]
fn the_interceptor_keeps_every_invariant_when_things_change_under_a_call() {
    crate::protocol_model::assert_every_property(interceptor(None), "interceptor");
}

#[test]
fn a_resumed_claim_that_keeps_its_old_token_is_found_with_a_trace() {
    let found = trace(interceptor(Some(Bug::ResumeKeepsToken)), "at most once")
        .expect("the checker must find the re-introduced resume bug");
    eprintln!("{found}");
    assert!(found.contains("ClaimAnswer"), "{found}");
}

#[test]
fn a_response_that_derives_its_key_again_is_found_with_a_trace() {
    let found = trace(interceptor(Some(Bug::ResponseDerivesKey)), "no lost result")
        .expect("the checker must find the re-introduced derived-key bug");
    eprintln!("{found}");
    assert!(found.contains("ChangeConfig"), "{found}");
}

#[test]
fn an_input_required_answer_stored_as_the_outcome_is_found_with_a_trace() {
    let found = trace(
        interceptor(Some(Bug::InterimStored)),
        "replies come from effects",
    )
    .expect("the checker must find the interim answer replayed");
    eprintln!("{found}");
    assert!(found.contains("InputRequired"), "{found}");
}
