//! How long a claim is held: the lease arithmetic's constants, the executor's timing settings, and
//! how a side effect's lease is kept.

use std::time::Duration;

use crate::decide::Mode;

/// The longest a Lambda function can run (its maximum timeout): the bound of a tool whose own
/// timeout is not known, and of this function's own deadline.
pub const MAX_TOOL_TIMEOUT: Duration = Duration::from_secs(900);

/// A lease ends this long after the later of the tool's timeout and the Lambda deadline: the
/// bound on clock skew between the containers that compare it (Lambda hosts keep time with the
/// Amazon Time Sync Engine, well within a second).
pub const LEASE_MARGIN: Duration = Duration::from_secs(5);

/// How late a tool Lambda may start after it is invoked, on top of its own timeout: its init
/// phase, which runs outside the timeout (Lambda cuts it at 10 s), and our retries of a throttled
/// invoke (under 1 s).
pub const TOOL_START_ALLOWANCE: Duration = Duration::from_secs(11);

/// The longest lease any claim can take: Lambda's maximum run time, the start allowance and the
/// margin. A completed call's time to live may not be shorter, so it outlives any lease.
pub const LONGEST_LEASE: Duration = Duration::from_secs(
    MAX_TOOL_TIMEOUT.as_secs() + TOOL_START_ALLOWANCE.as_secs() + LEASE_MARGIN.as_secs(),
);

/// How long a completed call replays by default (a day).
pub(crate) const DEFAULT_TTL: Duration = Duration::from_secs(86_400);
/// How long a repeat waits by default for an identical call in flight.
pub(crate) const DEFAULT_WAIT: Duration = Duration::from_secs(10);

/// The executor's own knobs (mode, retention, waiting, cache, timing). The handler builds them
/// from the configuration; [`Settings::default`] holds the built-in values. How a call is scoped
/// belongs to the doors ([`crate::handler::DoorSettings`]).
#[derive(Debug, Clone)]
pub struct Settings {
    /// `DEDUP_MODE`: enforce, shadow (key and report, never replay) or off.
    pub mode: Mode,
    /// How long a completed result is replayed (`DEDUP_TTL_SECONDS`).
    pub ttl: Duration,
    /// How long a repeat waits for an identical call in flight (`DEDUP_WAIT_MS`).
    pub wait: Duration,
    /// Completed records the container keeps (`DEDUP_LOCAL_CACHE_ITEMS`, 0: no cache).
    pub local_cache_items: usize,
    /// The lease ends this long after the later of the Lambda deadline and the tool's own
    /// timeout (clock skew between containers).
    pub lease_margin: Duration,
    /// Time kept back before the deadline to store the result: the tool's timeout ends this
    /// long (plus `reply_margin`) before the deadline, so a completion and its retries finish
    /// while the invocation still lives.
    pub completion_reserve: Duration,
    /// Time kept back before the deadline to write the answer: every store call gives up then.
    pub reply_margin: Duration,
    /// The budget of an invocation without a deadline (`dedup replay`, tests), and the guard's
    /// lease (renewed while its side effect runs).
    pub default_budget: Duration,
    /// A claim that took longer than this (store retries) has its lease moved forward just
    /// before the side effect starts, so the lease covers the side effect from its start.
    pub slow_claim: Duration,
    /// How long the claims whose answers were lost may take to release before a call's own claim
    /// (all of them together); past it they wait for the next call.
    pub orphan_release_within: Duration,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            mode: Mode::Enforce,
            ttl: DEFAULT_TTL,
            wait: DEFAULT_WAIT,
            local_cache_items: 0,
            lease_margin: LEASE_MARGIN,
            completion_reserve: Duration::from_millis(2500),
            reply_margin: Duration::from_millis(200),
            default_budget: Duration::from_secs(60),
            slow_claim: Duration::from_millis(500),
            orphan_release_within: Duration::from_millis(100),
        }
    }
}

/// How long the side effect can run, and so how its claim's lease is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lease {
    /// A side effect that stops by itself within `max_run_time` of being started (a tool
    /// Lambda's own timeout and start allowance; zero for one that cannot outlive the
    /// invocation). The lease is set once, to the later of that and the deadline, plus the margin.
    Covering {
        /// Longest the side effect can run once started.
        max_run_time: Duration,
    },
    /// An in-process side effect with no limit of its own (the library guard): the lease is
    /// `length` plus the margin, renewed every third of `length` while the side effect runs, so
    /// a long side effect keeps its key and a dead process frees it within one lease.
    Renewed {
        /// One lease's length before the margin.
        length: Duration,
    },
}
