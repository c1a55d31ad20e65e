//! The cache against a real API server: one watch per type and scope, the reader, indexes,
//! metadata-only and dynamic informers, removal and shutdown.

#![allow(
    clippy::disallowed_methods,
    reason = "tests may spawn: the test owns its tasks"
)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{WatchGate, config_map, namespace_with, take};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{Expression, PartialObjectMeta, Selector};
use rudder_cache::{ByObject, Cache, Error, ListOptions, Scope};
use rudder_core::Event;
use rudder_envtest::TestEnv;
use rudder_envtest::poll::until;
use tokio_util::sync::CancellationToken;

fn team(cm: &ConfigMap) -> Vec<String> {
    cm.metadata
        .labels
        .iter()
        .flatten()
        .filter(|(k, _)| *k == "team")
        .map(|(_, v)| v.clone())
        .collect()
}

fn names<K: kube::Resource>(objs: &[Arc<K>]) -> Vec<String> {
    let mut n: Vec<String> = objs
        .iter()
        .map(|o| o.meta().name.clone().unwrap_or_default())
        .collect();
    n.sort();
    n
}

#[tokio::test]
async fn two_handlers_and_a_reader_share_one_watch() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("cache_one_watch").await.unwrap();
    let api = ns.api::<ConfigMap>();
    api.create(&PostParams::default(), &config_map("a", &[]))
        .await
        .unwrap();

    let gate = WatchGate::default();
    let token = CancellationToken::new();
    let cache = Cache::builder(gate.client(env.config()))
        .default_namespace(ns.name())
        .build(&token);

    let seen = Arc::new(AtomicUsize::new(0));
    for _ in 0..2 {
        let seen = Arc::clone(&seen);
        cache
            .informer::<ConfigMap>(&Scope::namespace(ns.name()))
            .unwrap()
            .add_handler(move |_: Event<ConfigMap>| {
                seen.fetch_add(1, Ordering::SeqCst);
                async {}
            });
    }
    let got = cache.get::<ConfigMap>(Some(ns.name()), "a").await.unwrap();
    assert_eq!(got.unwrap().metadata.name.as_deref(), Some("a"));
    assert_eq!(cache.informer_count(), 1);

    // Once a change reaches both handlers, the watch is open; there must be just one.
    api.create(&PostParams::default(), &config_map("b", &[]))
        .await
        .unwrap();
    until(
        "both handlers to see a and b",
        Duration::from_secs(20),
        || seen.load(Ordering::SeqCst) == 4,
    )
    .await;
    let listed = cache
        .list::<ConfigMap>(&ListOptions::default())
        .await
        .unwrap();
    assert_eq!(names(&listed), ["a", "b"]);
    assert_eq!(gate.watches(), 1);

    // Another scope of the same type is another watch.
    let other = cache
        .informer::<ConfigMap>(&Scope::namespace(ns.name()).labels("x=y"))
        .unwrap();
    other.wait_for_sync(Duration::from_secs(20)).await.unwrap();
    assert!(other.store().is_empty(), "the selector matches nothing");
    assert_eq!(cache.informer_count(), 2);
    // The cache as a whole: synced once every informer it started is.
    cache.wait_for_sync(Duration::from_secs(20)).await.unwrap();
    assert!(cache.has_synced());
    assert_eq!(cache.unsynced_count(), 0);
    cache.stop().await;
}

#[tokio::test]
async fn the_cache_is_not_synced_while_a_type_is_not_served() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("cache_unserved").await.unwrap();
    let token = CancellationToken::new();
    let cache = Cache::builder(ns.client())
        .default_namespace(ns.name())
        .build(&token);
    assert!(cache.has_synced(), "no informers: nothing to wait for");
    let resource = ApiResource {
        group: "nowhere.rudder.dev".into(),
        version: "v1".into(),
        api_version: "nowhere.rudder.dev/v1".into(),
        kind: "Ghost".into(),
        plural: "ghosts".into(),
    };
    let _ghosts = cache
        .dynamic_informer(&resource, &Scope::namespace(ns.name()))
        .unwrap();
    let err = cache
        .wait_for_sync(Duration::from_secs(2))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            rudder_cache::SyncError::CacheTimeout { unsynced: 1, .. }
        ),
        "{err}"
    );
    assert!(!cache.has_synced());
    cache.stop().await;
}

