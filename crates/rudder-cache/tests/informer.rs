//! Informer behaviour against a real API server: events, late handlers, slow handlers,
//! resync, relists and malformed objects.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{WatchGate, config_map, describe, namespace_with, next, take};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, WatchParams};
use kube::core::WatchEvent;
use rudder_cache::{Informer, ListStrategy, SyncError};
use rudder_core::Event;
use rudder_envtest::poll::until;
use rudder_envtest::{TestCrd, TestEnv};

fn labelled(label: &str) -> String {
    format!("test={label}")
}

async fn relabel(api: &Api<ConfigMap>, name: &str, key: &str, value: &str) {
    let patch = serde_json::json!({ "metadata": { "labels": { key: value } } });
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

#[tokio::test]
async fn every_handler_sees_exactly_create_update_and_delete() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("informer_events").await.unwrap();
    let api = common::api::<ConfigMap>(&ns);
    let l = [("test", "events")];
    api.create(&PostParams::default(), &config_map("before", &l))
        .await
        .unwrap();

    let informer = Informer::builder(api.clone())
        .labels(labelled("events"))
        .start();
    let mut one = informer.subscribe();
    let mut two = informer.subscribe();
    informer
        .wait_for_sync(Duration::from_secs(20))
        .await
        .unwrap();
    assert!(informer.has_synced());

    api.create(&PostParams::default(), &config_map("made", &l))
        .await
        .unwrap();
    relabel(&api, "made", "colour", "red").await;
    api.delete("before", &DeleteParams::default())
        .await
        .unwrap();
    // A last object, so that "nothing else came before it" can be asserted.
    api.create(&PostParams::default(), &config_map("sentinel", &l))
        .await
        .unwrap();

    let expected = [
        "add before initial=true",
        "add made initial=false",
        "update made changed=true",
        "delete before unknown=false",
        "add sentinel initial=false",
    ];
    assert_eq!(take(&mut one, 5).await, expected);
    assert_eq!(take(&mut two, 5).await, expected);

    let stored = informer.store().list();
    let mut names: Vec<_> = stored
        .iter()
        .map(|c| c.metadata.name.clone().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["made", "sentinel"]);
    // The default transform dropped managedFields.
    assert!(stored.iter().all(|c| c.metadata.managed_fields.is_none()));

    informer.stop().await;
    assert!(
        tokio::time::timeout(Duration::from_secs(5), one.next())
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn handler_registered_after_sync_first_gets_the_store_contents() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("informer_late").await.unwrap();
    let api = common::api::<ConfigMap>(&ns);
    for name in ["a", "b"] {
        api.create(&PostParams::default(), &config_map(name, &[]))
            .await
            .unwrap();
    }
    let informer = Informer::builder(api.clone()).start();
    informer
        .wait_for_sync(Duration::from_secs(20))
        .await
        .unwrap();

    let mut late = informer.subscribe();
    let mut replay = take(&mut late, 2).await;
    replay.sort();
    assert_eq!(replay, ["add a initial=true", "add b initial=true"]);
    api.create(&PostParams::default(), &config_map("c", &[]))
        .await
        .unwrap();
    assert_eq!(take(&mut late, 1).await, ["add c initial=false"]);
    informer.stop().await;
}

#[tokio::test]
async fn a_blocked_handler_does_not_delay_another() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("informer_slow").await.unwrap();
    let api = common::api::<ConfigMap>(&ns);
    let informer = Informer::builder(api.clone()).start();
    informer
        .wait_for_sync(Duration::from_secs(20))
        .await
        .unwrap();

    // The slow handler blocks on its first event until the test lets it go.
    let (release, released) = tokio::sync::watch::channel(false);
    let slow_seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = Arc::clone(&slow_seen);
    informer.add_handler(move |event: Event<ConfigMap>| {
        let seen = Arc::clone(&seen);
        let mut released = released.clone();
        async move {
            let _ = released.wait_for(|r| *r).await;
            seen.lock().unwrap().push(describe(&event));
        }
    });
    let fast_count = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&fast_count);
    informer.add_handler(move |_event: Event<ConfigMap>| {
        count.fetch_add(1, Ordering::SeqCst);
        async {}
    });

    for i in 0..5 {
        api.create(&PostParams::default(), &config_map(&format!("cm{i}"), &[]))
            .await
            .unwrap();
    }
    // The fast handler gets all five while the slow one is still stuck on its first.
    until(
        "the fast handler's five events",
        Duration::from_secs(20),
        || fast_count.load(Ordering::SeqCst) == 5,
    )
    .await;
    assert!(slow_seen.lock().unwrap().is_empty());

    // Released, the slow handler catches up on its backlog, in order.
    release.send_replace(true);
    until(
        "the slow handler's backlog",
        Duration::from_secs(20),
        || slow_seen.lock().unwrap().len() == 5,
    )
    .await;
    let expected: Vec<String> = (0..5).map(|i| format!("add cm{i} initial=false")).collect();
    assert_eq!(*slow_seen.lock().unwrap(), expected);
    informer.stop().await;
}

