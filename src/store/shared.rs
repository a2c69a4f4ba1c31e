//! A store shared by several owners.

use std::future::Future;

use super::{
    ClaimOutcome, ClaimRequest, Completion, LeaseToken, Record, RecordFilter, Records,
    RequestCounts, SettleAs, Store, StoreError,
};

/// One store shared by several owners (two handlers standing for two containers of one function,
/// or a handler and an operator's task): each call goes to the one store.
impl<S: Store> Store for std::sync::Arc<S> {
    fn claim(
        &self,
        req: ClaimRequest<'_>,
    ) -> impl Future<Output = Result<ClaimOutcome, StoreError>> + Send {
        (**self).claim(req)
    }
    fn complete(
        &self,
        key: &str,
        token: &LeaseToken,
        result: &[u8],
        expires_at_s: i64,
    ) -> impl Future<Output = Result<Completion, StoreError>> + Send {
        (**self).complete(key, token, result, expires_at_s)
    }
    fn extend_lease(
        &self,
        key: &str,
        token: &LeaseToken,
        lease_until_ms: i64,
        expires_at_s: i64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        (**self).extend_lease(key, token, lease_until_ms, expires_at_s)
    }
    fn hand_over(
        &self,
        key: &str,
        from: &LeaseToken,
        from_lease_until_ms: i64,
        to: &LeaseToken,
        lease_until_ms: i64,
        expires_at_s: i64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        (**self).hand_over(
            key,
            from,
            from_lease_until_ms,
            to,
            lease_until_ms,
            expires_at_s,
        )
    }
    fn release(
        &self,
        key: &str,
        token: &LeaseToken,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        (**self).release(key, token)
    }
    fn put(
        &self,
        key: &str,
        label: &str,
        value: &[u8],
        expires_at_s: i64,
        replacing: Option<&LeaseToken>,
    ) -> impl Future<Output = Result<LeaseToken, StoreError>> + Send {
        (**self).put(key, label, value, expires_at_s, replacing)
    }
    fn settle_unknown(
        &self,
        key: &str,
        token: &LeaseToken,
        expires_at_s: i64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        (**self).settle_unknown(key, token, expires_at_s)
    }
    fn get(&self, key: &str) -> impl Future<Output = Result<Option<Record>, StoreError>> + Send {
        (**self).get(key)
    }
    fn now_ms(&self) -> i64 {
        (**self).now_ms()
    }
    fn requests(&self) -> RequestCounts {
        (**self).requests()
    }
}

/// An operator's reads and settlements on a shared store, so a handler on one can sweep and
/// serve (both need [`Records`]).
impl<S: Records> Records for std::sync::Arc<S> {
    fn list(
        &self,
        filter: &RecordFilter,
    ) -> impl Future<Output = Result<Vec<Record>, StoreError>> + Send {
        (**self).list(filter)
    }
    fn settle(
        &self,
        key: &str,
        token: &LeaseToken,
        settle_as: SettleAs<'_>,
        expires_at_s: i64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        (**self).settle(key, token, settle_as, expires_at_s)
    }
    fn evict(
        &self,
        key: &str,
        token: &LeaseToken,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        (**self).evict(key, token)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::store::{MemoryStore, RecordFilter, Records, Store};

    /// Two owners of one store see one table: a claim through one is listed through the other.
    #[tokio::test]
    async fn a_shared_store_is_one_table_for_every_owner() {
        let store = Arc::new(MemoryStore::new());
        let other = store.clone();
        let now = store.now_ms();
        let req = crate::store::ClaimRequest {
            key: "0123456789abcdef0123456789abcdef",
            fingerprint: "f",
            tool: "charge_card",
            lease_until_ms: now + 60_000,
            expires_at_s: now / 1000 + 3_600,
            owner: None,
            at_most_once: false,
            on_failure: Default::default(),
            path_digests: None,
            about: Default::default(),
        };
        store.claim(req).await.unwrap();
        let listed = other.list(&RecordFilter::default()).await.unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(other.requests().total(), store.requests().total());
    }
}
