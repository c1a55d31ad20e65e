//! How informers list, against a real API server: streaming lists where the server serves
//! them, paginated lists where it does not (an older release, or a server that ignores
//! `sendInitialEvents` and never ends the initial events), and paginated only when asked.
//! The server started with `WatchList` off is in `list_fallback.rs`, a control plane of its
//! own.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::{WatchGate, config_map, synced_informer};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::PostParams;
use rudder_cache::ListStrategy;
use rudder_envtest::TestEnv;

const OBJECTS: usize = 30;

/// Whether `request` is a streaming list's watch.
fn streams(request: &str) -> bool {
    request.contains("watch=true") && request.contains("sendInitialEvents=true")
}

/// Whether `request` is a paginated list (a GET of the collection, not a watch).
fn lists(request: &str) -> bool {
    request.contains("/configmaps?") && !request.contains("watch=true")
}

async fn populated(env: &TestEnv, prefix: &str) -> rudder_envtest::TestNamespace {
    let ns = env.namespace(prefix).await.unwrap();
    let api = ns.api::<ConfigMap>();
    for i in 0..OBJECTS {
        api.create(&PostParams::default(), &config_map(&format!("cm-{i}"), &[]))
            .await
            .unwrap();
    }
    ns
}

#[tokio::test]
async fn an_informer_streams_its_list_where_the_server_serves_streaming_lists() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = populated(env, "list-streaming").await;
    let gate = WatchGate::default();
    let informer = synced_informer(&gate, env.config(), ns.name(), |b| b).await;
    assert_eq!(informer.store().len(), OBJECTS);
    let requests = gate.requests();
    let version = env.version();
    if (version.major, version.minor) >= (1, 34) {
        // WatchList is on by default from 1.34: one streaming watch, no list at all.
        assert_eq!(informer.list_strategy(), ListStrategy::Streaming);
        assert_eq!(informer.stats().streaming_fallbacks, 0);
        assert!(requests.iter().any(|r| streams(r)), "{requests:?}");
        assert!(!requests.iter().any(|r| lists(r)), "{requests:?}");
    } else {
        // Before, it is off: refused (422), and the informer lists in pages instead.
        assert_eq!(informer.list_strategy(), ListStrategy::Paginated);
        assert_eq!(informer.stats().streaming_fallbacks, 1);
        assert!(requests.iter().any(|r| lists(r)), "{requests:?}");
    }
    // Changes arrive after the list either way.
    ns.api::<ConfigMap>()
        .create(&PostParams::default(), &config_map("later", &[]))
        .await
        .unwrap();
    rudder_envtest::poll::until("the later object stored", Duration::from_secs(20), || {
        informer.store().len() == OBJECTS + 1
    })
    .await;
    informer.stop().await;
}

#[tokio::test]
async fn a_server_that_never_ends_the_initial_events_gets_paginated_lists_after_the_bound() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = populated(env, "list-old-server").await;
    let gate = WatchGate::default();
    gate.as_old_server();
    let informer = synced_informer(&gate, env.config(), ns.name(), |b| {
        b.initial_events_bound(Duration::from_millis(1500))
    })
    .await;
    assert_eq!(informer.list_strategy(), ListStrategy::Paginated);
    assert_eq!(informer.stats().streaming_fallbacks, 1);
    assert_eq!(informer.store().len(), OBJECTS);
    let requests = gate.requests();
    let first_list = requests.iter().position(|r| lists(r)).unwrap();
    assert!(
        requests[..first_list]
            .iter()
            .any(|r| r.contains("watch=true")),
        "a watch was tried first: {requests:?}"
    );
    informer.stop().await;
}

#[tokio::test]
async fn paginated_lists_when_asked_never_stream() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = populated(env, "list-paginated").await;
    let gate = WatchGate::default();
    let informer = synced_informer(&gate, env.config(), ns.name(), |b| {
        b.list_strategy(ListStrategy::Paginated)
    })
    .await;
    assert_eq!(informer.list_strategy(), ListStrategy::Paginated);
    assert_eq!(informer.stats().streaming_fallbacks, 0);
    assert_eq!(informer.store().len(), OBJECTS);
    let requests = gate.requests();
    assert!(!requests.iter().any(|r| streams(r)), "{requests:?}");
    assert!(requests.iter().any(|r| lists(r)), "{requests:?}");
    informer.stop().await;
}

#[tokio::test]
async fn the_caches_streaming_list_asks_for_the_most_recent_state() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = populated(env, "list-most-recent").await;
    let gate = WatchGate::default();
    let cache = rudder_cache::Cache::builder(gate.client(env.config()))
        .default_namespace(ns.name())
        .build(&tokio_util::sync::CancellationToken::new());
    // Written just before the informer starts: a list from a watch cache that has not seen it
    // yet (`resourceVersion=0`, "any") could sync without it.
    ns.api::<ConfigMap>()
        .create(&Default::default(), &config_map("just-written", &[]))
        .await
        .unwrap();
    let found = cache
        .get::<ConfigMap>(Some(ns.name()), "just-written")
        .await
        .unwrap();
    assert!(
        found.is_some(),
        "synced without an object written before it started"
    );
    let requests = gate.requests();
    let version = env.version();
    if (version.major, version.minor) >= (1, 34) {
        let streaming: Vec<&String> = requests.iter().filter(|r| streams(r)).collect();
        assert!(!streaming.is_empty(), "{requests:?}");
        assert!(
            streaming.iter().all(|r| !r.contains("resourceVersion=0")),
            "{streaming:?}"
        );
    }
    cache.stop().await;
}