#[tokio::test]
async fn resync_redelivers_every_object_as_an_unchanged_update() {
    let (_ns, api) = namespace_with("informer_resync", &["a"]).await;
    let informer = Informer::builder(api.clone())
        .resync(Some(Duration::from_millis(300)))
        .start();
    let mut events = informer.subscribe();
    assert_eq!(take(&mut events, 1).await, ["add a initial=true"]);
    match next(&mut events).await {
        Event::Update { old, new } => assert!(Arc::ptr_eq(&old, &new)),
        other => panic!("expected a resync update, got {}", describe(&other)),
    }
    assert!(informer.stats().resyncs >= 1);
    informer.stop().await;
}

#[tokio::test]
async fn wait_for_sync_times_out_with_a_clear_error() {
    let env = TestEnv::builder().shared().await.unwrap();
    let client = env.client().unwrap();
    // A resource the server does not have: the list fails and is retried, never syncing.
    let missing = kube::api::ApiResource {
        group: "nothing.rudder.test".into(),
        version: "v1".into(),
        api_version: "nothing.rudder.test/v1".into(),
        kind: "Nothing".into(),
        plural: "nothings".into(),
    };
    let api: Api<kube::api::DynamicObject> = Api::all_with(client, &missing);
    let informer = Informer::builder(api).start();
    let err = informer
        .wait_for_sync(Duration::from_millis(500))
        .await
        .unwrap_err();
    assert!(matches!(err, SyncError::Timeout { .. }));
    assert!(err.to_string().contains("did not sync within"), "{err}");
    assert!(err.to_string().contains("nothings"), "{err}");
    informer.stop().await;
    let err = informer
        .wait_for_sync(Duration::from_secs(5))
        .await
        .unwrap_err();
    assert!(matches!(err, SyncError::Stopped { .. }), "{err}");
}

