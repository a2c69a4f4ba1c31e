//! Settling a call as outcome unknown, and who announces it: the writer whose settle applied, and
//! no other. Three writers can settle one claim so: the invocation that ran the tool, an
//! interceptor RESPONSE (which the Gateway may send twice, side by side), and the sweep (two of
//! which may list one claim). Whoever does not hold the claim by a token of its own takes it
//! under one first ([`take_and_settle`]): of two writers that read the same claim, only the one
//! whose hand-over applied goes on, so a second settle never meets the first as a retry of its
//! own would, and the call is announced once.
//!
//! Which invocation settled which calls is counted per invocation (task-local), not per
//! function: a handler that serves invocations side by side (the in-process guard's host, the
//! soak) would otherwise credit one invocation's settlement to another finishing meanwhile.

use std::cell::RefCell;
use std::future::Future;

use tokio::time::Instant;

use super::{Executor, Settling, within};
use crate::store::{LeaseToken, Record, Status, Store, StoreError};

/// How a writer holds the claim it settles as outcome unknown.
pub(super) enum Holding<'a> {
    /// By the token its own claim returned: no one else was told it.
    Own(&'a LeaseToken),
    /// By having read the record (an interceptor RESPONSE): taken under the token given first.
    Read(&'a Record, LeaseToken),
}

impl<S: Store> Executor<S> {
    /// Settles the call as outcome unknown, and notes it for this invocation to announce
    /// ([`counted`]) if this write is what settled it ([`settle_own`]). A write
    /// that did not apply leaves the claim to the sweep, which settles and announces it once its
    /// lease ends.
    pub(super) async fn settle_unknown(
        &self,
        call: Settling<'_>,
        holding: Holding<'_>,
        end: Instant,
    ) {
        tracing::warn!(
            key = call.key,
            "the side effect may have happened and the tool is at_most_once: the call is settled \
             as outcome unknown until an operator settles it (dedup settle)"
        );
        let expires_at_s = self.expiry_from(call.policy_name, self.store.now_ms(), None);
        let by = Some(self.answer_by(end));
        let settled = match holding {
            Holding::Own(token) => {
                settle_own(&*self.store, call.key, token, expires_at_s, by).await
            }
            Holding::Read(record, mine) => {
                take_and_settle(&*self.store, record, mine, expires_at_s, by).await
            }
        };
        match settled {
            Ok(()) => note(call.key, call.tool),
            // Settled, released or taken over meanwhile: whoever did it answers for it.
            Err(StoreError::LeaseLost) => {}
            Err(e) => tracing::warn!(error = %e, "could not settle the call as outcome unknown; \
                 its claim, taken at_most_once, is settled by the sweep once its lease ends"),
        }
    }
}

/// A call an invocation settled as outcome unknown: what its announcement names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SettledUnknown {
    pub(crate) key: String,
    pub(crate) tool: String,
}

tokio::task_local! {
    static SETTLED_UNKNOWN: RefCell<Vec<SettledUnknown>>;
}

/// Runs `invocation`, collecting the calls it settled as outcome unknown. The invocation comes
/// boxed: a call's future is large, and each wrapper that held it by value would reserve its size
/// again on the polling thread's stack (a debug build's soak overflowed a worker's 2 MiB).
pub(crate) async fn counted<T>(
    invocation: std::pin::Pin<Box<impl Future<Output = T>>>,
) -> (T, Vec<SettledUnknown>) {
    SETTLED_UNKNOWN
        .scope(RefCell::new(Vec::new()), async {
            let out = invocation.await;
            (out, SETTLED_UNKNOWN.with(|settled| settled.take()))
        })
        .await
}

/// Notes `key` (a call of `tool`) as settled as outcome unknown by the invocation running, for
/// it to announce (nothing outside [`counted`]: nothing announces there).
pub(super) fn note(key: &str, tool: &str) {
    let _ = SETTLED_UNKNOWN.try_with(|settled| {
        settled.borrow_mut().push(SettledUnknown {
            key: key.to_string(),
            tool: tool.to_string(),
        })
    });
}

/// Settles the claim `token` holds as outcome unknown (each store request given up at `by`, if
/// set). `Ok` when this write settled it, so its writer announces the call: applied, or applied
/// with its answers lost (read back), or unknowable (the read failed too: announced in case, since
/// a second announcement is an operator's duplicate ticket and a missing one an unknown charge
/// nobody hears of). `Err` when it did not apply: settled, released or taken meanwhile
/// ([`StoreError::LeaseLost`]: whoever did it answers for it), or refused, leaving the claim to
/// the sweep once its lease ends.
pub(crate) async fn settle_own<S: Store>(
    store: &S,
    key: &str,
    token: &LeaseToken,
    expires_at_s: i64,
    by: Option<Instant>,
) -> Result<(), StoreError> {
    match within(by, store.settle_unknown(key, token, expires_at_s)).await {
        Err(e) if !matches!(e, StoreError::LeaseLost) => match within(by, store.get(key)).await {
            // Settled so under this token: this write applied, its answer lost.
            Ok(Some(now))
                if now.status == Status::Completed
                    && now.outcome_unknown
                    && now.token == *token =>
            {
                Ok(())
            }
            Ok(_) => Err(e),
            Err(read) => {
                tracing::warn!(error = %e, read = %read, key, "could not tell whether the \
                         call was settled as outcome unknown: announced in case");
                Ok(())
            }
        },
        settled => settled,
    }
}

/// Settles `record`'s claim as outcome unknown for a writer that read it rather than took it (the
/// sweep, an interceptor RESPONSE): takes the claim under a token of its own, `mine`, first, fenced by the
/// token and lease it read, then settles under that token ([`settle_own`]). A hand-over whose
/// answers were lost is read back: if it applied, the writer goes on under its token, so the claim
/// is not left under a token nobody settles; if that cannot be told, the claim waits for the
/// sweep (under whichever token holds it), and nothing is announced yet.
pub(crate) async fn take_and_settle<S: Store>(
    store: &S,
    record: &Record,
    mine: LeaseToken,
    expires_at_s: i64,
    by: Option<Instant>,
) -> Result<(), StoreError> {
    let handed = store.hand_over(
        &record.key,
        &record.token,
        record.lease_until_ms,
        &mine,
        record.lease_until_ms,
        record.expires_at_s,
    );
    if let Err(e) = within(by, handed).await {
        let applied = matches!(
            within(by, store.get(&record.key)).await,
            Ok(Some(now)) if now.token == mine && now.status == Status::InProgress
        );
        if !applied {
            return Err(e);
        }
    }
    settle_own(store, &record.key, &mine, expires_at_s, by).await
}
