//! What an informer holds and what its sync cost: how an object's bytes are measured (the
//! store keeps each object's size and their sum), the time to its first sync; published as
//! gauges by the watch task.

use std::sync::atomic::{AtomicU64, Ordering};
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

/// When the informer started and first synced, shared by the watch task (which writes it)
/// and the handles. (The stored objects' sizes are the store's: `Store::bytes`.)
#[derive(Debug)]
pub(crate) struct Footprint {
    started: Instant,
    /// Nanoseconds from the start to the first sync, 0 before it.
    sync_nanos: AtomicU64,
}

impl Default for Footprint {
    fn default() -> Self {
        Self {
            started: Instant::now(),
            sync_nanos: AtomicU64::new(0),
        }
    }
}

impl Footprint {
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
