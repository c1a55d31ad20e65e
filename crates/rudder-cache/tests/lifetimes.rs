//! How long the cache's informers live: as long as a use holds them (or something pinned
//! them), and through their resource going away and coming back.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{ApiResource, DeleteParams, DynamicObject, PostParams};
use rudder_cache::{Cache, ListOptions, Scope};
use rudder_core::Event;
use rudder_envtest::poll::until;
use rudder_envtest::{TestCrd, TestEnv};
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(20);

#[tokio::test]
async fn an_informer_stops_when_its_last_user_lets_go() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("lifetimes_users").await.unwrap();
    let cache = Cache::builder(env.client().unwrap())
        .default_namespace(ns.name())
        .build(&CancellationToken::new());
    let scope = Scope::namespace(ns.name());

    let first = cache.acquire::<ConfigMap>(&scope).unwrap();
    let second = cache.acquire::<ConfigMap>(&scope).unwrap();
    let informer = first.informer().clone();
    informer.wait_for_sync(WAIT).await.unwrap();
    assert_eq!(cache.informer_count(), 1, "one informer for both users");
    assert_eq!(cache.informer_users::<ConfigMap>(&scope), 2);
    // A read of an informer someone holds does not keep it.
    cache
        .list::<ConfigMap>(&ListOptions::default())
        .await
        .unwrap();
    assert_eq!(cache.informer_count(), 1, "the read used the held informer");

    // A clone is the same hold.
    let clone = first.clone();
    drop(first);
    assert_eq!(cache.informer_users::<ConfigMap>(&scope), 2);
    drop(clone);
    assert_eq!(cache.informer_users::<ConfigMap>(&scope), 1);
    assert!(informer.is_running() && !informer.is_stopped());

    let mut events = informer.subscribe();
    drop(second);
    assert_eq!(cache.informer_users::<ConfigMap>(&scope), 0);
    assert_eq!(cache.informer_count(), 0, "forgotten with its last user");
    assert!(informer.is_stopped());
    until("the informer's watch task to end", WAIT, || {
        !informer.is_running()
    })
    .await;
    // The subscription replays the store, then ends with the informer.
    while tokio::time::timeout(WAIT, events.next())
        .await
        .unwrap()
        .is_some()
    {}

    // The next use starts a new one.
    let again = cache.acquire::<ConfigMap>(&scope).unwrap();
    assert!(!again.is_stopped());
    again.wait_for_sync(WAIT).await.unwrap();
    assert_eq!(cache.informer_count(), 1);
    drop(again);
    assert_eq!(cache.informer_count(), 0);
    cache.stop().await;
}

#[tokio::test]
async fn a_pinned_informer_outlives_its_users() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("lifetimes_pinned").await.unwrap();
    let cache = Cache::builder(env.client().unwrap()).build(&CancellationToken::new());
    let scope = Scope::namespace(ns.name());

    // Asked for without a use: pinned, whatever its users do.
    let pinned = cache.informer::<ConfigMap>(&scope).unwrap();
    drop(cache.acquire::<ConfigMap>(&scope).unwrap());
    assert_eq!(cache.informer_count(), 1);
    assert!(!pinned.is_stopped());

    // A use taken first, then pinned by `informer`: the pin survives the use.
    let other = Scope::namespace(format!("{}-other", ns.name()));
    let held = cache.acquire::<ConfigMap>(&other).unwrap();
    cache.informer::<ConfigMap>(&other).unwrap();
    drop(held);
    assert_eq!(cache.informer_count(), 2);

    // Removal stops a held informer too.
    let third = Scope::namespace(format!("{}-third", ns.name()));
    let held = cache.acquire::<ConfigMap>(&third).unwrap();
    assert!(cache.remove_informer::<ConfigMap>(&third).await);
    assert!(held.is_stopped());
    assert_eq!(cache.informer_count(), 2);
    drop(held);
    assert_eq!(
        cache.informer_count(),
        2,
        "dropping the last use of a removed one is harmless"
    );
    cache.stop().await;

    // A read that starts an informer keeps it (a cache of its own: nothing runs in it).
    let cache = Cache::builder(env.client().unwrap())
        .default_namespace(ns.name())
        .build(&CancellationToken::new());
    cache
        .list::<ConfigMap>(&ListOptions::default())
        .await
        .unwrap();
    let scope = Scope::namespace(ns.name());
    drop(cache.acquire::<ConfigMap>(&scope).unwrap());
    assert_eq!(cache.informer_count(), 1, "the read's informer stays");
    cache.stop().await;
}