#[tokio::test]
async fn indexes_follow_objects_that_move_between_values() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("cache_index_moves").await.unwrap();
    let api = ns.api::<ConfigMap>();
    for (name, t) in [("x", "red"), ("y", "red"), ("z", "blue")] {
        api.create(&PostParams::default(), &config_map(name, &[("team", t)]))
            .await
            .unwrap();
    }
    let token = CancellationToken::new();
    let cache = Cache::builder(ns.client())
        .default_namespace(ns.name())
        .build(&token);
    cache.add_index::<ConfigMap, _>("team", team).unwrap();
    let by_team = |t: &'static str| {
        let cache = cache.clone();
        async move {
            names(
                &cache
                    .list::<ConfigMap>(&ListOptions::default().index("team", t))
                    .await
                    .unwrap(),
            )
        }
    };
    assert_eq!(by_team("red").await, ["x", "y"]);
    assert_eq!(by_team("blue").await, ["z"]);

    let patch = serde_json::json!({ "metadata": { "labels": { "team": "blue" } } });
    api.patch("x", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let store = cache
        .informer::<ConfigMap>(&Scope::namespace(ns.name()))
        .unwrap()
        .store()
        .clone();
    until("x to move to blue", Duration::from_secs(20), || {
        names(&store.by_index("team", "blue").unwrap()) == ["x", "z"]
    })
    .await;
    assert_eq!(by_team("red").await, ["y"]);

    api.delete("y", &Default::default()).await.unwrap();
    until("y to leave the index", Duration::from_secs(20), || {
        store.by_index("team", "red").unwrap().is_empty()
    })
    .await;
    assert_eq!(store.index_values("team").unwrap(), ["blue"]);

    // Label selectors and namespaces filter too.
    let sel = Selector::from(Expression::Equal("team".into(), "blue".into()));
    let listed = cache
        .list::<ConfigMap>(&ListOptions::default().namespace(ns.name()).labels(sel))
        .await
        .unwrap();
    assert_eq!(names(&listed), ["x", "z"]);
    let elsewhere = cache
        .list::<ConfigMap>(&ListOptions::default().namespace("elsewhere"))
        .await
        .unwrap_err();
    assert!(matches!(elsewhere, Error::NotCached { .. }), "{elsewhere}");
    let err = cache
        .list::<ConfigMap>(&ListOptions::default().index("nope", "x"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Index(_)), "{err}");
    cache.stop().await;
}

#[tokio::test]
async fn metadata_and_dynamic_informers_read_from_the_server() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("cache_meta_dynamic").await.unwrap();
    let api = ns.api::<ConfigMap>();
    api.create(&PostParams::default(), &config_map("a", &[("team", "red")]))
        .await
        .unwrap();
    let token = CancellationToken::new();
    let cache = Cache::builder(ns.client())
        .default_namespace(ns.name())
        .build(&token);

    let meta = cache
        .get::<PartialObjectMeta<ConfigMap>>(Some(ns.name()), "a")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        meta.metadata.labels.as_ref().unwrap()["team"],
        "red".to_owned()
    );
    assert!(meta.metadata.managed_fields.is_none());
    assert!(
        cache
            .informer::<PartialObjectMeta<ConfigMap>>(&Scope::namespace(ns.name()))
            .unwrap()
            .has_synced()
    );

    let resource = ApiResource::erase::<ConfigMap>(&());
    let dynamic = cache
        .get_dynamic(&resource, Some(ns.name()), "a")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(dynamic.data["data"]["k"], "v");
    let listed = cache
        .list_dynamic(&resource, &ListOptions::default())
        .await
        .unwrap();
    assert_eq!(names::<DynamicObject>(&listed), ["a"]);
    // Typed, metadata-only and dynamic are three watches.
    assert_eq!(cache.informer_count(), 2);
    cache
        .informer::<ConfigMap>(&Scope::namespace(ns.name()))
        .unwrap();
    assert_eq!(cache.informer_count(), 3);
    cache.stop().await;
}

