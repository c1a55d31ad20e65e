//! [`WriteTracker`]: the writes this process made that the cache has not delivered yet, per
//! object, and who waits for each (read-your-writes).
//!
//! A writing client records each successful write made inside a reconcile
//! ([`WriteTracker::record`]) with the resourceVersion the server returned (for a delete, the
//! uid). Every informer of the cache tells the tracker what it stored or removed, and the
//! tracker marks a write *reached* once the cache holds that version or a newer state of the
//! object, and tells the reconcile's [`WriteObserver`] (the controller, which holds the key
//! until then). Reads wait for pending writes of what they read
//! ([`wait_for_object`](WriteTracker::wait_for_object),
//! [`wait_for_resource`](WriteTracker::wait_for_resource)).
//!
//! "Newer" depends on the server. From Kubernetes 1.35 resourceVersions are comparable
//! integers (KEP-5504): a cache holding resourceVersion 120 has reached a write of 117.
//! Before, they are opaque strings: a write is reached when the cache holds exactly the
//! version written, or the object was deleted or replaced (another uid) since; if another
//! writer changes the object again before the cache delivers the version written here (the
//! watch delivers every version, so only a relist can skip one), the write is not reached
//! and its waiters wait out their bound. The manager sets the mode from the server's
//! version as it starts ([`WriteTracker::set_comparable`]); until then it is the second.
//!
//! Observers are told outside the tracker's lock, in the order it decided under it: what a
//! call decides is queued under the lock and told after it is released, by one thread at a
//! time, so an observer may call back into the tracker (see [`WriteObserver`]).
//!
//! With nothing pending, an informer's event costs one atomic load here.

use std::cell::Cell;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, MutexGuard, PoisonError};
use std::time::Duration;

use rudder_core::Request;
use rudder_core::sync::LockExt;
use rudder_core::writes::{ObjectRef, WriteObserver, WriteScope};
use tokio::sync::Notify;
use tokio::time::Instant;

/// The least time a recorded write is kept waiting for the cache before the tracker forgets
/// it (entries are kept twice the waiting reconcile's bound, and at least this): a write whose
/// event never arrives (a watch cut off, an object the cache's selectors exclude) costs
/// memory only this long.
pub const MIN_RETENTION: Duration = Duration::from_secs(30);

/// What a write left on the server: a version of the object, or its deletion.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Written {
    /// The object as the server stored it: its resourceVersion, and its uid.
    Version {
        /// The resourceVersion the server returned.
        resource_version: String,
        /// The object's uid, if known.
        uid: Option<String>,
    },
    /// The object was deleted: it is gone on the server.
    Deleted {
        /// The uid of the deleted object, if known.
        uid: Option<String>,
    },
    /// The object's deletion started and the server answered with it (finalizers or a grace
    /// period may keep it a while, or it may be gone already): reached by that version or a
    /// newer one, as [`Written::Version`], or by its absence.
    Deleting {
        /// The resourceVersion of the object as the delete returned it.
        resource_version: String,
        /// Its uid, if known.
        uid: Option<String>,
    },
}

impl Written {
    /// The version of `meta` (an object as a write returned it): [`Written::Version`], or
    /// [`Written::Deleting`] for an object whose deletion has started (removing its last
    /// finalizer, for one, lets it go at once); `None` without a resourceVersion.
    pub fn of_meta(meta: &kube::core::ObjectMeta) -> Option<Self> {
        let resource_version = meta.resource_version.clone()?;
        let uid = meta.uid.clone();
        Some(if meta.deletion_timestamp.is_some() {
            Written::Deleting {
                resource_version,
                uid,
            }
        } else {
            Written::Version {
                resource_version,
                uid,
            }
        })
    }
}

/// What the cache holds of an object right now, as seen at the moment a write is recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cached {
    /// No informer of the cache would ever deliver the object (none for its type covers
    /// its namespace without selectors): there is nothing to wait for.
    NotCached,
    /// The cache watches the object's type there but holds no such object.
    Absent,
    /// The cache holds the object at this version.
    Present {
        /// Its resourceVersion.
        resource_version: Option<String>,
        /// Its uid.
        uid: Option<String>,
    },
}

/// What an informer stored or removed.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Seen<'a> {
    /// The informer stores this version.
    Present {
        resource_version: Option<&'a str>,
        uid: Option<&'a str>,
    },
    /// The informer removed the object (a delete event, or a relist without it).
    Deleted { uid: Option<&'a str> },
}

/// An informer's link to its cache's tracker: the tracker, and the informer's type as writes
/// name it.
pub(crate) struct Tracked {
    pub(crate) tracker: Arc<WriteTracker>,
    pub(crate) group: String,
    pub(crate) resource: String,
}

