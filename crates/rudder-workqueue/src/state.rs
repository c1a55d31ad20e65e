//! The queue's bookkeeping behind its one lock: key slots, the ready queue, the delayed heap.
//!
//! Every key the queue knows lives in one slot of a slab, found through a hash table that
//! stores slot numbers. The ready queue and the delayed heap hold slot numbers too, so a key
//! is stored once and handing it around inside the queue never clones it. Their entries carry
//! the slot's generation when they were pushed; when a key is re-ranked (a higher priority, an
//! earlier ready time) the generation moves on and the old entry is skipped when it surfaces.
//! Slots of keys that are neither waiting nor processing are freed at once, so the queue
//! holds nothing for keys that are gone.
//!
//! Time is read lazily, through a closure, and only when an answer depends on it: with
//! strict priority an immediate add reads no clock at all; with ageing it reads it once, for
//! the time the key became ready.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::hash::Hash;

use hashbrown::HashTable;
use hashbrown::hash_table::Entry;

use crate::Payload;
use crate::clock::Nanos;
use crate::ready::{Place, ReadyQueue};
use crate::waiters::Waiters;

/// A ready time meaning "as soon as possible", which needs no clock to compare.
pub(crate) const NOW: Nanos = 0;

/// Where a key stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// The slot is on the free list.
    Free,
    /// Waiting in the ready queue.
    Ready,
    /// Waiting in the delayed heap for its ready time.
    Delayed,
    /// Handed to a worker; nothing is pending.
    Processing,
    /// Handed to a worker and added again since; it is queued once more when the worker is done.
    Dirty,
}

struct Slot<K, P> {
    key: Option<K>,
    /// What the adds of the pending run carried, merged ([`Payload`]); taken when the key
    /// is handed out.
    payload: P,
    hash: u64,
    phase: Phase,
    generation: u32,
    /// The priority of the pending run (for `Dirty`, of the run after the current one).
    priority: i32,
    /// When the pending run may start (for `Dirty`, the run after the current one); [`NOW`]
    /// for at once.
    ready_at: Nanos,
    /// Metrics only: when the key became ready (queue latency) or was handed out (work time).
    stamp: Nanos,
    /// Position in `in_flight` while processing (kept with metrics on only).
    in_flight_pos: u32,
    /// While ready: its place in line, kept when the key moves to a higher priority.
    place: Place,
}

/// Takes a free slot (or a new one) for `key`; the caller puts it in the index.
fn alloc<K, P>(
    slots: &mut Vec<Slot<K, P>>,
    free: &mut Vec<u32>,
    key: K,
    payload: P,
    hash: u64,
) -> u32 {
    let fresh = Slot {
        key: Some(key),
        payload,
        hash,
        phase: Phase::Free,
        generation: 0,
        priority: 0,
        ready_at: NOW,
        stamp: 0,
        in_flight_pos: 0,
        place: Place::default(),
    };
    match free.pop() {
        Some(slot) => {
            let s = &mut slots[slot as usize];
            let generation = s.generation;
            *s = fresh;
            s.generation = generation;
            slot
        }
        None => {
            slots.push(fresh);
            (slots.len() - 1) as u32
        }
    }
}

/// Delayed heap order: earliest ready time first, then insertion order.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct DelayedEntry {
    ready_at: Nanos,
    seq: u64,
    slot: u32,
    generation: u32,
}

/// A parked getter's timer: when it fires, and which getter holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Armed {
    pub(crate) at: Nanos,
    pub(crate) waiter: u32,
}

/// What an operation did, so the caller can wake workers and report metrics after unlocking.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Effect {
    /// A key became ready: a waiting worker may take it.
    pub(crate) became_ready: bool,
    /// A delayed key now has the earliest ready time: the timer must be re-armed.
    pub(crate) new_earliest_delay: bool,
    /// The add put a key into the queue or marked a processing key dirty (client-go's adds).
    pub(crate) counted_add: bool,
}

/// A key handed out by [`State::pop`].
pub(crate) struct Popped<K, P> {
    pub(crate) key: K,
    pub(crate) payload: P,
    pub(crate) slot: u32,
    pub(crate) priority: i32,
    /// How long the key waited since it became ready (with metrics on).
    pub(crate) queued_for: Nanos,
}

/// What [`State::done`] did.
pub(crate) struct Finished {
    pub(crate) effect: Effect,
    /// How long the worker held the key (with metrics on).
    pub(crate) worked_for: Nanos,
}

