//! Sharding on a real API server: three managers in this process split 3,000 ConfigMaps by
//! shard Leases; every key is reconciled by the replica its shard belongs to, and the
//! recorded reconcile intervals of a key never overlap across replicas, while a member stops
//! cleanly, one joins, and one is killed (its Leases left to expire). A replica in a child
//! process frozen (SIGSTOP) past its leases and resumed starts no reconcile.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

#[path = "support/fixtures.rs"]
mod fixtures;

use fixtures::{
    Kid, client_from_kubeconfig, config_map, create_config_maps, manager_builder,
    shard_config_maps, sharding, start, wall_micros,
};

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use rudder_controller::{Controller, Options};
use rudder_core::Action;
use rudder_core::Context;
use rudder_core::Reconciler;
use rudder_core::Request;
use rudder_envtest::{TestEnv, TestNamespace};
use rudder_lease::sharding::{Ring, RingStatus, owner};
use rudder_manager::Error;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How many ConfigMaps (3,000, the figure; `RUDDER_SHARDING_OBJECTS` sets another
/// number, e.g. 300 for a quick run).
fn objects() -> usize {
    std::env::var("RUDDER_SHARDING_OBJECTS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(3000)
}
const SHARDS: usize = 16;
const RING: &str = "cms";
const WAIT: Duration = Duration::from_secs(40);

/// One reconcile: who ran it, the key, when it started and when it returned (tokio's clock,
/// and the wall clock for comparisons with child processes).
#[derive(Clone, Debug)]
struct Interval {
    who: &'static str,
    key: String,
    start: Instant,
    end: Instant,
    wall: (u128, u128),
}

type Log = Arc<Mutex<Vec<Interval>>>;

struct Recording {
    who: &'static str,
    log: Log,
}

impl Reconciler for Recording {
    type Error = std::convert::Infallible;
    async fn reconcile(&self, request: Request, _: Context) -> Result<Action, Self::Error> {
        let start = Instant::now();
        let wall = wall_micros();
        // Long enough for an overlap to be seen if two replicas ran a key at once.
        tokio::time::sleep(Duration::from_millis(5)).await;
        self.log.lock().unwrap().push(Interval {
            who: self.who,
            key: request.name().to_owned(),
            start,
            end: Instant::now(),
            wall: (wall, wall_micros()),
        });
        // Keep every key busy, so hand-offs happen while its keys are being reconciled.
        Ok(Action::requeue_after(Duration::from_secs(1)))
    }
}

struct Replica {
    who: &'static str,
    status: watch::Receiver<RingStatus>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<Result<(), Error>>,
}

fn replica(ns: &TestNamespace, who: &'static str, log: &Log) -> Replica {
    replica_in(ns, RING, who, log)
}

fn replica_in(ns: &TestNamespace, ring_name: &str, who: &'static str, log: &Log) -> Replica {
    let manager = manager_builder(ns.client(), ns.name()).build().unwrap();
    let ring = Ring::new(ns.client(), sharding(ns.name(), ring_name, who, SHARDS)).unwrap();
    let controller = Controller::builder(
        format!("{ring_name}-{who}"),
        Recording {
            who,
            log: Arc::clone(log),
        },
    )
    .options(Options::new().workers(2))
    .build()
    .unwrap();
    shard_config_maps(&manager, &controller, &ring);
    let status = ring.status();
    manager.add(ring);
    manager.add_controller(controller);
    let (stop, task) = start(manager);
    Replica {
        who,
        status,
        stop,
        task,
    }
}

/// Waits until every replica in `live` sees exactly `live` as members and holds exactly
/// its shards; returns then.
async fn settled(replicas: &[&Replica]) -> Vec<String> {
    let mut expected: Vec<String> = replicas.iter().map(|r| r.who.to_owned()).collect();
    expected.sort();
    let deadline = Instant::now() + WAIT;
    loop {
        let all = replicas.iter().all(|r| {
            let status = r.status.borrow();
            status.settled && status.members == expected
        });
        if all {
            // Every shard is held by exactly one of them.
            let mut held = HashSet::new();
            for r in replicas {
                for shard in &r.status.borrow().held {
                    assert!(held.insert(*shard), "shard {shard} held twice");
                }
            }
            assert_eq!(held.len(), SHARDS, "every shard is held");
            return expected;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {expected:?} to settle: {:?}",
            replicas
                .iter()
                .map(|r| (r.who, r.status.borrow().clone()))
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The keys with a reconcile started at or after `since`.
fn keys_since(log: &Log, since: Instant) -> HashSet<String> {
    log.lock()
        .unwrap()
        .iter()
        .filter(|i| i.start >= since)
        .map(|i| i.key.clone())
        .collect()
}

/// Waits until every key has a reconcile started after `since`, then checks that every
/// reconcile started after `since` ran on the key's owner among `members`.
async fn every_key_on_its_owner(
    log: &Log,
    since: Instant,
    members: &[String],
    names: &[String],
    namespace: &str,
) {
    let gate = rudder_controller::ShardGate::new(
        SHARDS,
        rudder_core::hash::fnv1a64(RING.as_bytes()),
        rudder_controller::KeyAffinity::Name,
    );
    let deadline = Instant::now() + WAIT;
    loop {
        let seen = keys_since(log, since);
        if names.iter().all(|n| seen.contains(n)) {
            break;
        }
        if Instant::now() >= deadline {
            let log = log.lock().unwrap();
            for name in names.iter().filter(|n| !seen.contains(*n)) {
                let shard = gate.shard_of(&Request::namespaced(namespace, name));
                let last: Vec<_> = log
                    .iter()
                    .filter(|i| &i.key == name)
                    .map(|i| (i.who, i.start))
                    .collect();
                println!(
                    "missing {name} shard {shard} owner {:?} since {since:?} history {last:?}",
                    owner(RING, SHARDS, shard, members)
                );
            }
        }
        assert!(
            Instant::now() < deadline,
            "{} of {} keys reconciled after the members settled",
            seen.len(),
            names.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let log = log.lock().unwrap();
    let mut checked = 0;
    for interval in log.iter().filter(|i| i.start >= since) {
        let shard = gate.shard_of(&Request::namespaced(namespace, &interval.key));
        let expected = owner(RING, SHARDS, shard, members).unwrap();
        assert_eq!(
            interval.who, expected,
            "{} (shard {shard}) reconciled by {} instead of its owner {expected}",
            interval.key, interval.who
        );
        checked += 1;
    }
    println!("{checked} reconciles after the settle, each on its key's owner among {members:?}");
}

/// Checks that no two reconciles of one key overlap in time (whoever ran them).
fn no_overlap(log: &Log) -> usize {
    let log = log.lock().unwrap();
    let mut by_key: HashMap<&str, Vec<&Interval>> = HashMap::new();
    for interval in log.iter() {
        by_key.entry(&interval.key).or_default().push(interval);
    }
    let mut crossings = 0;
    for (key, mut intervals) in by_key {
        intervals.sort_by_key(|i| i.start);
        for pair in intervals.windows(2) {
            assert!(
                pair[0].end <= pair[1].start,
                "{key}: {} ran {:?}..{:?} and {} started at {:?}",
                pair[0].who,
                pair[0].start,
                pair[0].end,
                pair[1].who,
                pair[1].start
            );
            if pair[0].who != pair[1].who {
                crossings += 1;
            }
        }
    }
    crossings
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_split_the_keys_by_shard_leases_without_overlap_as_members_change() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("sharding").await.unwrap();
    let api: Api<ConfigMap> = ns.api();
    let names: Vec<String> = (0..objects()).map(|i| format!("cm-{i}")).collect();
    create_config_maps(&api, names.iter().map(config_map), 50).await;
    let log: Log = Arc::default();

    // Three replicas.
    let started = Instant::now();
    let a = replica(&ns, "a", &log);
    let b = replica(&ns, "b", &log);
    let c = replica(&ns, "c", &log);
    let members = settled(&[&a, &b, &c]).await;
    println!("3 replicas settled in {:?}", started.elapsed());
    let since = Instant::now();
    every_key_on_its_owner(&log, since, &members, &names, ns.name()).await;

    // One stops cleanly: its shards are drained, released and taken by the others.
    let change = Instant::now();
    c.stop.cancel();
    c.task.await.unwrap().unwrap();
    let members = settled(&[&a, &b]).await;
    println!("c stopped: a and b settled in {:?}", change.elapsed());
    let since = Instant::now();
    every_key_on_its_owner(&log, since, &members, &names, ns.name()).await;

    // One joins: it takes about a third of the shards.
    let change = Instant::now();
    let d = replica(&ns, "d", &log);
    let members = settled(&[&a, &b, &d]).await;
    println!(
        "d joined: settled in {:?}, d holds {:?}",
        change.elapsed(),
        d.status.borrow().held
    );
    let since = Instant::now();
    every_key_on_its_owner(&log, since, &members, &names, ns.name()).await;

    // One is killed: nothing is released, its Leases expire, the others take its shards.
    let change = Instant::now();
    a.task.abort();
    let _ = a.task.await;
    let members = settled(&[&b, &d]).await;
    let took = change.elapsed();
    println!("a killed: b and d settled in {took:?}");
    assert!(
        took >= Duration::from_secs(2),
        "a's shards were taken before its leases could expire: {took:?}"
    );
    // The shard Leases were observed all along: taken over about a lease duration (3 s) after
    // the kill, not two.
    assert!(
        took < Duration::from_secs(6),
        "a's shards were taken {took:?} after the kill"
    );
    let since = Instant::now();
    every_key_on_its_owner(&log, since, &members, &names, ns.name()).await;

    let crossings = no_overlap(&log);
    let total = log.lock().unwrap().len();
    println!(
        "{total} reconciles, {crossings} hand-offs of a key between replicas, none overlapping"
    );
    assert!(crossings > 0, "keys moved between replicas");

    for r in [b, d] {
        r.stop.cancel();
        r.task.await.unwrap().unwrap();
    }
    drop(a.stop);
}

const CHILD: &str = "RUDDER_SHARDING_CHILD";
const FROZEN_RING: &str = "frozen";

/// Appends `key start end` (wall-clock microseconds) for each reconcile to a file.
struct FileLogged(Mutex<std::fs::File>);

impl Reconciler for FileLogged {
    type Error = std::convert::Infallible;
    async fn reconcile(&self, request: Request, _: Context) -> Result<Action, Self::Error> {
        let start = wall_micros();
        tokio::time::sleep(Duration::from_millis(5)).await;
        let line = format!("{} {start} {}\n", request.name(), wall_micros());
        self.0.lock().unwrap().write_all(line.as_bytes()).unwrap();
        Ok(Action::requeue_after(Duration::from_millis(300)))
    }
}

/// The child replica of the test below (a no-op otherwise): one sharded manager in the ring
/// `frozen`, logging its reconciles to a file, until it ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharded_child() {
    let Ok(spec) = std::env::var(CHILD) else {
        return;
    };
    let [kubeconfig, namespace, log]: [&str; 3] =
        spec.split('|').collect::<Vec<_>>().try_into().unwrap();
    let client = client_from_kubeconfig(kubeconfig).await;
    let manager = manager_builder(client.clone(), namespace).build().unwrap();
    let ring = Ring::new(client, sharding(namespace, FROZEN_RING, "f", SHARDS)).unwrap();
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    let controller = Controller::builder("frozen-f", FileLogged(Mutex::new(file)))
        .build()
        .unwrap();
    shard_config_maps(&manager, &controller, &ring);
    manager.add(ring);
    manager.add_controller(controller);
    println!("started");
    let result = manager.start_until_signal().await;
    println!("ended: {result:?}");
    std::process::exit(if result.is_ok() { 0 } else { 4 });
}

/// `(key, start, end)` of every reconcile the child logged.
fn read_log(path: &std::path::Path) -> Vec<(String, u128, u128)> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| {
            let mut parts = line.split(' ');
            let key = parts.next()?.to_owned();
            let start = parts.next()?.parse().ok()?;
            let end = parts.next()?.parse().ok()?;
            Some((key, start, end))
        })
        .collect()
}

/// The scenario: a replica frozen with SIGSTOP past its leases while another takes
/// its shards, then resumed: it starts no reconcile after resuming (it owns nothing then),
/// and its manager ends (its member Lease's renew deadline passed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_frozen_past_its_leases_starts_nothing_when_resumed() {
    // The process's recorder, before any ring registers its metrics.
    let metrics = rudder_manager::metrics::prometheus().unwrap();
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("sharding-frozen").await.unwrap();
    let api: Api<ConfigMap> = ns.api();
    let names: Vec<String> = (0..60).map(|i| format!("cm-{i}")).collect();
    create_config_maps(&api, names.iter().map(config_map), names.len()).await;
    let dir = std::env::temp_dir().join(format!("rudder-sharding-frozen-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let child_log = dir.join("f.log");
    let spec = format!(
        "{}|{}|{}",
        env.kubeconfig_path().display(),
        ns.name(),
        child_log.display()
    );
    let mut f = Kid::spawn("sharded_child", CHILD, spec, "f");
    let log: Log = Arc::default();
    let a = replica_in(&ns, FROZEN_RING, "a", &log);

    // Both hold their shards, and f reconciles its keys.
    let deadline = Instant::now() + WAIT;
    loop {
        let status = a.status.borrow().clone();
        let f_keys: HashSet<String> = read_log(&child_log).into_iter().map(|l| l.0).collect();
        if status.settled && status.members == ["a", "f"] && f_keys.len() >= 10 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "a and f never shared the ring: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    f.signal("-STOP");
    let stopped = wall_micros();
    let frozen = Instant::now();
    // a sees f's member Lease expire and takes over every shard once its Leases expire.
    let deadline = frozen + WAIT;
    loop {
        let status = a.status.borrow().clone();
        if status.settled && status.members == ["a"] && status.held.len() == SHARDS {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "a never took f's shards: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let took_over = frozen.elapsed();
    // a's metrics say so (the ring `frozen` has no other replica in this process).
    let deadline = Instant::now() + WAIT;
    let wanted = [
        "rudder_shard_members{ring=\"frozen\"} 1\n".to_owned(),
        format!("rudder_shard_shards_owned{{ring=\"frozen\"}} {SHARDS}\n"),
        format!(
            "rudder_shard_keys_owned{{ring=\"frozen\"}} {}\n",
            names.len()
        ),
    ];
    loop {
        let body = metrics.render();
        let acquired = body
            .lines()
            .find(|l| {
                l.starts_with("rudder_shard_handoffs_total{")
                    && l.contains("ring=\"frozen\"")
                    && l.contains("direction=\"acquired\"")
            })
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok());
        let rebalances = body
            .lines()
            .find(|l| l.starts_with("rudder_shard_rebalance_seconds_count{ring=\"frozen\"}"))
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok());
        let ok = wanted.iter().all(|w| body.contains(w.as_str()))
            && acquired.is_some_and(|n| n >= SHARDS as f64)
            && rebalances.is_some_and(|n| n >= 2.0)
            && body.contains("rudder_shard_rebalance_seconds_bucket{ring=\"frozen\",le=\"120\"}");
        if ok {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "a's ring metrics: {}",
            body.lines()
                .filter(|l| l.contains("rudder_shard"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Every key is reconciled by a.
    let since = Instant::now();
    let deadline = since + WAIT;
    loop {
        let seen = keys_since(&log, since);
        if seen.len() == names.len() {
            break;
        }
        assert!(Instant::now() < deadline, "a did not reconcile every key");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let resumed = wall_micros();
    f.signal("-CONT");
    // f's member Lease missed its renew deadline while frozen: its ring, and its manager, end.
    let code = f.exit_code(WAIT, "f did not end after resuming").await;
    let f_log = read_log(&child_log);
    let after_resume = f_log.iter().filter(|l| l.1 >= resumed).count();
    let during = f_log.iter().filter(|l| l.1 >= stopped).count();
    // Reconciles f had started before the freeze and finished after it whose key a
    // reconciled meanwhile: none, since a reconcile whose shard holding passed is cancelled
    // when the process resumes, before it can go on (it logs only when it finishes).
    let a_log = log.lock().unwrap().clone();
    let overlapping = f_log
        .iter()
        .filter(|(key, start, end)| {
            a_log
                .iter()
                .any(|i| &i.key == key && i.wall.0 < *end && *start < i.wall.1)
        })
        .count();
    println!(
        "a held every shard {took_over:?} after the freeze; f reconciled {} times, {during} \
         started after the freeze ({after_resume} after resuming), {overlapping} overlapping \
         one of a's; f ended with code {code:?}",
        f_log.len()
    );
    assert_eq!(during, 0, "the frozen replica started a reconcile");
    assert_eq!(after_resume, 0, "the resumed replica started a reconcile");
    assert_eq!(
        overlapping, 0,
        "a reconcile started before the freeze went on after it"
    );
    assert_ne!(code, Some(0), "f's manager ended without an error");
    a.stop.cancel();
    a.task.await.unwrap().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