/// The Gadget CRD of this file, in a group no other test uses.
fn gadgets() -> CustomResourceDefinition {
    TestCrd::new("lifetimes.rudder.test", "Gadget", "gadgets").build()
}

fn gadget(name: &str) -> DynamicObject {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "lifetimes.rudder.test/v1",
        "kind": "Gadget",
        "metadata": { "name": name },
        "spec": {},
    }))
    .unwrap()
}

#[tokio::test]
async fn an_informer_waits_quietly_while_its_crd_is_deleted_and_lists_it_again() {
    let env = TestEnv::builder().shared().await.unwrap();
    env.install_crds([gadgets()]).await.unwrap();
    let ns = env.namespace("lifetimes_crd").await.unwrap();
    let resource = ApiResource {
        group: "lifetimes.rudder.test".into(),
        version: "v1".into(),
        api_version: "lifetimes.rudder.test/v1".into(),
        kind: "Gadget".into(),
        plural: "gadgets".into(),
    };
    let raw: Api<DynamicObject> = Api::namespaced_with(ns.client(), ns.name(), &resource);
    raw.create(&PostParams::default(), &gadget("before"))
        .await
        .unwrap();

    let cache = Cache::builder(env.client().unwrap()).build(&CancellationToken::new());
    let informer = cache
        .acquire_dynamic(&resource, &Scope::namespace(ns.name()))
        .unwrap();
    informer.wait_for_sync(WAIT).await.unwrap();
    let mut events = informer.subscribe();
    let replayed = tokio::time::timeout(WAIT, events.next())
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(replayed, Event::Create { .. }));
    assert!(informer.resource_served());
    assert_eq!(informer.store().len(), 1);

    // The CRD goes, and its objects with it.
    let crds: Api<CustomResourceDefinition> = Api::all(env.client().unwrap());
    crds.delete("gadgets.lifetimes.rudder.test", &DeleteParams::default())
        .await
        .unwrap();
    until("the informer to see its resource gone", WAIT, || {
        !informer.resource_served()
    })
    .await;
    until("the store to be emptied", WAIT, || {
        informer.store().is_empty()
    })
    .await;
    let deleted = tokio::time::timeout(WAIT, events.next())
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(deleted, Event::Delete { .. }), "{deleted:?}");
    // Waiting, not failing: the informer runs, counts no watch error, and stays synced.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let stats = informer.stats();
    assert_eq!(stats.watch_errors, 0, "{stats:?}");
    assert!(informer.is_running() && informer.has_synced());

    // Served again: listed again, and the new object arrives.
    env.install_crds([gadgets()]).await.unwrap();
    raw.create(&PostParams::default(), &gadget("after"))
        .await
        .unwrap();
    until("the informer to list the resource again", WAIT, || {
        informer.resource_served()
            && informer
                .store()
                .list()
                .iter()
                .any(|g| g.metadata.name.as_deref() == Some("after"))
    })
    .await;
    assert_eq!(informer.store().len(), 1);
    assert_eq!(informer.stats().watch_errors, 0);
    cache.stop().await;
}

#[tokio::test]
async fn an_informer_for_a_crd_not_installed_yet_stays_unsynced_until_it_is() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("lifetimes_late_crd").await.unwrap();
    let resource = ApiResource {
        group: "late.lifetimes.rudder.test".into(),
        version: "v1".into(),
        api_version: "late.lifetimes.rudder.test/v1".into(),
        kind: "Gizmo".into(),
        plural: "gizmos".into(),
    };
    let cache = Cache::builder(env.client().unwrap()).build(&CancellationToken::new());
    let informer = cache
        .acquire_dynamic(&resource, &Scope::namespace(ns.name()))
        .unwrap();
    until("the informer to find its resource missing", WAIT, || {
        !informer.resource_served()
    })
    .await;
    assert!(!informer.has_synced(), "no list, no sync");
    assert_eq!(informer.stats().watch_errors, 0);

    env.install_crds([TestCrd::new("late.lifetimes.rudder.test", "Gizmo", "gizmos").build()])
        .await
        .unwrap();
    informer.wait_for_sync(WAIT).await.unwrap();
    assert!(informer.resource_served());
    cache.stop().await;
}
