//! [`ShardGate`]: which keys this replica of a sharded controller may reconcile now, shard by
//! shard, with the running reconciles of each shard counted so a shard can be handed off.
//!
//! This is sharding's worker side, here because the controller's workers consult it. The
//! other side, which opens and closes shards as it holds their Leases (the ring: membership,
//! assignment, label mode's source), is `rudder_lease::sharding`, a crate above this one.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use rudder_core::Request;
use rudder_core::hash::{FNV_OFFSET, fnv1a, mix};
use rudder_core::sync::LockExt;
use tokio::sync::{Notify, mpsc, watch};
use tokio::time::Instant;

use crate::gate::LeaderGate;

/// Lists the keys a sharded controller's primary objects have now (from its cache), for the
/// resync that follows a shard's acquisition and for the keys-owned gauge.
pub type KeyLister = Arc<dyn Fn() -> Vec<Request> + Send + Sync>;

/// What a key is hashed by to find its shard.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KeyAffinity {
    /// `namespace/name`: keys spread evenly (the default).
    #[default]
    Name,
    /// The namespace alone: every key of a namespace lands in one shard, so one replica
    /// reconciles a whole namespace. Cluster-scoped keys hash by name.
    Namespace,
}

/// Which keys a replica of a sharded controller may reconcile, checked as a worker takes a
/// request from the queue ([`Controller::set_shard_gate`](crate::Controller::set_shard_gate)).
///
/// Keys are hashed into a fixed number of shards ([`shard_of`](Self::shard_of): FNV-1a 64,
/// stable across builds and platforms, so every replica agrees). Whoever owns shards (the
/// manager's `sharding::Ring`, through Leases) [`open`](Self::open)s a shard with a validity
/// channel like a [`LeaderGate`](rudder_core::LeaderGate)'s: a key of that shard is admitted only
/// while the value is `Some(t)` with `now < t` on tokio's monotonic clock, so a shard closes
/// by itself when its holder stops renewing or was frozen past `t`. An admitted key carries a
/// [`ShardPermit`] for as long as it is reconciled; [`close`](Self::close) stops admitting a
/// shard's keys and [`drained`](Self::drained) waits until the shard's permits are gone, which
/// is when the shard may be handed to another replica. A reconcile whose shard's validity
/// passes while it runs (not renewed in time, or the process frozen past it) is cancelled by
/// the controller ([`ShardPermit::lost`]): its context is cancelled and its future dropped.
///
/// A key taken while its shard is not open is dropped, not reconciled: whoever owns the shard
/// reconciles it. When a shard opens, the gate reports it to the controller (once), which
/// queues every key of the shard from its cache (its *resync*), so keys dropped before the
/// opening are not lost. Whatever else follows which shards are held (the facade's fleet)
/// subscribes to [`held`](Self::held), told of every opening and closing.
///
/// Cloning gives another handle on the same gate.
#[derive(Clone)]
pub struct ShardGate {
    shared: Arc<Shared>,
}

struct Shared {
    seed: u64,
    affinity: KeyAffinity,
    slots: Vec<Mutex<Slot>>,
    /// Wakes [`ShardGate::drained`] when a permit is dropped.
    released: Notify,
    /// Shards opened, for the controller's resync: `None` until [`ShardGate::take_opened`],
    /// so that openings nobody takes are not kept.
    opened: Mutex<Opened>,
    /// The shards opened and not closed since; every [`ShardGate::open`] and
    /// [`ShardGate::close`] notifies its receivers.
    held: watch::Sender<BTreeSet<usize>>,
    keys: Mutex<Option<KeyLister>>,
    /// Keys dropped at take time because their shard was not open here.
    dropped: AtomicUsize,
}

/// Who is told of openings through [`ShardGate::take_opened`].
enum Opened {
    /// Nobody took the stream yet.
    Untaken,
    /// Taken: its sender (sends fail, harmlessly, once the receiver is gone).
    Taken(mpsc::UnboundedSender<usize>),
}

#[derive(Default)]
struct Slot {
    /// Set while this replica holds the shard and has not closed it: open while its
    /// validity is, by the leader gate's rule.
    validity: Option<LeaderGate>,
    /// Permits of this shard alive now.
    in_flight: usize,
}

impl fmt::Debug for ShardGate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShardGate")
            .field("shards", &self.shards())
            .field("affinity", &self.shared.affinity)
            .field("open", &self.open_shards())
            .finish_non_exhaustive()
    }
}

