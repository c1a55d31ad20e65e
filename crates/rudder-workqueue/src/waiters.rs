//! Parked getters, kept under the queue's own lock.
//!
//! A getter that finds nothing ready registers its waker here and sleeps; an add that makes a
//! key ready takes one waker out (first parked, first woken) and wakes it after the lock is
//! released. Keeping the list under the queue's lock, rather than in a separate
//! `tokio::sync::Notify`, means parking and waking cost no lock beyond the one the operation
//! takes anyway, and an add with nobody parked touches nothing at all.

use std::collections::VecDeque;
use std::task::Waker;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Free,
    Parked,
    Notified,
}

struct Waiter {
    waker: Option<Waker>,
    phase: Phase,
}

/// The parked getters. Ids are reused; a getter holds its id only while registered.
#[derive(Default)]
pub(crate) struct Waiters {
    slots: Vec<Waiter>,
    free: Vec<u32>,
    /// Parked (not yet notified) waiters, oldest first.
    order: VecDeque<u32>,
}

impl Waiters {
    /// How many getters are parked and not yet notified.
    #[cfg(test)]
    pub(crate) fn parked(&self) -> usize {
        self.order.len()
    }

    /// Registers a getter with its waker; returns its id.
    pub(crate) fn park(&mut self, waker: &Waker) -> u32 {
        let waiter = Waiter {
            waker: Some(waker.clone()),
            phase: Phase::Parked,
        };
        let id = match self.free.pop() {
            Some(id) => {
                self.slots[id as usize] = waiter;
                id
            }
            None => {
                self.slots.push(waiter);
                (self.slots.len() - 1) as u32
            }
        };
        self.order.push_back(id);
        id
    }

    /// Removes a registration. Returns whether the getter had been notified (and so owed the
    /// queue a look that it may now not take).
    pub(crate) fn unpark(&mut self, id: u32) -> bool {
        let w = &mut self.slots[id as usize];
        let notified = w.phase == Phase::Notified;
        if w.phase == Phase::Parked {
            // The list is as long as the number of parked getters: a handful of workers.
            if let Some(pos) = self.order.iter().position(|&o| o == id) {
                self.order.remove(pos);
            }
        }
        w.phase = Phase::Free;
        w.waker = None;
        self.free.push(id);
        notified
    }

    /// Whether the getter `id` has been notified since it parked.
    #[cfg(test)]
    pub(crate) fn is_notified(&self, id: u32) -> bool {
        self.slots[id as usize].phase == Phase::Notified
    }

    /// Notifies the longest-parked getter; returns its waker to wake after unlocking.
    pub(crate) fn notify_one(&mut self) -> Option<Waker> {
        let id = self.order.pop_front()?;
        let w = &mut self.slots[id as usize];
        w.phase = Phase::Notified;
        w.waker.take()
    }

    /// Notifies the getter `id` if it is still parked.
    pub(crate) fn notify(&mut self, id: u32) -> Option<Waker> {
        let w = &mut self.slots[id as usize];
        if w.phase != Phase::Parked {
            return None;
        }
        w.phase = Phase::Notified;
        let waker = w.waker.take();
        if let Some(pos) = self.order.iter().position(|&o| o == id) {
            self.order.remove(pos);
        }
        waker
    }

    /// Notifies every parked getter.
    pub(crate) fn notify_all(&mut self) -> Vec<Waker> {
        let mut wakers = Vec::with_capacity(self.order.len());
        while let Some(waker) = self.notify_one() {
            wakers.push(waker);
        }
        wakers
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_parked_is_first_notified_and_ids_are_reused() {
        let mut w = Waiters::default();
        let waker = Waker::noop();
        let a = w.park(waker);
        let b = w.park(waker);
        assert_eq!(w.parked(), 2);
        assert!(w.notify_one().is_some());
        assert!(w.is_notified(a) && !w.is_notified(b));
        assert!(w.unpark(a));
        assert!(!w.unpark(b));
        assert_eq!(w.parked(), 0);
        assert!(w.notify_one().is_none());
        let c = w.park(waker);
        assert!(c == a || c == b);
        assert!(w.notify(c).is_some());
        assert!(w.notify(c).is_none(), "notified twice");
        assert_eq!(w.notify_all().len(), 0);
    }
}
