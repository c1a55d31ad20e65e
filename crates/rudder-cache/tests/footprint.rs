//! What an informer says it holds, against a real API server: objects, their bytes as JSON
//! (followed through adds, updates and deletes), its sync time and list strategy, as stats
//! and as gauges; and the warning a cached read gives when it starts a cluster-wide informer.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::config_map;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use rudder_cache::{Cache, Informer};
use rudder_envtest::TestEnv;
#[cfg(feature = "metrics")]
use rudder_envtest::metrics as metrics_page;
use rudder_envtest::poll::until;
use tokio_util::sync::CancellationToken;

/// The sum of the stored objects' sizes as JSON, measured here apart from the informer.
fn json_bytes(informer: &Informer<ConfigMap>) -> u64 {
    informer
        .store()
        .list()
        .iter()
        .map(|cm| serde_json::to_vec(&**cm).unwrap().len() as u64)
        .sum()
}

#[tokio::test]
async fn an_informer_counts_its_objects_and_their_bytes_through_every_change() {
    // The test runtime has one thread, so the informer's task reports to this recorder.
    #[cfg(feature = "metrics")]
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    #[cfg(feature = "metrics")]
    let _guard = metrics::set_default_local_recorder(&recorder);
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("footprint").await.unwrap();
    let api = common::api::<ConfigMap>(&ns);
    for i in 0..5 {
        api.create(&PostParams::default(), &config_map(&format!("cm-{i}"), &[]))
            .await
            .unwrap();
    }
    let informer = Informer::builder(common::api::<ConfigMap>(&ns)).start();
    assert_eq!(informer.stats().sync_duration, None);
    informer
        .wait_for_sync(Duration::from_secs(30))
        .await
        .unwrap();
    let stats = informer.stats();
    assert!(stats.sync_duration.is_some_and(|d| d > Duration::ZERO));
    assert_eq!(stats.bytes_held, json_bytes(&informer));
    assert!(stats.bytes_held > 5 * 100, "{stats:?}");

    // A bigger update, a delete and an add: the count follows each.
    let big = serde_json::json!({ "data": { "big": "x".repeat(4000) } });
    api.patch("cm-0", &PatchParams::default(), &Patch::Merge(&big))
        .await
        .unwrap();
    api.delete("cm-1", &DeleteParams::default()).await.unwrap();
    api.create(&PostParams::default(), &config_map("cm-new", &[]))
        .await
        .unwrap();
    until("the changes stored", Duration::from_secs(20), || {
        let stored = informer.store().get(&rudder_cache::ObjectKey {
            namespace: Some(ns.name().to_owned()),
            name: "cm-0".to_owned(),
        });
        informer.store().len() == 5
            && stored.is_some_and(|cm| cm.data.as_ref().is_some_and(|d| d.contains_key("big")))
            && informer
                .store()
                .list()
                .iter()
                .all(|cm| cm.metadata.name.as_deref() != Some("cm-1"))
    })
    .await;
    let bytes = informer.stats().bytes_held;
    assert_eq!(bytes, json_bytes(&informer));
    assert!(
        bytes > stats.bytes_held + 3000,
        "{bytes} after, {} before",
        stats.bytes_held
    );

    #[cfg(feature = "metrics")]
    {
        // Published at the end of the list and at most a second after a change.
        let resource = informer.resource().to_owned();
        let strategy = informer.list_strategy().as_str();
        rudder_envtest::poll::eventually(
            "the gauges published",
            Duration::from_secs(10),
            async || {
                let page = recorder.handle().render();
                let get = |name: &str, extra: &str| {
                    metrics_page::value(&page, name, &format!("resource=\"{resource}\"{extra}"))
                };
                (get("rudder_cache_objects", "") == Some(5.0)
                    && get("rudder_cache_object_bytes", "") == Some(bytes as f64)
                    && get("rudder_cache_sync_duration_seconds", "").is_some_and(|v| v > 0.0)
                    && get(
                        "rudder_cache_list_strategy",
                        &format!(",strategy=\"{strategy}\""),
                    ) == Some(1.0))
                .then_some(())
            },
        )
        .await;
        informer.stop().await;
        let page = recorder.handle().render();
        assert_eq!(
            metrics_page::value(
                &page,
                "rudder_cache_objects",
                &format!("resource=\"{resource}\"")
            ),
            Some(0.0),
            "a stopped informer holds nothing"
        );
    }
}

#[tokio::test]
async fn a_cached_read_that_starts_a_cluster_wide_informer_is_counted() {
    #[cfg(feature = "metrics")]
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    #[cfg(feature = "metrics")]
    let _guard = metrics::set_default_local_recorder(&recorder);
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("footprint-read").await.unwrap();
    let token = CancellationToken::new();
    // Scoped to a namespace: a read starts that namespace's informer, no warning.
    let scoped = Cache::builder(env.client().unwrap())
        .default_namespace(ns.name())
        .build(&token);
    scoped.get::<ConfigMap>(Some(ns.name()), "x").await.unwrap();
    // Cluster-wide: the first read starts the informer and is counted, later ones are not.
    let cache = Cache::builder(env.client().unwrap()).build(&token);
    for _ in 0..2 {
        cache.get::<ConfigMap>(Some(ns.name()), "x").await.unwrap();
    }
    #[cfg(feature = "metrics")]
    {
        let page = recorder.handle().render();
        let started = metrics_page::samples(&page, "rudder_cache_reader_started_informers_total");
        assert_eq!(started.len(), 1, "{started:?}");
        assert_eq!(started[0].1, 1.0);
        assert!(
            started[0].0.contains("resource=\"/api/v1/configmaps"),
            "{started:?}"
        );
    }
    token.cancel();
    scoped.stop().await;
    cache.stop().await;
}