impl Tracked {
    /// The link of an informer over `url` (an `Api`'s resource URL: `/api/v1/configmaps`,
    /// `/apis/apps/v1/namespaces/ns/deployments`) to `tracker`.
    pub(crate) fn new(tracker: Arc<WriteTracker>, url: &str) -> Self {
        let parts: Vec<&str> = url.trim_matches('/').split('/').collect();
        let group = match parts.first() {
            Some(&"apis") => parts.get(1).copied().unwrap_or_default(),
            _ => "",
        };
        let resource = parts.last().copied().unwrap_or_default();
        Self {
            tracker,
            group: group.to_owned(),
            resource: resource.to_owned(),
        }
    }

    pub(crate) fn observed(&self, namespace: Option<&str>, name: &str, seen: Seen<'_>) {
        self.tracker
            .observed(&self.group, &self.resource, namespace, name, seen);
    }
}

/// The writes pending per object; one per [`Cache`](crate::Cache), shared by its informers
/// and by every writing client of it. Cheap to share (`Arc`).
pub struct WriteTracker {
    state: std::sync::Mutex<State>,
    /// Entries plus echoes: when zero, informers skip the tracker.
    tracked: AtomicUsize,
    comparable: AtomicBool,
    /// Woken whenever a pending write is reached or forgotten.
    changed: Notify,
    /// Woken whenever notices were told ([`State::told`] moved).
    told: Condvar,
}

#[derive(Default)]
struct State {
    pending: HashMap<ObjectRef, Pending>,
    echoes: HashMap<ObjectRef, Echo>,
    next_sweep: Option<Instant>,
    /// What to tell observers, in the order decided under the lock; told once it is released.
    outbox: VecDeque<Notice>,
    /// Whether a thread is telling the outbox's notices now (it tells all queued meanwhile).
    telling: bool,
    /// How many notices were ever queued, and told: a caller waits until its own are told.
    queued: u64,
    told: u64,
}

/// One call to make on an observer, decided under the tracker's lock.
enum Notice {
    Wrote(Arc<dyn WriteObserver>, Request, ObjectRef, String),
    Written(Arc<dyn WriteObserver>, Request, ObjectRef),
    Reached(Arc<dyn WriteObserver>, Request, ObjectRef),
}

impl Notice {
    fn tell(self) {
        match self {
            Self::Wrote(observer, key, object, resource_version) => {
                observer.wrote(&key, &object, &resource_version);
            }
            Self::Written(observer, key, object) => observer.written(&key, &object),
            Self::Reached(observer, key, object) => observer.reached(&key, &object),
        }
    }
}

thread_local! {
    /// Whether this thread is telling some tracker's observers: a call made from inside an
    /// observer never waits for notices to be told (it may be what tells them).
    static TELLING: Cell<bool> = const { Cell::new(false) };
}

struct Pending {
    written: Written,
    /// When the last write of the object was recorded.
    recorded: Instant,
    waiters: Vec<(Arc<dyn WriteObserver>, Request)>,
    expires: Instant,
}

/// The event an informer is about to deliver that is exactly a recorded write: the
/// observers that wrote it may drop it ([`WriteTracker::take_echo`]).
struct Echo {
    of: EchoOf,
    observers: Vec<Arc<dyn WriteObserver>>,
    expires: Instant,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum EchoOf {
    Version(String),
    Delete(Option<String>),
}

impl Default for WriteTracker {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for WriteTracker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteTracker")
            .field("pending", &self.pending())
            .field("comparable", &self.is_comparable())
            .finish()
    }
}

impl WriteTracker {
    /// A tracker with nothing pending, treating resourceVersions as opaque until told they
    /// compare ([`set_comparable`](Self::set_comparable)).
    pub fn new() -> Self {
        Self {
            state: std::sync::Mutex::new(State::default()),
            tracked: AtomicUsize::new(0),
            comparable: AtomicBool::new(false),
            changed: Notify::new(),
            told: Condvar::new(),
        }
    }

    /// Whether the server's resourceVersions compare as integers (Kubernetes 1.35 and
    /// later, KEP-5504): then a cache holding a newer version has reached an older write.
    pub fn set_comparable(&self, comparable: bool) {
        self.comparable.store(comparable, Ordering::Relaxed);
    }

    /// Whether resourceVersions are compared as integers ([`set_comparable`](Self::set_comparable)).
    pub fn is_comparable(&self) -> bool {
        self.comparable.load(Ordering::Relaxed)
    }

    /// How many objects have a write the cache has not reached yet.
    pub fn pending(&self) -> usize {
        self.state.lock_unpoisoned().pending.len()
    }