impl ShardGate {
    /// A gate over `shards` shards (at least 1), keys hashed with `seed` (the ring's name
    /// hashed, so that rings spread keys differently) by `affinity`; every shard closed.
    pub fn new(shards: usize, seed: u64, affinity: KeyAffinity) -> Self {
        let shards = shards.max(1);
        Self {
            shared: Arc::new(Shared {
                seed,
                affinity,
                slots: (0..shards).map(|_| Mutex::default()).collect(),
                released: Notify::new(),
                opened: Mutex::new(Opened::Untaken),
                held: watch::Sender::new(BTreeSet::new()),
                keys: Mutex::new(None),
                dropped: AtomicUsize::new(0),
            }),
        }
    }

    /// How many shards keys are hashed into.
    pub fn shards(&self) -> usize {
        self.shared.slots.len()
    }

    /// What keys are hashed by.
    pub fn affinity(&self) -> KeyAffinity {
        self.shared.affinity
    }

    /// The shard of `request`: FNV-1a 64 from the offset basis xor-ed with the seed, over
    /// `namespace/name` (the namespace alone with [`KeyAffinity::Namespace`] for a
    /// namespaced key), passed through [`mix`], modulo the number of shards.
    pub fn shard_of(&self, request: &Request) -> usize {
        let mut hash = fnv1a(FNV_OFFSET ^ self.shared.seed, b"");
        match (self.shared.affinity, request.namespace()) {
            (KeyAffinity::Namespace, Some(namespace)) => {
                hash = fnv1a(hash, namespace.as_bytes());
            }
            (_, namespace) => {
                hash = fnv1a(hash, namespace.unwrap_or("").as_bytes());
                hash = fnv1a(hash, b"/");
                hash = fnv1a(hash, request.name().as_bytes());
            }
        }
        let shards = u64::try_from(self.shards()).unwrap_or(u64::MAX);
        usize::try_from(mix(hash) % shards).unwrap_or(0)
    }

    /// Opens `shard` (out of range: ignored) while `validity` holds `Some(t)` with
    /// `now < t`, and reports it to the controller for its resync.
    pub fn open(&self, shard: usize, validity: watch::Receiver<Option<Instant>>) {
        let Some(slot) = self.shared.slots.get(shard) else {
            return;
        };
        slot.lock_unpoisoned().validity = Some(LeaderGate::new(validity));
        if let Opened::Taken(opened) = &*self.shared.opened.lock_unpoisoned() {
            // The receiver may be gone (the controller stopped): nothing to resync then.
            let _ = opened.send(shard);
        }
        // Notified even when already held (opened again with a new validity).
        self.shared.held.send_modify(|held| {
            held.insert(shard);
        });
    }

    /// Closes `shard`: from now on none of its keys is admitted. Reconciles already running
    /// go on; [`drained`](Self::drained) waits for them.
    pub fn close(&self, shard: usize) {
        if let Some(slot) = self.shared.slots.get(shard) {
            slot.lock_unpoisoned().validity = None;
            self.shared
                .held
                .send_if_modified(|held| held.remove(&shard));
        }
    }

    /// The shards opened and not closed since, as a `watch`: it changes at every
    /// [`open`](Self::open) and [`close`](Self::close), so a subscriber learns of a shard
    /// handed over in either direction as it happens (the facade's fleet engages and
    /// disengages the clusters of a shard on it). A shard whose validity passed without a
    /// close is still in the set; [`is_open`](Self::is_open) and [`admit`](Self::admit) say
    /// whether it admits keys now (and [`ShardPermit::lost`] tells a permit's holder).
    pub fn held(&self) -> watch::Receiver<BTreeSet<usize>> {
        self.shared.held.subscribe()
    }

    /// Waits until no reconcile of a key of `shard` is running. Call after
    /// [`close`](Self::close), or keys may be admitted again meanwhile.
    pub async fn drained(&self, shard: usize) {
        let Some(slot) = self.shared.slots.get(shard) else {
            return;
        };
        loop {
            let released = self.shared.released.notified();
            let mut released = std::pin::pin!(released);
            released.as_mut().enable();
            if slot.lock_unpoisoned().in_flight == 0 {
                return;
            }
            released.await;
        }
    }

