//! Shared informers, indexed stores and a cache reader for Kubernetes controllers.
//!
//! Start with [`Cache::builder`]: the cache gives out one shared [`Informer`] per type and
//! scope, and reads ([`Cache::get`], [`Cache::list`]) from their stores. An informer can also
//! be used alone, from [`Informer::builder`].
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use rudder_cache::{Cache, ListOptions, Scope};
//! use rudder_core::Event;
//! use tokio_util::sync::CancellationToken;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let client = kube::Client::try_default().await?;
//! let token = CancellationToken::new();
//! let cache = Cache::builder(client).default_namespace("default").build(&token);
//!
//! // Every caller asking for ConfigMaps shares this informer and its one watch.
//! let informer = cache.informer::<ConfigMap>(&Scope::namespace("default"))?;
//! cache.add_index::<ConfigMap, _>("owner", |cm| {
//!     cm.metadata.labels.iter().flatten()
//!         .filter(|(k, _)| *k == "owner")
//!         .map(|(_, v)| v.clone())
//!         .collect()
//! })?;
//! informer.add_handler(|event: Event<ConfigMap>| async move {
//!     match event {
//!         Event::Create { object, initial_list } => {
//!             println!("create {:?} ({initial_list})", object.metadata.name)
//!         }
//!         Event::Update { new, .. } => println!("update {:?}", new.metadata.name),
//!         Event::Delete { object, final_state_unknown } => {
//!             println!("delete {:?} ({final_state_unknown})", object.metadata.name)
//!         }
//!         // Only sources outside the cluster send these; an informer never does.
//!         Event::Generic { .. } => {}
//!     }
//! });
//! informer.wait_for_sync(Duration::from_secs(30)).await?;
//!
//! // Reads come from the store: no request to the API server.
//! let settings = cache.get::<ConfigMap>(Some("default"), "settings").await?;
//! let alices = cache.list::<ConfigMap>(&ListOptions::default().index("owner", "alice")).await?;
//! println!("{} {}", settings.is_some(), alices.len());
//!
//! cache.stop().await; // or token.cancel(); stop() also waits for every task to end
//! # Ok(())
//! # }
//! ```
//!
//! # Informers and their events
//!
//! An [`Informer`] runs one list/watch of Rudder's own engine ([`watch`], on kube-client's
//! HTTP client, with client-go's reflector's backoff) and applies each object to its
//! [`Store`] one at a time. Every
//! handler receives an [`Event`], rudder-core's, the same type the controllers' predicates
//! and event handlers take, so nothing is renamed on the way:
//!
//! - [`Event::Create`](rudder_core::Event::Create) for a new object, with `initial_list` set for objects from the first
//!   list (and for the replay a late handler gets, below);
//! - [`Event::Update`](rudder_core::Event::Update) with the old and new stored objects when the `resourceVersion`
//!   changed; a watch event that repeats the stored `resourceVersion` produces nothing;
//! - [`Event::Delete`](rudder_core::Event::Delete) with the deleted object, and `final_state_unknown` set when the
//!   delete was inferred from a relist rather than seen.
//!
//! An informer never sends [`Event::Generic`](rudder_core::Event::Generic): only sources outside the cluster do.
//!
//! A handler registered after the informer has (partly) listed first gets a `Create` for every
//! object already stored, then every change, without gap or overlap: the replay and the
//! registration happen under the lock the watch holds while it applies an event.
//! [`Informer::has_synced`] and [`Informer::wait_for_sync`] say when the first list is in.
//!
//! # Slow handlers
//!
//! Each handler ([`Informer::add_handler`], or a stream from [`Informer::subscribe`]) has an
//! unbounded queue of its own and, for `add_handler`, a task of its own. The watch only
//! pushes to the queues, so it never waits for a handler, and handlers never wait for each
//! other. A handler that falls behind keeps a backlog: one event per change, each a few
//! pointers sharing the stored `Arc`s (not copies of the objects); it then sees every event,
//! in order, as it catches up. Nothing is dropped or merged. [`EventStream::backlog`] tells
//! how far behind a stream consumer is. A handler that never catches up grows its queue
//! without bound, so handlers should do little more than enqueue a key (which is what
//! controllers do).
//!
//! # Relists
//!
//! When the watch cannot be resumed (410 Gone after compaction, or an expired watch), the
//! engine lists again. Every list has an epoch number; each listed object is stamped with
//! it as it is applied, and compared with the stored one by `resourceVersion`: new objects
//! give `Create`, changed ones `Update`, unchanged ones nothing (the listed copy is dropped at
//! once, keeping the stored `Arc`). At the end of the list, objects not stamped with the
//! epoch are removed and given to handlers as `Delete` with `final_state_unknown`. Peak
//! memory during a relist is therefore the store plus one list page, not two stores.
//!
//! # Resync
//!
//! With a resync period (the cache's default is [`DEFAULT_RESYNC`], 10 hours, plus up to 10%
//! jitter per informer; a bare informer has none), every stored object is re-delivered as an
//! `Update` whose `old` and `new` are the same `Arc`.
//!
//! # Store and indexes
//!
//! A [`Store`] holds `Arc<K>` by [`ObjectKey`] (namespace/name), with O(1) gets, a built-in
//! namespace index ([`NAMESPACE_INDEX`]) and indexes added with [`Store::add_index`]: a
//! name and a function from an object to the values it is filed under. Every add, update and
//! delete keeps them exact (an update that changes an object's values moves it), and
//! [`Store::by_index`] costs O(matches). Locks are held only to insert, remove or clone
//! `Arc`s out, never across an `await` or a handler call.
//!
//! # The cache
//!
//! [`Cache`] keeps one informer per (type, [`Scope`]): a namespace or all, and label and
//! field selectors. Typed objects ([`Cache::informer`]), dynamic objects
//! ([`Cache::dynamic_informer`]) and metadata-only objects (`Cache::informer` of
//! `PartialObjectMeta<K>`, which asks the server for metadata only) each have their own. [`CacheBuilder`] sets default namespaces (one informer per namespace and type,
//! read together by the reader; a read for a namespace outside them is
//! [`Error::NotCached`]), per-type scope and transform ([`ByObject`]), the resync period and
//! whether the reader may start informers ([`CacheBuilder::fail_on_missing_informer`]).
//! [`Cache::remove_informer`] stops a watch nothing needs any more.
//!
//! # How long an informer lives
//!
//! An informer runs as long as someone needs it. Users hold it with an [`InformerUse`]
//! ([`Cache::acquire`], [`Cache::acquire_dynamic`]; a controller's `Kind`
//! source holds one for each informer it reads while it runs): when the last use is dropped,
//! the informer stops and the cache forgets it. An informer asked for without a use
//! ([`Cache::informer`], [`Cache::dynamic_informer`]) or started by a read that found none running is
//! pinned: it runs until the cache stops or [`Cache::remove_informer`], as in
//! controller-runtime; a read of an informer someone holds does not pin it. A subscriber that
//! comes late gets the whole store replayed, then every change, with no gap and no overlap.
//! When the last handle to a store of 1,000 objects or more goes, its memory is given back to
//! the system (glibc's allocator keeps freed pages otherwise; `docs/benchmarks.md` measures
//! the RSS before an informer is created and after it is released).
//!
//! A resource the server does not serve (a `404` answer to the list or the watch: a CRD not
//! installed yet, or deleted) is not a watch error: the informer logs it once at `info`,
//! reports it ([`Informer::resource_served`]) and asks again quietly, 500 ms doubling to
//! 10 s. A store that held a list is emptied (subscribers get the deletes; every object went
//! with the CRD); one that never synced stays unsynced. When the resource is served again
//! the informer lists it and goes on.
//!
//! # Transforms and memory
//!
//! Every informer applies a transform to each object before storing it. The default,
//! [`strip_managed_fields`], drops `metadata.managedFields`, which controllers rarely read
//! and which is often the largest part of an object's metadata; set another with
//! [`InformerBuilder::transform`] or [`ByObject::transform`], or keep the field with
//! [`ByObject::keep_managed_fields`]. `docs/benchmarks.md` has the measured bytes per object.
//!
//! # Lists: streaming first, pages when the server refuses
//!
//! An informer lists with a streaming list by default ([`ListStrategy::Streaming`], what
//! client-go's reflector does from 0.35): one watch with `sendInitialEvents=true` sends the
//! current objects as events, each stored as it arrives, and a bookmark annotated
//! `k8s.io/initial-events-end` ends them; the informer has synced there and goes on watching
//! on the same connection. Neither the server nor the client holds the whole list at once.
//! Kubernetes serves it by default from 1.34. Where the server refuses it (a `400` or `422`
//! answer, as 1.27-1.33 give with the `WatchList` feature off) or sends no
//! end-of-initial-events bookmark and then nothing for
//! [`InformerBuilder::initial_events_bound`] (a server too old to know the parameter), the
//! informer falls back to paginated lists ([`ListStrategy::Paginated`], 500 objects a page),
//! logs it at `info` (the answer's code and reason; the whole answer at `debug`), counts it in [`InformerStats::streaming_fallbacks`] and reports it in
//! [`Informer::list_strategy`]; a refusal is not a watch error and is not retried with
//! backoff. The choice is the informer's: it streams again at the first relist
//! [`InformerBuilder::streaming_retry`] after falling back, never by breaking a healthy watch.
//! [`CacheBuilder::list_strategy`] and [`InformerBuilder::list_strategy`] make every list
//! paginated. Every informer, the [`Cache`]'s and one built with [`Informer::builder`] on
//! any `Api`, starts its lists at the most recent state (no `resourceVersion`, as client-go's
//! reflector does: the server answers once its watch cache is current, or reads etcd), so it
//! never syncs without an object written before it started. A watch that ends is resumed
//! from the last resourceVersion seen (bookmarks included), without a list. The first list stores each object as it arrives. A relist (a watch that cannot
//! resume, e.g. 410 Gone) replaces the store in one step at its end: objects it brings
//! unchanged (same resourceVersion) are only stamped, those it brings changed or new wait
//! aside, and when it ends they are applied and what it did not list removed (a delete with
//! `final_state_unknown`) under one write lock; readers see the store as it was before the
//! relist or as it is after, never a mix, and the relist holds a second copy only of what
//! changed.
//!
//! # The wire: protobuf for built-in types
//!
//! An informer of a built-in type (a k8s-openapi type such as `ConfigMap` or `Pod`) lists
//! and watches in protobuf (`application/vnd.kubernetes.protobuf`), as client-go's and
//! controller-runtime's do, and decodes each object straight into its k8s-openapi type with
//! the generated decoders of `rudder-protobuf`: the same values as from JSON, in fewer bytes
//! and less CPU. Custom resources, dynamic objects and metadata-only informers list and
//! watch in JSON. [`CacheBuilder::wire_format`] and [`InformerBuilder::wire_format`] with
//! [`WireFormat::Json`] ask for JSON everywhere. A server that answers JSON when asked for
//! protobuf (an aggregated API server may have none) is read in JSON from then on, said
//! once at `info`; an object whose protobuf does not decode makes the informer list again
//! in JSON, decoding each object on its own (below). [`InformerStats::wire_format`] and the
//! gauge `rudder_cache_wire_format{resource, format}` (with the `metrics` feature) say which
//! format an informer reads now.
//!
//! # Errors and malformed objects
//!
//! Watch errors never stop an informer: each is logged with `tracing`, counted in
//! [`Informer::stats`] and retried after the engine's backoff (client-go's reflector's:
//! 800 ms doubling to 30 s, jittered, [`rudder_core::backoff::Backoff`]). An object that
//! does not decode into the informer's type is logged at `warn`, counted as
//! [`InformerStats::malformed_objects`] (and, with the `metrics` feature, in
//! `rudder_cache_malformed_objects_total`) and skipped; the watch goes on. In a list, the
//! [`Cache`]'s typed informers (and any informer built with
//! [`InformerBuilder::skip_malformed`]) skip it the same way instead of failing the whole
//! list, which would keep the informer from ever syncing: once a page or a watch event
//! fails on such an object (a custom resource written under an older schema), the informer
//! lists again decoding each object on its own ([`Lenient`]). An object that turns malformed keeps its
//! last good version in the store until it is deleted. A bare [`Informer::builder`] decodes list pages whole: one
//! bad object fails the page, retried with backoff; a streaming list sends each object as an
//! event of its own, so there the bad one is skipped and counted like a bad watch event. Dynamic and metadata-only informers
//! decode anything.
//!
//! A list or watch the API server refuses (401 Unauthorized, 403 Forbidden: RBAC without
//! `list` or `watch` on the resource there) is not waited out: [`Informer::wait_for_sync`],
//! and so a read and [`Cache::wait_for_sync`], fails at once with [`SyncError::Refused`] (the
//! answer is its [`Refusal`]) while the informer retries with backoff, and syncs once it is
//! allowed ([`Informer::refusal`], [`Informer::wait_until_allowed`]). A streak of refusals
//! is logged once at `warn` (at `debug` while it lasts, once at `info` when it ends) and
//! each is counted in [`InformerStats::refusals`] (and, with the `metrics` feature, in
//! `rudder_cache_watch_refusals_total`, labels `resource` and `code`). The engine hands such
//! an answer over as [`watch::Error::Refused`], never logging it itself, so the informer's
//! line is the only one at `warn`.
//!
//! # Panics in user code
//!
//! Index functions and transforms run inside the watch task (index functions under the
//! store's write lock). A panic in one is caught: it is logged at `error` with the resource,
//! the object's `namespace/name` and the panic's message, counted in
//! [`InformerStats::panics`] (and, with the `metrics` feature, in `rudder_cache_panics_total`),
//! and the object is skipped like a malformed one: not stored, not sent, and a stored older
//! version stays until the object is deleted. Every index value is computed before the store
//! changes, so an object is always in the store and every index, or in none; the lock is
//! never poisoned. [`Store::add_index`] with a function that panics on a stored object fails
//! with [`IndexError::Panicked`] and adds nothing.
//!
//! Should the watch task still end by a panic (from elsewhere), the informer fails visibly:
//! it stops, its subscribers' streams end, [`Informer::has_failed`] is true,
//! [`Informer::has_synced`] and [`Informer::is_running`] are false and
//! [`Informer::wait_for_sync`] fails with [`SyncError::Failed`]. A [`Cache`] counts it in
//! [`Cache::failed_count`] and [`Cache::unsynced_count`] (so a manager's readiness turns
//! false) and starts a new informer the next time one is asked for.
//!
//! # Features
//!
//! | feature | what it adds |
//! |---|---|
//! | `metrics` | `rudder_cache_watch_errors_total` and `rudder_cache_malformed_objects_total` counters (label `resource`), `rudder_cache_watch_refusals_total` (labels `resource`, `code`: `401` or `403`), and `rudder_cache_panics_total` (labels `resource`, `function`: `index`, `transform` or `handler`), through the `metrics` crate; their names and descriptions in `metrics`; on in every manager (rudder-manager enables it) |
//!
//! # Shutdown
//!
//! Each informer runs a watch task and one task per `add_handler`, tracked together.
//! [`Informer::stop`] and [`Cache::stop`] cancel them and wait until every one has ended;
//! cancelling the token given to [`CacheBuilder::build`] stops them too. A handler finishes
//! the event it is on and gets no more; [`Informer::subscribe`] streams end. An informer
//! whose last handle and last `subscribe` stream are dropped stops by itself (its tasks end
//! shortly after, unwaited); a cache holds a handle to each of its informers.
//!
//! [`Event`]: rudder_core::Event