    /// Records that `object` was written (`written`) inside the reconcile `scope` names.
    /// `cached` says what the cache holds of it now; it is asked under the tracker's lock,
    /// so a write the informer delivers meanwhile is either seen by it or reaches the
    /// entry recorded here, never neither. Returns whether the write is pending: `false`
    /// when the cache has reached it already or would never deliver it
    /// ([`Cached::NotCached`]); then the observer is not told. A write the cache holds
    /// exactly already is remembered as an echo all the same: its event may not have reached
    /// the controller's predicates yet.
    pub fn record(
        &self,
        object: ObjectRef,
        written: Written,
        scope: &WriteScope,
        cached: impl FnOnce() -> Cached,
    ) -> bool {
        let now = Instant::now();
        let mut state = self.state.lock_unpoisoned();
        self.sweep(&mut state, now);
        if let Written::Version {
            resource_version, ..
        } = &written
        {
            queue(
                &mut state,
                Notice::Wrote(
                    Arc::clone(scope.observer()),
                    scope.key().clone(),
                    object.clone(),
                    resource_version.clone(),
                ),
            );
        }
        let comparable = self.is_comparable();
        let expires = now + (scope.wait() * 2).max(MIN_RETENTION);
        // Reached already: `Some(true)` when the cache holds exactly what was written, whose
        // event may still be on its way to the controller's predicates (an informer stores
        // an object before its subscribers read the event), so it is remembered as an echo.
        let cached_now = cached();
        let reached = match &cached_now {
            Cached::NotCached => Some(false),
            Cached::Absent => matches!(written, Written::Deleted { .. } | Written::Deleting { .. })
                .then_some(true),
            Cached::Present {
                resource_version,
                uid,
            } => {
                let seen = Seen::Present {
                    resource_version: resource_version.as_deref(),
                    uid: uid.as_deref(),
                };
                reaches(&written, seen, comparable)
            }
        };
        if let Some(echo) = reached {
            if echo {
                let of = match written {
                    Written::Version {
                        resource_version, ..
                    } => EchoOf::Version(resource_version),
                    Written::Deleting {
                        resource_version,
                        uid,
                    } => {
                        if matches!(cached_now, Cached::Absent) {
                            EchoOf::Delete(uid)
                        } else {
                            EchoOf::Version(resource_version)
                        }
                    }
                    Written::Deleted { uid } => EchoOf::Delete(uid),
                };
                let observer = Arc::clone(scope.observer());
                match state.echoes.get_mut(&object) {
                    Some(e) if e.of == of => {
                        if !e.observers.iter().any(|o| Arc::ptr_eq(o, &observer)) {
                            e.observers.push(observer);
                        }
                    }
                    _ => {
                        state.echoes.insert(
                            object,
                            Echo {
                                of,
                                observers: vec![observer],
                                expires,
                            },
                        );
                    }
                }
                self.count(&state);
            }
            self.tell(state);
            return false;
        }
        let waiter = (Arc::clone(scope.observer()), scope.key().clone());
        queue(
            &mut state,
            Notice::Written(
                Arc::clone(scope.observer()),
                scope.key().clone(),
                object.clone(),
            ),
        );
        match state.pending.get_mut(&object) {
            Some(pending) => {
                // A later write of the same object: the newer version is what to reach.
                pending.written = written;
                pending.recorded = now;
                pending.expires = expires;
                let known = pending
                    .waiters
                    .iter()
                    .any(|(o, k)| Arc::ptr_eq(o, &waiter.0) && *k == waiter.1);
                if !known {
                    pending.waiters.push(waiter);
                }
            }
            None => {
                state.pending.insert(
                    object,
                    Pending {
                        written,
                        recorded: now,
                        waiters: vec![waiter],
                        expires,
                    },
                );
            }
        }
        self.count(&state);
        self.tell(state);
        true
    }

    /// What an informer of `group`/`resource` stored or removed for `namespace/name`.
    pub(crate) fn observed(
        &self,
        group: &str,
        resource: &str,
        namespace: Option<&str>,
        name: &str,
        seen: Seen<'_>,
    ) {
        if self.tracked.load(Ordering::Acquire) == 0 {
            return;
        }
        let object = ObjectRef::new(group, resource, namespace, name);
        let mut state = self.state.lock_unpoisoned();
        // A new state of an object replaces the echo of an older write not yet taken.
        if let Some(echo) = state.echoes.get(&object)
            && !echo.is(seen)
        {
            state.echoes.remove(&object);
        }
        let comparable = self.is_comparable();
        let Some(echo) = state
            .pending
            .get(&object)
            .and_then(|pending| reaches(&pending.written, seen, comparable))
        else {
            self.count(&state);
            return;
        };
        let Some(pending) = state.pending.remove(&object) else {
            return;
        };
        for (observer, key) in &pending.waiters {
            queue(
                &mut state,
                Notice::Reached(Arc::clone(observer), key.clone(), object.clone()),
            );
        }
        if echo {
            let of = match (pending.written, seen) {
                (
                    Written::Deleted { uid } | Written::Deleting { uid, .. },
                    Seen::Deleted { .. },
                ) => EchoOf::Delete(uid),
                (
                    Written::Version {
                        resource_version, ..
                    }
                    | Written::Deleting {
                        resource_version, ..
                    },
                    _,
                ) => EchoOf::Version(resource_version),
                (Written::Deleted { uid }, Seen::Present { .. }) => EchoOf::Delete(uid),
            };
            let observers = pending.waiters.into_iter().map(|(o, _)| o).collect();
            state.echoes.insert(
                object,
                Echo {
                    of,
                    observers,
                    expires: pending.expires,
                },
            );
        }
        self.count(&state);
        self.tell(state);
        self.changed.notify_waiters();
    }

