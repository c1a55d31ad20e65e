//! The whole path against a real API server (rudder-envtest): informer-backed sources, event
//! handlers and predicates feeding a controller.

#![allow(
    clippy::disallowed_methods,
    reason = "tests may spawn: the test owns its tasks"
)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Resource;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::core::ObjectMeta;
use rudder_cache::Cache;
use rudder_controller::Controller;
use rudder_core::Action;
use rudder_core::Context;
use rudder_core::Reconciler;
use rudder_core::Request;
use rudder_envtest::{TestCrd, TestEnv, TestNamespace};
use rudder_handler::{EnqueueObject, EnqueueOwner, GenerationChanged, Kind};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tokio::time::{Instant, timeout};
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(30);

/// Records every request it reconciles.
struct Recorder(mpsc::UnboundedSender<Request>);

impl Reconciler for Recorder {
    type Error = std::convert::Infallible;
    async fn reconcile(&self, request: Request, _: Context) -> Result<Action, Self::Error> {
        let _ = self.0.send(request);
        Ok(Action::done())
    }
}

async fn next(seen: &mut mpsc::UnboundedReceiver<Request>) -> Request {
    timeout(WAIT, seen.recv())
        .await
        .expect("no reconcile in time")
        .expect("controller gone")
}

/// Waits for a reconcile of `want`, returning the requests reconciled before it.
async fn until(seen: &mut mpsc::UnboundedReceiver<Request>, want: &Request) -> Vec<Request> {
    let mut before = Vec::new();
    loop {
        let got = next(seen).await;
        if &got == want {
            return before;
        }
        before.push(got);
    }
}

async fn setup(test: &str) -> (TestNamespace, Cache, CancellationToken) {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace(test).await.unwrap();
    let token = CancellationToken::new();
    let cache = Cache::builder(ns.client())
        .default_namespace(ns.name())
        .build(&token);
    (ns, cache, token)
}

fn run<R: Reconciler>(c: &Controller<R>, token: &CancellationToken) -> tokio::task::JoinHandle<()> {
    let (c, token) = (c.clone(), token.clone());
    tokio::spawn(async move { c.run(token).await.unwrap() })
}

fn config_map(name: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    }
}

fn secret(name: &str, owner: &ConfigMap, controller: bool) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                name: owner.metadata.name.clone().unwrap(),
                uid: owner.metadata.uid.clone().unwrap(),
                controller: Some(controller),
                ..OwnerReference::default()
            }]),
            ..ObjectMeta::default()
        },
        ..Secret::default()
    }
}

#[tokio::test]
async fn config_maps_owning_secrets_enqueue_the_right_keys() {
    let (ns, cache, token) = setup("owns").await;
    let (tx, mut seen) = mpsc::unbounded_channel();
    let c = Controller::builder("owns", Recorder(tx)).build().unwrap();
    c.watch(Kind::<ConfigMap>::from_cache(&cache), EnqueueObject, vec![])
        .unwrap();
    c.watch(
        Kind::<Secret>::from_cache(&cache),
        EnqueueOwner::<ConfigMap>::new(),
        vec![],
    )
    .unwrap();
    let running = run(&c, &token);
    let cms: Api<ConfigMap> = ns.api();
    let secrets: Api<Secret> = ns.api();
    let pp = PostParams::default();
    let req = |name: &str| Request::namespaced(ns.name(), name);

    // The config map itself: create.
    let owner = cms.create(&pp, &config_map("owner")).await.unwrap();
    assert_eq!(next(&mut seen).await, req("owner"));

    // Its controlled secret: create, update, delete each reach the owner.
    secrets
        .create(&pp, &secret("owned", &owner, true))
        .await
        .unwrap();
    assert_eq!(next(&mut seen).await, req("owner"));
    let data = serde_json::json!({ "stringData": { "k": "v" } });
    secrets
        .patch("owned", &PatchParams::default(), &Patch::Merge(&data))
        .await
        .unwrap();
    assert_eq!(next(&mut seen).await, req("owner"));
    secrets
        .delete("owned", &DeleteParams::default())
        .await
        .unwrap();
    assert_eq!(next(&mut seen).await, req("owner"));

    // A secret owned without `controller: true` does not reach its owner. Events of one
    // watch are handled in order, so once the sentinel's owner is reconciled, the first
    // secret's event was handled too, and its request would have come first.
    let other = cms.create(&pp, &config_map("other")).await.unwrap();
    assert_eq!(next(&mut seen).await, req("other"));
    secrets
        .create(&pp, &secret("not-controlled", &owner, false))
        .await
        .unwrap();
    secrets
        .create(&pp, &secret("sentinel", &other, true))
        .await
        .unwrap();
    let before = until(&mut seen, &req("other")).await;
    assert!(
        before.is_empty(),
        "non-controller owner reconciled: {before:?}"
    );

    // Updating and deleting the config map itself.
    let data = serde_json::json!({ "data": { "k": "v" } });
    cms.patch("owner", &PatchParams::default(), &Patch::Merge(&data))
        .await
        .unwrap();
    assert_eq!(next(&mut seen).await, req("owner"));
    cms.delete("owner", &DeleteParams::default()).await.unwrap();
    assert_eq!(next(&mut seen).await, req("owner"));

    token.cancel();
    running.await.unwrap();
    cache.stop().await;
}

