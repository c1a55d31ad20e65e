//! The informer: one watch feeding one [`Store`], fanned out to every handler.
//!
//! `builder.rs` holds the options and how the event stream is made (on the list/watch engine,
//! `watch/`, which also decides how to list), `watch_task.rs` the watch task
//! (applying events to the store, relists, resync, errors and panics), `subscribers.rs` the
//! events and the per-subscriber queues, `refusal.rs` a list or watch the API server refused
//! (401, 403), `footprint.rs` what the informer holds and `json_length.rs` how it counts an
//! object's bytes (its length as JSON, without writing it).

use std::fmt::{self, Debug};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use kube::Resource;
use rudder_core::sync::LockExt;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::{CancellationToken, DropGuard};
use tokio_util::task::TaskTracker;

use crate::error::SyncError;
use crate::store::{ObjectKey, Store};
use crate::{ListStrategy, WireFormat};

mod builder;
mod footprint;
mod json_length;
mod refusal;
mod subscribers;
mod watch_task;

pub use builder::InformerBuilder;
pub use refusal::Refusal;
pub(crate) use rudder_core::Event;
pub use subscribers::EventStream;
#[cfg(test)]
pub(crate) use watch_task::start_on;

/// The default resync period, as in controller-runtime: 10 hours, plus up to 10% jitter.
pub const DEFAULT_RESYNC: Duration = Duration::from_secs(10 * 60 * 60);

/// Counters an informer keeps about its watch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct InformerStats {
    /// Objects in the watch stream that could not be decoded into the informer's type. Each
    /// was logged at `warn` and skipped (and, with the `metrics` feature, counted in
    /// `rudder_cache_malformed_objects_total`).
    pub malformed_objects: u64,
    /// Other errors from the watch (failed lists, failed or broken watches), each followed
    /// by the engine's backoff. Each is logged, except a refusal that continues a
    /// streak of them (see [`refusals`](Self::refusals)).
    pub watch_errors: u64,
    /// Lists and watches the API server refused with 401 Unauthorized or 403 Forbidden
    /// ([`Refusal`]), each also one of [`watch_errors`](Self::watch_errors). A streak of them
    /// is logged once, at `warn`, when it begins, and once at `info` when a list or watch is
    /// allowed again; with the `metrics` feature each is counted in
    /// `rudder_cache_watch_refusals_total` (labels `resource`, `code`).
    pub refusals: u64,
    /// Lists after the first one (a watch that could not be resumed, e.g. 410 Gone).
    pub relists: u64,
    /// Resyncs done.
    pub resyncs: u64,
    /// Panics caught in the user's index functions and transforms. Each was logged at
    /// `error` with the object's key, and the object skipped: it is neither stored nor sent,
    /// and a stored older version stays (as for a malformed object) until the object is
    /// deleted. With the `metrics` feature each is also counted in
    /// `rudder_cache_panics_total` (labels `resource`, and `function`: `index`,
    /// `transform` or `handler`).
    pub panics: u64,
    /// Times the informer fell back from streaming lists to paginated ones (see
    /// [`ListStrategy::Streaming`]): the server refused them or never ended their initial
    /// events.
    pub streaming_fallbacks: u64,
    /// An estimate of the memory the stored objects take: the sum of their sizes as JSON
    /// (after the transform; serde_json's compact form, byte for byte, counted without
    /// writing it, whichever wire format the objects came in; a timestamp with a year before
    /// -999, which the API server cannot write as JSON, counts one byte short). Each object is
    /// measured once, as it is stored. The resident memory they cost is larger (a decoded object's
    /// strings, maps and allocations, and the store's tables and indexes); `cargo bench -p
    /// rudder-cache --bench cache` measures both and prints the ratio (`docs/benchmarks.md`).
    pub bytes_held: u64,
    /// How long the informer took from its start to its first sync; `None` before it.
    pub sync_duration: Option<Duration>,
    /// The wire format the informer lists and watches in now: [`WireFormat::Protobuf`] for a
    /// built-in type (unless the informer or its cache asked for JSON), until an object of
    /// it does not decode (the informer then lists again in JSON, decoding each object on
    /// its own) or the server answers JSON; [`WireFormat::Json`] for every other type.
    pub wire_format: WireFormat,
}

