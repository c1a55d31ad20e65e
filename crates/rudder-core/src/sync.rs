//! Locks that ignore poisoning: [`LockExt`] for `std::sync::Mutex`, [`RwLockExt`] for
//! `std::sync::RwLock`.
//!
//! A std lock is poisoned when a thread panics while holding it, and every later `lock()`
//! then returns an error. Rudder recovers the guard instead of failing, everywhere, for one
//! reason: no code path in Rudder panics while holding a lock (user code, such as a handler,
//! an index function or a reconciler, never runs under one; where it could panic it runs
//! inside `catch_unwind` with the lock released). So a poisoned lock can only follow a
//! broken invariant of Rudder's own, and the data under it is as consistent as after any
//! other completed critical section. Propagating the poison would turn one panic into a
//! panic in every task that touches the lock afterwards (a dead cache, a manager that cannot
//! stop), which is worse than going on with the data as it is.
//!
//! ```
//! use std::sync::{Mutex, RwLock};
//! use rudder_core::sync::{LockExt, RwLockExt};
//!
//! let counter = Mutex::new(0);
//! *counter.lock_unpoisoned() += 1;
//! let names = RwLock::new(vec!["a"]);
//! names.write_unpoisoned().push("b");
//! assert_eq!(names.read_unpoisoned().len(), 2);
//! assert_eq!(*counter.lock_unpoisoned(), 1);
//! ```

use std::sync::{Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// `lock()` that recovers a poisoned `Mutex` (see the [module](self) for why that is right).
pub trait LockExt<T: ?Sized> {
    /// Locks, ignoring poisoning.
    fn lock_unpoisoned(&self) -> MutexGuard<'_, T>;
}

impl<T: ?Sized> LockExt<T> for Mutex<T> {
    #[inline]
    fn lock_unpoisoned(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// `read()` and `write()` that recover a poisoned `RwLock` (see the [module](self) for why
/// that is right).
pub trait RwLockExt<T: ?Sized> {
    /// Locks for reading, ignoring poisoning.
    fn read_unpoisoned(&self) -> RwLockReadGuard<'_, T>;

    /// Locks for writing, ignoring poisoning.
    fn write_unpoisoned(&self) -> RwLockWriteGuard<'_, T>;
}

impl<T: ?Sized> RwLockExt<T> for RwLock<T> {
    #[inline]
    fn read_unpoisoned(&self) -> RwLockReadGuard<'_, T> {
        self.read().unwrap_or_else(PoisonError::into_inner)
    }

    #[inline]
    fn write_unpoisoned(&self) -> RwLockWriteGuard<'_, T> {
        self.write().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn a_poisoned_mutex_still_hands_out_its_data() {
        let shared = Arc::new(Mutex::new(1));
        let poisoner = Arc::clone(&shared);
        let _ = std::thread::spawn(move || {
            let _guard = poisoner.lock_unpoisoned();
            panic!("poison it");
        })
        .join();
        assert!(shared.is_poisoned());
        assert_eq!(*shared.lock_unpoisoned(), 1);
    }

    #[test]
    fn a_poisoned_rwlock_still_hands_out_its_data() {
        let shared = Arc::new(RwLock::new(1));
        let poisoner = Arc::clone(&shared);
        let _ = std::thread::spawn(move || {
            let _guard = poisoner.write_unpoisoned();
            panic!("poison it");
        })
        .join();
        assert!(shared.is_poisoned());
        *shared.write_unpoisoned() += 1;
        assert_eq!(*shared.read_unpoisoned(), 2);
    }
}
