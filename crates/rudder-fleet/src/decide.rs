//! What the fleet's engine does about its members: a pure function of what the providers
//! announced, which shards this replica holds and what is engaged, with no I/O and no clock.
//!
//! The engine calls it when one of its inputs changes (an announcement, a shard opened or
//! closed, a disengagement ended), and carries out the actions it returns; nothing is
//! checked again on a timer.

use std::collections::{BTreeMap, BTreeSet};

/// What the engine knows when it decides: every input of [`decide`].
pub(crate) struct Inputs<'a> {
    /// The members announced (and not withdrawn), by name: the generation of each one's
    /// latest announcement.
    pub(crate) wanted: &'a BTreeMap<String, u64>,
    /// The members engaged here: the generation each was engaged with.
    pub(crate) engaged: &'a BTreeMap<String, u64>,
    /// The members whose last engagement is still being ended: not engaged again until it
    /// has (so a controller's instance is never live twice).
    pub(crate) stopping: &'a BTreeSet<String>,
    /// Sharded: the shards held here and each member's shard; `None` holds every member.
    pub(crate) shards: Option<Shards<'a>>,
}

/// The sharded part of [`Inputs`].
pub(crate) struct Shards<'a> {
    /// The shards opened here and not closed since.
    pub(crate) held: &'a BTreeSet<usize>,
    /// The shard of a member.
    pub(crate) shard_of: &'a dyn Fn(&str) -> usize,
}

/// One thing to do about a member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Action {
    /// Engage it (announced, held here, not engaged, no disengagement of it under way).
    Engage(String),
    /// Disengage it: withdrawn, or its shard is no longer held here.
    Disengage(String),
    /// Disengage it to engage its newer announcement once that disengagement has ended.
    Replace(String),
}

impl Inputs<'_> {
    /// Whether `name`'s shard is held here (always, unsharded).
    fn holds(&self, name: &str) -> bool {
        self.shards
            .as_ref()
            .is_none_or(|shards| shards.held.contains(&(shards.shard_of)(name)))
    }
}

/// The actions that bring what is engaged to what is announced and held, one per member
/// that needs one, in name order.
pub(crate) fn decide(inputs: &Inputs<'_>) -> Vec<Action> {
    let names: BTreeSet<&String> = inputs.wanted.keys().chain(inputs.engaged.keys()).collect();
    names
        .into_iter()
        .filter_map(|name| decide_one(inputs, name))
        .collect()
}

