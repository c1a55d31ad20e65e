//! How the engine lists: streaming lists (a watch with `sendInitialEvents=true`) first, and
//! paginated lists when the server refuses them, remembered per informer and retried later.

use super::wire::WireFormat;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// How an informer gets its first list, and every relist after a watch that cannot resume.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ListStrategy {
    /// A streaming list (KEP-3157, `WatchList`): one watch with `sendInitialEvents=true` that
    /// sends the current objects as events, marks their end with a bookmark annotated
    /// `k8s.io/initial-events-end`, and goes on watching. The server never builds the whole
    /// list in one answer, nor the client holds one. The default: when the server refuses it
    /// (a `400` or `422` answer, as Kubernetes before 1.34 gives with the `WatchList` feature
    /// off) or sends no end-of-initial-events bookmark and then nothing for
    /// [`InformerBuilder::initial_events_bound`](crate::InformerBuilder::initial_events_bound)
    /// (a server too old to know the parameter), the informer lists with
    /// [`Paginated`](Self::Paginated) instead, and tries streaming again at the first relist
    /// after [`InformerBuilder::streaming_retry`](crate::InformerBuilder::streaming_retry).
    #[default]
    Streaming,
    /// A paginated LIST (`limit`/`continue`, 500 objects a page), then a watch from the list's
    /// resourceVersion: what every server serves.
    Paginated,
}

impl ListStrategy {
    /// The strategy's name in logs and metrics: `streaming` or `paginated`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Streaming => "streaming",
            Self::Paginated => "paginated",
        }
    }
}

/// The default of [`InformerBuilder::initial_events_bound`](crate::InformerBuilder::initial_events_bound).
pub const DEFAULT_INITIAL_EVENTS_BOUND: Duration = Duration::from_secs(30);

/// The default of [`InformerBuilder::streaming_retry`](crate::InformerBuilder::streaming_retry).
pub const DEFAULT_STREAMING_RETRY: Duration = Duration::from_secs(10 * 60);

/// What an informer lists with now, shared between its watch stream and its handles.
#[derive(Debug, Default)]
pub(crate) struct ListMode {
    /// Set while the informer lists with [`ListStrategy::Paginated`].
    paginated: AtomicBool,
    /// How many times the informer fell back from streaming to paginated lists.
    pub(crate) fallbacks: AtomicU64,
    /// Set while the server answers 404 for the resource (its CRD not installed yet, or
    /// deleted).
    pub(crate) not_served: AtomicBool,
    /// Set while the engine lists and watches in protobuf.
    pub(crate) protobuf: AtomicBool,
}

impl ListMode {
    pub(crate) fn current(&self) -> ListStrategy {
        if self.paginated.load(Ordering::Acquire) {
            ListStrategy::Paginated
        } else {
            ListStrategy::Streaming
        }
    }

    pub(crate) fn fallbacks(&self) -> u64 {
        self.fallbacks.load(Ordering::Relaxed)
    }

    /// Whether the server serves the resource, as far as the last answer said.
    pub(crate) fn served(&self) -> bool {
        !self.not_served.load(Ordering::Acquire)
    }

    /// The wire format the engine reads now.
    pub(crate) fn wire(&self) -> WireFormat {
        if self.protobuf.load(Ordering::Acquire) {
            WireFormat::Protobuf
        } else {
            WireFormat::Json
        }
    }

    pub(crate) fn set(&self, strategy: ListStrategy) {
        self.paginated
            .store(strategy == ListStrategy::Paginated, Ordering::Release);
    }
}