    /// Whether keys of `shard` are admitted now.
    pub fn is_open(&self, shard: usize) -> bool {
        self.shared
            .slots
            .get(shard)
            .is_some_and(|slot| is_valid(&slot.lock_unpoisoned(), Instant::now()))
    }

    /// The shards whose keys are admitted now.
    pub fn open_shards(&self) -> Vec<usize> {
        (0..self.shards()).filter(|&s| self.is_open(s)).collect()
    }

    /// How many reconciles of keys of `shard` are running.
    pub fn in_flight(&self, shard: usize) -> usize {
        self.shared
            .slots
            .get(shard)
            .map_or(0, |slot| slot.lock_unpoisoned().in_flight)
    }

    /// Admits `request` if its shard is open now, with a permit to hold while it is
    /// reconciled; `None` (and counted as dropped) otherwise.
    pub fn admit(&self, request: &Request) -> Option<ShardPermit> {
        let shard = self.shard_of(request);
        let slot = &self.shared.slots[shard];
        let mut slot = slot.lock_unpoisoned();
        let now = Instant::now();
        let Some(validity) = slot.validity.clone().filter(|v| v.is_open_at(now)) else {
            drop(slot);
            self.shared.dropped.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        slot.in_flight += 1;
        Some(ShardPermit {
            shared: Arc::clone(&self.shared),
            shard,
            validity,
        })
    }

    /// How many keys were dropped at take time because their shard was not open here.
    pub fn dropped(&self) -> usize {
        self.shared.dropped.load(Ordering::Relaxed)
    }

    /// Sets how to list the controller's keys (the controller sets it with the gate).
    pub fn set_key_lister(&self, keys: KeyLister) {
        *self.lock_keys() = Some(keys);
    }

    fn lock_keys(&self) -> std::sync::MutexGuard<'_, Option<KeyLister>> {
        self.shared.keys.lock_unpoisoned()
    }

    /// The keys of the open shards, from the key lister (`None` without one).
    pub fn owned_keys(&self) -> Option<Vec<Request>> {
        self.keys_in(&self.open_shards())
    }

    /// The keys of `shards`, from one listing of the key lister (empty without one).
    pub(crate) fn keys_of(&self, shards: &[usize]) -> Vec<Request> {
        self.keys_in(shards).unwrap_or_default()
    }

    fn keys_in(&self, shards: &[usize]) -> Option<Vec<Request>> {
        let keys = self.lock_keys().clone()?;
        Some(
            keys()
                .into_iter()
                .filter(|key| shards.contains(&self.shard_of(key)))
                .collect(),
        )
    }

    /// The stream of opened shards: the shards open at this call, then each shard's number
    /// as it opens. Only the first caller gets it: the controller the gate is set on (for
    /// its resync). Openings are kept only once it is taken. To follow closings too,
    /// subscribe to [`held`](Self::held).
    pub fn take_opened(&self) -> Option<mpsc::UnboundedReceiver<usize>> {
        let mut opened = self.shared.opened.lock_unpoisoned();
        if let Opened::Taken(_) = &*opened {
            return None;
        }
        let (tx, rx) = mpsc::unbounded_channel();
        for shard in self.open_shards() {
            let _ = tx.send(shard);
        }
        *opened = Opened::Taken(tx);
        Some(rx)
    }
}

/// Held while an admitted key is reconciled; dropping it lets [`ShardGate::drained`] return
/// once its shard has none left.
pub struct ShardPermit {
    shared: Arc<Shared>,
    shard: usize,
    /// The shard's holding as it was when the key was admitted.
    validity: LeaderGate,
}

impl ShardPermit {
    /// The shard of the admitted key.
    pub fn shard(&self) -> usize {
        self.shard
    }

    /// A [`LeaderGate`] open while this replica's holding of the shard is valid, as it was
    /// when the key was admitted: for work that runs as long as the permit is held (the
    /// facade's fleet gates a member cluster's controllers with it), so that it stops taking
    /// requests by itself once the holding passes, even in a process that was frozen.
    pub fn gate(&self) -> LeaderGate {
        self.validity.clone()
    }

    /// Returns once this replica's holding of the shard has passed by the monotonic clock
    /// (the Lease was not renewed in time, or the process was frozen past it) or was given
    /// up: from then on another replica may hold the shard. A clean hand-off
    /// ([`ShardGate::close`], then [`ShardGate::drained`], then the release) does not end
    /// it: the reconciles it waits for run to their end.
    pub async fn lost(&mut self) {
        self.validity.closed().await;
    }
}