/// The action [`decide`] gives for `name`, if any.
pub(crate) fn decide_one(inputs: &Inputs<'_>, name: &str) -> Option<Action> {
    let want = inputs
        .wanted
        .get(name)
        .copied()
        .filter(|_| inputs.holds(name));
    match (inputs.engaged.get(name).copied(), want) {
        (Some(have), Some(want)) if have == want => None,
        (Some(_), Some(_)) => Some(Action::Replace(name.to_owned())),
        (Some(_), None) => Some(Action::Disengage(name.to_owned())),
        (None, Some(_)) if !inputs.stopping.contains(name) => Some(Action::Engage(name.to_owned())),
        (None, _) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One replica's view, for the tests.
    #[derive(Default)]
    struct Replica {
        wanted: BTreeMap<String, u64>,
        engaged: BTreeMap<String, u64>,
        stopping: BTreeSet<String>,
        held: BTreeSet<usize>,
    }

    /// Members `c<n>` live in shard `n`.
    fn shard_of(name: &str) -> usize {
        name.trim_start_matches('c').parse().unwrap_or(usize::MAX)
    }

    impl Replica {
        fn announced(names: &[&str]) -> Self {
            Self {
                wanted: names.iter().map(|n| ((*n).to_owned(), 1)).collect(),
                ..Self::default()
            }
        }

        fn decide(&self, sharded: bool) -> Vec<Action> {
            decide(&Inputs {
                wanted: &self.wanted,
                engaged: &self.engaged,
                stopping: &self.stopping,
                shards: sharded.then_some(Shards {
                    held: &self.held,
                    shard_of: &shard_of,
                }),
            })
        }

        /// Carries out `actions` as the engine does: a disengagement is under way until
        /// [`ended`](Self::ended).
        fn apply(&mut self, actions: &[Action]) {
            for action in actions {
                match action {
                    Action::Engage(name) => {
                        self.engaged.insert(name.clone(), self.wanted[name]);
                    }
                    Action::Disengage(name) | Action::Replace(name) => {
                        self.engaged.remove(name);
                        self.stopping.insert(name.clone());
                    }
                }
            }
        }

        fn ended(&mut self, name: &str) {
            self.stopping.remove(name);
        }
    }

    fn engage(name: &str) -> Action {
        Action::Engage(name.to_owned())
    }

    fn disengage(name: &str) -> Action {
        Action::Disengage(name.to_owned())
    }

    #[test]
    fn unsharded_every_announced_member_is_engaged_once() {
        let mut replica = Replica::announced(&["c0", "c1"]);
        let actions = replica.decide(false);
        assert_eq!(actions, [engage("c0"), engage("c1")]);
        replica.apply(&actions);
        assert_eq!(replica.decide(false), []);
    }

    #[test]
    fn a_withdrawn_member_is_disengaged() {
        let mut replica = Replica::announced(&["c0", "c1"]);
        replica.apply(&replica.decide(false));
        replica.wanted.remove("c1");
        assert_eq!(replica.decide(false), [disengage("c1")]);
    }

    #[test]
    fn a_member_announced_again_is_replaced_after_its_disengagement_ended() {
        let mut replica = Replica::announced(&["c0"]);
        replica.apply(&replica.decide(false));
        replica.wanted.insert("c0".to_owned(), 2);
        let actions = replica.decide(false);
        assert_eq!(actions, [Action::Replace("c0".to_owned())]);
        replica.apply(&actions);
        // Never live twice: nothing until the old engagement ended.
        assert_eq!(replica.decide(false), []);
        replica.ended("c0");
        let actions = replica.decide(false);
        assert_eq!(actions, [engage("c0")]);
        replica.apply(&actions);
        assert_eq!(replica.engaged["c0"], 2);
    }

    #[test]
    fn sharded_only_the_members_of_held_shards_are_engaged() {
        let mut replica = Replica::announced(&["c0", "c1", "c2"]);
        assert_eq!(replica.decide(true), []);
        replica.held.insert(1);
        assert_eq!(replica.decide(true), [engage("c1")]);
    }

    #[test]
    fn a_shard_handed_to_another_replica_is_engaged_there_as_the_shard_moves() {
        let names = ["c0", "c1", "c2"];
        let (mut a, mut b) = (Replica::announced(&names), Replica::announced(&names));
        a.held = BTreeSet::from([0, 1]);
        b.held = BTreeSet::from([2]);
        a.apply(&a.decide(true));
        b.apply(&b.decide(true));
        assert_eq!(a.engaged.keys().collect::<Vec<_>>(), ["c0", "c1"]);
        assert_eq!(b.engaged.keys().collect::<Vec<_>>(), ["c2"]);

        // The ring gives shard 1 to b: a closes it, and that closing alone disengages c1.
        a.held.remove(&1);
        let actions = a.decide(true);
        assert_eq!(actions, [disengage("c1")]);
        a.apply(&actions);
        // b cannot hold the shard before a's disengagement ended and the Lease moved; its
        // opening alone engages c1 there.
        a.ended("c1");
        assert_eq!(a.decide(true), []);
        b.held.insert(1);
        let actions = b.decide(true);
        assert_eq!(actions, [engage("c1")]);
        b.apply(&actions);
        assert_eq!(b.engaged.keys().collect::<Vec<_>>(), ["c1", "c2"]);
        assert_eq!(a.engaged.keys().collect::<Vec<_>>(), ["c0"]);
    }

    #[test]
    fn a_shard_given_back_while_its_member_is_stopping_waits_for_the_stop() {
        let mut replica = Replica::announced(&["c0"]);
        replica.held.insert(0);
        replica.apply(&replica.decide(true));
        replica.held.remove(&0);
        replica.apply(&replica.decide(true));
        replica.held.insert(0);
        assert_eq!(replica.decide(true), []);
        replica.ended("c0");
        assert_eq!(replica.decide(true), [engage("c0")]);
    }
}
