//! The ready keys: a queue per priority level, in line by when they became ready, with ageing
//! across levels.
//!
//! Every key joining the ready queue gets a [`Place`]: a sequence number (its turn within a
//! level) and the time it became ready (for ageing). Within a level keys leave in sequence
//! order; a key raised to a higher level keeps its place and goes in among that level's keys
//! by its sequence number, not to the back. Across levels the head with the smallest rank
//! leaves first, where a key of priority `p` that became ready at `t` ranks `t - p × aging`:
//! every `aging` spent waiting is worth one level, so no key waits forever behind a stream of
//! higher-priority ones. Without ageing, the highest level always goes first and the times are
//! never read.

use std::collections::VecDeque;

use crate::clock::Nanos;

/// Levels kept for reuse once empty, beyond which empty levels are dropped.
const SPARE_LEVELS: usize = 8;
/// Stale entries tolerated per level before it is compacted.
const SLACK: usize = 64;

/// A key's place in line: its turn, and when it became ready.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Place {
    /// Order of joining the ready queue; smaller goes first within a level.
    seq: u64,
    /// When the key became ready, for ageing (0 when the queue does not age).
    since: Nanos,
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    slot: u32,
    generation: u32,
    place: Place,
}

#[derive(Debug)]
struct Level {
    priority: i32,
    /// Sorted by `place.seq`.
    entries: VecDeque<Entry>,
    /// Live entries (the rest are stale: the key moved to another level).
    live: usize,
}

/// A ready key handed out by [`ReadyQueue::pop`].
pub(crate) struct Head {
    pub(crate) slot: u32,
}

#[derive(Debug)]
pub(crate) struct ReadyQueue {
    /// Sorted by priority, highest first.
    levels: Vec<Level>,
    live: usize,
    /// Nanoseconds of waiting worth one level; `None` for strict priority.
    aging: Option<u64>,
    /// The last sequence number handed out.
    seq: u64,
}

impl ReadyQueue {
    pub(crate) fn new(aging: Option<u64>) -> Self {
        Self {
            levels: Vec::new(),
            live: 0,
            aging,
            seq: 0,
        }
    }

    /// Live keys.
    pub(crate) fn len(&self) -> usize {
        self.live
    }

    /// Whether ranks use the time keys became ready (if not, [`Self::place`] ignores it).
    pub(crate) fn ages(&self) -> bool {
        self.aging.is_some()
    }

    /// A place at the back of the line for a key that became ready at `since`.
    pub(crate) fn place(&mut self, since: Nanos) -> Place {
        self.seq += 1;
        Place {
            seq: self.seq,
            since: if self.aging.is_some() { since } else { 0 },
        }
    }

    /// Puts a key at `priority` in its `place` (new from [`Self::place`], or kept from an
    /// earlier push when the key moves to a higher level).
    #[inline]
    pub(crate) fn push(
        &mut self,
        slot: u32,
        generation: u32,
        priority: i32,
        place: Place,
        is_live: impl Fn(u32, u32) -> bool,
    ) {
        let index = match self.levels.binary_search_by(|l| priority.cmp(&l.priority)) {
            Ok(i) => i,
            Err(i) => {
                self.levels.insert(
                    i,
                    Level {
                        priority,
                        entries: VecDeque::new(),
                        live: 0,
                    },
                );
                i
            }
        };
        let level = &mut self.levels[index];
        let entry = Entry {
            slot,
            generation,
            place,
        };
        if level.entries.back().is_none_or(|b| b.place.seq < place.seq) {
            level.entries.push_back(entry);
        } else {
            // A raised key: in among the keys that became ready after it.
            let at = level.entries.partition_point(|e| e.place.seq < place.seq);
            level.entries.insert(at, entry);
        }
        level.live += 1;
        self.live += 1;
        if level.entries.len() > 2 * level.live + SLACK {
            level.entries.retain(|e| is_live(e.slot, e.generation));
        }
        if self.levels.len() > SPARE_LEVELS {
            self.levels
                .retain(|l| !l.entries.is_empty() || l.priority == priority);
        }
    }

    /// Records that a live entry at `priority` went stale (its key moved to another level).
    pub(crate) fn forget(&mut self, priority: i32) {
        if let Ok(i) = self.levels.binary_search_by(|l| priority.cmp(&l.priority)) {
            self.levels[i].live -= 1;
            self.live -= 1;
        }
    }

    /// Takes the next key: the best-ranked head among the levels.
    #[inline]
    pub(crate) fn pop(&mut self, is_live: impl Fn(u32, u32) -> bool) -> Option<Head> {
        if self.live == 0 {
            return None;
        }
        // The highest level holding live keys; it goes first unless ageing has to compare
        // it with lower ones.
        let first = self.levels.iter().position(|l| l.live > 0)?;
        let alone = self.levels[first].live == self.live;
        let i = if alone || self.aging.is_none() {
            first
        } else {
            self.best_ranked(first, &is_live)?
        };
        let level = &mut self.levels[i];
        // Stale entries (keys that moved to another level) are dropped on the way.
        while let Some(head) = level.entries.pop_front() {
            if is_live(head.slot, head.generation) {
                level.live -= 1;
                self.live -= 1;
                return Some(Head { slot: head.slot });
            }
        }
        // Not reached: a level's live count is the number of its live entries.
        debug_assert!(false, "a level with live keys has no live entry");
        None
    }

