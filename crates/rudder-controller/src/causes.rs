//! Why each queued key was queued: the controller's book of [`Causes`] by key, filled as keys
//! are added and emptied as they are reconciled.
//!
//! A watch's handler enqueues through the plain queue (`queue.add(request)`), so the watch
//! task names the cause of what it is handling in a thread-local slot for the length of the
//! (synchronous) `handle` call, and the queue's add hook ([`WorkQueue::on_add`]) files it
//! under each key the handler adds. The worker files its own re-adds (a requeue, a retry)
//! directly, and the shard hand-off its keys'. Puts back that only move a key in the queue
//! (a closed leader gate, a key held for its own writes) file nothing: the causes stay until
//! the reconcile takes them.
//!
//! [`WorkQueue::on_add`]: rudder_workqueue::Builder::on_add

use std::cell::RefCell;
use std::hash::BuildHasher;
use std::sync::Mutex;

use hashbrown::{DefaultHashBuilder, HashTable};

use rudder_core::Request;
use rudder_core::cause::Cause;
use rudder_core::cause::Causes;
use rudder_core::sync::LockExt;

thread_local! {
    /// The cause of what the watch task on this thread is handling, while it handles it.
    static HANDLING: RefCell<Option<Cause>> = const { RefCell::new(None) };
}

/// Runs `handle` with `cause` as the cause of every key it adds to a controller's queue on
/// this thread.
pub(crate) fn handling<T>(cause: Cause, handle: impl FnOnce() -> T) -> T {
    /// Puts back what the slot held before however `handle` ends: a handler that drives
    /// another watch's handling inside its own gets its own cause back after it.
    struct Restore(Option<Cause>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let outer = self.0.take();
            HANDLING.with(|slot| *slot.borrow_mut() = outer);
        }
    }
    let outer = HANDLING.with(|slot| slot.borrow_mut().replace(cause));
    let _restore = Restore(outer);
    handle()
}

/// The causes of the keys queued and not yet reconciled: a table hashed once per call (with
/// the work queue's fast hasher, hashed before the lock is taken), so filing a cause costs
/// one lookup and, for a key not yet waiting, one insert.
#[derive(Default)]
pub(crate) struct Book {
    causes: Mutex<HashTable<(Request, Causes)>>,
    hasher: DefaultHashBuilder,
}

impl std::fmt::Debug for Book {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Book").finish_non_exhaustive()
    }
}

impl Book {
    /// Files `cause` under `key`, merged with what it waits with.
    pub(crate) fn file(&self, key: &Request, cause: Cause) {
        let hash = self.hasher.hash_one(key);
        let mut causes = self.causes.lock_unpoisoned();
        match causes.find_mut(hash, |(k, _)| k == key) {
            Some((_, waiting)) => waiting.merge(cause),
            None => {
                causes.insert_unique(hash, (key.clone(), Causes::new(cause)), |(k, _)| {
                    self.hasher.hash_one(k)
                });
            }
        }
    }

    /// The queue's add hook: files the cause being handled on this thread, if any.
    pub(crate) fn file_handled(&self, key: &Request) {
        let cause = HANDLING.with(|slot| slot.borrow().clone());
        if let Some(cause) = cause {
            self.file(key, cause);
        }
    }

    /// Takes the causes of `key`, as its reconcile starts (or as the key is dropped).
    pub(crate) fn take(&self, key: &Request) -> Option<Causes> {
        let hash = self.hasher.hash_one(key);
        let mut causes = self.causes.lock_unpoisoned();
        let entry = causes.find_entry(hash, |(k, _)| k == key).ok()?;
        Some(entry.remove().0.1)
    }

    /// How many keys have causes filed.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.causes.lock_unpoisoned().len()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn a_handled_cause_is_filed_under_each_key_added_and_only_while_handling() {
        let book = Book::default();
        let (a, b) = (
            Request::namespaced("ns", "a"),
            Request::namespaced("ns", "b"),
        );
        book.file_handled(&a);
        assert_eq!(book.len(), 0, "nothing handled: nothing filed");
        handling(Cause::new(Arc::from("for"), "create"), || {
            book.file_handled(&a);
            book.file_handled(&b);
        });
        book.file_handled(&a);
        let causes = book.take(&a).unwrap();
        assert_eq!((causes.count(), causes.first().source()), (1, "for"));
        assert_eq!(book.take(&b).unwrap().count(), 1);
        assert!(book.take(&a).is_none());
        // Nested: the inner cause while inside, the outer one again after.
        handling(Cause::new(Arc::from("outer"), "update"), || {
            handling(Cause::new(Arc::from("inner"), "create"), || {
                book.file_handled(&a);
            });
            book.file_handled(&b);
        });
        assert_eq!(book.take(&a).unwrap().first().source(), "inner");
        assert_eq!(book.take(&b).unwrap().first().source(), "outer");
        book.file_handled(&a);
        assert!(
            book.take(&a).is_none(),
            "nothing filed after the outer handling"
        );
    }
}
