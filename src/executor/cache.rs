//! The warm container's cache of completed records.

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};

use crate::store::{Record, Status};

/// Warm-container LRU of completed records (`DEDUP_LOCAL_CACHE_ITEMS`). Only completed records
/// are cached: they never change until they expire, and expiry is checked on every hit.
#[derive(Debug)]
pub(super) struct RecordCache {
    inner: Mutex<lru::LruCache<String, CacheEntry>>,
}

#[derive(Debug, Clone)]
pub(super) struct CacheEntry {
    pub(super) result: Arc<[u8]>,
    pub(super) fingerprint: String,
    /// When the call first ran (its claim was taken), epoch ms.
    pub(super) first_ran_ms: i64,
    expires_at_s: i64,
}

impl RecordCache {
    /// `None` for a capacity of 0 (the cache is off).
    pub(super) fn new(capacity: usize) -> Option<RecordCache> {
        NonZeroUsize::new(capacity).map(|capacity| RecordCache {
            inner: Mutex::new(lru::LruCache::new(capacity)),
        })
    }

    pub(super) fn get(&self, key: &str, now_ms: i64) -> Option<CacheEntry> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        match inner.get(key) {
            Some(entry) if entry.expires_at_s >= now_ms.div_euclid(1000) => Some(entry.clone()),
            Some(_) => {
                inner.pop(key);
                None
            }
            None => None,
        }
    }

    pub(super) fn put(&self, key: &str, record: &Record, now_ms: i64) {
        let (Status::Completed, Some(result)) = (record.status, &record.result) else {
            return;
        };
        if record.is_expired(now_ms) {
            return;
        }
        self.insert(
            key,
            result,
            &record.fingerprint,
            record.expires_at_s,
            record.created_at_ms,
        );
    }

    /// Caches a completed result of a call that first ran at `first_ran_ms`.
    pub(super) fn insert(
        &self,
        key: &str,
        result: &[u8],
        fingerprint: &str,
        expires_at_s: i64,
        first_ran_ms: i64,
    ) {
        let entry = CacheEntry {
            result: Arc::from(result),
            fingerprint: fingerprint.to_string(),
            first_ran_ms,
            expires_at_s,
        };
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .put(key.to_string(), entry);
    }
}