    /// With ageing and live keys in several levels: the level whose head ranks best,
    /// looking from `first` (the highest live level) down.
    #[cold]
    fn best_ranked(&mut self, first: usize, is_live: &impl Fn(u32, u32) -> bool) -> Option<usize> {
        let aging = self.aging?;
        let mut best: Option<(usize, i128)> = None;
        for (i, level) in self.levels.iter_mut().enumerate().skip(first) {
            if level.live == 0 {
                continue;
            }
            // Drop stale heads so the head is live.
            while let Some(head) = level.entries.front() {
                if is_live(head.slot, head.generation) {
                    break;
                }
                level.entries.pop_front();
            }
            let Some(head) = level.entries.front() else {
                continue;
            };
            // In 128 bits a rank cannot overflow: |priority × aging| < 2^95. An ageing
            // period longer than any wait thus gives strict priority, as it should.
            let rank =
                i128::from(head.place.since) - i128::from(level.priority) * i128::from(aging);
            // Levels are visited highest first, so a tie keeps the higher level.
            if best.is_none_or(|(_, r)| rank < r) {
                best = Some((i, rank));
            }
        }
        best.map(|(i, _)| i)
    }

    /// Bytes held.
    pub(crate) fn footprint(&self) -> usize {
        self.levels.capacity() * size_of::<Level>()
            + self
                .levels
                .iter()
                .map(|l| l.entries.capacity() * size_of::<Entry>())
                .sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pop_all(q: &mut ReadyQueue) -> Vec<u32> {
        std::iter::from_fn(|| q.pop(|_, _| true).map(|h| h.slot)).collect()
    }

    fn push_at(q: &mut ReadyQueue, slot: u32, priority: i32, since: Nanos) -> Place {
        let place = q.place(since);
        q.push(slot, 0, priority, place, |_, _| true);
        place
    }

    #[test]
    fn strict_priority_then_fifo() {
        let mut q = ReadyQueue::new(None);
        for (slot, p) in [(1, 0), (2, 5), (3, 0), (4, -1), (5, 5)] {
            push_at(&mut q, slot, p, 0);
        }
        assert_eq!(pop_all(&mut q), [2, 5, 1, 3, 4]);
    }

    #[test]
    fn ageing_ranks_each_key_from_when_it_became_ready() {
        let mut q = ReadyQueue::new(Some(1_000));
        // Two low keys at 5 and 6 rank 2005 and 2006; normal keys rank their own time.
        push_at(&mut q, 1, -2, 5);
        push_at(&mut q, 2, -2, 6);
        push_at(&mut q, 3, 0, 10);
        push_at(&mut q, 4, 0, 2_005);
        push_at(&mut q, 5, 0, 2_006);
        push_at(&mut q, 6, 0, 2_007);
        // Ties go to the higher level.
        assert_eq!(pop_all(&mut q), [3, 4, 1, 5, 2, 6]);
    }

    #[test]
    fn a_raised_key_keeps_its_place() {
        let mut q = ReadyQueue::new(None);
        let place = push_at(&mut q, 1, -5, 0);
        push_at(&mut q, 2, 0, 0);
        push_at(&mut q, 3, 0, 0);
        // Slot 1 moves to level 0 (its old entry goes stale): it is first there.
        q.forget(-5);
        q.push(1, 1, 0, place, |_, _| true);
        let got: Vec<_> =
            std::iter::from_fn(|| q.pop(|s, g| s != 1 || g == 1).map(|h| h.slot)).collect();
        assert_eq!(got, [1, 2, 3]);
    }

    #[test]
    fn huge_ageing_periods_do_not_overflow_into_reversed_priorities() {
        let mut q = ReadyQueue::new(Some(u64::MAX));
        push_at(&mut q, 1, i32::MIN, 0);
        push_at(&mut q, 2, i32::MAX, u64::MAX);
        push_at(&mut q, 3, 0, 7);
        assert_eq!(pop_all(&mut q), [2, 3, 1]);
    }

    #[test]
    fn stale_entries_are_skipped_and_compacted() {
        let mut q = ReadyQueue::new(None);
        for slot in 0..200u32 {
            // Generation 0 goes stale; each key then lives at priority 1 with generation 1.
            let place = q.place(0);
            q.push(slot, 0, 0, place, |_, g| g == 1);
            q.forget(0);
            let place = q.place(0);
            q.push(slot, 1, 1, place, |_, g| g == 1);
        }
        assert_eq!(q.len(), 200);
        let level0 = q
            .levels
            .iter()
            .find(|l| l.priority == 0)
            .map(|l| l.entries.len());
        assert!(level0.unwrap_or(0) <= SLACK + 3, "{level0:?}");
        let got: Vec<_> = std::iter::from_fn(|| q.pop(|_, g| g == 1).map(|h| h.slot)).collect();
        assert_eq!(got, (0..200).collect::<Vec<_>>());
    }
}