    /// Whether the event about to be delivered for `object` (at `resource_version`, or its
    /// deletion when `deleted`, with `uid`) is exactly the echo of a write `observer` made;
    /// if so, that observer's claim on it is taken (asking twice says `false`).
    pub fn take_echo(
        &self,
        object: &ObjectRef,
        resource_version: Option<&str>,
        uid: Option<&str>,
        deleted: bool,
        observer: &Arc<dyn WriteObserver>,
    ) -> bool {
        if self.tracked.load(Ordering::Acquire) == 0 {
            return false;
        }
        let mut state = self.state.lock_unpoisoned();
        let Some(echo) = state.echoes.get_mut(object) else {
            return false;
        };
        let seen = if deleted {
            Seen::Deleted { uid }
        } else {
            Seen::Present {
                resource_version,
                uid,
            }
        };
        if !echo.is(seen) {
            return false;
        }
        let before = echo.observers.len();
        echo.observers.retain(|o| !Arc::ptr_eq(o, observer));
        let taken = echo.observers.len() < before;
        if echo.observers.is_empty() {
            state.echoes.remove(object);
            self.count(&state);
        }
        taken
    }

    /// Waits until no write of `object` that the reconcile `scope` names made (in this
    /// reconcile, or in the key's last one), recorded less than the scope's bound ago, is
    /// pending: at most that bound, and no longer than the youngest such write's age reaches
    /// it (a read does not wait again for a write whose wait already ran out). Writes of other
    /// keys or controllers are not waited for: a reconcile never waits behind another key.
    /// Whether it ended with none of them pending (`false`: it waited out its bound, or found
    /// only writes too old to wait for).
    pub async fn wait_for_object(&self, object: &ObjectRef, scope: &WriteScope) -> bool {
        self.wait_until(scope, |o| o == object).await
    }

    /// As [`wait_for_object`](Self::wait_for_object), for every object of `group`/`resource`
    /// in `namespace` (`None`: in any namespace).
    pub async fn wait_for_resource(
        &self,
        group: &str,
        resource: &str,
        namespace: Option<&str>,
        scope: &WriteScope,
    ) -> bool {
        self.wait_until(scope, |o| {
            o.group == group
                && o.resource == resource
                && (namespace.is_none() || o.namespace.as_deref() == namespace)
        })
        .await
    }

    async fn wait_until(&self, scope: &WriteScope, object: impl Fn(&ObjectRef) -> bool) -> bool {
        if self.tracked.load(Ordering::Acquire) == 0 {
            return true;
        }
        let timeout = scope.wait();
        let matches = |o: &ObjectRef, p: &Pending| {
            object(o)
                && p.waiters
                    .iter()
                    .any(|(w, key)| scope.same_observer(w) && key == scope.key())
        };
        let started = Instant::now();
        loop {
            let notified = self.changed.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            let now = Instant::now();
            // The latest moment a matching write still counts: its recording plus the bound.
            let until = self
                .state
                .lock_unpoisoned()
                .pending
                .iter()
                .filter(|(o, p)| matches(o, p))
                .map(|(_, p)| p.recorded + timeout)
                .filter(|&until| until > now)
                .max();
            let Some(until) = until else {
                return !self
                    .state
                    .lock_unpoisoned()
                    .pending
                    .iter()
                    .any(|(o, p)| matches(o, p));
            };
            let deadline = until.min(started + timeout);
            if now >= deadline {
                return false;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                // Waited out: whether the writes waited for were reached at the last moment.
                return !self
                    .state
                    .lock_unpoisoned()
                    .pending
                    .iter()
                    .any(|(o, p)| matches(o, p));
            }
        }
    }