#[tokio::test]
async fn all_owners_reaches_a_non_controller_owner() {
    let (ns, cache, token) = setup("all-owners").await;
    let (tx, mut seen) = mpsc::unbounded_channel();
    let c = Controller::builder("all-owners", Recorder(tx))
        .build()
        .unwrap();
    c.watch(
        Kind::<Secret>::from_cache(&cache),
        EnqueueOwner::<ConfigMap>::new().all_owners(),
        vec![],
    )
    .unwrap();
    let running = run(&c, &token);
    let owner = ns
        .api::<ConfigMap>()
        .create(&PostParams::default(), &config_map("owner"))
        .await
        .unwrap();
    ns.api::<Secret>()
        .create(&PostParams::default(), &secret("s", &owner, false))
        .await
        .unwrap();
    assert_eq!(
        next(&mut seen).await,
        Request::namespaced(ns.name(), "owner")
    );
    token.cancel();
    running.await.unwrap();
    cache.stop().await;
}

/// A namespaced custom resource with a status subresource, implemented by hand.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Widget {
    #[serde(rename = "apiVersion", default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    metadata: ObjectMeta,
    #[serde(default)]
    spec: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    status: Option<BTreeMap<String, String>>,
}

macro_rules! custom_resource {
    ($ty:ty, $kind:literal, $plural:literal) => {
        impl Resource for $ty {
            type DynamicType = ();
            type Scope = NamespaceResourceScope;
            fn kind(_: &()) -> Cow<'_, str> {
                $kind.into()
            }
            fn group(_: &()) -> Cow<'_, str> {
                "test.rudder.dev".into()
            }
            fn version(_: &()) -> Cow<'_, str> {
                "v1".into()
            }
            fn plural(_: &()) -> Cow<'_, str> {
                $plural.into()
            }
            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

custom_resource!(Widget, "Widget", "widgets");

/// Like `Widget`, for a CRD installed only after its controller started.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Gadget {
    #[serde(rename = "apiVersion", default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    metadata: ObjectMeta,
    #[serde(default)]
    spec: BTreeMap<String, String>,
}

custom_resource!(Gadget, "Gadget", "gadgets");

/// The CRD of the test kind `kind`, with a status subresource.
fn crd(kind: &str, plural: &str) -> CustomResourceDefinition {
    TestCrd::new("test.rudder.dev", kind, plural)
        .status_subresource()
        .build()
}

fn widget<T: Resource<DynamicType = ()>>(name: &str, spec: (&str, &str)) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "test.rudder.dev/v1",
        "kind": T::kind(&()),
        "metadata": { "name": name },
        "spec": { spec.0: spec.1 },
    })
}