/// One watch feeding one [`Store`], shared by every handler registered on it.
///
/// Cloning gives another handle to the same informer. When the last handle and the last
/// [`subscribe`](Informer::subscribe) stream are dropped, the informer is told to stop (as by
/// [`Informer::stop`], without waiting), so a forgotten informer does not watch forever;
/// handlers from [`add_handler`](Informer::add_handler) do not keep it running. A
/// [`Cache`](crate::Cache) keeps a handle to each of its informers until it is stopped or
/// dropped.
pub struct Informer<K> {
    pub(crate) shared: Arc<Shared<K>>,
    /// Cancels the informer's token when the last handle goes.
    pub(crate) _handles: Arc<DropGuard>,
}

impl<K> Clone for Informer<K> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
            _handles: Arc::clone(&self._handles),
        }
    }
}

impl<K> Debug for Informer<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Informer")
            .field("resource", &self.shared.resource)
            .field("synced", &*self.shared.synced.borrow())
            .field("store", &self.shared.store)
            .finish()
    }
}

impl<K: Resource + Send + Sync + 'static> Informer<K> {
    /// The store the watch fills.
    pub fn store(&self) -> &Store<K> {
        &self.shared.store
    }

    /// The informer's type as writes name it (API group, resource), if it tells a write
    /// tracker what it stores.
    pub(crate) fn written_as(&self) -> Option<(String, String)> {
        self.shared
            .writes
            .as_ref()
            .map(|t| (t.group.clone(), t.resource.clone()))
    }

    /// Whether the first list has been stored completely, and the watch has not failed
    /// (see [`has_failed`](Self::has_failed)).
    pub fn has_synced(&self) -> bool {
        *self.shared.synced.borrow() && !self.has_failed()
    }

    /// Whether the watch task is still running: false once it has ended, whether stopped
    /// or failed.
    pub fn is_running(&self) -> bool {
        self.shared.running.load(Ordering::Acquire)
    }

    /// Whether the watch task ended by a panic (outside the index functions and transforms,
    /// whose panics are caught and skipped). The informer is then stopped: subscribers'
    /// streams end, [`has_synced`](Self::has_synced) is false and
    /// [`wait_for_sync`](Self::wait_for_sync) fails with [`SyncError::Failed`]; the store
    /// keeps what it held. A [`Cache`](crate::Cache) counts it in
    /// [`Cache::failed_count`](crate::Cache::failed_count) and starts a new informer the next
    /// time one is asked for.
    pub fn has_failed(&self) -> bool {
        self.shared.failed.load(Ordering::Acquire)
    }

    /// Waits until the first list has been stored, at most `timeout`.
    ///
    /// A list or watch the API server refuses (401, 403) ends the wait at once: RBAC that
    /// does not let this identity list and watch the resource is no delay to sit out. The
    /// informer keeps retrying in the background with backoff, so a wait after the RBAC is
    /// granted (and the next list allowed) succeeds.
    ///
    /// # Errors
    ///
    /// [`SyncError::Refused`] if the API server refused the list or watch before the first
    /// list was stored (at once, when it is refused already), [`SyncError::Timeout`] if the
    /// time ran out, [`SyncError::Stopped`] if the informer was stopped before it synced,
    /// [`SyncError::Failed`] if its watch failed.
    pub async fn wait_for_sync(&self, timeout: Duration) -> Result<(), SyncError> {
        let mut synced = self.shared.synced.subscribe();
        let mut refused = self.shared.refused.subscribe();
        let wait = async {
            tokio::select! {
                biased;
                res = synced.wait_for(|s| *s) => Waited::Synced(res.is_ok()),
                () = self.shared.token.cancelled() => Waited::Synced(*self.shared.synced.borrow()),
                refusal = refused.wait_for(Option::is_some) => match refusal {
                    Ok(refusal) => Waited::Refused(refusal.clone()),
                    // The sender lives in `shared`, which this handle holds.
                    Err(_) => Waited::Synced(false),
                },
            }
        };
        let outcome = tokio::time::timeout(timeout, wait).await;
        // A failure cancels the token after setting the flag, so it is seen here.
        if self.has_failed() {
            return Err(SyncError::Failed {
                resource: self.shared.resource.clone(),
            });
        }
        match outcome {
            Ok(Waited::Synced(true)) => Ok(()),
            Ok(Waited::Synced(false)) => Err(SyncError::Stopped {
                resource: self.shared.resource.clone(),
            }),
            Ok(Waited::Refused(Some(refusal))) => Err(SyncError::Refused {
                resource: self.shared.resource.clone(),
                refusal,
            }),
            Ok(Waited::Refused(None)) | Err(_) => Err(SyncError::Timeout {
                resource: self.shared.resource.clone(),
                timeout,
            }),
        }
    }

    /// The API server's refusal of the informer's last list or watch, while it lasts: from
    /// a 401 or 403 answer until a list or watch is allowed again.
    pub fn refusal(&self) -> Option<Refusal> {
        self.shared.refused.borrow().clone()
    }

    /// Waits until the informer's list and watch are no longer refused ([`refusal`](Self::refusal)
    /// is `None`: at once when they are not), or the informer stops.
    pub async fn wait_until_allowed(&self) {
        let mut refused = self.shared.refused.subscribe();
        tokio::select! {
            _ = refused.wait_for(Option::is_none) => {}
            () = self.shared.token.cancelled() => {}
        }
    }

    /// What the informer lists with now: [`ListStrategy::Streaming`] unless it was built
    /// with [`ListStrategy::Paginated`] or fell back to it (see [`ListStrategy`]).
    pub fn list_strategy(&self) -> ListStrategy {
        self.shared.lists.current()
    }

    /// Whether the server serves the informer's resource, as far as its last answer said:
    /// false from a `404 Not Found` answer to its list or watch (a CRD not installed yet, or
    /// deleted) until the list succeeds again. Meanwhile the informer asks again quietly
    /// (500 ms doubling to 10 s), logging once at info rather than a watch error each time;
    /// a store that held a list is emptied (its objects went with the resource, and
    /// subscribers get their deletes), and one that never synced stays unsynced. When the
    /// resource is served again the informer lists it and goes on.
    pub fn resource_served(&self) -> bool {
        self.shared.lists.served()
    }

    /// The informer's counters.
    pub fn stats(&self) -> InformerStats {
        let s = &self.shared.stats;
        InformerStats {
            streaming_fallbacks: self.shared.lists.fallbacks(),
            wire_format: self.shared.lists.wire(),
            bytes_held: self.shared.store.bytes(),
            sync_duration: self.shared.footprint.sync_duration(),
            malformed_objects: s.malformed.load(Ordering::Relaxed),
            watch_errors: s.errors.load(Ordering::Relaxed),
            refusals: s.refusals.load(Ordering::Relaxed),
            relists: s.relists.load(Ordering::Relaxed),
            resyncs: s.resyncs.load(Ordering::Relaxed),
            panics: s.panics.load(Ordering::Relaxed),
        }
    }

    /// What the informer watches, for messages: kind, namespace and selectors.
    pub fn resource(&self) -> &str {
        &self.shared.resource
    }

    /// Stops the watch and the handlers, and waits for their tasks to end.
    pub async fn stop(&self) {
        self.shared.token.cancel();
        self.shared.tracker.close();
        self.shared.tracker.wait().await;
    }

    /// Whether the informer has been told to stop.
    pub fn is_stopped(&self) -> bool {
        self.shared.token.is_cancelled()
    }
}