pub(crate) struct State<K, P> {
    slots: Vec<Slot<K, P>>,
    free: Vec<u32>,
    index: HashTable<u32>,
    ready: ReadyQueue,
    delayed: BinaryHeap<Reverse<DelayedEntry>>,
    delayed_len: usize,
    /// Processing keys that were added again (they run once more when done).
    dirty_len: usize,
    /// Slots being processed, kept only with metrics on (`track_time`): the unfinished-work
    /// gauges read it. `processing` counts them either way.
    in_flight: Vec<u32>,
    /// Keys handed to workers and not yet done.
    processing: usize,
    seq: u64,
    /// Whether to stamp keys for metrics.
    track_time: bool,
    pub(crate) shutting_down: bool,
    /// Getters currently parked waiting for work.
    pub(crate) waiters: Waiters,
    /// The timer a parked getter has armed for the earliest delayed key, if any.
    pub(crate) armed: Option<Armed>,
}

impl<K, P> State<K, P> {
    /// Keys ready to be handed out.
    pub(crate) fn ready_len(&self) -> usize {
        self.ready.len()
    }

    /// client-go's depth: ready keys plus processing keys that will run again.
    pub(crate) fn depth(&self) -> usize {
        self.ready.len() + self.dirty_len
    }

    /// Keys waiting for their ready time.
    pub(crate) fn delayed_len(&self) -> usize {
        self.delayed_len
    }

    /// Keys handed to workers and not yet done.
    pub(crate) fn processing_len(&self) -> usize {
        self.processing
    }

    /// Sum of the time in-flight keys have been processing, and the longest of them.
    pub(crate) fn unfinished(&self, now: Nanos) -> (Nanos, Nanos) {
        self.in_flight.iter().fold((0, 0), |(sum, longest), &slot| {
            let took = now.saturating_sub(self.slots[slot as usize].stamp);
            (sum.saturating_add(took), longest.max(took))
        })
    }

    /// Bytes the queue's own structures hold (keys' heap data not included).
    pub(crate) fn footprint(&self) -> usize {
        self.slots.capacity() * size_of::<Slot<K, P>>()
            + self.free.capacity() * size_of::<u32>()
            + self.index.allocation_size()
            + self.ready.footprint()
            + self.delayed.capacity() * size_of::<Reverse<DelayedEntry>>()
            + self.in_flight.capacity() * size_of::<u32>()
    }
}

impl<K: Hash + Eq + Clone, P: Payload> State<K, P> {
    /// `aging`: nanoseconds of waiting worth one priority level (`None`: strict priority).
    /// `track_time`: stamp keys for the latency metrics.
    pub(crate) fn new(aging: Option<u64>, track_time: bool) -> Self {
        Self {
            slots: Vec::new(),
            free: Vec::new(),
            index: HashTable::new(),
            ready: ReadyQueue::new(aging),
            delayed: BinaryHeap::new(),
            delayed_len: 0,
            dirty_len: 0,
            in_flight: Vec::new(),
            processing: 0,
            seq: 0,
            track_time,
            shutting_down: false,
            waiters: Waiters::default(),
            armed: None,
        }
    }

    /// The earliest ready time of a delayed key, skipping stale heap entries on the way.
    pub(crate) fn next_ready_at(&mut self) -> Option<Nanos> {
        while let Some(Reverse(top)) = self.delayed.peek().copied() {
            if self.is_live_delayed(&top) {
                return Some(top.ready_at);
            }
            self.delayed.pop();
        }
        None
    }