#[tokio::test]
async fn remove_informer_stops_the_watch_and_the_next_use_starts_another() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("cache_remove").await.unwrap();
    let gate = WatchGate::default();
    let token = CancellationToken::new();
    let cache = Cache::builder(gate.client(env.config()))
        .default_namespace(ns.name())
        .build(&token);
    let informer = cache
        .informer::<ConfigMap>(&Scope::namespace(ns.name()))
        .unwrap();
    let mut events = informer.subscribe();
    informer
        .wait_for_sync(Duration::from_secs(20))
        .await
        .unwrap();
    until("the watch to open", Duration::from_secs(20), || {
        gate.watches() == 1
    })
    .await;

    assert!(
        cache
            .remove_informer::<ConfigMap>(&Scope::namespace(ns.name()))
            .await
    );
    assert!(informer.is_stopped());
    assert_eq!(cache.informer_count(), 0);
    assert!(events.next().await.is_none());
    assert!(
        !cache
            .remove_informer::<ConfigMap>(&Scope::namespace(ns.name()))
            .await
    );

    let again = cache
        .informer::<ConfigMap>(&Scope::namespace(ns.name()))
        .unwrap();
    again.wait_for_sync(Duration::from_secs(20)).await.unwrap();
    until("a second watch", Duration::from_secs(20), || {
        gate.watches() == 2
    })
    .await;

    // An informer stopped through its own handle is replaced on next use.
    again.stop().await;
    let third = cache
        .informer::<ConfigMap>(&Scope::namespace(ns.name()))
        .unwrap();
    assert!(!third.is_stopped());
    third.wait_for_sync(Duration::from_secs(20)).await.unwrap();
    assert_eq!(cache.informer_count(), 1);
    cache.stop().await;
}

#[tokio::test]
async fn fail_on_missing_informer_refuses_reads_until_one_is_started() {
    let (ns, _) = namespace_with("cache_missing", &["a"]).await;
    let token = CancellationToken::new();
    let cache = Cache::builder(ns.client())
        .default_namespace(ns.name())
        .fail_on_missing_informer(true)
        .build(&token);
    let err = cache
        .get::<ConfigMap>(Some(ns.name()), "a")
        .await
        .unwrap_err();
    assert!(matches!(err, Error::MissingInformer { .. }), "{err}");
    assert!(err.to_string().contains("no informer for"), "{err}");
    assert_eq!(cache.informer_count(), 0);

    cache
        .informer::<ConfigMap>(&Scope::namespace(ns.name()))
        .unwrap();
    assert!(
        cache
            .get::<ConfigMap>(Some(ns.name()), "a")
            .await
            .unwrap()
            .is_some()
    );
    cache.stop().await;
}

#[tokio::test]
async fn cancelling_the_token_ends_every_task_and_refuses_new_informers() {
    let (ns, _) = namespace_with("cache_stop", &["a"]).await;
    let token = CancellationToken::new();
    let cache = Cache::builder(ns.client())
        .default_namespace(ns.name())
        .build(&token);
    let informer = cache
        .informer::<ConfigMap>(&Scope::namespace(ns.name()))
        .unwrap();
    let mut events = informer.subscribe();
    assert_eq!(take(&mut events, 1).await, ["add a initial=true"]);
    // A handler whose task holds a guard: the guard is dropped when the task ends.
    let guard = Arc::new(());
    let held = Arc::clone(&guard);
    informer.add_handler(move |_: Event<ConfigMap>| {
        let _held = &held;
        async {}
    });

    token.cancel();
    tokio::time::timeout(Duration::from_secs(10), cache.stop())
        .await
        .unwrap();
    assert_eq!(
        Arc::strong_count(&guard),
        1,
        "the handler task outlived stop"
    );
    assert!(events.next().await.is_none());
    assert!(matches!(
        cache
            .informer::<ConfigMap>(&Scope::namespace(ns.name()))
            .unwrap_err(),
        Error::Stopped
    ));
}