// Unit tests may spawn: the test is the owner. The library build keeps clippy's
// `disallowed_methods` (clippy.toml: a spawn is owned by whoever joins it).
#![cfg_attr(
    test,
    allow(
        clippy::disallowed_methods,
        reason = "unit tests may spawn: the test owns its tasks"
    )
)]
// Which feature brings an item, in docs.rs' rendering (`--cfg docsrs`, on nightly).
#![cfg_attr(docsrs, feature(doc_cfg))]

mod cache;
mod error;
mod informer;
mod lenient;
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub mod metrics;
mod release;
mod store;
mod transform;
mod unwind;
pub mod watch;
pub mod writes;

/// Internals the fuzz targets under `fuzz/` drive, in builds with `--cfg fuzzing` only
/// (cargo-fuzz sets it): not part of the API, and absent from every other build.
#[cfg(fuzzing)]
#[doc(hidden)]
#[allow(missing_docs)]
pub mod fuzzing {
    use std::io;

    use bytes::Bytes;

    /// The longest protobuf watch frame read.
    pub const MAX_FRAME: usize = crate::watch::wire::MAX_FRAME;

    /// The protobuf watch frame reader, fed the body's chunks.
    #[derive(Default)]
    pub struct Framer(crate::watch::wire::Framer);