/// What a wait for the first list saw first.
enum Waited {
    /// The list is in (`true`), or the informer stopped without it (`false`).
    Synced(bool),
    /// A list or watch was refused.
    Refused(Option<Refusal>),
}

#[derive(Default)]
pub(crate) struct Stats {
    pub(crate) malformed: AtomicU64,
    pub(crate) errors: AtomicU64,
    pub(crate) refusals: AtomicU64,
    pub(crate) relists: AtomicU64,
    pub(crate) resyncs: AtomicU64,
    pub(crate) panics: AtomicU64,
}

/// What an informer's logs and metrics call it: its resource (path and selectors) and, in a
/// process with informers of several clusters, its cluster.
pub(crate) struct Described {
    pub(crate) resource: String,
    pub(crate) cluster: Option<Arc<str>>,
}

impl From<&str> for Described {
    fn from(resource: &str) -> Self {
        resource.to_owned().into()
    }
}

impl From<String> for Described {
    fn from(resource: String) -> Self {
        Self {
            resource,
            cluster: None,
        }
    }
}

pub(crate) struct Shared<K> {
    pub(crate) resource: String,
    /// The member cluster, for the `cluster` label of its metrics.
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    pub(crate) cluster: Option<Arc<str>>,
    pub(crate) store: Store<K>,
    /// Held while an event is applied to the store and sent, so a new subscriber's replay
    /// of the store and its later events neither overlap nor leave a gap.
    pub(crate) subscribers: Mutex<Vec<mpsc::UnboundedSender<Event<K>>>>,
    pub(crate) synced: watch::Sender<bool>,
    /// The API server's refusal of the last list or watch, from a 401 or 403 answer until
    /// a list or watch is allowed again.
    pub(crate) refused: watch::Sender<Option<Refusal>>,
    /// Cleared when the watch task ends, for any reason.
    pub(crate) running: AtomicBool,
    /// Set when the watch task ended by a panic.
    pub(crate) failed: AtomicBool,
    pub(crate) stats: Stats,
    pub(crate) token: CancellationToken,
    pub(crate) tracker: TaskTracker,
    /// The cache's write tracker, told what the informer stores and removes.
    pub(crate) writes: Option<crate::writes::Tracked>,
    /// What the informer lists with now.
    pub(crate) lists: Arc<crate::watch::ListMode>,
    /// What it holds, in bytes, and how long its first sync took.
    pub(crate) footprint: footprint::Footprint,
    /// How it measures an object for `footprint` (none: bytes are not counted).
    pub(crate) sizer: Option<footprint::Sizer<K>>,
}