    /// Adds (or merges) a request for `key` (whose hash, from the queue's hasher, is `hash`)
    /// to run `delay` from now (0: at once), with `priority`, carrying `payload` (merged into
    /// the pending run's, even when the add changes nothing else; dropped at shutdown).
    ///
    /// `now` is only called when the answer depends on the time: a dedup hit never reads the
    /// clock, nor does an immediate add with strict priority.
    #[inline]
    pub(crate) fn add(
        &mut self,
        key: K,
        hash: u64,
        delay: Nanos,
        priority: i32,
        payload: P,
        now: &mut impl FnMut() -> Nanos,
    ) -> Effect {
        let mut effect = Effect::default();
        if self.shutting_down {
            return effect;
        }
        // Keys already due go ahead of this one, as they would had they been moved on time.
        if self.delayed_len > 0 {
            self.promote(now());
        }
        let ready_at = |now: &mut dyn FnMut() -> Nanos| {
            if delay == 0 {
                NOW
            } else {
                now().saturating_add(delay)
            }
        };
        // One probe finds the key or the place to insert it.
        let slots = &self.slots;
        let entry = self.index.entry(
            hash,
            |&s| slots[s as usize].key.as_ref() == Some(&key),
            |&s| slots[s as usize].hash,
        );
        let slot = match entry {
            Entry::Occupied(found) => *found.get(),
            Entry::Vacant(vacant) => {
                let slot = alloc(&mut self.slots, &mut self.free, key, payload, hash);
                vacant.insert(slot);
                effect.counted_add = true;
                let at = ready_at(now);
                self.enqueue(slot, at, priority, now, &mut effect);
                return effect;
            }
        };
        let s = &mut self.slots[slot as usize];
        s.payload.merge(payload);
        match s.phase {
            Phase::Ready => {
                // Already runnable; only a higher priority changes its place.
                // It keeps its place in line and its wait: it became ready when it did.
                if priority > s.priority {
                    let old = s.priority;
                    s.priority = priority;
                    let place = s.place;
                    self.ready.forget(old);
                    self.push_ready(slot, priority, place);
                }
            }
            Phase::Delayed => {
                let old_ready = s.ready_at;
                let new_ready = ready_at(now).min(old_ready);
                let new_priority = priority.max(s.priority);
                if new_ready != old_ready || new_priority != s.priority {
                    self.delayed_len -= 1;
                    self.enqueue(slot, new_ready, new_priority, now, &mut effect);
                }
            }
            Phase::Processing => {
                s.phase = Phase::Dirty;
                s.priority = priority;
                self.slots[slot as usize].ready_at = ready_at(now);
                self.dirty_len += 1;
                effect.counted_add = true;
            }
            Phase::Dirty => {
                let old_ready = s.ready_at;
                s.priority = s.priority.max(priority);
                if old_ready != NOW {
                    let new_ready = ready_at(now).min(old_ready);
                    self.slots[slot as usize].ready_at = new_ready;
                }
            }
            Phase::Free => unreachable!("the index never points at a free slot"),
        }
        effect
    }

    /// Moves delayed keys whose time has come into the ready queue, in the order they became
    /// due.
    pub(crate) fn promote(&mut self, now: Nanos) {
        while let Some(Reverse(top)) = self.delayed.peek().copied() {
            if top.ready_at > now {
                break;
            }
            self.delayed.pop();
            if !self.is_live_delayed(&top) {
                continue;
            }
            let s = &mut self.slots[top.slot as usize];
            s.phase = Phase::Ready;
            // Queue latency and ageing count from when the key became due, however late it
            // moved.
            s.stamp = top.ready_at;
            let priority = s.priority;
            self.delayed_len -= 1;
            let place = self.ready.place(top.ready_at);
            self.push_ready(top.slot, priority, place);
        }
    }

    /// Hands out the best ready key, marking it processing. `now` matters only for metrics.
    #[inline]
    pub(crate) fn pop(&mut self, now: Nanos) -> Option<Popped<K, P>> {
        let slots = &self.slots;
        let head = self.ready.pop(|slot, generation| {
            let s = &slots[slot as usize];
            s.generation == generation && s.phase == Phase::Ready
        })?;
        let s = &mut self.slots[head.slot as usize];
        let Some(key) = s.key.clone() else {
            unreachable!("a queued slot always holds its key")
        };
        let payload = std::mem::take(&mut s.payload);
        s.phase = Phase::Processing;
        let queued_for = now.saturating_sub(s.stamp);
        s.stamp = now;
        let priority = s.priority;
        self.processing += 1;
        if self.track_time {
            s.in_flight_pos = self.in_flight.len() as u32;
            self.in_flight.push(head.slot);
        }
        Some(Popped {
            key,
            payload,
            slot: head.slot,
            priority,
            queued_for,
        })
    }

