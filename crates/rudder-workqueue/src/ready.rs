//! The ready keys: a first-in first-out queue per priority level, with ageing across levels.
//!
//! Within a level keys leave in the order they arrived. Across levels the head with the
//! smallest rank leaves first, where a key of priority `p` that has been waiting since `t`
//! ranks `t - p × aging`: every `aging` spent waiting is worth one level, so no key waits
//! forever behind a stream of higher-priority ones. Without ageing, the highest level always
//! goes first.
//!
//! A rank needs the time a key started waiting, and reading the clock on every add is most of
//! the cost of an add. So a key's time is only read when it matters: when the key is added
//! while keys of another level wait. A key added while its own level is the only one waiting
//! is left unstamped, and when a key of another level arrives, every unstamped key is stamped
//! with that moment (each key at most once). Ageing thus counts from when a key first had
//! competition from another level, which is the only time ageing can change its turn.
//! Invariant: whenever two levels hold live keys, every live key is stamped.

use std::collections::VecDeque;

use crate::state::Nanos;

/// Levels kept for reuse once empty, beyond which empty levels are dropped.
const SPARE_LEVELS: usize = 8;
/// Stale entries tolerated per level before it is compacted.
const SLACK: usize = 64;

#[derive(Clone, Copy, Debug)]
struct Entry {
    slot: u32,
    generation: u32,
    /// When the key started waiting for ageing purposes; meaningful once stamped.
    since: Nanos,
}

#[derive(Debug)]
struct Level {
    priority: i32,
    entries: VecDeque<Entry>,
    /// Live entries (the rest are stale: the key moved to another level).
    live: usize,
    /// How many entries at the back are unstamped.
    unstamped: usize,
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
}

impl ReadyQueue {
    pub(crate) fn new(aging: Option<u64>) -> Self {
        Self {
            levels: Vec::new(),
            live: 0,
            aging,
        }
    }

    /// Live keys.
    pub(crate) fn len(&self) -> usize {
        self.live
    }

    /// Appends a key at `priority`. `now` is called only if the ranks need the time.
    pub(crate) fn push(
        &mut self,
        slot: u32,
        generation: u32,
        priority: i32,
        now: &mut impl FnMut() -> Nanos,
        is_live: impl Fn(u32, u32) -> bool,
    ) {
        let competing = self.aging.is_some()
            && self
                .levels
                .iter()
                .any(|l| l.priority != priority && l.live > 0);
        let since = if competing {
            let t = now();
            // A second level starts waiting: stamp everyone still unstamped.
            for level in &mut self.levels {
                let n = level.unstamped;
                for e in level.entries.iter_mut().rev().take(n) {
                    e.since = t;
                }
                level.unstamped = 0;
            }
            Some(t)
        } else {
            None
        };
        let index = match self.levels.binary_search_by(|l| priority.cmp(&l.priority)) {
            Ok(i) => i,
            Err(i) => {
                self.levels.insert(
                    i,
                    Level {
                        priority,
                        entries: VecDeque::new(),
                        live: 0,
                        unstamped: 0,
                    },
                );
                i
            }
        };
        let level = &mut self.levels[index];
        level.entries.push_back(Entry {
            slot,
            generation,
            since: since.unwrap_or(0),
        });
        if since.is_none() {
            level.unstamped += 1;
        }
        level.live += 1;
        self.live += 1;
        if level.entries.len() > 2 * level.live + SLACK {
            compact(level, &is_live);
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
    pub(crate) fn pop(&mut self, is_live: impl Fn(u32, u32) -> bool) -> Option<Head> {
        if self.live == 0 {
            return None;
        }
        let mut best: Option<(usize, i64)> = None;
        for (i, level) in self.levels.iter_mut().enumerate() {
            if level.live == 0 {
                continue;
            }
            // Drop stale heads so the head is live.
            while let Some(head) = level.entries.front() {
                if is_live(head.slot, head.generation) {
                    break;
                }
                level.entries.pop_front();
                level.unstamped = level.unstamped.min(level.entries.len());
            }
            let Some(head) = level.entries.front() else {
                continue;
            };
            let Some(aging) = self.aging else {
                // Strict priority: the highest live level wins.
                best = Some((i, 0));
                break;
            };
            let since = i64::try_from(head.since).unwrap_or(i64::MAX);
            let rank = since.saturating_sub(i64::from(level.priority).saturating_mul(aging as i64));
            // Levels are visited highest first, so a tie keeps the higher level.
            if best.is_none_or(|(_, r)| rank < r) {
                best = Some((i, rank));
            }
        }
        let (i, _) = best?;
        let level = &mut self.levels[i];
        let head = level.entries.pop_front()?;
        level.unstamped = level.unstamped.min(level.entries.len());
        level.live -= 1;
        self.live -= 1;
        Some(Head { slot: head.slot })
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

fn compact(level: &mut Level, is_live: &impl Fn(u32, u32) -> bool) {
    let unstamped_from = level.entries.len() - level.unstamped;
    let mut index = 0;
    let mut unstamped = 0;
    level.entries.retain(|e| {
        let keep = is_live(e.slot, e.generation);
        if keep && index >= unstamped_from {
            unstamped += 1;
        }
        index += 1;
        keep
    });
    level.unstamped = unstamped;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pop_all(q: &mut ReadyQueue) -> Vec<u32> {
        std::iter::from_fn(|| q.pop(|_, _| true).map(|h| h.slot)).collect()
    }

    #[test]
    fn strict_priority_then_fifo() {
        let mut q = ReadyQueue::new(None);
        let mut clock = || -> Nanos { panic!("strict priority never reads the clock") };
        for (slot, p) in [(1, 0), (2, 5), (3, 0), (4, -1), (5, 5)] {
            q.push(slot, 0, p, &mut clock, |_, _| true);
        }
        assert_eq!(pop_all(&mut q), [2, 5, 1, 3, 4]);
    }

    #[test]
    fn one_level_never_reads_the_clock() {
        let mut q = ReadyQueue::new(Some(1_000));
        let mut clock = || -> Nanos { panic!("no competition, no clock") };
        for slot in 0..100 {
            q.push(slot, 0, 3, &mut clock, |_, _| true);
        }
        assert_eq!(pop_all(&mut q), (0..100).collect::<Vec<_>>());
    }

    #[test]
    fn a_second_level_stamps_the_waiting_ones_and_ageing_applies() {
        let mut q = ReadyQueue::new(Some(1_000));
        let at = |ns: Nanos| move || ns;
        // Two low keys wait alone (unstamped), then a normal one arrives at t=10: they are
        // stamped 10, ranking 10 + 2 × 1000.
        q.push(1, 0, -2, &mut at(5), |_, _| true);
        q.push(2, 0, -2, &mut at(6), |_, _| true);
        q.push(3, 0, 0, &mut at(10), |_, _| true);
        // A normal key arriving before 2010 still goes first; one arriving after goes later.
        q.push(4, 0, 0, &mut at(2_009), |_, _| true);
        q.push(5, 0, 0, &mut at(2_011), |_, _| true);
        assert_eq!(pop_all(&mut q), [3, 4, 1, 2, 5]);
    }

    #[test]
    fn stale_entries_are_skipped_and_compacted() {
        let mut q = ReadyQueue::new(None);
        let mut clock = || 0;
        for slot in 0..200u32 {
            // Generation 0 goes stale; each key then lives at priority 1 with generation 1.
            q.push(slot, 0, 0, &mut clock, |_, g| g == 1);
            q.forget(0);
            q.push(slot, 1, 1, &mut clock, |_, g| g == 1);
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
