//! The [`Predicate`] contract: which events reach the event handlers. [`MetaPredicate`]s
//! read only metadata, so one applies to events of any type; [`Compose`] combines either
//! kind with `and`, `or` and `not`.
//!
//! The predicates themselves (`GenerationChanged`, `LabelSelectorPredicate`, `Funcs`, ...)
//! live in rudder-handler.

use std::sync::Arc;

use kube::Resource;
use kube::core::ObjectMeta;

use crate::Event;

/// Decides whether an event goes on to the handler.
pub trait Predicate<K>: Send + Sync {
    /// `true` to let the event through.
    fn filter(&self, event: &Event<K>) -> bool;
}

/// Any `Fn(&Event<K>) -> bool` is a predicate.
impl<K, F> Predicate<K> for F
where
    F: Fn(&Event<K>) -> bool + Send + Sync,
{
    fn filter(&self, event: &Event<K>) -> bool {
        self(event)
    }
}

impl<K> Predicate<K> for Box<dyn Predicate<K>> {
    fn filter(&self, event: &Event<K>) -> bool {
        (**self).filter(event)
    }
}

/// An event seen through the object's metadata only, whatever its type: what a
/// [`MetaPredicate`] looks at. Not a second event type: it is a borrowed view of an
/// [`Event`] ([`MetaEvent::of`]) with the same variants under the same names, so that one
/// predicate, compiled once, applies to the watches of every type.
#[derive(Clone, Copy, Debug)]
pub enum MetaEvent<'a> {
    /// See [`Event::Create`].
    Create {
        /// The object's metadata.
        meta: &'a ObjectMeta,
        /// It came from a (re)list.
        initial_list: bool,
    },
    /// See [`Event::Update`].
    Update {
        /// The metadata before.
        old: &'a ObjectMeta,
        /// The metadata after.
        new: &'a ObjectMeta,
    },
    /// See [`Event::Delete`].
    Delete {
        /// The last metadata known.
        meta: &'a ObjectMeta,
        /// The deletion was inferred during a relist.
        final_state_unknown: bool,
    },
    /// See [`Event::Generic`].
    Generic {
        /// The object's metadata.
        meta: &'a ObjectMeta,
    },
}

impl<'a> MetaEvent<'a> {
    /// The metadata view of `event`.
    pub fn of<K: Resource>(event: &'a Event<K>) -> Self {
        match event {
            Event::Create {
                object,
                initial_list,
            } => Self::Create {
                meta: object.meta(),
                initial_list: *initial_list,
            },
            Event::Update { old, new } => Self::Update {
                old: old.meta(),
                new: new.meta(),
            },
            Event::Delete {
                object,
                final_state_unknown,
            } => Self::Delete {
                meta: object.meta(),
                final_state_unknown: *final_state_unknown,
            },
            Event::Generic { object } => Self::Generic {
                meta: object.meta(),
            },
        }
    }

    /// The metadata the event is about (the new state for an update).
    pub fn meta(&self) -> &'a ObjectMeta {
        match *self {
            Self::Create { meta, .. } | Self::Delete { meta, .. } | Self::Generic { meta } => meta,
            Self::Update { new, .. } => new,
        }
    }
}

