//! Streaming lists refused: a control plane of its own, started with the `WatchList` feature
//! gate off, answers a streaming list's watch with 422, and informers (bare, and a cache's)
//! list in pages instead, sync, and go on watching.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::{WatchGate, config_map, synced_informer};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::PostParams;
use rudder_cache::{Cache, ListOptions, ListStrategy, Scope};
use rudder_envtest::TestEnv;
use tokio_util::sync::CancellationToken;

#[tokio::test]
async fn informers_fall_back_to_paginated_lists_when_the_server_refuses_streaming_lists() {
    let env = TestEnv::builder()
        .apiserver_arg("--feature-gates=WatchList=false")
        .shared()
        .await
        .unwrap();
    let ns = env.namespace("list-refused").await.unwrap();
    let api = ns.api::<ConfigMap>();
    for i in 0..20 {
        api.create(&PostParams::default(), &config_map(&format!("cm-{i}"), &[]))
            .await
            .unwrap();
    }

    let gate = WatchGate::default();
    let informer = synced_informer(&gate, env.config(), ns.name(), |b| b).await;
    assert_eq!(informer.list_strategy(), ListStrategy::Paginated);
    assert_eq!(informer.store().len(), 20);
    let stats = informer.stats();
    assert_eq!(stats.streaming_fallbacks, 1);
    // The refusal is the fall back's reason, not a watch error retried with backoff.
    assert_eq!(stats.watch_errors, 0);
    let requests = gate.requests();
    assert!(
        requests
            .iter()
            .any(|r| r.contains("sendInitialEvents=true")),
        "{requests:?}"
    );

    // A cache's informers do the same, and its reader serves what they hold.
    let token = CancellationToken::new();
    let cache = Cache::builder(env.client().unwrap())
        .default_namespace(ns.name())
        .build(&token);
    let listed = cache
        .list::<ConfigMap>(&ListOptions::default())
        .await
        .unwrap();
    assert_eq!(listed.len(), 20);
    assert_eq!(
        cache
            .informer::<ConfigMap>(&Scope::namespace(ns.name()))
            .unwrap()
            .list_strategy(),
        ListStrategy::Paginated
    );
    api.create(&PostParams::default(), &config_map("later", &[]))
        .await
        .unwrap();
    rudder_envtest::poll::until("the later object stored", Duration::from_secs(20), || {
        informer.store().len() == 21
    })
    .await;
    informer.stop().await;
    cache.stop().await;
}