    impl Framer {
        /// Takes the body's next chunk, once `next_frame` has no frame.
        pub fn push(&mut self, chunk: Bytes) {
            self.0.push(chunk);
        }

        /// The next whole frame, if the chunks so far hold one.
        pub fn next_frame(&mut self) -> Result<Option<Bytes>, io::Error> {
            self.0.next_frame()
        }

        /// The bytes held that are not a frame yet.
        pub fn buffered(&self) -> usize {
            self.0.buffered()
        }

        /// What the reader's buffer has allocated.
        pub fn reserved(&self) -> usize {
            self.0.reserved()
        }
    }
}

pub use cache::{
    ApiScope, ByObject, Cache, CacheBuilder, DEFAULT_SYNC_TIMEOUT, InformerUse, ListOptions, Scope,
    Typed,
};
pub use error::{Error, IndexError, Result, SyncError};
pub use informer::{
    DEFAULT_RESYNC, EventStream, Informer, InformerBuilder, InformerStats, Refusal,
};
pub use lenient::{Lenient, Malformed};
pub use store::{IndexFn, NAMESPACE_INDEX, ObjectKey, Store};
pub use transform::{Transform, strip_managed_fields};
pub use watch::strategy::{DEFAULT_INITIAL_EVENTS_BOUND, DEFAULT_STREAMING_RETRY, ListStrategy};
pub use watch::wire::WireFormat;