    /// Forgets writes and echoes past their retention, at most once a second.
    fn sweep(&self, state: &mut State, now: Instant) {
        if state.next_sweep.is_some_and(|at| now < at) {
            return;
        }
        state.next_sweep = Some(now + Duration::from_secs(1));
        let before = state.pending.len();
        // A write given up on is done with for its waiters too: their keys' own bounds passed
        // long before (the retention is twice the longest), so this only frees what a key
        // never taken again would hold.
        let mut forgotten_writes = Vec::new();
        state.pending.retain(|object, p| {
            let keep = p.expires > now;
            if !keep {
                for (observer, key) in &p.waiters {
                    forgotten_writes.push(Notice::Reached(
                        Arc::clone(observer),
                        key.clone(),
                        object.clone(),
                    ));
                }
            }
            keep
        });
        for notice in forgotten_writes {
            queue(state, notice);
        }
        state.echoes.retain(|_, e| e.expires > now);
        let forgotten = before - state.pending.len();
        if forgotten > 0 {
            tracing::debug!(
                forgotten,
                "forgot writes the cache never delivered within their retention"
            );
            self.changed.notify_waiters();
        }
        self.count(state);
    }

    /// Releases the lock (`state`), then tells the observers what was queued: this thread
    /// tells them unless another does already; then it waits until that one has told this
    /// call's notices too, unless it is itself inside an observer (whose own call goes on
    /// telling once the observer returns).
    fn tell<'a>(&'a self, mut state: MutexGuard<'a, State>) {
        let mine = state.queued;
        if state.telling {
            if TELLING.get() {
                return;
            }
            while state.telling && state.told < mine {
                state = self
                    .told
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            if state.told >= mine {
                return;
            }
        }
        let mut teller = Teller::new(self);
        state.telling = true;
        loop {
            let batch: Vec<Notice> = state.outbox.drain(..).collect();
            if batch.is_empty() {
                break;
            }
            let count = batch.len() as u64;
            drop(state);
            for notice in batch {
                notice.tell();
            }
            state = self.state.lock_unpoisoned();
            state.told += count;
            self.told.notify_all();
        }
        teller.done(state);
    }

    fn count(&self, state: &State) {
        self.tracked
            .store(state.pending.len() + state.echoes.len(), Ordering::Release);
    }
}

/// Queues `notice` to be told once the lock is released ([`WriteTracker::tell`]).
fn queue(state: &mut State, notice: Notice) {
    state.outbox.push_back(notice);
    state.queued += 1;
}

/// The telling role of one thread for one tracker: marks the thread as telling, and gives the
/// role back even if an observer panics (another caller then tells what is left).
struct Teller<'t> {
    tracker: &'t WriteTracker,
    was_telling: bool,
    done: bool,
}

impl<'t> Teller<'t> {
    fn new(tracker: &'t WriteTracker) -> Self {
        Self {
            tracker,
            was_telling: TELLING.replace(true),
            done: false,
        }
    }

    /// Gives the role back, with the lock held (`state`), once the outbox is empty.
    fn done(&mut self, mut state: MutexGuard<'_, State>) {
        state.telling = false;
        self.done = true;
        drop(state);
        self.tracker.told.notify_all();
    }
}

impl Drop for Teller<'_> {
    fn drop(&mut self) {
        TELLING.set(self.was_telling);
        if !self.done {
            self.tracker.state.lock_unpoisoned().telling = false;
            self.tracker.told.notify_all();
        }
    }
}

impl Echo {
    /// Whether `seen` is exactly the event of the write this echo stands for.
    fn is(&self, seen: Seen<'_>) -> bool {
        match (&self.of, seen) {
            (
                EchoOf::Version(rv),
                Seen::Present {
                    resource_version, ..
                },
            ) => resource_version == Some(rv.as_str()),
            (EchoOf::Delete(uid), Seen::Deleted { uid: seen }) => {
                uid.is_none() || seen.is_none() || uid.as_deref() == seen
            }
            _ => false,
        }
    }
}

/// Whether the cache holding `seen` has reached `written`: `None` if not, `Some(true)` if
/// `seen` is exactly the written version (its echo), `Some(false)` if a newer state.
fn reaches(written: &Written, seen: Seen<'_>, comparable: bool) -> Option<bool> {
    match (written, seen) {
        (
            Written::Version {
                resource_version,
                uid,
            }
            | Written::Deleting {
                resource_version,
                uid,
            },
            Seen::Present {
                resource_version: seen_rv,
                uid: seen_uid,
            },
        ) => {
            if let (Some(uid), Some(seen_uid)) = (uid, seen_uid)
                && uid != seen_uid
            {
                // Deleted and made again since: a newer state.
                return Some(false);
            }
            let seen_rv = seen_rv?;
            if seen_rv == resource_version {
                return Some(true);
            }
            (comparable && newer(seen_rv, resource_version)).then_some(false)
        }
        (Written::Version { uid, .. }, Seen::Deleted { uid: seen_uid }) => {
            // Deleted after the write: newer (the same object, or no uid to tell).
            (uid.is_none() || seen_uid.is_none() || uid.as_deref() == seen_uid).then_some(false)
        }
        (Written::Deleting { uid, .. }, Seen::Deleted { uid: seen_uid }) => {
            // The deletion this write started, finished: its echo.
            (uid.is_none() || seen_uid.is_none() || uid.as_deref() == seen_uid).then_some(true)
        }
        (Written::Deleted { uid }, Seen::Deleted { uid: seen_uid }) => {
            (uid.is_none() || seen_uid.is_none() || uid.as_deref() == seen_uid).then_some(true)
        }
        (Written::Deleted { uid }, Seen::Present { uid: seen_uid, .. }) => {
            // The name holds another object now: the delete is behind the cache.
            matches!((uid, seen_uid), (Some(a), Some(b)) if a != b).then_some(false)
        }
    }
}

