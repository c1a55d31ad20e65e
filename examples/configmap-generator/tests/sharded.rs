//! The generator sharded across 3 replicas in one process, on a real API server, in both
//! modes: every generator gets its ConfigMaps and its status, and the ring's shard Leases are
//! held by the three replicas; in label mode every generator also carries its shard label
//! and each replica's cache holds only the generators of its shards.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

mod support;
use support::{manager, start};

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use configmap_generator::{CONTROLLER_NAME, ConfigMapGenerator, ConfigMapGeneratorSpec};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PostParams};
use kube::{CustomResourceExt, ResourceExt};
use rudder::cache::ListOptions;
use rudder::lease::sharding::{ShardMode, ShardingConfig};

const GENERATORS: usize = 12;
const SHARDS: usize = 8;

#[tokio::test]
async fn three_sharded_replicas_generate_every_generators_configmaps() {
    three_replicas("cmgen-sharded", "cmgen", ShardMode::QueueFilter).await;
}

#[tokio::test]
async fn three_replicas_in_label_mode_split_the_generators_between_their_caches() {
    three_replicas("cmgen-labels", "cmgen-labels", ShardMode::Labels).await;
}

async fn three_replicas(hint: &str, ring: &str, mode: ShardMode) {
    let env = rudder_envtest::TestEnv::builder().shared().await.unwrap();
    env.install_crds([ConfigMapGenerator::crd()]).await.unwrap();
    let ns = env.namespace(hint).await.unwrap();
    let mut managers = Vec::new();
    let mut running = Vec::new();
    for who in ["a", "b", "c"] {
        let manager = manager(&ns);
        let controller = configmap_generator::register_with(
            &manager,
            &format!("{CONTROLLER_NAME}-{ring}-{who}"),
            Some(
                ShardingConfig::new(ns.name(), ring)
                    .with_mode(mode)
                    .with_identity(who)
                    .with_shards(SHARDS)
                    .with_lease_duration(Duration::from_secs(3))
                    .with_renew_deadline(Duration::from_secs(2))
                    .with_retry_period(Duration::from_millis(500)),
            ),
        )
        .await
        .unwrap();
        assert!(controller.is_sharded());
        running.push(start(&manager));
        managers.push(manager);
    }

    let generators: Api<ConfigMapGenerator> = ns.api();
    for i in 0..GENERATORS {
        let spec = ConfigMapGeneratorSpec {
            data: BTreeMap::from([("i".to_owned(), i.to_string())]),
            count: 2,
        };
        generators
            .create(
                &PostParams::default(),
                &ConfigMapGenerator::new(&format!("g{i}"), spec),
            )
            .await
            .unwrap();
    }
    let cms: Api<ConfigMap> = ns.api();
    let expected: BTreeSet<String> = (0..GENERATORS)
        .flat_map(|i| [format!("g{i}-0"), format!("g{i}-1")])
        .collect();
    rudder_envtest::poll::eventually(
        "every generator's ConfigMaps and status",
        Duration::from_secs(60),
        async || {
            let names: BTreeSet<String> = cms
                .list(&ListParams::default())
                .await
                .unwrap()
                .into_iter()
                .map(|cm| cm.name_any())
                .filter(|n| n != "kube-root-ca.crt")
                .collect();
            let statuses = generators
                .list(&ListParams::default())
                .await
                .unwrap()
                .into_iter()
                .filter(|g| g.status.as_ref().is_some_and(|s| s.generated == 2))
                .count();
            (names == expected && statuses == GENERATORS).then_some(())
        },
    )
    .await;
    // The shards are held by the three replicas, each shard by one.
    let leases: Api<Lease> = ns.api();
    let holders = rudder_envtest::poll::eventually(
        "every shard held, by all three replicas",
        Duration::from_secs(30),
        async || {
            let mut holders = Vec::new();
            for shard in 0..SHARDS {
                let holder = leases
                    .get_opt(&format!("{ring}-shard-{shard}"))
                    .await
                    .ok()
                    .flatten()
                    .and_then(|l| l.spec)
                    .and_then(|s| s.holder_identity)
                    .filter(|h| !h.is_empty());
                holders.extend(holder);
            }
            let distinct: BTreeSet<&String> = holders.iter().collect();
            (holders.len() == SHARDS && distinct.len() == 3).then_some(holders)
        },
    )
    .await;
    println!("shard holders: {holders:?}");
    if mode == ShardMode::Labels {
        // Every generator carries its shard, and the replicas' caches split them.
        let label = format!("shard.rudder.dev/{ring}");
        for generator in generators.list(&ListParams::default()).await.unwrap() {
            assert!(
                generator.labels().contains_key(&label),
                "{}",
                generator.name_any()
            );
        }
        let cached = rudder_envtest::poll::eventually(
            "the generators split between the replicas' caches",
            Duration::from_secs(30),
            async || {
                let mut counts = Vec::new();
                for manager in &managers {
                    let held = manager
                        .cache()
                        .list::<ConfigMapGenerator>(&ListOptions::default())
                        .await
                        .ok()?;
                    counts.push(held.len());
                }
                (counts.iter().sum::<usize>() == GENERATORS
                    && counts.iter().all(|&n| n < GENERATORS))
                .then_some(counts)
            },
        )
        .await;
        println!("generators cached per replica: {cached:?}");
    }
    for (stop, task) in running {
        stop.cancel();
        task.await.unwrap().unwrap();
    }
}
