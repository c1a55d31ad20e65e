//! The guard a worker holds while it processes a key.

use std::fmt;
use std::hash::Hash;
use std::ops::Deref;

use crate::WorkQueue;

/// A key handed to a worker by [`WorkQueue::get`].
///
/// While it exists no other worker receives the key. Dropping it, or calling
/// [`done`](Self::done), tells the queue the worker is finished; if the key was added again
/// meanwhile it is queued exactly once more. Because dropping counts as done, a worker that
/// panics cannot leave its key stuck.
pub struct WorkItem<K>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    key: K,
    slot: u32,
    priority: i32,
    queue: WorkQueue<K>,
}

impl<K> WorkItem<K>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    pub(crate) fn new(key: K, slot: u32, priority: i32, queue: WorkQueue<K>) -> Self {
        Self {
            key,
            slot,
            priority,
            queue,
        }
    }

    /// The key.
    pub fn key(&self) -> &K {
        &self.key
    }

    /// The priority the key was queued with.
    pub fn priority(&self) -> i32 {
        self.priority
    }

    /// The queue the key came from.
    pub fn queue(&self) -> &WorkQueue<K> {
        &self.queue
    }

    /// Marks the key done; the same as dropping the item.
    pub fn done(self) {}
}

impl<K> Drop for WorkItem<K>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    fn drop(&mut self) {
        self.queue.finish(self.slot);
    }
}

impl<K> Deref for WorkItem<K>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    type Target = K;

    fn deref(&self) -> &K {
        &self.key
    }
}

impl<K> fmt::Debug for WorkItem<K>
where
    K: Hash + Eq + Clone + Send + Sync + 'static + fmt::Debug,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkItem")
            .field("key", &self.key)
            .field("priority", &self.priority)
            .finish_non_exhaustive()
    }
}