#[tokio::test]
async fn generation_changed_drops_status_only_updates() {
    let env = TestEnv::builder().shared().await.unwrap();
    env.install_crds([crd("Widget", "widgets")]).await.unwrap();
    let (ns, cache, token) = setup("generation").await;
    let (tx, mut seen) = mpsc::unbounded_channel();
    let c = Controller::builder("generation", Recorder(tx))
        .build()
        .unwrap();
    c.watch(
        Kind::<Widget>::from_cache(&cache),
        EnqueueObject,
        vec![Box::new(GenerationChanged)],
    )
    .unwrap();
    let running = run(&c, &token);
    let widgets: Api<Widget> = ns.api();
    let req = |name: &str| Request::namespaced(ns.name(), name);
    let create = |name: &str| {
        let body: Widget = serde_json::from_value(widget::<Widget>(name, ("size", "1"))).unwrap();
        let widgets = widgets.clone();
        async move { widgets.create(&PostParams::default(), &body).await.unwrap() }
    };
    create("w").await;
    assert_eq!(next(&mut seen).await, req("w"));

    // Status only: the generation stays, the update is filtered.
    let status = serde_json::json!({ "status": { "phase": "ready" } });
    widgets
        .patch_status("w", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    create("sentinel").await;
    let before = until(&mut seen, &req("sentinel")).await;
    assert!(
        before.is_empty(),
        "a status-only update was reconciled: {before:?}"
    );

    // The spec: the generation moves, the update passes.
    let spec = serde_json::json!({ "spec": { "size": "2" } });
    widgets
        .patch("w", &PatchParams::default(), &Patch::Merge(&spec))
        .await
        .unwrap();
    assert_eq!(next(&mut seen).await, req("w"));
    token.cancel();
    running.await.unwrap();
    cache.stop().await;
}

#[tokio::test]
async fn a_source_for_a_crd_installed_later_starts_working() {
    let env = TestEnv::builder().shared().await.unwrap();
    let (ns, cache, token) = setup("late-crd").await;
    let (tx, mut seen) = mpsc::unbounded_channel();
    let c = Controller::builder("late-crd", Recorder(tx))
        .options(rudder_controller::Options::new().cache_sync_timeout(Duration::from_secs(120)))
        .build()
        .unwrap();
    c.watch(Kind::<Gadget>::from_cache(&cache), EnqueueObject, vec![])
        .unwrap();
    let running = run(&c, &token);
    // The type is not served yet: the source keeps retrying and is not synced.
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline {
        assert!(!c.has_synced());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    env.install_crds([crd("Gadget", "gadgets")]).await.unwrap();
    let body: Gadget = serde_json::from_value(widget::<Gadget>("g", ("a", "b"))).unwrap();
    ns.api::<Gadget>()
        .create(&PostParams::default(), &body)
        .await
        .unwrap();
    // The watcher's backoff can be several seconds after repeated 404s.
    let got = timeout(Duration::from_secs(90), seen.recv()).await.unwrap();
    assert_eq!(got, Some(Request::namespaced(ns.name(), "g")));
    assert!(c.has_synced());
    token.cancel();
    running.await.unwrap();
    cache.stop().await;
}

/// Four workers, a burst of updates on three config maps: never two reconciles of a key at
/// once, and each key's last reconcile sees its last update.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn four_workers_on_a_burst_keep_keys_exclusive_and_end_on_the_last_state() {
    struct Checker {
        cache: Cache,
        in_flight: Mutex<HashSet<Request>>,
        seen: Mutex<HashMap<Request, String>>,
    }
    impl Reconciler for Checker {
        type Error = rudder_cache::Error;
        async fn reconcile(&self, request: Request, _: Context) -> Result<Action, Self::Error> {
            assert!(
                self.in_flight.lock().unwrap().insert(request.clone()),
                "{request} reconciled twice at once"
            );
            let cm = self
                .cache
                .get::<ConfigMap>(request.namespace(), request.name())
                .await;
            tokio::task::yield_now().await;
            self.in_flight.lock().unwrap().remove(&request);
            let value = cm?
                .and_then(|cm| cm.data.as_ref()?.get("v").cloned())
                .unwrap_or_default();
            self.seen.lock().unwrap().insert(request, value);
            Ok(Action::done())
        }
    }
    let (ns, cache, token) = setup("burst").await;
    let c = Controller::builder(
        "burst",
        Checker {
            cache: cache.clone(),
            in_flight: Mutex::default(),
            seen: Mutex::default(),
        },
    )
    .options(rudder_controller::Options::new().workers(4))
    .build()
    .unwrap();
    c.watch(Kind::<ConfigMap>::from_cache(&cache), EnqueueObject, vec![])
        .unwrap();
    let running = run(&c, &token);
    let cms: Api<ConfigMap> = ns.api();
    let names = ["a", "b", "c"];
    for name in names {
        cms.create(&PostParams::default(), &config_map(name))
            .await
            .unwrap();
    }
    const UPDATES: usize = 30;
    let writers: Vec<_> = names
        .iter()
        .map(|name| {
            let cms = cms.clone();
            let name = (*name).to_owned();
            tokio::spawn(async move {
                for i in 1..=UPDATES {
                    let data = serde_json::json!({ "data": { "v": i.to_string() } });
                    cms.patch(&name, &PatchParams::default(), &Patch::Merge(&data))
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    for w in writers {
        w.await.unwrap();
    }
    let last = UPDATES.to_string();
    let deadline = Instant::now() + WAIT;
    loop {
        let done = {
            let seen = c.reconciler().seen.lock().unwrap();
            names
                .iter()
                .all(|n| seen.get(&Request::namespaced(ns.name(), n)) == Some(&last))
        };
        if done {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the last update was never reconciled"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    token.cancel();
    running.await.unwrap();
    cache.stop().await;
}

#[tokio::test]
async fn stop_lets_in_flight_reconciles_finish_and_nothing_runs_after() {
    /// Each reconcile holds until the test lets it through.
    struct Slow {
        started: mpsc::UnboundedSender<Request>,
        gate: Arc<tokio::sync::Semaphore>,
        finished: Mutex<Vec<Request>>,
    }
    impl Reconciler for Slow {
        type Error = std::convert::Infallible;
        async fn reconcile(&self, request: Request, _: Context) -> Result<Action, Self::Error> {
            let _ = self.started.send(request.clone());
            self.gate.acquire().await.unwrap().forget();
            self.finished.lock().unwrap().push(request);
            Ok(Action::done())
        }
    }
    let (ns, cache, token) = setup("stop").await;
    let (tx, mut started) = mpsc::unbounded_channel();
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let c = Controller::builder(
        "stop",
        Slow {
            started: tx,
            gate: Arc::clone(&gate),
            finished: Mutex::default(),
        },
    )
    .options(rudder_controller::Options::new().workers(2))
    .build()
    .unwrap();
    c.watch(Kind::<ConfigMap>::from_cache(&cache), EnqueueObject, vec![])
        .unwrap();
    let running = run(&c, &token);
    let cms: Api<ConfigMap> = ns.api();
    for name in ["a", "b", "c"] {
        cms.create(&PostParams::default(), &config_map(name))
            .await
            .unwrap();
    }
    // Two reconciles in flight (two workers), the third waiting in the queue.
    next(&mut started).await;
    next(&mut started).await;
    // Both finish the moment the stop is given: the workers must not take the third
    // request then, even while the controller is still stopping its watches. (A permit
    // for it too, so that a third reconcile would finish and be counted, not hang.)
    token.cancel();
    gate.add_permits(3);
    running.await.unwrap();
    let finished = c.reconciler().finished.lock().unwrap().len();
    assert_eq!(
        finished, 2,
        "the two in-flight reconciles finished before run returned, and no other started"
    );
    assert!(
        started.try_recv().is_err(),
        "the waiting request was not started"
    );
    assert!(c.queue().is_shutting_down());
    assert_eq!(c.queue().stats().processing, 0);
    cache.stop().await;
}

/// A ConfigMap whose decoding panics for the object named `bomb`: a bug in a user's type,
/// or in a library under the watch. The panic happens inside the informer's watch task.
#[derive(Clone, Debug, Serialize)]
struct Fragile {
    metadata: ObjectMeta,
}

impl<'de> Deserialize<'de> for Fragile {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Raw {
            metadata: ObjectMeta,
        }
        let raw = Raw::deserialize(d)?;
        assert_ne!(
            raw.metadata.name.as_deref(),
            Some("bomb"),
            "Fragile cannot decode the bomb"
        );
        Ok(Fragile {
            metadata: raw.metadata,
        })
    }
}

impl Resource for Fragile {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;
    fn kind(_: &()) -> Cow<'_, str> {
        "ConfigMap".into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        "".into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        "v1".into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "configmaps".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// An informer whose watch task dies (here: a panic while decoding) ends its subscribers'
/// streams; a `Kind` on the cache then asks the cache for a replacement and goes on, so the
/// controller is not left silently deaf.
#[tokio::test]
async fn a_kind_source_recovers_when_its_informer_fails() {
    let (ns, cache, token) = setup("kind-recovers").await;
    let (tx, mut seen) = mpsc::unbounded_channel();
    let c = Controller::builder("kind-recovers", Recorder(tx))
        .build()
        .unwrap();
    c.watch(Kind::<Fragile>::from_cache(&cache), EnqueueObject, vec![])
        .unwrap();
    let running = run(&c, &token);
    let cms: Api<ConfigMap> = ns.api();
    let pp = PostParams::default();
    cms.create(&pp, &config_map("before")).await.unwrap();
    until(&mut seen, &Request::namespaced(ns.name(), "before")).await;

    // The watch task panics on the bomb: the informer fails.
    cms.create(&pp, &config_map("bomb")).await.unwrap();
    let deadline = Instant::now() + WAIT;
    while cache.failed_count() == 0 {
        assert!(Instant::now() < deadline, "the informer did not fail");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Replacements fail on the bomb too while it exists; once it is gone, one syncs and
    // the controller hears of new objects again.
    cms.delete("bomb", &DeleteParams::default()).await.unwrap();
    cms.create(&pp, &config_map("after")).await.unwrap();
    until(&mut seen, &Request::namespaced(ns.name(), "after")).await;
    token.cancel();
    running.await.unwrap();
}