/// While the informer's watch is held back, objects are deleted, changed and created, and
/// etcd is compacted past the informer's resourceVersion, so its next watch gets 410 Gone
/// and it must relist and diff.
#[tokio::test]
async fn relist_after_expired_watch_emits_deletes_and_updates() {
    let env = TestEnv::builder()
        // Without the watch cache, watches are served by etcd, which answers a compacted
        // resourceVersion with 410 Gone; compaction runs every second.
        .apiserver_arg("--watch-cache=false")
        .apiserver_arg("--etcd-compaction-interval=1s")
        .start()
        .await
        .unwrap();
    let admin = env.client().unwrap();
    let api: Api<ConfigMap> = Api::namespaced(admin.clone(), "default");
    let l = [("test", "relist")];
    for name in ["a", "b", "c"] {
        api.create(&PostParams::default(), &config_map(name, &l))
            .await
            .unwrap();
    }

    let gate = WatchGate::default();
    let gated: Api<ConfigMap> = Api::namespaced(gate.client(env.config()), "default");
    // Short server-side watch timeouts, so the watch ends and reconnects every 2 s.
    let informer = Informer::builder(gated)
        .labels(labelled("relist"))
        .timeout(2)
        .start();
    let mut events = informer.subscribe();
    informer
        .wait_for_sync(Duration::from_secs(20))
        .await
        .unwrap();
    let mut initial = take(&mut events, 3).await;
    initial.sort();
    assert_eq!(
        initial,
        [
            "add a initial=true",
            "add b initial=true",
            "add c initial=true"
        ]
    );
    // Hold the informer's next watch back.
    gate.close();
    until(
        "the informer's watch to reconnect into the gate",
        Duration::from_secs(20),
        || gate.waiting() == 1,
    )
    .await;

    api.delete("a", &DeleteParams::default()).await.unwrap();
    relabel(&api, "b", "colour", "blue").await;
    let d = api
        .create(&PostParams::default(), &config_map("d", &l))
        .await
        .unwrap();
    // Newer than anything the informer has seen.
    let newest_rv = d.metadata.resource_version.unwrap();

    // Wait until etcd has compacted past that: a watch from it then fails with 410.
    let mut bumps = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let mut stream = api
            .watch(&WatchParams::default().timeout(1), &newest_rv)
            .await
            .unwrap()
            .boxed();
        let first = stream.next().await;
        if matches!(first, Some(Ok(WatchEvent::Error(ref e))) if e.code == 410) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "etcd did not compact"
        );
        // Writes elsewhere move etcd's revision on, so the next compaction passes ours.
        bumps += 1;
        api.create(
            &PostParams::default(),
            &config_map(&format!("bump{bumps}"), &[]),
        )
        .await
        .unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    gate.open();
    // The relist lists b (changed), c (unchanged) and d (new), then infers a's delete.
    assert_eq!(
        take(&mut events, 3).await,
        [
            "update b changed=true",
            "add d initial=false",
            "delete a unknown=true"
        ]
    );
    assert_eq!(informer.stats().relists, 1);
    // All of it in protobuf: the list, the watches, the 410 and the relist.
    assert_eq!(
        informer.stats().wire_format,
        rudder_cache::WireFormat::Protobuf
    );
    api.create(&PostParams::default(), &config_map("sentinel", &l))
        .await
        .unwrap();
    assert_eq!(take(&mut events, 1).await, ["add sentinel initial=false"]);
    informer.stop().await;
    env.stop().unwrap();
}

/// A custom resource whose Rust type is stricter than its CRD: the CRD accepts any `spec`,
/// the type wants `spec.size` to be a number.
#[derive(Clone, Debug, serde::Deserialize, serde::Serialize)]
struct Widget {
    metadata: kube::api::ObjectMeta,
    spec: WidgetSpec,
}

#[derive(Clone, Debug, serde::Deserialize, serde::Serialize)]
struct WidgetSpec {
    size: u32,
}

impl kube::Resource for Widget {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;

    fn kind(_: &()) -> std::borrow::Cow<'_, str> {
        "Widget".into()
    }
    fn group(_: &()) -> std::borrow::Cow<'_, str> {
        "malformed.rudder.test".into()
    }
    fn version(_: &()) -> std::borrow::Cow<'_, str> {
        "v1".into()
    }
    fn plural(_: &()) -> std::borrow::Cow<'_, str> {
        "widgets".into()
    }
    fn meta(&self) -> &kube::api::ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut kube::api::ObjectMeta {
        &mut self.metadata
    }
}

/// The shared control plane with the Widget CRD, a namespace, and an untyped `Api` that can
/// write widgets the Rust type cannot read.
async fn widgets(hint: &str) -> (rudder_envtest::TestNamespace, Api<kube::api::DynamicObject>) {
    let env = TestEnv::builder().shared().await.unwrap();
    env.install_crds([TestCrd::new("malformed.rudder.test", "Widget", "widgets").build()])
        .await
        .unwrap();
    let ns = env.namespace(hint).await.unwrap();
    let resource = kube::api::ApiResource::erase::<Widget>(&());
    let raw = Api::namespaced_with(ns.client(), ns.name(), &resource);
    (ns, raw)
}

/// Creates widget `name` of `size`: a number fits the Rust type, anything else does not.
async fn create_widget(
    raw: &Api<kube::api::DynamicObject>,
    name: &str,
    size: impl Into<serde_json::Value>,
) {
    let object: kube::api::DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "malformed.rudder.test/v1",
        "kind": "Widget",
        "metadata": { "name": name },
        "spec": { "size": size.into() },
    }))
    .unwrap();
    raw.create(&PostParams::default(), &object).await.unwrap();
}