/// A predicate that reads only metadata, so it applies to events of any type: the kind a
/// controller applies to all its watches (controller-runtime's `WithEventFilter`).
///
/// Every `MetaPredicate` is also a [`Predicate<K>`] for each `K: Resource`, through
/// [`MetaPredicates`]. rudder-handler's built-in update predicates, its
/// `LabelSelectorPredicate` and [`And`] / [`Or`] / [`Not`] of them are both; so is any
/// `Fn(MetaEvent<'_>) -> bool`.
pub trait MetaPredicate: Send + Sync {
    /// `true` to let the event through.
    fn filter_meta(&self, event: MetaEvent<'_>) -> bool;
}

impl<F> MetaPredicate for F
where
    F: Fn(MetaEvent<'_>) -> bool + Send + Sync,
{
    fn filter_meta(&self, event: MetaEvent<'_>) -> bool {
        self(event)
    }
}

/// A list of [`MetaPredicate`]s, all of which must pass, usable as a [`Predicate<K>`] for
/// any resource type; cloning shares the list.
#[derive(Clone, Default)]
pub struct MetaPredicates(Arc<[Arc<dyn MetaPredicate>]>);

impl MetaPredicates {
    /// All of `predicates`.
    pub fn new(predicates: Vec<Arc<dyn MetaPredicate>>) -> Self {
        Self(predicates.into())
    }

    /// Whether there are none (every event passes).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::fmt::Debug for MetaPredicates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetaPredicates")
            .field("len", &self.0.len())
            .finish()
    }
}

impl MetaPredicate for MetaPredicates {
    fn filter_meta(&self, event: MetaEvent<'_>) -> bool {
        self.0.iter().all(|p| p.filter_meta(event))
    }
}

impl<K: Resource> Predicate<K> for MetaPredicates {
    fn filter(&self, event: &Event<K>) -> bool {
        self.filter_meta(MetaEvent::of(event))
    }
}

/// Composes predicates (and [`MetaPredicate`]s) by method: `a.and(b)`, `a.or(b)`, `a.not()`
/// give [`And`], [`Or`] and [`Not`], which are predicates of whatever kind both sides are.
///
/// ```
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use rudder_core::{Compose, Event, MetaEvent, Predicate};
///
/// let named = |e: &Event<ConfigMap>| e.object().metadata.name.is_some();
/// let initial = |e: MetaEvent<'_>| matches!(e, MetaEvent::Create { initial_list: true, .. });
/// fn takes(_: impl Predicate<ConfigMap>) {}
/// takes(named.and(named.not()).or(named));
/// fn takes_meta(_: impl rudder_core::MetaPredicate) {}
/// takes_meta(initial.not());
/// ```
pub trait Compose: Sized {
    /// Both must let the event through.
    fn and<B>(self, other: B) -> And<Self, B> {
        And(self, other)
    }

    /// Either lets the event through.
    fn or<B>(self, other: B) -> Or<Self, B> {
        Or(self, other)
    }

    /// Lets through what this drops.
    fn not(self) -> Not<Self> {
        Not(self)
    }
}

impl<P: Sized> Compose for P {}

/// Both predicates must let the event through.
#[derive(Clone, Copy, Debug, Default)]
pub struct And<A, B>(pub A, pub B);

impl<K, A: Predicate<K>, B: Predicate<K>> Predicate<K> for And<A, B> {
    fn filter(&self, event: &Event<K>) -> bool {
        self.0.filter(event) && self.1.filter(event)
    }
}

impl<A: MetaPredicate, B: MetaPredicate> MetaPredicate for And<A, B> {
    fn filter_meta(&self, event: MetaEvent<'_>) -> bool {
        self.0.filter_meta(event) && self.1.filter_meta(event)
    }
}

/// Either predicate lets the event through.
#[derive(Clone, Copy, Debug, Default)]
pub struct Or<A, B>(pub A, pub B);

impl<K, A: Predicate<K>, B: Predicate<K>> Predicate<K> for Or<A, B> {
    fn filter(&self, event: &Event<K>) -> bool {
        self.0.filter(event) || self.1.filter(event)
    }
}

impl<A: MetaPredicate, B: MetaPredicate> MetaPredicate for Or<A, B> {
    fn filter_meta(&self, event: MetaEvent<'_>) -> bool {
        self.0.filter_meta(event) || self.1.filter_meta(event)
    }
}

/// Lets through what the inner predicate drops.
#[derive(Clone, Copy, Debug, Default)]
pub struct Not<P>(pub P);

impl<K, P: Predicate<K>> Predicate<K> for Not<P> {
    fn filter(&self, event: &Event<K>) -> bool {
        !self.0.filter(event)
    }
}

impl<P: MetaPredicate> MetaPredicate for Not<P> {
    fn filter_meta(&self, event: MetaEvent<'_>) -> bool {
        !self.0.filter_meta(event)
    }
}