#[tokio::test]
async fn cluster_scoped_types_ignore_the_default_namespace() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("cache_cluster_scoped").await.unwrap();
    let token = CancellationToken::new();
    let cache = Cache::builder(ns.client())
        .default_namespace(ns.name())
        .build(&token);
    // The test's own namespace is a cluster-scoped object.
    let found = cache
        .get::<k8s_openapi::api::core::v1::Namespace>(None, ns.name())
        .await
        .unwrap();
    assert_eq!(found.unwrap().metadata.name.as_deref(), Some(ns.name()));
    // Asking with or without a namespace finds the same informer.
    cache
        .informer::<k8s_openapi::api::core::v1::Namespace>(&Scope::all())
        .unwrap();
    assert_eq!(cache.informer_count(), 1);
    cache.stop().await;
}

#[tokio::test]
async fn several_default_namespaces_get_an_informer_each_and_one_reader() {
    let env = TestEnv::builder().shared().await.unwrap();
    let one = env.namespace("cache_multi_one").await.unwrap();
    let two = env.namespace("cache_multi_two").await.unwrap();
    let other = env.namespace("cache_multi_other").await.unwrap();
    for (ns, name) in [(&one, "a"), (&two, "b"), (&other, "c")] {
        ns.api::<ConfigMap>()
            .create(
                &PostParams::default(),
                &config_map(name, &[("team", "red")]),
            )
            .await
            .unwrap();
    }
    let token = CancellationToken::new();
    let cache = Cache::builder(env.client().unwrap())
        .default_namespaces([one.name(), two.name()])
        .build(&token);
    cache.add_index::<ConfigMap, _>("team", team).unwrap();
    assert_eq!(cache.informer_count(), 2);
    assert_eq!(
        cache.scopes::<ConfigMap>(),
        [Scope::namespace(one.name()), Scope::namespace(two.name())]
    );

    let all = cache
        .list::<ConfigMap>(&ListOptions::default())
        .await
        .unwrap();
    assert_eq!(names(&all), ["a", "b"]);
    let red = cache
        .list::<ConfigMap>(&ListOptions::default().index("team", "red"))
        .await
        .unwrap();
    assert_eq!(names(&red), ["a", "b"]);
    let in_two = cache
        .list::<ConfigMap>(&ListOptions::default().namespace(two.name()))
        .await
        .unwrap();
    assert_eq!(names(&in_two), ["b"]);
    assert!(
        cache
            .get::<ConfigMap>(Some(two.name()), "b")
            .await
            .unwrap()
            .is_some()
    );
    let err = cache
        .get::<ConfigMap>(Some(other.name()), "c")
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NotCached { .. }), "{err}");
    assert_eq!(cache.informer_count(), 2);
    cache.stop().await;
}

#[tokio::test]
async fn per_type_transforms_replace_the_default() {
    let (ns, _) = namespace_with("cache_transforms", &["a"]).await;
    let token = CancellationToken::new();
    let cache = Cache::builder(ns.client())
        .default_namespace(ns.name())
        .by_object(ByObject::<ConfigMap>::new().transform(|cm: &mut ConfigMap| cm.data = None))
        .by_object(ByObject::<PartialObjectMeta<ConfigMap>>::new().keep_managed_fields())
        .build(&token);
    let cm = cache
        .get::<ConfigMap>(Some(ns.name()), "a")
        .await
        .unwrap()
        .unwrap();
    assert!(cm.data.is_none(), "the per-type transform ran");
    assert!(
        cm.metadata.managed_fields.is_some(),
        "a per-type transform replaces the default, which would strip managedFields"
    );
    let meta = cache
        .get::<PartialObjectMeta<ConfigMap>>(Some(ns.name()), "a")
        .await
        .unwrap()
        .unwrap();
    assert!(meta.metadata.managed_fields.is_some());
    cache.stop().await;
}