impl<K> Shared<K> {
    pub(crate) fn subscribers(&self) -> MutexGuard<'_, Vec<mpsc::UnboundedSender<Event<K>>>> {
        self.subscribers.lock_unpoisoned()
    }
}

/// Logs and counts a panic of user code (`function`: a transform, an index function, a
/// handler) on the object `key`, which was skipped.
pub(super) fn record_panic<K>(
    shared: &Shared<K>,
    function: &'static str,
    key: &ObjectKey,
    message: &str,
) {
    tracing::error!(
        resource = %shared.resource,
        object = %key,
        panic = %message,
        "a {function} panicked; skipping the object"
    );
    count_panic(shared, function);
}

pub(super) fn count_panic<K>(shared: &Shared<K>, function: &'static str) {
    shared.stats.panics.fetch_add(1, Ordering::Relaxed);
    #[cfg(feature = "metrics")]
    {
        let mut labels = shared.labels();
        labels.push(metrics::Label::new("function", function));
        metrics::counter!(crate::metrics::PANICS_TOTAL, labels).increment(1);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = function;
}

impl<K> Shared<K> {
    /// The labels of this informer's metrics: `resource`, and `cluster` when it has one.
    #[cfg(feature = "metrics")]
    pub(crate) fn labels(&self) -> Vec<metrics::Label> {
        let mut labels = vec![metrics::Label::new("resource", self.resource.clone())];
        if let Some(cluster) = &self.cluster {
            labels.push(metrics::Label::new("cluster", cluster.to_string()));
        }
        labels
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use futures::StreamExt;

    use super::watch_task::jittered;
    use crate::watch::Event as W;

    use super::*;
    use crate::lenient::{Lenient, Malformed};
    use crate::store::ObjectKey;
    use crate::transform::Transform;

    #[test]
    fn jitter_stays_within_ten_percent() {
        let period = Duration::from_secs(1000);
        for _ in 0..100 {
            let d = jittered(period);
            assert!(
                d >= period && d <= period + Duration::from_secs(100),
                "{d:?}"
            );
        }
    }

    fn cm(name: &str, rv: &str) -> Lenient<Arc<k8s_openapi::api::core::v1::ConfigMap>> {
        Lenient::Ok(Arc::new(k8s_openapi::api::core::v1::ConfigMap {
            metadata: kube::core::ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                resource_version: Some(rv.into()),
                ..Default::default()
            },
            ..Default::default()
        }))
    }

    fn bad(name: &str) -> Lenient<Arc<k8s_openapi::api::core::v1::ConfigMap>> {
        Lenient::Malformed(Box::new(Malformed {
            metadata: kube::core::ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                ..Default::default()
            },
            error: "invalid type".into(),
        }))
    }

    #[tokio::test]
    async fn a_relist_replaces_the_store_in_one_step_at_its_end() {
        type Cm = k8s_openapi::api::core::v1::ConfigMap;
        let (tx, rx) = mpsc::unbounded_channel::<W<Lenient<Arc<Cm>>>>();
        // How many events the informer's task has taken.
        let taken = Arc::new(AtomicU64::new(0));
        let stream =
            futures::stream::unfold((rx, Arc::clone(&taken)), |(mut rx, taken)| async move {
                let event = rx.recv().await?;
                taken.fetch_add(1, Ordering::SeqCst);
                Some((Ok(event), (rx, taken)))
            });
        let informer = start_on(
            "configmaps",
            stream,
            None,
            None,
            CancellationToken::new(),
            TaskTracker::new(),
            None,
            Arc::default(),
            None,
        );
        let mut events = informer.subscribe();
        let mut next = async || {
            let event = tokio::time::timeout(Duration::from_secs(5), events.next())
                .await
                .unwrap()
                .unwrap();
            match event {
                Event::Create { object, .. } => {
                    format!("add {}", object.metadata.name.as_deref().unwrap())
                }
                Event::Update { new, .. } => {
                    format!("update {}", new.metadata.name.as_deref().unwrap())
                }
                Event::Delete { object, .. } => {
                    format!("delete {}", object.metadata.name.as_deref().unwrap())
                }
                Event::Generic { .. } => unreachable!("an informer sends no generic events"),
            }
        };
        let version = |name: &str| {
            informer
                .store()
                .get(&ObjectKey::namespaced("ns", name))
                .and_then(|o| o.metadata.resource_version.clone())
        };
        for event in [
            W::Init,
            W::InitApply(cm("a", "1")),
            W::InitApply(cm("b", "1")),
            W::InitApply(cm("c", "1")),
            W::InitDone,
        ] {
            tx.send(event).unwrap();
        }
        for _ in 0..3 {
            next().await;
        }
        let unchanged = informer
            .store()
            .get(&ObjectKey::namespaced("ns", "c"))
            .unwrap();

        // A relist that changes a, drops b, adds d and keeps c: until its end the store is
        // as it was.
        for event in [
            W::Init,
            W::InitApply(cm("a", "2")),
            W::InitApply(cm("d", "2")),
            W::InitApply(cm("c", "1")),
        ] {
            tx.send(event).unwrap();
        }
        // Until the informer's task has taken them all: on this one-thread runtime it applies
        // an event without yielding once it has taken it from the channel.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while taken.load(Ordering::SeqCst) < 9 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the task took the events"
            );
            tokio::task::yield_now().await;
        }
        assert_eq!(version("a").as_deref(), Some("1"), "a not updated yet");
        assert_eq!(version("b").as_deref(), Some("1"), "b not removed yet");
        assert_eq!(version("d"), None, "d not added yet");
        assert_eq!(informer.store().len(), 3);

        tx.send(W::InitDone).unwrap();
        let mut seen = vec![next().await, next().await, next().await];
        seen.sort();
        assert_eq!(seen, ["add d", "delete b", "update a"]);
        assert_eq!(version("a").as_deref(), Some("2"));
        assert_eq!(version("b"), None);
        assert_eq!(informer.store().len(), 3);
        // An unchanged object stays the same allocation: the relist held no copy of it.
        let kept = informer
            .store()
            .get(&ObjectKey::namespaced("ns", "c"))
            .unwrap();
        assert!(Arc::ptr_eq(&unchanged, &kept));
        assert_eq!(informer.stats().relists, 1);
        informer.stop().await;
    }

    #[tokio::test]
    async fn a_malformed_object_keeps_its_last_good_version_until_deleted() {
        type Cm = k8s_openapi::api::core::v1::ConfigMap;
        let (tx, rx) = mpsc::unbounded_channel::<W<Lenient<Arc<Cm>>>>();
        let stream = futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|event| (Ok(event), rx))
        });
        let informer = start_on(
            "configmaps",
            stream,
            None,
            None,
            CancellationToken::new(),
            TaskTracker::new(),
            None,
            Arc::default(),
            None,
        );
        let mut events = informer.subscribe();
        let mut next = async || {
            let event = tokio::time::timeout(Duration::from_secs(5), events.next())
                .await
                .unwrap()
                .unwrap();
            match event {
                Event::Create {
                    object,
                    initial_list,
                } => format!(
                    "add {} {initial_list}",
                    object.metadata.name.as_deref().unwrap()
                ),
                Event::Update { new, .. } => {
                    format!("update {}", new.metadata.name.as_deref().unwrap())
                }
                Event::Delete {
                    object,
                    final_state_unknown,
                } => format!(
                    "delete {}@{} {final_state_unknown}",
                    object.metadata.name.as_deref().unwrap(),
                    object.metadata.resource_version.as_deref().unwrap()
                ),
                Event::Generic { .. } => unreachable!("an informer sends no generic events"),
            }
        };
        let key = |name: &str| ObjectKey::namespaced("ns", name);
        for event in [
            W::Init,
            W::InitApply(cm("a", "1")),
            W::InitApply(cm("b", "1")),
            W::InitDone,
        ] {
            tx.send(event).unwrap();
        }
        assert_eq!(next().await, "add a true");
        assert_eq!(next().await, "add b true");

        // `a` turns malformed on the watch, then in a relist: its last good version stays.
        tx.send(W::Apply(bad("a"))).unwrap();
        for event in [
            W::Init,
            W::InitApply(bad("a")),
            W::InitApply(cm("b", "1")),
            W::InitDone,
        ] {
            tx.send(event).unwrap();
        }
        tx.send(W::Apply(cm("marker", "2"))).unwrap();
        assert_eq!(
            next().await,
            "add marker false",
            "no delete of a, no update of b"
        );
        assert_eq!(
            informer
                .store()
                .get(&key("a"))
                .unwrap()
                .metadata
                .resource_version
                .as_deref(),
            Some("1")
        );
        assert_eq!(informer.stats().malformed_objects, 2);
        assert_eq!(informer.stats().relists, 1);

        // Its deletion removes that version; a malformed unknown object's deletion is nothing.
        tx.send(W::Delete(bad("unknown"))).unwrap();
        tx.send(W::Delete(bad("a"))).unwrap();
        assert_eq!(next().await, "delete a@1 true");
        assert!(informer.store().get(&key("a")).is_none());
        assert_eq!(informer.stats().malformed_objects, 4);
        informer.stop().await;
    }

    type Cm = k8s_openapi::api::core::v1::ConfigMap;
    type Sender = mpsc::UnboundedSender<W<Lenient<Arc<Cm>>>>;

    /// An informer fed by hand, through the returned sender.
    fn fed_informer(transform: Option<Transform<Cm>>) -> (Sender, Informer<Cm>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let stream = futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|event| (Ok(event), rx))
        });
        let informer = start_on(
            "configmaps",
            stream,
            transform,
            None,
            CancellationToken::new(),
            TaskTracker::new(),
            None,
            Arc::default(),
            None,
        );
        (tx, informer)
    }

    async fn next_name(events: &mut EventStream<Cm>) -> String {
        let event = tokio::time::timeout(Duration::from_secs(5), events.next())
            .await
            .expect("an event within 5 s")
            .expect("the stream goes on");
        let kind = match &event {
            Event::Create { .. } => "add",
            Event::Update { .. } => "update",
            Event::Delete { .. } => "delete",
            Event::Generic { .. } => "generic",
        };
        format!(
            "{kind} {}",
            event.object().metadata.name.as_deref().unwrap()
        )
    }

    fn names(objs: &[Arc<Cm>]) -> Vec<String> {
        let mut names: Vec<_> = objs
            .iter()
            .map(|o| o.metadata.name.clone().unwrap())
            .collect();
        names.sort();
        names
    }

    #[tokio::test]
    async fn a_panicking_handler_is_counted_and_gets_the_next_event() {
        let (tx, informer) = fed_informer(None);
        let (seen_tx, mut seen) = mpsc::unbounded_channel();
        informer.add_handler(move |event: Event<Cm>| {
            let name = event.object().metadata.name.clone().unwrap_or_default();
            // Panics while making the future for one object, while running it for another.
            assert_ne!(name, "bad-call", "the handler refuses bad-call");
            let seen_tx = seen_tx.clone();
            async move {
                assert_ne!(name, "bad-run", "the handler's future refuses bad-run");
                let _ = seen_tx.send(name);
            }
        });
        for event in [
            W::Init,
            W::InitApply(cm("a", "1")),
            W::InitApply(cm("bad-call", "1")),
            W::InitApply(cm("bad-run", "1")),
            W::InitApply(cm("c", "1")),
            W::InitDone,
        ] {
            tx.send(event).unwrap();
        }
        let mut got = Vec::new();
        while got.len() < 2 {
            let name = tokio::time::timeout(Duration::from_secs(5), seen.recv())
                .await
                .unwrap()
                .unwrap();
            got.push(name);
        }
        assert_eq!(got, ["a", "c"], "the handler went on after both panics");
        assert_eq!(informer.stats().panics, 2);
        informer.stop().await;
    }

    #[tokio::test]
    async fn an_index_function_panic_skips_the_object_and_the_watch_goes_on() {
        let (tx, informer) = fed_informer(None);
        informer
            .store()
            .add_index("name", |c: &Cm| {
                let name = c.metadata.name.clone().unwrap();
                assert!(name != "bad", "the index refuses bad");
                vec![name]
            })
            .unwrap();
        let mut events = informer.subscribe();
        for event in [
            W::Init,
            W::InitApply(cm("a", "1")),
            W::InitApply(cm("bad", "1")),
            W::InitApply(cm("c", "1")),
            W::InitDone,
        ] {
            tx.send(event).unwrap();
        }
        assert_eq!(next_name(&mut events).await, "add a");
        assert_eq!(next_name(&mut events).await, "add c");
        informer
            .wait_for_sync(Duration::from_secs(5))
            .await
            .unwrap();
        assert!(informer.has_synced());
        tx.send(W::Apply(cm("d", "2"))).unwrap();
        assert_eq!(next_name(&mut events).await, "add d");

        let store = informer.store();
        assert_eq!(names(&store.list()), ["a", "c", "d"]);
        assert_eq!(names(&store.list_namespace("ns")), ["a", "c", "d"]);
        let mut values = store.index_values("name").unwrap();
        values.sort();
        assert_eq!(values, ["a", "c", "d"]);
        assert_eq!(informer.stats().panics, 1);
        assert!(informer.is_running());
        assert!(!informer.has_failed());

        // Its deletion reaches the subscribers, and the store stays as it was.
        tx.send(W::Delete(cm("bad", "3"))).unwrap();
        assert_eq!(next_name(&mut events).await, "delete bad");
        assert_eq!(store.len(), 3);
        informer.stop().await;
    }

    #[tokio::test]
    async fn a_transform_panic_skips_the_object_and_the_watch_goes_on() {
        let transform: Transform<Cm> = Arc::new(|c: &mut Cm| {
            c.data = Some([("seen".to_owned(), "yes".to_owned())].into());
            let rv = c.metadata.resource_version.as_deref().unwrap();
            assert!(rv != "666", "the transform refuses 666");
        });
        let (tx, informer) = fed_informer(Some(transform));
        let mut events = informer.subscribe();
        for event in [
            W::Init,
            W::InitApply(cm("a", "1")),
            W::InitApply(cm("bad", "666")),
            W::InitDone,
        ] {
            tx.send(event).unwrap();
        }
        assert_eq!(next_name(&mut events).await, "add a");
        // A panicking update keeps the last good version; a later good one replaces it.
        tx.send(W::Apply(cm("a", "666"))).unwrap();
        tx.send(W::Apply(cm("c", "2"))).unwrap();
        assert_eq!(next_name(&mut events).await, "add c");
        let key = ObjectKey::namespaced("ns", "a");
        let stored = informer.store().get(&key).unwrap();
        assert_eq!(stored.metadata.resource_version.as_deref(), Some("1"));
        assert_eq!(informer.stats().panics, 2);
        assert!(informer.has_synced());

        // Its deletion still removes it, and tells with the last good version.
        tx.send(W::Delete(cm("a", "666"))).unwrap();
        assert_eq!(next_name(&mut events).await, "delete a");
        assert!(informer.store().get(&key).is_none());
        assert_eq!(informer.stats().panics, 3);
        assert_eq!(names(&informer.store().list()), ["c"]);
        informer.stop().await;
    }

    #[tokio::test]
    async fn a_watch_task_that_panics_ends_every_stream_and_says_it_failed() {
        let (tx, rx) = mpsc::unbounded_channel::<Option<W<Lenient<Arc<Cm>>>>>();
        // `None` stands for something in the watch (the engine, say) panicking.
        let stream = futures::stream::unfold(rx, |mut rx| async move {
            let event = rx.recv().await?;
            let event = event.expect("the watch broke");
            Some((Ok(event), rx))
        });
        let informer = start_on(
            "configmaps",
            stream,
            None,
            None,
            CancellationToken::new(),
            TaskTracker::new(),
            None,
            Arc::default(),
            None,
        );
        let mut events = informer.subscribe();
        for event in [W::Init, W::InitApply(cm("a", "1")), W::InitDone] {
            tx.send(Some(event)).unwrap();
        }
        assert_eq!(next_name(&mut events).await, "add a");
        informer
            .wait_for_sync(Duration::from_secs(5))
            .await
            .unwrap();
        assert!(informer.is_running());

        tx.send(None).unwrap();
        let end = tokio::time::timeout(Duration::from_secs(5), events.next()).await;
        assert!(matches!(end, Ok(None)), "the stream ends");
        assert!(informer.has_failed());
        assert!(!informer.is_running());
        assert!(!informer.has_synced());
        assert!(informer.is_stopped());
        assert!(matches!(
            informer.wait_for_sync(Duration::from_secs(5)).await,
            Err(SyncError::Failed { .. })
        ));
        // A late subscriber gets what the store held, then the end.
        let mut late = informer.subscribe();
        assert_eq!(next_name(&mut late).await, "add a");
        assert!(late.next().await.is_none());
        informer.stop().await;
    }
}