/// Whether resourceVersion `a` is newer than `b`, as KEP-5504 compares them: decimal
/// integers without leading zeros, the longer one larger, equal lengths compared digit by
/// digit. Anything else is not known to be newer.
pub(crate) fn newer(a: &str, b: &str) -> bool {
    let decimal = |s: &str| !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit());
    if !decimal(a) || !decimal(b) {
        return false;
    }
    let (a, b) = (a.trim_start_matches('0'), b.trim_start_matches('0'));
    (a.len(), a) > (b.len(), b)
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    #[derive(Default)]
    struct Log(Mutex<Vec<String>>);

    impl WriteObserver for Log {
        fn written(&self, key: &Request, object: &ObjectRef) {
            self.0
                .lock()
                .unwrap()
                .push(format!("written {key} {object}"));
        }
        fn reached(&self, key: &Request, object: &ObjectRef) {
            self.0
                .lock()
                .unwrap()
                .push(format!("reached {key} {object}"));
        }
    }

    fn setup() -> (WriteTracker, Arc<Log>, WriteScope, ObjectRef) {
        let log = Arc::new(Log::default());
        let observer: Arc<dyn WriteObserver> = log.clone();
        let scope = WriteScope::new(
            observer,
            Request::namespaced("ns", "owner"),
            Duration::from_secs(5),
        );
        let child = ObjectRef::new("", "configmaps", Some("ns"), "child");
        (WriteTracker::new(), log, scope, child)
    }

    fn version(rv: &str) -> Written {
        Written::Version {
            resource_version: rv.into(),
            uid: Some("u1".into()),
        }
    }

    fn present(rv: &str) -> Seen<'_> {
        Seen::Present {
            resource_version: Some(rv),
            uid: Some("u1"),
        }
    }

    #[test]
    fn an_informer_names_its_type_as_writes_do() {
        let tracker = Arc::new(WriteTracker::new());
        let core = Tracked::new(Arc::clone(&tracker), "/api/v1/namespaces/ns/configmaps");
        assert_eq!(
            (core.group.as_str(), core.resource.as_str()),
            ("", "configmaps")
        );
        let apps = Tracked::new(Arc::clone(&tracker), "/apis/apps/v1/deployments");
        assert_eq!(
            (apps.group.as_str(), apps.resource.as_str()),
            ("apps", "deployments")
        );
        let nodes = Tracked::new(tracker, "/api/v1/nodes");
        assert_eq!(nodes.resource, "nodes");
    }

    #[test]
    fn kep_5504_order() {
        assert!(newer("120", "117"));
        assert!(newer("1000", "999"));
        assert!(!newer("999", "1000"));
        assert!(!newer("5", "5"));
        assert!(!newer("abc", "1"));
        assert!(!newer("", "1"));
    }

    #[tokio::test]
    async fn a_write_is_pending_until_the_informer_stores_it() {
        let (tracker, log, scope, child) = setup();
        assert!(tracker.record(child.clone(), version("10"), &scope, || Cached::Absent));
        assert_eq!(tracker.pending(), 1);
        tracker.observed("", "configmaps", Some("ns"), "other", present("11"));
        tracker.observed("", "configmaps", Some("ns"), "child", present("9"));
        assert_eq!(tracker.pending(), 1, "another object, an older version");
        tracker.observed("", "configmaps", Some("ns"), "child", present("10"));
        assert_eq!(tracker.pending(), 0);
        assert_eq!(
            *log.0.lock().unwrap(),
            [
                "written ns/owner configmaps/ns/child",
                "reached ns/owner configmaps/ns/child"
            ]
        );
        let observer: Arc<dyn WriteObserver> = log;
        assert!(tracker.take_echo(&child, Some("10"), Some("u1"), false, &observer));
        assert!(
            !tracker.take_echo(&child, Some("10"), Some("u1"), false, &observer),
            "taken once"
        );
    }

    /// Records, from inside each `written`, a write of `<object>-echo` by the same key, and
    /// reads what is pending: an observer calling back into its tracker.
    struct Reentrant {
        tracker: Arc<WriteTracker>,
        me: std::sync::OnceLock<std::sync::Weak<Reentrant>>,
        log: Mutex<Vec<String>>,
    }

    impl WriteObserver for Reentrant {
        fn written(&self, key: &Request, object: &ObjectRef) {
            self.log
                .lock()
                .unwrap()
                .push(format!("written {}", object.name));
            if object.name.ends_with("-echo") {
                return;
            }
            let me: Arc<dyn WriteObserver> = self.me.get().unwrap().upgrade().unwrap();
            let scope = WriteScope::new(me, key.clone(), Duration::from_secs(5));
            let echo = ObjectRef::new(
                "",
                "configmaps",
                Some("ns"),
                format!("{}-echo", object.name),
            );
            assert!(
                self.tracker
                    .record(echo, version("20"), &scope, || Cached::Absent)
            );
            assert_eq!(self.tracker.pending(), 2);
        }

        fn reached(&self, _: &Request, object: &ObjectRef) {
            self.log
                .lock()
                .unwrap()
                .push(format!("reached {}", object.name));
            // Reads under no lock of the tracker's.
            let _ = self.tracker.pending();
        }
    }

    #[test]
    fn an_observer_may_call_back_into_its_tracker() {
        let tracker = Arc::new(WriteTracker::new());
        let observer = Arc::new(Reentrant {
            tracker: Arc::clone(&tracker),
            me: std::sync::OnceLock::new(),
            log: Mutex::default(),
        });
        observer.me.set(Arc::downgrade(&observer)).unwrap();
        let (done, finished) = std::sync::mpsc::channel();
        // On a thread of its own, so that a deadlock fails the test at the timeout below
        // instead of hanging it; a deadlocked thread cannot be joined, so it is not.
        #[allow(
            clippy::disallowed_methods,
            reason = "a deadlocked thread cannot be joined: the channel's timeout fails the test"
        )]
        std::thread::spawn({
            let (tracker, observer) = (Arc::clone(&tracker), Arc::clone(&observer));
            move || {
                let key = Request::namespaced("ns", "owner");
                let scope = WriteScope::new(observer, key, Duration::from_secs(5));
                let child = ObjectRef::new("", "configmaps", Some("ns"), "child");
                let pending = tracker.record(child, version("10"), &scope, || Cached::Absent);
                tracker.observed("", "configmaps", Some("ns"), "child", present("10"));
                tracker.observed("", "configmaps", Some("ns"), "child-echo", present("20"));
                let _ = done.send(pending);
            }
        });
        let pending = finished
            .recv_timeout(Duration::from_secs(10))
            .expect("an observer calling back into its tracker deadlocked it");
        assert!(pending);
        assert_eq!(tracker.pending(), 0);
        assert_eq!(
            *observer.log.lock().unwrap(),
            [
                "written child",
                // Told once the observer's own call returned.
                "written child-echo",
                "reached child",
                "reached child-echo",
            ]
        );
    }

    #[tokio::test]
    async fn a_newer_version_reaches_a_write_only_where_versions_compare() {
        let (tracker, _log, scope, child) = setup();
        assert!(tracker.record(child.clone(), version("10"), &scope, || Cached::Absent));
        tracker.observed("", "configmaps", Some("ns"), "child", present("12"));
        assert_eq!(
            tracker.pending(),
            1,
            "opaque versions: only the one written"
        );
        tracker.set_comparable(true);
        tracker.observed("", "configmaps", Some("ns"), "child", present("12"));
        assert_eq!(tracker.pending(), 0);
        let observer = Arc::clone(scope.observer());
        assert!(
            !tracker.take_echo(&child, Some("12"), Some("u1"), false, &observer),
            "a newer version is no echo"
        );
    }

    #[tokio::test]
    async fn a_write_the_cache_holds_already_or_never_will_is_not_pending() {
        let (tracker, log, scope, child) = setup();
        let held = || Cached::Present {
            resource_version: Some("10".into()),
            uid: Some("u1".into()),
        };
        assert!(!tracker.record(child.clone(), version("10"), &scope, held));
        assert!(
            tracker.take_echo(&child, Some("10"), Some("u1"), false, scope.observer()),
            "its event may still be on its way: an echo"
        );
        assert!(!tracker.record(child.clone(), version("10"), &scope, || Cached::NotCached));
        assert!(
            !tracker.record(child, Written::Deleted { uid: None }, &scope, || {
                Cached::Absent
            })
        );
        assert!(log.0.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_delete_is_reached_by_the_delete_or_another_object_of_the_name() {
        let (tracker, _log, scope, child) = setup();
        let deleted = Written::Deleted {
            uid: Some("u1".into()),
        };
        let cached = || Cached::Present {
            resource_version: Some("10".into()),
            uid: Some("u1".into()),
        };
        assert!(tracker.record(child.clone(), deleted.clone(), &scope, cached));
        tracker.observed("", "configmaps", Some("ns"), "child", present("11"));
        assert_eq!(tracker.pending(), 1, "the same object, still there");
        tracker.observed(
            "",
            "configmaps",
            Some("ns"),
            "child",
            Seen::Deleted { uid: Some("u1") },
        );
        assert_eq!(tracker.pending(), 0);

        assert!(tracker.record(child, deleted, &scope, cached));
        tracker.observed(
            "",
            "configmaps",
            Some("ns"),
            "child",
            Seen::Present {
                resource_version: Some("3"),
                uid: Some("u2"),
            },
        );
        assert_eq!(tracker.pending(), 0, "made again: the delete is behind");
    }

    #[tokio::test(start_paused = true)]
    async fn a_read_waits_for_the_write_and_no_longer_than_its_bound() {
        let (tracker, log, scope, child) = setup();
        let tracker = Arc::new(tracker);
        let second = Duration::from_secs(1);
        let scope = WriteScope::new(Arc::clone(scope.observer()), scope.key().clone(), second);
        assert!(
            tracker.wait_for_object(&child, &scope).await,
            "nothing pending"
        );
        assert!(tracker.record(child.clone(), version("10"), &scope, || Cached::Absent));
        assert!(
            tracker
                .wait_for_resource("", "configmaps", Some("other"), &scope)
                .await,
            "nothing pending in another namespace"
        );
        let other_key = WriteScope::new(log, Request::namespaced("ns", "other"), second);
        let started = Instant::now();
        assert!(
            tracker.wait_for_object(&child, &other_key).await,
            "another key's write is not waited for"
        );
        assert_eq!(started.elapsed(), Duration::ZERO);
        assert!(
            !tracker
                .wait_for_resource("", "configmaps", Some("ns"), &scope)
                .await
        );
        assert_eq!(started.elapsed(), second, "waited its bound");
        assert!(
            !tracker.wait_for_object(&child, &scope).await,
            "still pending..."
        );
        assert_eq!(
            started.elapsed(),
            second,
            "... but older than the bound: not waited for again"
        );

        assert!(tracker.record(child.clone(), version("11"), &scope, || Cached::Absent));
        let waiting = tokio::spawn({
            let tracker = Arc::clone(&tracker);
            let child = child.clone();
            let scope = WriteScope::new(
                Arc::clone(scope.observer()),
                scope.key().clone(),
                Duration::from_secs(60),
            );
            async move { tracker.wait_for_object(&child, &scope).await }
        });
        // Lets the reader start waiting (paused clock: no real time passes); were it to look
        // only after the next line, it would find nothing pending and pass all the same.
        tokio::time::sleep(Duration::from_millis(10)).await;
        tracker.observed("", "configmaps", Some("ns"), "child", present("11"));
        assert!(waiting.await.unwrap());
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "woken, not timed out"
        );
    }

    #[tokio::test]
    async fn a_deletion_started_is_reached_by_its_version_or_by_the_objects_absence() {
        let (tracker, _log, scope, child) = setup();
        let deleting = || Written::Deleting {
            resource_version: "10".into(),
            uid: Some("u1".into()),
        };
        assert!(
            !tracker.record(child.clone(), deleting(), &scope, || Cached::Absent),
            "gone from the cache already (a delete that finished at once)"
        );
        assert!(
            tracker.take_echo(&child, None, Some("u1"), true, scope.observer()),
            "its delete event may still be on its way: an echo"
        );
        let before = || Cached::Present {
            resource_version: Some("9".into()),
            uid: Some("u1".into()),
        };
        assert!(tracker.record(child.clone(), deleting(), &scope, before));
        tracker.observed("", "configmaps", Some("ns"), "child", present("10"));
        assert_eq!(tracker.pending(), 0, "the terminating version");
        assert!(tracker.record(child.clone(), deleting(), &scope, before));
        tracker.observed(
            "",
            "configmaps",
            Some("ns"),
            "child",
            Seen::Deleted { uid: Some("u1") },
        );
        assert_eq!(tracker.pending(), 0, "or the deletion itself");
        assert!(tracker.take_echo(&child, None, Some("u1"), true, scope.observer()));
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_never_delivered_is_forgotten_after_its_retention() {
        let (tracker, log, scope, child) = setup();
        assert!(tracker.record(child, version("10"), &scope, || Cached::Absent));
        tokio::time::advance(MIN_RETENTION + Duration::from_secs(1)).await;
        let other = ObjectRef::new("", "configmaps", Some("ns"), "other");
        assert!(tracker.record(other, version("11"), &scope, || Cached::Absent));
        assert_eq!(tracker.pending(), 1, "the first was forgotten");
        assert!(
            log.0
                .lock()
                .unwrap()
                .contains(&"reached ns/owner configmaps/ns/child".to_owned()),
            "and its waiter told, so nothing of it stays behind"
        );
    }
}
