//! What a queued key may carry besides itself: a [`Payload`] merged on every add of the key
//! while it waits and handed to the worker with the key.

/// A value a queued key carries in the queue's own slot for it (one hash, one lock: no
/// second table beside the queue), merged on each add while the key waits and handed to the
/// worker that gets the key ([`WorkItem::take_payload`](crate::WorkItem::take_payload)).
///
/// A queue that carries nothing uses `()`, the default, which costs nothing: the slot does
/// not grow and no merge runs. A controller uses it to record why each key was queued.
///
/// An add made while the key is being processed merges into the payload of the key's next
/// run, not the one the worker holds. A payload lives as long as its key waits: the queue
/// drops it with the key (at shutdown, for a delayed key).
pub trait Payload: Default + Clone + Send + Sync + 'static {
    /// Merges `later`, the payload of an add made after those this one holds. An add
    /// carrying the default payload should change nothing. Called under the queue's lock:
    /// keep it short, and bounded in what it keeps (the queue holds one per waiting key).
    fn merge(&mut self, later: Self);
}

impl Payload for () {
    #[inline]
    fn merge(&mut self, (): ()) {}
}
