//! Which invocation settled a call as outcome unknown, so that each such call is announced by the
//! invocation that settled it, and by no other. A count per invocation (task-local), not per
//! executor: a handler that serves invocations side by side (the in-process guard's host, the
//! soak) would otherwise credit one invocation's settlement to another that happened to finish
//! at the same time, and announce the wrong call or the same call twice.

use std::cell::Cell;
use std::future::Future;

tokio::task_local! {
    static SETTLED_UNKNOWN: Cell<u64>;
}

/// Runs `invocation`, counting the calls it settled as outcome unknown. The invocation comes
/// boxed: a call's future is large, and each wrapper that held it by value would reserve its size
/// again on the polling thread's stack (a debug build's soak overflowed a worker's 2 MiB).
pub(crate) async fn counted<T>(
    invocation: std::pin::Pin<Box<impl Future<Output = T>>>,
) -> (T, u64) {
    SETTLED_UNKNOWN
        .scope(Cell::new(0), async {
            let out = invocation.await;
            (out, SETTLED_UNKNOWN.with(Cell::get))
        })
        .await
}

/// Counts one call settled as outcome unknown by the invocation running (none outside
/// [`counted`]: nothing announces there).
pub(super) fn count() {
    let _ = SETTLED_UNKNOWN.try_with(|n| n.set(n.get() + 1));
}
