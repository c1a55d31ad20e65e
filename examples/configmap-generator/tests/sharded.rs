//! The generator sharded across 3 replicas in one process, on a real API server: every
//! generator gets its ConfigMaps and its status, and the ring's shard Leases are held by the
//! three replicas.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use configmap_generator::{CONTROLLER_NAME, ConfigMapGenerator, ConfigMapGeneratorSpec};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PostParams};
use kube::{CustomResourceExt, ResourceExt};
use rudder::Manager;
use rudder::manager::sharding::ShardingConfig;
use tokio_util::sync::CancellationToken;

const GENERATORS: usize = 12;
const SHARDS: usize = 8;

#[tokio::test]
async fn three_sharded_replicas_generate_every_generators_configmaps() {
    let env = rudder_envtest::TestEnv::builder().shared().await.unwrap();
    env.install_crds([ConfigMapGenerator::crd()]).await.unwrap();
    let ns = env.namespace("cmgen-sharded").await.unwrap();
    let mut running = Vec::new();
    for who in ["a", "b", "c"] {
        let namespace = ns.name().to_owned();
        let manager = Arc::new(
            Manager::builder(ns.client())
                .health_probe_address(None)
                .metrics_address(None)
                .cache(move |c| c.default_namespace(namespace))
                .build()
                .unwrap(),
        );
        let controller = configmap_generator::register_with(
            &manager,
            &format!("{CONTROLLER_NAME}-{who}"),
            Some(
                ShardingConfig::new(ns.name(), "cmgen")
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
        let stop = CancellationToken::new();
        let task = tokio::spawn({
            let (manager, stop) = (Arc::clone(&manager), stop.clone());
            async move { manager.start(stop).await }
        });
        running.push((stop, task));
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
    rudder_envtest::eventually(
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
    let holders = rudder_envtest::eventually(
        "every shard held, by all three replicas",
        Duration::from_secs(30),
        async || {
            let mut holders = Vec::new();
            for shard in 0..SHARDS {
                let holder = leases
                    .get_opt(&format!("cmgen-shard-{shard}"))
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
    for (stop, task) in running {
        stop.cancel();
        task.await.unwrap().unwrap();
    }
}
