//! Shedding at the connection cap: the server's registry of open connections, from which the
//! accept loop picks the one idle longest to close when a new client needs its slot.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

// parking_lot's lock, as the connection's: no poisoning.
use parking_lot::{Mutex, MutexGuard};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::activity::{Activity, Idleness};

/// Every open connection's [`Activity`], by an id of its own.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    entries: Mutex<HashMap<u64, Arc<Activity>>>,
    next_id: AtomicU64,
    /// Woken when a connection may have become sheddable (its last request finished, or a
    /// shed it was asked for was declined), for an accept loop waiting at the cap.
    changed: Arc<Notify>,
    /// Connections closed by a shed.
    shed: AtomicU64,
}

/// What [`Registry::shed_longest_idle`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Shedding {
    /// A connection was asked to close; its slot frees once it has.
    Asked,
    /// A connection asked earlier has not closed yet: nothing more is asked until it has,
    /// so one new client costs one connection.
    Pending,
    /// Every connection has a request in flight: nothing may be shed.
    NoneIdle,
}

impl Registry {
    /// Registers a connection accepted now; it leaves the registry when the returned guard
    /// is dropped (with the connection's task).
    pub(crate) fn register(self: &Arc<Self>) -> Registered {
        let activity = Arc::new(Activity::new(Instant::now(), Arc::clone(&self.changed)));
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.entries().insert(id, Arc::clone(&activity));
        Registered {
            registry: Arc::clone(self),
            id,
            activity,
        }
    }

    /// Asks the connection idle longest to close: of those with no request in flight and
    /// their last answer written, the one whose idle spell began first (at its accept, for
    /// one that never sent a whole request). Bytes of an unfinished request head do not end
    /// a spell, so a client cannot keep its connection young by trickling a head.
    ///
    /// A linear scan: it runs only at the cap, once per accepted connection, over at most
    /// the cap's worth of entries.
    pub(crate) fn shed_longest_idle(&self) -> Shedding {
        let entries = self.entries();
        let mut oldest: Option<(Instant, &Arc<Activity>)> = None;
        for activity in entries.values() {
            match activity.idleness() {
                Idleness::Shedding => return Shedding::Pending,
                Idleness::Busy => {}
                Idleness::IdleSince(since) => {
                    if oldest.is_none_or(|(first, _)| since < first) {
                        oldest = Some((since, activity));
                    }
                }
            }
        }
        match oldest {
            Some((_, activity)) => {
                activity.ask_to_shed();
                Shedding::Asked
            }
            None => Shedding::NoneIdle,
        }
    }

    /// Resolves once a connection may have become sheddable since the last call (a stored
    /// wake-up is not lost between a scan and this wait).
    pub(crate) async fn changed(&self) {
        self.changed.notified().await;
    }

    /// Connections closed by a shed so far.
    pub(crate) fn shed_count(&self) -> u64 {
        self.shed.load(Ordering::Relaxed)
    }

    fn entries(&self) -> MutexGuard<'_, HashMap<u64, Arc<Activity>>> {
        self.entries.lock()
    }
}

/// A connection's place in the [`Registry`], held by its task.
#[derive(Debug)]
pub(crate) struct Registered {
    registry: Arc<Registry>,
    id: u64,
    activity: Arc<Activity>,
}

impl Registered {
    /// The connection's activity, shared with the registry's scans.
    pub(crate) fn activity(&self) -> &Arc<Activity> {
        &self.activity
    }

    /// Settles a shed the connection was asked for: `true` if it is to close now (it is
    /// still idle; counted), `false` if a request arrived first and it stays open, in which
    /// case the accept loop is told to pick another.
    pub(crate) fn settle_shed(&self) -> bool {
        if self.activity.confirm_shed() {
            self.registry.shed.fetch_add(1, Ordering::Relaxed);
            true
        } else {
            self.registry.changed.notify_one();
            false
        }
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.registry.entries().remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_longest_idle_is_asked_and_busy_ones_never_are() {
        let registry = Arc::new(Registry::default());
        let busy = registry.register();
        tokio::time::advance(std::time::Duration::from_secs(1)).await;
        let older = registry.register();
        tokio::time::advance(std::time::Duration::from_secs(1)).await;
        let younger = registry.register();
        let in_flight = busy.activity().request();

        assert_eq!(registry.shed_longest_idle(), Shedding::Asked);
        assert_eq!(older.activity().idleness(), Idleness::Shedding);
        // Until the asked one has settled, nobody else is asked.
        assert_eq!(registry.shed_longest_idle(), Shedding::Pending);
        assert!(older.settle_shed());
        drop(older);
        assert_eq!(registry.shed_count(), 1);

        // A request that arrives before the shed is settled keeps the connection open.
        assert_eq!(registry.shed_longest_idle(), Shedding::Asked);
        let late = younger.activity().request();
        assert!(!younger.settle_shed());
        assert_eq!(registry.shed_longest_idle(), Shedding::NoneIdle);
        assert_eq!(registry.shed_count(), 1);
        drop(late);
        tokio::time::advance(std::time::Duration::from_secs(1)).await;
        drop(in_flight);
        // Both idle again: the one whose request ended first goes first.
        assert_eq!(registry.shed_longest_idle(), Shedding::Asked);
        assert_eq!(younger.activity().idleness(), Idleness::Shedding);
    }
}
