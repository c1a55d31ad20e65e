//! What an informer holds and what its sync cost: objects, an estimate of their bytes, the
//! time to its first sync; kept by the watch task and published as gauges.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;

/// How an informer measures one object for [`InformerStats::bytes_held`](super::InformerStats::bytes_held).
pub(crate) type Sizer<K> = fn(&K) -> usize;

/// The length of `object` serialized as JSON (serde_json's compact form, byte for byte),
/// counted without building the JSON: see [`json_length`](super::json_length) for how, and
/// why it is not the length of what was decoded.
pub(crate) fn json_size<K: Serialize>(object: &K) -> usize {
    super::json_length::json_length(object)
}

/// The running totals, shared by the watch task (which writes them) and the handles.
#[derive(Debug)]
pub(crate) struct Footprint {
    /// The sum of the stored objects' sizes.
    bytes: AtomicI64,
    started: Instant,
    /// Nanoseconds from the start to the first sync, 0 before it.
    sync_nanos: AtomicU64,
}

impl Default for Footprint {
    fn default() -> Self {
        Self {
            bytes: AtomicI64::new(0),
            started: Instant::now(),
            sync_nanos: AtomicU64::new(0),
        }
    }
}

impl Footprint {
    /// Adds `added` bytes and takes `removed` away.
    pub(crate) fn change(&self, added: usize, removed: usize) {
        let delta =
            i64::try_from(added).unwrap_or(i64::MAX) - i64::try_from(removed).unwrap_or(i64::MAX);
        self.bytes.fetch_add(delta, Ordering::Relaxed);
    }

    pub(crate) fn bytes(&self) -> u64 {
        u64::try_from(self.bytes.load(Ordering::Relaxed)).unwrap_or(0)
    }

    /// Records the first sync, now.
    pub(crate) fn synced(&self) {
        let nanos = u64::try_from(self.started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.sync_nanos.store(nanos.max(1), Ordering::Relaxed);
    }

    pub(crate) fn sync_duration(&self) -> Option<Duration> {
        match self.sync_nanos.load(Ordering::Relaxed) {
            0 => None,
            nanos => Some(Duration::from_nanos(nanos)),
        }
    }
}

/// How often the watch task publishes the gauges between lists.
pub(crate) const PUBLISH_EVERY: Duration = Duration::from_secs(1);
