//! [`Event`]: what a source saw happen to an object, from the informer to the handlers.

use std::sync::Arc;

use kube::Resource;

/// A change to an object, from the informer that saw it to the predicates and event handlers
/// of every controller watching it: one type all the way (controller-runtime's names), so no
/// layer renames a variant.
///
/// An informer (rudder-cache) emits `Create`, `Update` and `Delete`; `Generic` comes only from
/// sources outside the cluster (a channel source, a stream), as in controller-runtime.
#[derive(Debug)]
pub enum Event<K> {
    /// The object appeared: it was created, or is part of the state the source started from.
    Create {
        /// The object as stored.
        object: Arc<K>,
        /// It was part of the state the source started from (an informer's first list, or
        /// the replay of its store to a new subscriber) rather than a change seen since:
        /// handlers queue it at [`LOW_PRIORITY`](crate::LOW_PRIORITY) so new changes
        /// overtake it. An object that first appears in a later relist (it was created
        /// while the watch was down) is a change, so this is `false` for it, as in
        /// controller-runtime (client-go sets `isInInitialList` only for the first list).
        initial_list: bool,
    },
    /// The object changed (its resourceVersion differs), or a resync re-delivers it, in
    /// which case `old` and `new` are the same `Arc`.
    Update {
        /// The object as stored before.
        old: Arc<K>,
        /// The object as stored now.
        new: Arc<K>,
    },
    /// The object went away.
    Delete {
        /// The object from the delete event, or the last stored version when the delete was
        /// inferred from a relist.
        object: Arc<K>,
        /// The delete was inferred: the object was missing from a relist, so its final state
        /// (and whether it was deleted or only stopped matching the watch) is unknown, and
        /// `object` may be older than it.
        final_state_unknown: bool,
    },
    /// Something outside the cluster asks for the object to be looked at (never sent by an
    /// informer).
    Generic {
        /// The object.
        object: Arc<K>,
    },
}

impl<K> Clone for Event<K> {
    fn clone(&self) -> Self {
        match self {
            Self::Create {
                object,
                initial_list,
            } => Self::Create {
                object: Arc::clone(object),
                initial_list: *initial_list,
            },
            Self::Update { old, new } => Self::Update {
                old: Arc::clone(old),
                new: Arc::clone(new),
            },
            Self::Delete {
                object,
                final_state_unknown,
            } => Self::Delete {
                object: Arc::clone(object),
                final_state_unknown: *final_state_unknown,
            },
            Self::Generic { object } => Self::Generic {
                object: Arc::clone(object),
            },
        }
    }
}

impl<K> Event<K> {
    /// The object the event is about (the new state for an update).
    pub fn object(&self) -> &K {
        match self {
            Self::Create { object, .. }
            | Self::Delete { object, .. }
            | Self::Generic { object } => object,
            Self::Update { new, .. } => new,
        }
    }

    /// The object the event is about, shared (the new state of an update).
    pub fn object_arc(&self) -> &Arc<K> {
        match self {
            Self::Create { object, .. }
            | Self::Delete { object, .. }
            | Self::Generic { object } => object,
            Self::Update { new, .. } => new,
        }
    }

    /// The event's name as a cause gives it: [`kind`](Self::kind), except `initial` for an
    /// object of an informer's first list.
    pub fn cause_name(&self) -> &'static str {
        match self {
            Self::Create {
                initial_list: true, ..
            } => "initial",
            _ => self.kind(),
        }
    }

    /// The event's kind, for logs and metrics: `create`, `update`, `delete` or `generic`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Create { .. } => "create",
            Self::Update { .. } => "update",
            Self::Delete { .. } => "delete",
            Self::Generic { .. } => "generic",
        }
    }
}

impl<K: Resource> Event<K> {
    /// Whether the change is old news: part of the state the source started from (see
    /// `initial_list`), or a resync re-delivering an object whose resourceVersion did not
    /// change. Handlers queue such events at
    /// [`LOW_PRIORITY`](crate::LOW_PRIORITY).
    pub fn is_low_priority(&self) -> bool {
        match self {
            Self::Create { initial_list, .. } => *initial_list,
            Self::Update { old, new } => {
                let (old, new) = (old.meta(), new.meta());
                old.resource_version.is_some() && old.resource_version == new.resource_version
            }
            Self::Delete { .. } | Self::Generic { .. } => false,
        }
    }
}
