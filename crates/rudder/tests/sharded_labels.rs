//! Sharding in label mode against a real API server: three managers declare the same
//! controller with `.sharded(config.with_mode(ShardMode::Labels))` over 90 ConfigMaps that
//! carry no shard label. Each object gets the label of its shard, each replica's cache holds
//! only the objects of the shards it holds (count and bytes about a third), each key is
//! reconciled by its owner reading it from that cache; a wrong shard label written by hand is
//! corrected and a removed one written again; when a replica's shard informers stop
//! (as failed watches do) the source follows their replacements; and after a replica stops
//! the other two take its shards: their caches grow to hold them, and no key is reconciled
//! by two replicas at once.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

mod support;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::core::ObjectMeta;
use rudder::cache::ListOptions;
use rudder::controller::{KeyAffinity, ShardGate};
use rudder::lease::sharding::{ShardMode, owner};
use rudder::manager::rbac::Verb;
use rudder::prelude::*;
use rudder_core::hash::fnv1a64;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const SHARDS: usize = 9;
const RING: &str = "label-ring";
const OBJECTS: usize = 90;
const WAIT: Duration = Duration::from_secs(40);

/// (who, key, found in the cache, start, end) of every reconcile.
type Log = Arc<Mutex<Vec<(&'static str, String, bool, Instant, Instant)>>>;

struct Recording {
    who: &'static str,
    log: Log,
    tools: Tools,
}

impl Reconciler for Recording {
    type Error = rudder::client::ClientError;
    async fn reconcile(&self, request: Request, _: Context) -> Result<Action, Self::Error> {
        let start = Instant::now();
        let found = self
            .tools
            .client()
            .get::<ConfigMap>(&request)
            .await?
            .is_some();
        tokio::time::sleep(Duration::from_millis(2)).await;
        self.log.lock().unwrap().push((
            self.who,
            request.name().to_owned(),
            found,
            start,
            Instant::now(),
        ));
        Ok(Action::requeue_after(Duration::from_millis(500)))
    }
}

struct Replica {
    who: &'static str,
    manager: Arc<Manager>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<Result<(), rudder::manager::Error>>,
}

/// What a replica's cache holds of the ConfigMaps: names, and their bytes as JSON.
async fn cached(manager: &Manager) -> (BTreeSet<String>, usize) {
    let objects = manager
        .cache()
        .list::<ConfigMap>(&ListOptions::default())
        .await
        .unwrap();
    let bytes = objects
        .iter()
        .map(|o| serde_json::to_vec(&**o).unwrap().len())
        .sum();
    let names = objects
        .iter()
        .map(|o| o.metadata.name.clone().unwrap())
        .collect();
    (names, bytes)
}

/// Polls until every replica's cache holds exactly the objects of the shards `members`
/// give it, and every key has been reconciled, after `since`, by its owner, which found it
/// in its cache. Returns each replica's (count, bytes).
async fn settle(
    replicas: &[Replica],
    names: &[String],
    log: &Log,
    owner_of: &impl Fn(&str, &[String]) -> Option<&'static str>,
    since: Instant,
) -> HashMap<&'static str, (usize, usize)> {
    let members: Vec<String> = replicas.iter().map(|r| r.who.to_owned()).collect();
    let deadline = Instant::now() + WAIT;
    loop {
        let mut caches_right = true;
        let mut sizes = HashMap::new();
        for replica in replicas {
            let (held, bytes) = cached(&replica.manager).await;
            let want: BTreeSet<String> = names
                .iter()
                .filter(|n| owner_of(n, &members) == Some(replica.who))
                .cloned()
                .collect();
            caches_right &= held == want;
            sizes.insert(replica.who, (held.len(), bytes));
        }
        let by_owner: HashSet<String> = log
            .lock()
            .unwrap()
            .iter()
            .filter(|(who, key, found, start, _)| {
                *start >= since && *found && owner_of(key, &members) == Some(*who)
            })
            .map(|(_, key, ..)| key.clone())
            .collect();
        if caches_right && names.iter().all(|n| by_owner.contains(n)) {
            return sizes;
        }
        assert!(
            Instant::now() < deadline,
            "not settled: caches right {caches_right}, {sizes:?}; {} of {} keys reconciled by their owner",
            by_owner.len(),
            names.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn label_mode_splits_the_cache_between_replicas_and_moves_it_with_the_shards() {
    let env = rudder_envtest::TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("sharded-labels").await.unwrap();
    let api: Api<ConfigMap> = ns.api();
    let names: Vec<String> = (0..OBJECTS).map(|i| format!("cm-{i}")).collect();
    support::create_config_maps(&ns, &names, 1000).await;
    let log: Log = Arc::default();
    let mut replicas = Vec::new();
    for who in ["a", "b", "c"] {
        let manager = support::manager(&ns);
        let log = Arc::clone(&log);
        let controller = rudder::new_controller(&manager)
            .for_::<ConfigMap>()
            .named(format!("labels-{who}"))
            .sharded(support::ring(&ns, RING, who, SHARDS).with_mode(ShardMode::Labels))
            .complete_with(move |tools| Recording { who, log, tools })
            .await
            .unwrap();
        assert!(controller.is_sharded());
        // Labelling needs patch on the primary type: recorded.
        let rules = manager.permissions();
        let scope = rudder::manager::rbac::RuleScope::Namespace(ns.name().to_owned());
        assert!(rules.allows(&scope, "", "configmaps", Verb::Patch));
        let (stop, task) = support::start(&manager);
        replicas.push(Replica {
            who,
            manager,
            stop,
            task,
        });
    }

    let gate = ShardGate::new(SHARDS, fnv1a64(RING.as_bytes()), KeyAffinity::Name);
    let shard_of = |name: &str| gate.shard_of(&Request::namespaced(ns.name(), name));
    let owner_of = |name: &str, members: &[String]| -> Option<&'static str> {
        let found = owner(RING, SHARDS, shard_of(name), members)?;
        ["a", "b", "c"].into_iter().find(|who| found == *who)
    };

    // Three replicas: each caches and reconciles its third.
    let sizes = settle(&replicas, &names, &log, &owner_of, Instant::now()).await;
    eprintln!("three replicas, (objects, bytes) cached: {sizes:?}");
    let total_bytes: usize = sizes.values().map(|(_, b)| b).sum();
    assert_eq!(sizes.values().map(|(n, _)| n).sum::<usize>(), OBJECTS);
    for (who, (count, bytes)) in &sizes {
        // 9 shards over 3 members: 3 shards each, so about a third of the keys.
        assert!(
            (OBJECTS / 6..=OBJECTS / 2).contains(count),
            "{who} caches {count} of {OBJECTS}"
        );
        assert!(
            *bytes * 2 < total_bytes,
            "{who} caches {bytes} of {total_bytes} bytes"
        );
    }
    // Every object carries the label of its shard.
    let label = format!("shard.rudder.dev/{RING}");
    for cm in api.list(&ListParams::default()).await.unwrap() {
        let name = cm.metadata.name.clone().unwrap();
        let value = cm.metadata.labels.as_ref().and_then(|l| l.get(&label));
        assert_eq!(value, Some(&shard_of(&name).to_string()), "{name}");
    }

    // A label written by hand: a wrong shard is corrected and a removed label written again,
    // each object back in its owner's cache.
    let wrong = (shard_of("cm-0") + 1) % SHARDS;
    api.patch(
        "cm-0",
        &PatchParams::default(),
        &Patch::Merge(
            serde_json::json!({ "metadata": { "labels": { &label: wrong.to_string() } } }),
        ),
    )
    .await
    .unwrap();
    api.patch(
        "cm-1",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({ "metadata": { "labels": { &label: null } } })),
    )
    .await
    .unwrap();
    rudder_envtest::poll::eventually("the labels written again", WAIT, async || {
        let labels = |name: &'static str| {
            let api = api.clone();
            async move {
                api.get(name)
                    .await
                    .unwrap()
                    .metadata
                    .labels
                    .unwrap_or_default()
            }
        };
        let (zero, one) = (labels("cm-0").await, labels("cm-1").await);
        (zero.get(&label) == Some(&shard_of("cm-0").to_string())
            && one.get(&label) == Some(&shard_of("cm-1").to_string()))
        .then_some(())
    })
    .await;
    settle(&replicas, &names, &log, &owner_of, Instant::now()).await;

    // a's shard informers stop (as a failed watch would): the source asks the cache for
    // replacements, and an object created in one of a's shards afterwards is reconciled by a.
    let members: Vec<String> = ["a", "b", "c"].map(str::to_owned).to_vec();
    for informer in replicas[0]
        .manager
        .cache()
        .scopes::<ConfigMap>()
        .iter()
        .map(|scope| {
            replicas[0]
                .manager
                .cache()
                .informer::<ConfigMap>(scope)
                .unwrap()
        })
        .collect::<Vec<_>>()
    {
        informer.stop().await;
    }
    let after_stop = (0..)
        .map(|i| format!("after-stop-{i}"))
        .find(|n| owner_of(n, &members) == Some("a"))
        .unwrap();
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(after_stop.clone()),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    };
    api.create(&PostParams::default(), &cm).await.unwrap();
    let mut names = names.clone();
    names.push(after_stop);
    settle(&replicas, &names, &log, &owner_of, Instant::now()).await;

    // c stops: a and b take its shards, their caches grow to hold them.
    let c = replicas.pop().unwrap();
    c.stop.cancel();
    c.task.await.unwrap().unwrap();
    let since = Instant::now();
    let sizes = settle(&replicas, &names, &log, &owner_of, since).await;
    eprintln!("two replicas, (objects, bytes) cached: {sizes:?}");
    assert_eq!(sizes.values().map(|(n, _)| n).sum::<usize>(), OBJECTS + 1);

    // An object created now, without a label, is labelled and reconciled by its owner.
    let late = ConfigMap {
        metadata: ObjectMeta {
            name: Some("late".to_owned()),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    };
    api.create(&PostParams::default(), &late).await.unwrap();
    let mut all = names.clone();
    all.push("late".to_owned());
    settle(&replicas, &all, &log, &owner_of, Instant::now()).await;

    for replica in replicas {
        replica.stop.cancel();
        replica.task.await.unwrap().unwrap();
    }
    let log = log.lock().unwrap();
    let mut by_key: HashMap<&str, Vec<(Instant, Instant)>> = HashMap::new();
    for (_, key, _, start, end) in log.iter() {
        by_key.entry(key).or_default().push((*start, *end));
    }
    for (key, mut intervals) in by_key {
        intervals.sort();
        for pair in intervals.windows(2) {
            assert!(pair[0].1 <= pair[1].0, "{key}: reconciles overlap");
        }
    }
}
