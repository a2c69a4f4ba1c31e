//! The claims a container wrote while every answer to them was lost
//! ([`StoreError::ClaimUnconfirmed`]): nothing ran under them, so each is released (fenced) at
//! the container's next call. The list is the container's, not a configuration's: a config
//! refresh's new executor shares it.

use std::sync::Arc;

use tokio::time::Instant;

use super::Executor;
use crate::store::{LeaseToken, Store, StoreError};

/// Orphaned claims remembered at most (each is released at the next call, so few ever wait).
const MAX_ORPHANS: usize = 256;

impl<S: Store> Executor<S> {
    /// This executor, sharing `earlier`'s list of claims whose answers were lost (a container's
    /// state, which a new configuration must not forget: each is released at the next call).
    pub(crate) fn sharing_lost_claims(mut self, earlier: &Executor<S>) -> Executor<S> {
        self.orphans = Arc::clone(&earlier.orphans);
        self
    }

    pub(super) fn remember_orphan(&self, key: &str, token: LeaseToken) {
        let mut orphans = self.orphans.lock().unwrap_or_else(|p| p.into_inner());
        if orphans.len() >= MAX_ORPHANS {
            // Past the bound every remembered claim is forgotten and waits out its lease.
            orphans.clear();
        }
        orphans.insert(token, key.to_string());
    }

    /// Releases the claims written while their answers were lost (fenced: a claim someone else
    /// took over since is left alone), within [`super::Settings::orphan_release_within`] in all: they only
    /// free keys early (each ends with its lease anyway), so they must not hold up this call. The
    /// first that fails, and every one not tried, are kept for the next call, whatever the error:
    /// a refusal now (an expired credential, a throttled table, a garbled answer) says nothing
    /// about the next call, and a forgotten claim blocks its key until its lease ends. `Err` when
    /// the store failed in a way that may pass (an outage, or no answer within the budget, which
    /// a warm container's store gives only when in trouble): the call fails closed at once, where
    /// a claim would fail the same way after its own budget (before, each lost claim cost a later
    /// call the store's whole 5 s deadline, one after the other).
    pub(super) async fn release_orphans(&self, end: Instant) -> Result<(), StoreError> {
        let pending: Vec<(LeaseToken, String)> = {
            let mut orphans = self.orphans.lock().unwrap_or_else(|p| p.into_inner());
            if orphans.is_empty() {
                return Ok(());
            }
            orphans.drain().collect()
        };
        let within = self
            .settings
            .orphan_release_within
            .min(self.until_answer(end));
        let deadline = Instant::now() + within;
        let mut pending = pending.into_iter();
        while let Some((token, key)) = pending.next() {
            let released =
                tokio::time::timeout_at(deadline, self.store.release(&key, &token)).await;
            let failed = match released {
                Ok(Ok(())) => {
                    tracing::info!("released a claim whose answers were lost");
                    continue;
                }
                Ok(Err(StoreError::LeaseLost)) => continue,
                Ok(Err(e)) => e,
                Err(_) => StoreError::Unavailable(
                    format!("no answer to releasing a lost claim within {within:?}").into(),
                ),
            };
            tracing::warn!(error = %failed, "could not release a claim whose answers were lost; trying again at the next call");
            self.remember_orphan(&key, token);
            for (token, key) in pending {
                self.remember_orphan(&key, token);
            }
            return if failed.is_retryable() {
                Err(failed)
            } else {
                Ok(())
            };
        }
        Ok(())
    }
}
