//! [`Event`]: what a source saw happen to an object.

use std::sync::Arc;

use kube::Resource;

/// A change a [`Source`](crate::Source) observed, handed to predicates and event handlers.
#[derive(Debug)]
pub enum Event<K> {
    /// The object appeared.
    Create {
        /// The object.
        object: Arc<K>,
        /// It was part of the state the source started from (an informer's first list, or
        /// the replay of its store to a new subscriber) rather than a change seen since:
        /// the handlers queue it at [`LOW_PRIORITY`](crate::LOW_PRIORITY) so new changes
        /// overtake it. An object that first appears in a later relist (it was created
        /// while the watch was down) is a change, so this is `false` for it, as in
        /// controller-runtime (client-go sets `isInInitialList` only for the first list).
        initial_list: bool,
    },
    /// The object changed (or was re-delivered by a resync, with the same resourceVersion).
    Update {
        /// The object before.
        old: Arc<K>,
        /// The object after.
        new: Arc<K>,
    },
    /// The object was deleted.
    Delete {
        /// The last state known of the object.
        object: Arc<K>,
        /// The deletion was inferred (the object vanished during a relist), so `object` may
        /// be older than its final state.
        final_state_unknown: bool,
    },
    /// Something outside the cluster asks for the object to be looked at.
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
