//! Errors: one enum per entry point (indexes, waiting for sync, the cache reader).

use std::time::Duration;

/// An error from [`Store`](crate::Store) index operations.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IndexError {
    /// A lookup named an index that was never added; retrying does not help.
    #[error("no index named {name:?}")]
    Unknown {
        /// The index asked for.
        name: String,
    },
    /// An index with this name is already there (or the name is the built-in `namespace`);
    /// retrying does not help.
    #[error("an index named {name:?} already exists")]
    Exists {
        /// The index name.
        name: String,
    },
    /// The index function panicked on an object already in the store, so the index was not
    /// added (the store is unchanged). Retrying does not help until the function is fixed.
    #[error("index function {name:?} panicked on {object}: {message}")]
    Panicked {
        /// The index name.
        name: String,
        /// The object it panicked on, as `namespace/name`.
        object: String,
        /// The panic's message.
        message: String,
    },
}

/// An error from [`Informer::wait_for_sync`](crate::Informer::wait_for_sync).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SyncError {
    /// The first list did not finish in time: the API server is slow or unreachable, or the
    /// resource does not exist (the informer's log says which). The informer keeps trying,
    /// so waiting again may succeed.
    #[error("informer for {resource} did not sync within {timeout:?}")]
    Timeout {
        /// What the informer watches.
        resource: String,
        /// How long was waited.
        timeout: Duration,
    },
    /// The API server refused the informer's list or watch (401 Unauthorized, 403
    /// Forbidden) before its first list was stored: the identity the client acts as may not
    /// list and watch the resource there. Waiting again helps only once its RBAC grants
    /// `list` and `watch` (the informer keeps retrying in the background, with backoff).
    #[error("the API server refused the list or watch of the informer for {resource}")]
    Refused {
        /// What the informer watches.
        resource: String,
        /// The API server's answer.
        #[source]
        refusal: crate::Refusal,
    },
    /// The informer was stopped before it synced; retrying does not help.
    #[error("informer for {resource} stopped before it synced")]
    Stopped {
        /// What the informer watched.
        resource: String,
    },
    /// The informer's watch task panicked (see
    /// [`Informer::has_failed`](crate::Informer::has_failed)) and it stopped; retrying on this
    /// informer does not help, a new one (which a `Cache` starts on the next request) may.
    #[error("informer for {resource} failed: its watch task panicked")]
    Failed {
        /// What the informer watched.
        resource: String,
    },
    /// Not every informer of the cache synced in time (see [`Timeout`](Self::Timeout) for
    /// the usual causes; each informer's log says which). They keep trying.
    #[error("{unsynced} informer(s) of the cache did not sync within {timeout:?}")]
    CacheTimeout {
        /// How many had not synced.
        unsynced: usize,
        /// How long was waited.
        timeout: Duration,
    },
}

/// An error from the [`Cache`](crate::Cache) and its reader.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The reader was asked about a type that has no informer, and the cache was built with
    /// `fail_on_missing_informer`. Create the informer first (or let the reader do it).
    #[error("no informer for {resource} and the cache does not start them on demand")]
    MissingInformer {
        /// The type asked for.
        resource: String,
    },
    /// A read named a namespace that none of the type's informers covers; retrying does not
    /// help.
    #[error("namespace {namespace:?} is not cached for {resource}")]
    NotCached {
        /// The namespace asked for.
        namespace: String,
        /// The type asked for.
        resource: String,
    },
    /// The informer behind a read did not sync in time, or was stopped.
    #[error(transparent)]
    Sync(#[from] SyncError),
    /// A read named an unknown index, or an index was added twice.
    #[error(transparent)]
    Index(#[from] IndexError),
    /// The cache has been stopped; no informer can be started any more.
    #[error("the cache has been stopped")]
    Stopped,
}

/// A `Result` with the cache's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
