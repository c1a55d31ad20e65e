//! The builder's `sharded` option against a real API server: two managers each declare the
//! same controller with `.sharded(..)`; the keys end up split between them, each on its
//! owner, and no key is ever reconciled by both at once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use rudder::controller::{KeyAffinity, ShardGate};
use rudder::lease::sharding::owner;
use rudder::manager::rbac::Verb;
use rudder::prelude::*;
use rudder_core::hash::fnv1a64;
use tokio::time::Instant;

const SHARDS: usize = 8;
const RING: &str = "builder-ring";

/// (who, key, start, end) of every reconcile.
type Log = Arc<Mutex<Vec<(&'static str, String, Instant, Instant)>>>;

struct Recording {
    who: &'static str,
    log: Log,
}

impl Reconciler for Recording {
    type Error = std::convert::Infallible;
    async fn reconcile(&self, request: Request, _: Context) -> Result<Action, Self::Error> {
        let start = Instant::now();
        tokio::time::sleep(Duration::from_millis(2)).await;
        self.log
            .lock()
            .unwrap()
            .push((self.who, request.name().to_owned(), start, Instant::now()));
        Ok(Action::requeue_after(Duration::from_millis(300)))
    }
}

#[tokio::test]
async fn sharded_controllers_split_the_keys_between_replicas() {
    let env = rudder_envtest::TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("sharded").await.unwrap();
    let names: Vec<String> = (0..40).map(|i| format!("cm-{i}")).collect();
    support::create_config_maps(&ns, &names, 0).await;
    let log: Log = Arc::default();
    let mut running = Vec::new();
    for who in ["a", "b"] {
        let manager = support::manager(&ns);
        let controller = rudder::new_controller(&manager)
            .for_::<ConfigMap>()
            .named(format!("sharded-{who}"))
            .sharded(support::ring(&ns, RING, who, SHARDS))
            .complete(Recording {
                who,
                log: Arc::clone(&log),
            })
            .await
            .unwrap();
        assert!(controller.is_sharded());
        // The ring's Leases are in the rendered RBAC.
        let rules = manager.permissions();
        let scope = rudder::manager::rbac::RuleScope::Namespace(ns.name().to_owned());
        for verb in [
            Verb::Get,
            Verb::List,
            Verb::Watch,
            Verb::Create,
            Verb::Update,
        ] {
            assert!(rules.allows(&scope, "coordination.k8s.io", "leases", verb));
        }
        assert!(!rules.allows(&scope, "coordination.k8s.io", "leases", Verb::Delete));
        running.push(support::start(&manager));
    }

    let gate = ShardGate::new(SHARDS, fnv1a64(RING.as_bytes()), KeyAffinity::Name);
    let members = vec!["a".to_owned(), "b".to_owned()];
    let owner_of = |name: &str| {
        owner(
            RING,
            SHARDS,
            gate.shard_of(&Request::namespaced(ns.name(), name)),
            &members,
        )
    };
    // Until every key has been reconciled by its owner: both replicas hold their shards.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let by_owner: HashSet<String> = log
            .lock()
            .unwrap()
            .iter()
            .filter(|(who, key, _, _)| owner_of(key) == Some(*who))
            .map(|(_, key, _, _)| key.clone())
            .collect();
        if names.iter().all(|n| by_owner.contains(n)) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{} of {} keys reconciled by their owner",
            by_owner.len(),
            names.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // From then on, every key is reconciled again, and only by its owner.
    let since = Instant::now();
    loop {
        let again: HashSet<String> = log
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, _, start, _)| *start >= since)
            .map(|(_, key, _, _)| key.clone())
            .collect();
        if names.iter().all(|n| again.contains(n)) {
            break;
        }
        assert!(Instant::now() < deadline, "keys not reconciled again");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for (stop, task) in running {
        stop.cancel();
        task.await.unwrap().unwrap();
    }
    let log = log.lock().unwrap();
    let mut per_replica: HashMap<&str, usize> = HashMap::new();
    let mut by_key: HashMap<&str, Vec<(Instant, Instant)>> = HashMap::new();
    for (who, key, start, end) in log.iter() {
        if *start >= since {
            assert_eq!(owner_of(key), Some(*who), "{key} reconciled by {who}");
            *per_replica.entry(who).or_default() += 1;
        }
        by_key.entry(key).or_default().push((*start, *end));
    }
    assert_eq!(
        per_replica.len(),
        2,
        "both replicas reconciled: {per_replica:?}"
    );
    for (key, mut intervals) in by_key {
        intervals.sort();
        for pair in intervals.windows(2) {
            assert!(pair[0].1 <= pair[1].0, "{key}: reconciles overlap");
        }
    }
}
