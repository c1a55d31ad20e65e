//! [`Event`]: what the engine's stream carries, and the bookmark annotation that ends a
//! streaming list.

/// The annotation on the bookmark that ends a streaming list's initial events.
pub const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// One event of the engine's stream.
#[derive(Clone, Debug, PartialEq)]
pub enum Event<K> {
    /// A list begins (the first, or a relist): what it does not bring again is gone.
    Init,
    /// An object of the list.
    InitApply(K),
    /// The list has ended: the objects since [`Event::Init`] are the whole state.
    InitDone,
    /// An object added or changed.
    Apply(K),
    /// An object deleted.
    Delete(K),
}

impl<K> Event<K> {
    /// The same event with its object, if any, through `f`.
    pub(crate) fn map<T>(self, f: impl FnOnce(K) -> T) -> Event<T> {
        match self {
            Self::Init => Event::Init,
            Self::InitApply(object) => Event::InitApply(f(object)),
            Self::InitDone => Event::InitDone,
            Self::Apply(object) => Event::Apply(f(object)),
            Self::Delete(object) => Event::Delete(f(object)),
        }
    }
}
