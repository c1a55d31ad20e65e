//! The read-your-writes contract: which reconcile a write belongs to ([`WriteScope`]), and who
//! is told when the cache has caught up with it ([`WriteObserver`]).
//!
//! A controller runs each reconcile inside a [`WriteScope`] naming its key and the
//! controller's observer. The writing client (the facade's `Client`) reads the scope
//! ([`WriteScope::current`]) and records each successful write with the cache's write
//! tracker (rudder-cache), which tells the observer [`written`](WriteObserver::written) now
//! and [`reached`](WriteObserver::reached) once an informer has delivered that write (or a
//! newer state of the object). The controller holds the key until every write of its last
//! reconcile is reached, so no reconcile runs on a cache older than the controller's own
//! last write.
//!
//! ```
//! use std::sync::{Arc, Mutex};
//! use std::time::Duration;
//! use rudder_core::writes::{ObjectRef, WriteObserver, WriteScope};
//! use rudder_core::Request;
//!
//! #[derive(Default)]
//! struct Count(Mutex<usize>);
//!
//! impl WriteObserver for Count {
//!     fn written(&self, _key: &Request, _object: &ObjectRef) {
//!         *self.0.lock().unwrap() += 1;
//!     }
//!     fn reached(&self, _key: &Request, _object: &ObjectRef) {
//!         *self.0.lock().unwrap() -= 1;
//!     }
//! }
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let observer = Arc::new(Count::default());
//! let scope = WriteScope::new(observer.clone(), Request::namespaced("ns", "a"), Duration::from_secs(5));
//! let key = scope.run(async {
//!     // What a writing client does after a successful write.
//!     let scope = WriteScope::current().expect("inside a reconcile");
//!     let child = ObjectRef::new("", "configmaps", Some("ns"), "a-child");
//!     scope.observer().written(scope.key(), &child);
//!     scope.key().clone()
//! }).await;
//! assert_eq!(key.name(), "a");
//! assert_eq!(*observer.0.lock().unwrap(), 1);
//! assert!(WriteScope::current().is_none(), "outside the reconcile there is no scope");
//! # });
//! ```

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::Request;

/// An object's identity across its API versions: its API group (`""` for the core group),
/// its resource (the plural, e.g. `configmaps`), its namespace and its name. Two versions of
/// one kind (`v1` and `v1beta1`) share a resourceVersion sequence, so they are one object.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectRef {
    /// The API group, `""` for the core group.
    pub group: String,
    /// The resource, the plural name (`configmaps`).
    pub resource: String,
    /// The namespace, `None` for cluster-scoped objects.
    pub namespace: Option<String>,
    /// The name.
    pub name: String,
}

impl ObjectRef {
    /// The object `namespace/name` of `resource` in `group`.
    pub fn new(
        group: impl Into<String>,
        resource: impl Into<String>,
        namespace: Option<&str>,
        name: impl Into<String>,
    ) -> Self {
        Self {
            group: group.into(),
            resource: resource.into(),
            namespace: namespace.map(str::to_owned),
            name: name.into(),
        }
    }
}

impl fmt::Display for ObjectRef {
    /// `configmaps/ns/name`, `deployments.apps/ns/name`, `nodes/name`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.resource)?;
        if !self.group.is_empty() {
            write!(f, ".{}", self.group)?;
        }
        if let Some(ns) = &self.namespace {
            write!(f, "/{ns}")?;
        }
        write!(f, "/{}", self.name)
    }
}

impl fmt::Debug for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ObjectRef({self})")
    }
}

/// A write a reconcile of `key` made: the object and the resourceVersion it left. What a
/// sharded controller hands over with a shard (its recent writes), so that the shard's next
/// owner holds each key until its own cache has them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecentWrite {
    /// The key whose reconcile wrote.
    pub key: Request,
    /// The object written.
    pub object: ObjectRef,
    /// The resourceVersion the write left.
    pub resource_version: String,
}

/// Told about the writes made while reconciling a key, and when the cache has reached each:
/// a controller, which holds a key back until the cache has caught up with it.
///
/// Both calls come from the cache's write tracker, in the order it decided them under its
/// lock but made after releasing it, in order for one (key, object): `written` first, then
/// at most one `reached` per `written` (also when the tracker forgets a write never
/// delivered, past its retention, which is longer than any waiting key's bound). They must
/// be quick. They may call back into the tracker: what such a call decides is told after
/// the call being made returns.
pub trait WriteObserver: Send + Sync {
    /// `object` was written while reconciling `key`, and the cache has not seen it yet.
    fn written(&self, key: &Request, object: &ObjectRef);

    /// The cache has reached the write of `object` made while reconciling `key`: it holds
    /// that version or a newer state of the object (for a delete: no longer the deleted
    /// object).
    fn reached(&self, key: &Request, object: &ObjectRef);

    /// Every write of `object` made while reconciling `key` that left `resource_version`,
    /// whether or not the cache has it already (called before [`written`](Self::written)).
    /// Nothing by default; a sharded controller keeps its recent ones, to hand them over with
    /// a shard so that the next owner waits for its own cache to reach them.
    fn wrote(&self, key: &Request, object: &ObjectRef, resource_version: &str) {
        let _ = (key, object, resource_version);
    }
}

/// The reconcile a write belongs to: the key being reconciled and the observer to tell. The
/// controller sets it around each reconcile ([`run`](Self::run)); writing clients read it
/// ([`current`](Self::current)). It is a task-local: writes made in tasks the reconcile
/// spawns are outside it (and not waited for).
#[derive(Clone)]
pub struct WriteScope {
    observer: Arc<dyn WriteObserver>,
    key: Request,
    wait: Duration,
}

tokio::task_local! {
    static SCOPE: WriteScope;
}

impl WriteScope {
    /// The scope of a reconcile of `key`, whose writes `observer` is told about; reads inside
    /// it wait at most `wait` for the cache to reach a write still pending.
    pub fn new(observer: Arc<dyn WriteObserver>, key: Request, wait: Duration) -> Self {
        Self {
            observer,
            key,
            wait,
        }
    }

    /// The scope the current task runs in, if it runs inside a reconcile.
    pub fn current() -> Option<WriteScope> {
        SCOPE.try_with(Clone::clone).ok()
    }

    /// Runs `future` inside this scope.
    pub async fn run<F: Future>(self, future: F) -> F::Output {
        SCOPE.scope(self, future).await
    }

    /// The key being reconciled.
    pub fn key(&self) -> &Request {
        &self.key
    }

    /// The observer of the reconcile's writes.
    pub fn observer(&self) -> &Arc<dyn WriteObserver> {
        &self.observer
    }

    /// How long a read inside the reconcile waits for the cache to reach a pending write.
    pub fn wait(&self) -> Duration {
        self.wait
    }

    /// Whether `self` and `other` tell the same observer.
    pub fn same_observer(&self, other: &Arc<dyn WriteObserver>) -> bool {
        Arc::ptr_eq(&self.observer, other)
    }
}

impl fmt::Debug for WriteScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WriteScope")
            .field("key", &self.key)
            .field("wait", &self.wait)
            .finish_non_exhaustive()
    }
}