/// Rewrites widget `name` with a size the Rust type cannot read.
async fn spoil_widget(raw: &Api<kube::api::DynamicObject>, name: &str) {
    let mut object = raw.get(name).await.unwrap();
    object.data["spec"]["size"] = "lots".into();
    raw.replace(name, &PostParams::default(), &object)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_malformed_object_is_counted_and_skipped_and_the_watch_goes_on() {
    // The test runtime has one thread, so the informer's task reports to this recorder.
    #[cfg(feature = "metrics")]
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    #[cfg(feature = "metrics")]
    let _guard = metrics::set_default_local_recorder(&recorder);
    let (ns, raw) = widgets("informer_malformed").await;
    create_widget(&raw, "good", 1).await;

    let informer = Informer::builder(common::api::<Widget>(&ns)).start();
    let mut events = informer.subscribe();
    informer
        .wait_for_sync(Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(take(&mut events, 1).await, ["add good initial=true"]);

    create_widget(&raw, "bad", "huge").await;
    create_widget(&raw, "later", 3).await;
    // The bad one is skipped; the next good one still arrives.
    assert_eq!(take(&mut events, 1).await, ["add later initial=false"]);
    assert_eq!(informer.stats().malformed_objects, 1);
    let mut stored: Vec<_> = informer
        .store()
        .list()
        .iter()
        .map(|w| (w.metadata.name.clone().unwrap(), w.spec.size))
        .collect();
    stored.sort();
    assert_eq!(stored, [("good".to_owned(), 1), ("later".to_owned(), 3)]);
    #[cfg(feature = "metrics")]
    {
        let text = recorder.handle().render();
        let series = format!(
            "rudder_cache_malformed_objects_total{{resource=\"{}\"}} 1",
            informer.resource()
        );
        assert!(text.lines().any(|l| l == series), "{series} not in\n{text}");
    }
    informer.stop().await;
}

#[tokio::test]
async fn a_malformed_object_in_the_list_does_not_keep_the_informer_from_syncing() {
    let (ns, raw) = widgets("informer_malformed_list").await;
    create_widget(&raw, "one", 1).await;
    create_widget(&raw, "bad", "huge").await;
    create_widget(&raw, "two", 2).await;

    // A strict informer listing in pages decodes each page whole: the bad object fails it,
    // every time.
    let strict = Informer::builder(common::api::<Widget>(&ns))
        .list_strategy(ListStrategy::Paginated)
        .start();
    let err = strict
        .wait_for_sync(Duration::from_secs(3))
        .await
        .unwrap_err();
    assert!(matches!(err, SyncError::Timeout { .. }), "{err}");
    strict.stop().await;

    // A streaming list sends each object as an event of its own: the bad one is skipped
    // and counted, as a bad watch event is, and the informer syncs without it.
    // Where the server streams lists (1.34 on), syncing is what must happen: a long bound;
    // where it does not, the informer pages, and a short wait shows it cannot sync.
    let env = TestEnv::builder().shared().await.unwrap();
    let streams = (env.version().major, env.version().minor) >= (1, 34);
    let streaming = Informer::builder(common::api::<Widget>(&ns)).start();
    let wait = Duration::from_secs(if streams { 30 } else { 3 });
    let synced = streaming.wait_for_sync(wait).await;
    if streaming.list_strategy() == ListStrategy::Streaming {
        synced.unwrap();
        assert_eq!(streaming.store().len(), 2);
        assert_eq!(streaming.stats().malformed_objects, 1);
    } else {
        // A server without streaming lists (before 1.34): pages again.
        assert!(
            matches!(synced, Err(SyncError::Timeout { .. })),
            "{synced:?}"
        );
    }
    streaming.stop().await;

    // Decoding each object on its own, it syncs with the two good ones.
    let informer = Informer::builder(common::api::<Widget>(&ns))
        .skip_malformed()
        .start();
    informer
        .wait_for_sync(Duration::from_secs(20))
        .await
        .unwrap();
    let mut stored: Vec<_> = informer
        .store()
        .list()
        .iter()
        .map(|w| (w.metadata.name.clone().unwrap(), w.spec.size))
        .collect();
    stored.sort();
    assert_eq!(stored, [("one".to_owned(), 1), ("two".to_owned(), 2)]);
    assert_eq!(informer.stats().malformed_objects, 1);

    // On the watch too; an object that turns malformed keeps its last good version.
    let mut events = informer.subscribe();
    take(&mut events, 2).await;
    spoil_widget(&raw, "one").await;
    create_widget(&raw, "three", 3).await;
    assert_eq!(take(&mut events, 1).await, ["add three initial=false"]);
    assert_eq!(informer.stats().malformed_objects, 2);
    let key = rudder_cache::ObjectKey::namespaced(ns.name(), "one");
    assert_eq!(informer.store().get(&key).unwrap().spec.size, 1);
    informer.stop().await;

    // The cache's typed informers decode this way.
    let token = tokio_util::sync::CancellationToken::new();
    let cache = rudder_cache::Cache::builder(ns.client())
        .default_namespace(ns.name())
        .build(&token);
    let two = tokio::time::timeout(
        Duration::from_secs(30),
        cache.get::<Widget>(Some(ns.name()), "two"),
    )
    .await
    .expect("the cache's Widget informer syncs")
    .unwrap()
    .unwrap();
    assert_eq!(two.spec.size, 2);
    token.cancel();
}

#[tokio::test]
async fn an_object_turning_malformed_on_the_watch_is_still_seen_deleted() {
    let (ns, raw) = widgets("informer_malformed_watch").await;
    for name in ["w1", "w2"] {
        create_widget(&raw, name, 1).await;
    }
    // All good: the list decodes whole.
    let informer = Informer::builder(common::api::<Widget>(&ns))
        .skip_malformed()
        .start();
    let mut events = informer.subscribe();
    informer
        .wait_for_sync(Duration::from_secs(20))
        .await
        .unwrap();
    take(&mut events, 2).await;

    // w1 turns malformed on the watch: its last good version stays...
    spoil_widget(&raw, "w1").await;
    create_widget(&raw, "w3", 3).await;
    assert_eq!(take(&mut events, 1).await, ["add w3 initial=false"]);
    let key = rudder_cache::ObjectKey::namespaced(ns.name(), "w1");
    assert_eq!(informer.store().get(&key).unwrap().spec.size, 1);
    // ...and its deletion still reaches the store and the handlers (a strict watch would
    // have skipped the bad event and then the delete's too).
    raw.delete("w1", &DeleteParams::default()).await.unwrap();
    assert_eq!(take(&mut events, 1).await, ["delete w1 unknown=true"]);
    assert!(informer.store().get(&key).is_none());
    assert!(informer.stats().malformed_objects >= 1);
    informer.stop().await;
}

#[tokio::test]
async fn an_informer_runs_while_a_handle_or_stream_is_held_and_stops_after() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("informer_dropped").await.unwrap();
    let api = common::api::<ConfigMap>(&ns);
    let informer = Informer::builder(api.clone()).start();
    let mut events = informer.subscribe();
    // A handler whose task holds a guard: the guard is dropped when the task ends.
    let guard = Arc::new(());
    let held = Arc::clone(&guard);
    informer.add_handler(move |_: Event<ConfigMap>| {
        let _held = &held;
        async {}
    });
    informer
        .wait_for_sync(Duration::from_secs(20))
        .await
        .unwrap();

    // With only the stream left, the informer keeps delivering.
    drop(informer);
    api.create(&PostParams::default(), &config_map("a", &[]))
        .await
        .unwrap();
    assert_eq!(take(&mut events, 1).await, ["add a initial=false"]);
    assert_eq!(Arc::strong_count(&guard), 2, "the handler is still running");

    // With nothing left, it stops, and the handler's task ends.
    drop(events);
    until("the handler's task to end", Duration::from_secs(10), || {
        Arc::strong_count(&guard) == 1
    })
    .await;
}