#[tokio::test]
async fn index_functions_and_transforms_that_panic_skip_one_object_and_the_watch_goes_on() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("cache_panics").await.unwrap();
    let api = ns.api::<ConfigMap>();
    let token = CancellationToken::new();
    let scope = Scope::namespace(ns.name()).labels("test=panics");
    let cache = Cache::builder(ns.client())
        .by_object(ByObject::<ConfigMap>::new().scope(scope.clone()).transform(
            |cm: &mut ConfigMap| {
                cm.metadata.managed_fields = None;
                assert!(
                    cm.metadata.name.as_deref() != Some("bad-transform"),
                    "the transform refuses bad-transform"
                );
            },
        ))
        .build(&token);
    cache
        .add_index::<ConfigMap, _>("team", |cm: &ConfigMap| {
            assert!(
                cm.metadata.name.as_deref() != Some("bad"),
                "the index refuses bad"
            );
            team(cm)
        })
        .unwrap();
    let informer = cache.informer::<ConfigMap>(&scope).unwrap();
    let mut events = informer.subscribe();
    informer
        .wait_for_sync(Duration::from_secs(20))
        .await
        .unwrap();

    let labels = [("test", "panics"), ("team", "red")];
    for name in ["a", "bad", "bad-transform", "c"] {
        api.create(&PostParams::default(), &config_map(name, &labels))
            .await
            .unwrap();
    }
    assert_eq!(
        take(&mut events, 2).await,
        ["add a initial=false", "add c initial=false"]
    );
    assert_eq!(informer.stats().panics, 2);
    let red = cache
        .list::<ConfigMap>(&ListOptions::default().index("team", "red"))
        .await
        .unwrap();
    assert_eq!(names(&red), ["a", "c"]);
    assert_eq!(names(&informer.store().list()), ["a", "c"]);
    assert!(
        cache
            .get::<ConfigMap>(Some(ns.name()), "bad")
            .await
            .unwrap()
            .is_none()
    );
    assert!(informer.has_synced() && informer.is_running() && !informer.has_failed());
    assert!(cache.has_synced());
    assert_eq!((cache.unsynced_count(), cache.failed_count()), (0, 0));

    // The watch goes on: a change to a skipped object is skipped again, the next object
    // arrives, and the indexes keep up.
    let patch = serde_json::json!({ "data": { "k": "changed" } });
    api.patch("bad", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    api.create(&PostParams::default(), &config_map("d", &labels))
        .await
        .unwrap();
    assert_eq!(take(&mut events, 1).await, ["add d initial=false"]);
    assert_eq!(informer.stats().panics, 3);
    let store = informer.store();
    assert_eq!(
        names(&store.by_index("team", "red").unwrap()),
        ["a", "c", "d"]
    );
    assert_eq!(store.index_values("team").unwrap(), ["red"]);
    cache.stop().await;
}

