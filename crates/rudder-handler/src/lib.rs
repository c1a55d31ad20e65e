//! From "something changed" to "reconcile this key": events, requests, event handlers,
//! predicates and sources, in the shape of Go controller-runtime's `handler`, `predicate`
//! and `source` packages.
//!
//! A controller watches [`Source`]s. Each [`Event`] a source yields passes the watch's
//! [`Predicate`]s, then its [`EventHandler`] turns it into [`Request`]s on the controller's
//! work queue.
//!
//! The contracts ([`Event`], [`Request`], [`Source`], [`EventHandler`], [`Predicate`],
//! [`MetaPredicate`], [`Compose`]) are rudder-core's, and reached there only (one path per
//! item); this crate holds the concrete sources, handlers and predicates. A library that
//! writes its own depends on rudder-core alone.
//!
//! ```
//! use std::sync::Arc;
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use kube::core::ObjectMeta;
//! use rudder_core::{Event, EventHandler, Predicate, Queue, Request};
//! use rudder_handler::{EnqueueObject, GenerationChanged};
//!
//! let queue = Queue::default();
//! let object = Arc::new(ConfigMap {
//!     metadata: ObjectMeta {
//!         namespace: Some("default".into()),
//!         name: Some("settings".into()),
//!         ..ObjectMeta::default()
//!     },
//!     ..ConfigMap::default()
//! });
//! let event = Event::Create { object, initial_list: false };
//! if GenerationChanged.filter(&event) {
//!     EnqueueObject.handle(&event, &queue);
//! }
//! let item = queue.try_get().expect("queued");
//! assert_eq!(*item.key(), Request::namespaced("default", "settings"));
//! ```
//!
//! # Requests
//!
//! A [`Request`] names an object (namespace and name); it is the work queue's key, so a burst
//! of events about one object becomes one reconcile.
//!
//! # Handlers
//!
//! [`EnqueueObject`] queues the object itself; [`EnqueueOwner`] its owner of a given type (the
//! controller owner by default); [`EnqueueMapped`] whatever a function maps it to;
//! [`HandlerFuncs`] runs closures per event kind. Events that are old news (objects from the
//! first list, resyncs that changed nothing) are queued at [`LOW_PRIORITY`] so that new changes
//! overtake them.
//!
//! # Predicates
//!
//! [`GenerationChanged`], [`ResourceVersionChanged`], [`LabelChanged`],
//! [`AnnotationChanged`], [`LabelSelectorPredicate`], the combinators [`And`], [`Or`] and
//! [`Not`], [`Funcs`] with a closure per event kind, and any `Fn(&Event<K>) -> bool`.
//!
//! # Sources
//!
//! [`Kind`] for a type's shared informer from rudder-cache, [`channel`] for events from
//! outside the cluster, [`from_stream`] for any stream of events; each has a [`Synced`]
//! signal.
//!
//! [`Compose`]: rudder_core::Compose
//! [`MetaPredicate`]: rudder_core::MetaPredicate
//! [`LOW_PRIORITY`]: rudder_core::LOW_PRIORITY
//! [`And`]: rudder_core::And
//! [`Or`]: rudder_core::Or
//! [`Not`]: rudder_core::Not
//! [`EventHandler`]: rudder_core::EventHandler
//! [`Predicate`]: rudder_core::Predicate
//! [`Event`]: rudder_core::Event
//! [`Request`]: rudder_core::Request
//! [`Source`]: rudder_core::Source

mod handler;
mod kind;
mod predicate;
mod source;

pub use handler::{EnqueueMapped, EnqueueObject, EnqueueOwner, HandlerFuncs};
pub use kind::{Kind, resubscribing};
pub use predicate::{
    AnnotationChanged, DropOwnEchoes, Funcs, GenerationChanged, LabelChanged,
    LabelSelectorPredicate, ResourceVersionChanged,
};
pub(crate) use rudder_core::Event;
pub(crate) use rudder_core::Request;
pub use source::{
    ChannelSource, EventSender, SourceClosed, StreamSource, channel, from_stream,
    from_stream_with_sync,
};
pub(crate) use source::{Source, Synced};