impl fmt::Debug for ShardPermit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShardPermit")
            .field("shard", &self.shard)
            .finish()
    }
}

impl Drop for ShardPermit {
    fn drop(&mut self) {
        let mut slot = self.shared.slots[self.shard].lock_unpoisoned();
        slot.in_flight = slot.in_flight.saturating_sub(1);
        drop(slot);
        self.shared.released.notify_waiters();
    }
}

fn is_valid(slot: &Slot, now: Instant) -> bool {
    slot.validity
        .as_ref()
        .is_some_and(|validity| validity.is_open_at(now))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn namespace_affinity_puts_a_namespace_in_one_shard() {
        let gate = ShardGate::new(32, 7, KeyAffinity::Namespace);
        let shard = gate.shard_of(&Request::namespaced("team-a", "x"));
        for i in 0..100 {
            let key = Request::namespaced("team-a", &format!("object-{i}"));
            assert_eq!(gate.shard_of(&key), shard);
        }
        let by_name = ShardGate::new(32, 7, KeyAffinity::Name);
        let spread: std::collections::HashSet<_> = (0..100)
            .map(|i| by_name.shard_of(&Request::namespaced("team-a", &format!("object-{i}"))))
            .collect();
        assert!(
            spread.len() > 20,
            "100 names fell in {} shards",
            spread.len()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn keys_are_admitted_only_while_their_shard_is_valid() {
        let gate = ShardGate::new(4, 0, KeyAffinity::Name);
        let key = Request::namespaced("ns", "a");
        let shard = gate.shard_of(&key);
        assert!(gate.admit(&key).is_none(), "closed at first");
        let (validity, rx) = watch::channel(Some(Instant::now() + Duration::from_secs(3)));
        gate.open(shard, rx);
        let mut opened = gate.take_opened().unwrap();
        assert_eq!(opened.try_recv().unwrap(), shard);
        assert!(gate.take_opened().is_none(), "taken once");
        let permit = gate.admit(&key).expect("open");
        assert_eq!(permit.shard(), shard);
        assert_eq!(gate.in_flight(shard), 1);
        drop(permit);
        // The validity passes by itself: a frozen holder admits nothing once resumed.
        tokio::time::advance(Duration::from_secs(3)).await;
        assert!(gate.admit(&key).is_none());
        validity.send_replace(Some(Instant::now() + Duration::from_secs(3)));
        assert!(gate.admit(&key).is_some());
        gate.close(shard);
        assert!(gate.admit(&key).is_none());
        assert_eq!(gate.dropped(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn held_reports_every_opening_and_closing() {
        let gate = ShardGate::new(4, 0, KeyAffinity::Name);
        let mut held = gate.held();
        assert!(held.borrow_and_update().is_empty());
        let (_validity, rx) = watch::channel(Some(Instant::now() + Duration::from_secs(3)));
        gate.open(2, rx.clone());
        assert!(held.has_changed().unwrap());
        assert_eq!(*held.borrow_and_update(), BTreeSet::from([2]));
        gate.open(1, rx.clone());
        gate.close(2);
        assert!(held.has_changed().unwrap());
        assert_eq!(*held.borrow_and_update(), BTreeSet::from([1]));
        // Opened again (a new holding): told, though the set is the same.
        gate.open(1, rx);
        assert!(held.has_changed().unwrap());
        assert_eq!(*held.borrow_and_update(), BTreeSet::from([1]));
        // Closing a shard not held changes nothing.
        gate.close(3);
        assert!(!held.has_changed().unwrap());
    }

    #[tokio::test(start_paused = true)]
    async fn drained_waits_for_the_running_reconciles_of_its_shard() {
        let gate = ShardGate::new(1, 0, KeyAffinity::Name);
        let (_validity, rx) = watch::channel(Some(Instant::now() + Duration::from_secs(60)));
        gate.open(0, rx);
        let first = gate.admit(&Request::namespaced("ns", "a")).unwrap();
        let second = gate.admit(&Request::namespaced("ns", "b")).unwrap();
        gate.close(0);
        let start = Instant::now();
        let releaser = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            drop(first);
            tokio::time::sleep(Duration::from_secs(1)).await;
            drop(second);
        });
        gate.drained(0).await;
        assert_eq!(start.elapsed(), Duration::from_secs(2));
        releaser.await.unwrap();
    }
}