#[tokio::test]
async fn set_scopes_narrows_what_the_reader_reads_and_reset_widens_it_again() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("cache_set_scopes").await.unwrap();
    let api = ns.api::<ConfigMap>();
    for (name, labels) in [
        ("red-1", &[("shard", "red")][..]),
        ("red-2", &[("shard", "red")][..]),
        ("blue-1", &[("shard", "blue")][..]),
        ("none", &[][..]),
    ] {
        api.create(&PostParams::default(), &config_map(name, labels))
            .await
            .unwrap();
    }
    let token = CancellationToken::new();
    let cache = Cache::builder(env.client().unwrap())
        .default_namespace(ns.name())
        .build(&token);
    let defaults = cache.default_scopes::<ConfigMap>();
    assert_eq!(defaults, vec![Scope::namespace(ns.name())]);
    let red = Scope::namespace(ns.name()).labels("shard=red");
    let blue = Scope::namespace(ns.name()).labels("shard=blue");

    // One label scope: only its objects, and nothing started for the default scope.
    cache.set_scopes::<ConfigMap>(vec![red.clone()]);
    assert_eq!(cache.scopes::<ConfigMap>(), vec![red.clone()]);
    let listed = cache
        .list::<ConfigMap>(&ListOptions::default())
        .await
        .unwrap();
    assert_eq!(names(&listed), ["red-1", "red-2"]);
    assert!(
        cache
            .get::<ConfigMap>(Some(ns.name()), "red-1")
            .await
            .unwrap()
            .is_some()
    );
    assert!(
        cache
            .get::<ConfigMap>(Some(ns.name()), "blue-1")
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(cache.informer_count(), 1);
    // They say what the operator needs permission for: unchanged.
    assert_eq!(cache.default_scopes::<ConfigMap>(), defaults);

    // Two: both, read through one informer each.
    cache.set_scopes::<ConfigMap>(vec![red.clone(), blue.clone()]);
    let listed = cache
        .list::<ConfigMap>(&ListOptions::default())
        .await
        .unwrap();
    assert_eq!(names(&listed), ["blue-1", "red-1", "red-2"]);
    assert_eq!(cache.scopes::<ConfigMap>().len(), 2);
    assert!(
        cache
            .get::<ConfigMap>(Some(ns.name()), "blue-1")
            .await
            .unwrap()
            .is_some()
    );

    // None: nothing to read, and no error.
    cache.set_scopes::<ConfigMap>(Vec::new());
    assert!(
        cache
            .list::<ConfigMap>(&ListOptions::default())
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        cache
            .get::<ConfigMap>(Some(ns.name()), "red-1")
            .await
            .unwrap()
            .is_none()
    );
    assert!(cache.scopes::<ConfigMap>().is_empty());
    assert!(cache.remove_informer::<ConfigMap>(&blue).await);

    // Reset: the default scope again, every object.
    cache.reset_scopes::<ConfigMap>();
    let listed = cache
        .list::<ConfigMap>(&ListOptions::default())
        .await
        .unwrap();
    assert_eq!(names(&listed), ["blue-1", "none", "red-1", "red-2"]);
    token.cancel();
}

#[tokio::test]
async fn a_read_waiting_for_an_informer_goes_on_when_its_scope_is_dropped_or_it_is_replaced() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("cache_scope_dropped").await.unwrap();
    let api = ns.api::<ConfigMap>();
    for (name, labels) in [
        ("red-1", &[("shard", "red")][..]),
        ("blue-1", &[("shard", "blue")][..]),
    ] {
        api.create(&PostParams::default(), &config_map(name, labels))
            .await
            .unwrap();
    }
    let gate = WatchGate::default();
    gate.hold_lists();
    let token = CancellationToken::new();
    let cache = Cache::builder(gate.client(env.config()))
        .default_namespace(ns.name())
        .build(&token);
    let red = Scope::namespace(ns.name()).labels("shard=red");
    let blue = Scope::namespace(ns.name()).labels("shard=blue");
    let held = |n: usize| {
        let gate = gate.clone();
        async move {
            until("the informers' lists held", Duration::from_secs(10), || {
                gate.waiting() == n
            })
            .await;
        }
    };

    // A read waits for red's informer; red is handed away (its scope dropped, its informer
    // removed) before it syncs: the read goes on without it instead of failing.
    gate.close();
    cache.set_scopes::<ConfigMap>(vec![red.clone()]);
    let read = tokio::spawn({
        let cache = cache.clone();
        async move { cache.list::<ConfigMap>(&ListOptions::default()).await }
    });
    held(1).await;
    cache.set_scopes::<ConfigMap>(vec![blue.clone()]);
    assert!(cache.remove_informer::<ConfigMap>(&red).await);
    let listed = read.await.unwrap().unwrap();
    assert!(listed.is_empty(), "{:?}", names(&listed));

    // A read waits for blue's informer, which is stopped through its handle (as a failed
    // watch is) while blue is still read: the read waits for its replacement instead.
    let read = tokio::spawn({
        let cache = cache.clone();
        async move { cache.list::<ConfigMap>(&ListOptions::default()).await }
    });
    held(1).await;
    let stopped = cache.informer::<ConfigMap>(&blue).unwrap();
    stopped.stop().await;
    gate.open();
    let listed = read.await.unwrap().unwrap();
    assert_eq!(names(&listed), ["blue-1"]);
    assert!(!cache.informer::<ConfigMap>(&blue).unwrap().is_stopped());
    cache.stop().await;
}