    /// Marks the key in `slot` done; requeues it once if it was added while processing.
    #[inline]
    pub(crate) fn done(&mut self, slot: u32, now: &mut impl FnMut() -> Nanos) -> Finished {
        let mut effect = Effect::default();
        let s = &self.slots[slot as usize];
        let phase = s.phase;
        let (ready_at, priority) = (s.ready_at, s.priority);
        let pos = s.in_flight_pos as usize;
        let worked_for = if self.track_time {
            now().saturating_sub(s.stamp)
        } else {
            0
        };
        debug_assert!(matches!(phase, Phase::Processing | Phase::Dirty));
        self.processing -= 1;
        if self.track_time {
            self.in_flight.swap_remove(pos);
            if let Some(&moved) = self.in_flight.get(pos) {
                self.slots[moved as usize].in_flight_pos = pos as u32;
            }
        }
        if phase != Phase::Dirty {
            self.release(slot);
            return Finished { effect, worked_for };
        }
        self.dirty_len -= 1;
        if self.delayed_len > 0 {
            self.promote(now());
        }
        if self.shutting_down && ready_at != NOW && ready_at > now() {
            // Delayed runs are dropped at shutdown.
            self.release(slot);
        } else {
            self.enqueue(slot, ready_at, priority, now, &mut effect);
        }
        Finished { effect, worked_for }
    }

    /// Stops accepting adds and drops keys still delayed; ready and processing keys stay.
    pub(crate) fn shut_down(&mut self, now: Nanos) {
        // Keys already due stay, even if nobody has moved them to the ready queue yet.
        self.promote(now);
        self.shutting_down = true;
        while let Some(Reverse(top)) = self.delayed.pop() {
            if self.is_live_delayed(&top) {
                self.delayed_len -= 1;
                self.release(top.slot);
            }
        }
        self.armed = None;
    }

    #[inline]
    fn release(&mut self, slot: u32) {
        let s = &mut self.slots[slot as usize];
        let hash = s.hash;
        s.phase = Phase::Free;
        s.key = None;
        s.payload = P::default();
        s.generation = s.generation.wrapping_add(1);
        if let Ok(entry) = self.index.find_entry(hash, |&other| other == slot) {
            entry.remove();
        }
        self.free.push(slot);
    }

    /// Puts a slot that is in neither queue into the ready queue or the delayed heap.
    #[inline]
    fn enqueue(
        &mut self,
        slot: u32,
        ready_at: Nanos,
        priority: i32,
        now: &mut impl FnMut() -> Nanos,
        e: &mut Effect,
    ) {
        let s = &mut self.slots[slot as usize];
        s.priority = priority;
        s.ready_at = ready_at;
        if ready_at == NOW || ready_at <= now() {
            s.phase = Phase::Ready;
            if self.track_time {
                s.stamp = now();
            }
            // It becomes ready now (a dirty key's earlier ready time passed while a worker
            // held it, when it could not run).
            let since = if self.ready.ages() { now() } else { 0 };
            let place = self.ready.place(since);
            self.push_ready(slot, priority, place);
            e.became_ready = true;
        } else {
            s.phase = Phase::Delayed;
            s.generation = s.generation.wrapping_add(1);
            let generation = s.generation;
            self.seq += 1;
            let earliest = self.armed.is_none_or(|armed| ready_at < armed.at);
            self.delayed.push(Reverse(DelayedEntry {
                ready_at,
                seq: self.seq,
                slot,
                generation,
            }));
            self.delayed_len += 1;
            e.new_earliest_delay = earliest;
            self.compact_delayed();
        }
    }

    #[inline]
    fn push_ready(&mut self, slot: u32, priority: i32, place: Place) {
        let s = &mut self.slots[slot as usize];
        s.generation = s.generation.wrapping_add(1);
        s.place = place;
        let generation = s.generation;
        let slots = &self.slots;
        self.ready
            .push(slot, generation, priority, place, |slot, generation| {
                let s = &slots[slot as usize];
                s.generation == generation && s.phase == Phase::Ready
            });
    }

    fn is_live_delayed(&self, entry: &DelayedEntry) -> bool {
        let s = &self.slots[entry.slot as usize];
        s.generation == entry.generation && s.phase == Phase::Delayed
    }

    /// Drops stale delayed entries once they outnumber live ones, so moving delays earlier
    /// cannot grow the heap without bound.
    fn compact_delayed(&mut self) {
        const SLACK: usize = 64;
        if self.delayed.len() > 2 * self.delayed_len + SLACK {
            let slots = &self.slots;
            self.delayed.retain(|Reverse(e)| {
                let s = &slots[e.slot as usize];
                s.generation == e.generation && s.phase == Phase::Delayed
            });
        }
    }
}
