//! The builder against a real API server: a controller for ConfigMaps owning Secrets, and the
//! mistakes it reports when built.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Resource;
use kube::api::{Api, PostParams};
use kube::core::ObjectMeta;
use rudder::prelude::*;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

mod support;
use support::start;

struct Recorder(mpsc::UnboundedSender<Request>);

async fn next(seen: &mut mpsc::UnboundedReceiver<Request>) -> Request {
    tokio::time::timeout(Duration::from_secs(30), seen.recv())
        .await
        .unwrap()
        .unwrap()
}

/// Waits until the controller runs and its sources have stored their first lists, so that
/// what a test creates afterwards arrives by watch, in order and at normal priority (what a
/// first list delivers is queued at low priority, behind watch events).
async fn listed<R: Reconciler>(c: &Controller<R>) {
    rudder_envtest::poll::until(
        "the controller's first lists",
        Duration::from_secs(30),
        || c.has_synced(),
    )
    .await;
}

impl Reconciler for Recorder {
    type Error = std::convert::Infallible;
    async fn reconcile(&self, request: Request, _: Context) -> Result<Action, Self::Error> {
        let _ = self.0.send(request);
        Ok(Action::done())
    }
}

fn manager(ns: &rudder_envtest::TestNamespace) -> Manager {
    let namespace = ns.name().to_owned();
    Manager::builder(ns.client())
        .health_probe_address(None)
        .metrics_address(None)
        .cache(move |c| c.default_namespace(namespace))
        .build()
        .unwrap()
}

#[tokio::test]
async fn for_and_owns_reconcile_the_primary() {
    let env = rudder_envtest::TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("builder").await.unwrap();
    let m = Arc::new(manager(&ns));
    let (tx, mut seen) = mpsc::unbounded_channel();
    let c = rudder::new_controller(&m)
        .for_::<ConfigMap>()
        .owns::<Secret>()
        .named("builder-owns")
        .complete(Recorder(tx))
        .await
        .unwrap();
    assert_eq!(c.name(), "builder-owns");
    let (stop, running) = start(&m);
    let pp = PostParams::default();
    let owner = Api::<ConfigMap>::namespaced(ns.client(), ns.name())
        .create(
            &pp,
            &ConfigMap {
                metadata: ObjectMeta {
                    name: Some("owner".into()),
                    ..ObjectMeta::default()
                },
                ..ConfigMap::default()
            },
        )
        .await
        .unwrap();
    let want = Request::namespaced(ns.name(), "owner");
    assert_eq!(next(&mut seen).await, want);
    Api::<Secret>::namespaced(ns.client(), ns.name())
        .create(
            &pp,
            &Secret {
                metadata: ObjectMeta {
                    name: Some("owned".into()),
                    owner_references: Some(vec![OwnerReference {
                        api_version: "v1".into(),
                        kind: "ConfigMap".into(),
                        name: "owner".into(),
                        uid: owner.metadata.uid.clone().unwrap(),
                        controller: Some(true),
                        ..OwnerReference::default()
                    }]),
                    ..ObjectMeta::default()
                },
                ..Secret::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        next(&mut seen).await,
        want,
        "the owned secret queues its owner"
    );
    stop.cancel();
    running.await.unwrap().unwrap();
}

/// A custom resource whose CRD is never installed.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Phantom {
    metadata: ObjectMeta,
}

impl Resource for Phantom {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;
    fn kind(_: &()) -> Cow<'_, str> {
        "Phantom".into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        "nowhere.rudder.dev".into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        "v1".into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "phantoms".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[tokio::test]
async fn mistakes_are_errors_when_building() {
    let env = rudder_envtest::TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("builder-errors").await.unwrap();
    let m = manager(&ns);
    let (tx, _seen) = mpsc::unbounded_channel();

    let err = rudder::new_controller(&m)
        .for_::<Phantom>()
        .complete(Recorder(tx.clone()))
        .await
        .unwrap_err();
    assert!(matches!(err, rudder::Error::NotServed { .. }), "{err}");
    assert_eq!(
        err.to_string(),
        "the API server does not serve nowhere.rudder.dev/v1 Phantom"
    );

    let _first = rudder::new_controller(&m)
        .for_::<ConfigMap>()
        .named("builder-dup")
        .complete(Recorder(tx.clone()))
        .await
        .unwrap();
    let err = rudder::new_controller(&m)
        .for_::<ConfigMap>()
        .named("builder-dup")
        .complete(Recorder(tx))
        .await
        .unwrap_err();
    assert!(matches!(err, rudder::Error::Controller(_)), "{err}");
}

/// Sends each request with the `value` key of the ConfigMap it read from the cache, and
/// records an Event about the ConfigMap.
struct CacheReader {
    tools: Tools,
    seen: mpsc::UnboundedSender<(Request, Option<String>)>,
}

impl Reconciler for CacheReader {
    type Error = rudder::client::ClientError;
    async fn reconcile(&self, request: Request, _: Context) -> Result<Action, Self::Error> {
        let cm = self.tools.client().get::<ConfigMap>(&request).await?;
        let value = cm
            .as_ref()
            .and_then(|cm| cm.data.as_ref()?.get("value").cloned());
        if let (Some(cm), Some(value)) = (&cm, &value) {
            self.tools
                .record(&**cm, EventType::Normal, "Read", value.clone())
                .await;
        }
        let _ = self.seen.send((request, value));
        Ok(Action::done())
    }
}

fn labelled(name: &str, labels: &[(&str, &str)]) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        labels: Some(
            labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        ),
        ..ObjectMeta::default()
    }
}

#[tokio::test]
async fn global_predicates_filter_every_watch_and_tools_reach_the_reconciler() {
    let env = rudder_envtest::TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("builder-global").await.unwrap();
    let m = Arc::new(manager(&ns));
    let (tx, mut seen) = mpsc::unbounded_channel();
    let selector: kube::core::Selector = [("app", "keep")].into_iter().collect();
    let c = rudder::new_controller(&m)
        .for_::<ConfigMap>()
        .event_filter(rudder::handler::LabelSelectorPredicate::new(selector))
        .owns::<Secret>()
        .named("builder-global")
        .complete_with(|tools| {
            assert_eq!(tools.controller(), "builder-global");
            CacheReader { tools, seen: tx }
        })
        .await
        .unwrap();
    let (stop, running) = start(&m);
    let next = async |seen: &mut mpsc::UnboundedReceiver<_>| {
        tokio::time::timeout(Duration::from_secs(30), seen.recv())
            .await
            .unwrap()
            .unwrap()
    };
    // ConfigMaps and Secrets listed (empty): every create below arrives by watch, in order.
    listed(&c).await;
    let pp = PostParams::default();
    let cms = Api::<ConfigMap>::namespaced(ns.client(), ns.name());
    let mut created = Vec::new();
    // "a-skip" comes first in creation order, so first among the watch events.
    for (name, labels) in [
        ("a-skip", &[][..]),
        ("keep", &[("app", "keep")]),
        ("keep2", &[("app", "keep")]),
    ] {
        let cm = ConfigMap {
            metadata: labelled(name, labels),
            data: Some([("value".to_owned(), format!("{name}-value"))].into()),
            ..ConfigMap::default()
        };
        created.push(cms.create(&pp, &cm).await.unwrap());
    }
    // One informer delivers the creates in order, one worker reconciles in queue order: had
    // the unlabelled ConfigMap passed, it would come first.
    let keep = Request::namespaced(ns.name(), "keep");
    let keep2 = Request::namespaced(ns.name(), "keep2");
    assert_eq!(
        next(&mut seen).await,
        (keep.clone(), Some("keep-value".into()))
    );
    assert_eq!(
        next(&mut seen).await,
        (keep2.clone(), Some("keep2-value".into()))
    );

    // The global predicate applies to owned objects too: an unlabelled Secret owned by
    // `keep`, then a labelled one owned by `keep2`; only `keep2` may be reconciled.
    let secrets = Api::<Secret>::namespaced(ns.client(), ns.name());
    for (name, owner, labels) in [
        ("s1", &created[1], &[][..]),
        ("s2", &created[2], &[("app", "keep")]),
    ] {
        let mut meta = labelled(name, labels);
        meta.owner_references = Some(vec![OwnerReference {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            name: owner.metadata.name.clone().unwrap(),
            uid: owner.metadata.uid.clone().unwrap(),
            controller: Some(true),
            ..OwnerReference::default()
        }]);
        let secret = Secret {
            metadata: meta,
            ..Secret::default()
        };
        secrets.create(&pp, &secret).await.unwrap();
    }
    assert_eq!(
        next(&mut seen).await.0,
        keep2,
        "the unlabelled secret was filtered"
    );

    // The recorder reports as the controller.
    let events = Api::<k8s_openapi::api::events::v1::Event>::namespaced(ns.client(), ns.name());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let list = events.list(&Default::default()).await.unwrap();
        let ours = list.items.iter().find(|e| {
            e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("keep")
                && e.reporting_controller.as_deref() == Some("builder-global")
        });
        if let Some(event) = ours {
            assert_eq!(event.reason.as_deref(), Some("Read"));
            assert_eq!(event.note.as_deref(), Some("keep-value"));
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "no event recorded");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.cancel();
    running.await.unwrap().unwrap();
}

#[tokio::test]
async fn raw_sources_bypass_global_predicates() {
    let env = rudder_envtest::TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("builder-raw").await.unwrap();
    let m = Arc::new(manager(&ns));
    let (tx, mut seen) = mpsc::unbounded_channel();
    let (events, source) = rudder::handler::channel::<String>(8);
    let namespace = ns.name().to_owned();
    let (judged_tx, mut judged) = mpsc::unbounded_channel();
    let c = rudder::new_controller(&m)
        .for_::<ConfigMap>()
        // Drops every event of every object watch, saying which it judged...
        .event_filter(move |event: rudder::MetaEvent<'_>| {
            let _ = judged_tx.send(event.meta().name.clone().unwrap_or_default());
            false
        })
        // ...but not those of a raw source, whose items are no objects.
        .watches_raw(
            source,
            move |event: &rudder::Event<String>, queue: &rudder::Queue| {
                queue.add(Request::namespaced(&namespace, event.object()));
            },
        )
        .named("builder-raw")
        .complete(Recorder(tx))
        .await
        .unwrap();
    let (stop, running) = start(&m);
    // Listed first, so the ConfigMap's create arrives by watch at normal priority: were it
    // listed, a request for it would be queued at low priority, behind the channel's.
    listed(&c).await;
    Api::<ConfigMap>::namespaced(ns.client(), ns.name())
        .create(
            &PostParams::default(),
            &ConfigMap {
                metadata: ObjectMeta {
                    name: Some("filtered".into()),
                    ..ObjectMeta::default()
                },
                ..ConfigMap::default()
            },
        )
        .await
        .unwrap();
    // The ConfigMap's event has been judged: a request for it, had the filter let it pass,
    // would be queued by now (the handler runs right after the predicates, without
    // yielding, on this single-threaded test runtime), before the channel's item is sent.
    let judged_name = tokio::time::timeout(Duration::from_secs(30), judged.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(judged_name, "filtered");
    events
        .send(rudder::Event::Generic {
            object: Arc::new("from-the-channel".to_owned()),
        })
        .await
        .unwrap();
    // Had the filter let the ConfigMap's event through, it would have come first.
    assert_eq!(
        next(&mut seen).await,
        Request::namespaced(ns.name(), "from-the-channel")
    );
    stop.cancel();
    running.await.unwrap().unwrap();
}

fn named(name: &str) -> ConfigMap {
    ConfigMap {
        metadata: labelled(name, &[]),
        ..ConfigMap::default()
    }
}

/// Defect 1 of issue 11: a manager whose cache has several default namespaces could declare
/// no controller (`for_` asked the cache for one informer and got an error: several namespaces). Its
/// `Kind` now asks for one informer per namespace when it starts, and merges them.
#[tokio::test]
async fn a_cache_with_several_default_namespaces_serves_a_controller() {
    let env = rudder_envtest::TestEnv::builder().shared().await.unwrap();
    let a = env.namespace("builder-multi-a").await.unwrap();
    let b = env.namespace("builder-multi-b").await.unwrap();
    let namespaces = [a.name().to_owned(), b.name().to_owned()];
    let m = Arc::new(
        Manager::builder(a.client())
            .health_probe_address(None)
            .metrics_address(None)
            .cache(move |c| c.default_namespaces(namespaces))
            .build()
            .unwrap(),
    );
    let (tx, mut seen) = mpsc::unbounded_channel();
    rudder::new_controller(&m)
        .for_::<ConfigMap>()
        .named("builder-multi")
        .complete(Recorder(tx))
        .await
        .unwrap();
    let (stop, running) = start(&m);
    let pp = PostParams::default();
    for ns in [&a, &b] {
        Api::<ConfigMap>::namespaced(ns.client(), ns.name())
            .create(&pp, &named("in-each"))
            .await
            .unwrap();
    }
    let mut got = vec![next(&mut seen).await, next(&mut seen).await];
    got.sort_by(|x, y| x.namespace().cmp(&y.namespace()));
    let mut want = vec![
        Request::namespaced(a.name(), "in-each"),
        Request::namespaced(b.name(), "in-each"),
    ];
    want.sort_by(|x, y| x.namespace().cmp(&y.namespace()));
    assert_eq!(got, want);
    stop.cancel();
    running.await.unwrap().unwrap();
}

/// Defect 2 of issue 11: `for_`/`owns` started informers while declaring, so a `complete`
/// that failed on an unserved type left an informer behind that later failed the manager's
/// start (`CacheSync`), taking every other controller down. Declaring now has no side
/// effects.
#[tokio::test]
async fn a_failed_complete_leaves_nothing_behind() {
    let env = rudder_envtest::TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("builder-clean").await.unwrap();
    let namespace = ns.name().to_owned();
    let m = Arc::new(
        Manager::builder(ns.client())
            .health_probe_address(None)
            .metrics_address(None)
            .cache_sync_timeout(Duration::from_secs(10))
            .cache(move |c| c.default_namespace(namespace))
            .build()
            .unwrap(),
    );
    let (tx, mut seen) = mpsc::unbounded_channel();
    let err = rudder::new_controller(&m)
        .for_::<ConfigMap>()
        .owns::<Phantom>()
        .named("builder-clean-bad")
        .complete(Recorder(tx.clone()))
        .await
        .unwrap_err();
    assert!(matches!(err, rudder::Error::NotServed { .. }), "{err}");
    assert_eq!(
        m.cache().informer_count(),
        0,
        "declaring started no informer"
    );

    // A good controller on the same manager starts and works.
    rudder::new_controller(&m)
        .for_::<ConfigMap>()
        .named("builder-clean-good")
        .complete(Recorder(tx))
        .await
        .unwrap();
    assert_eq!(
        m.cache().informer_count(),
        0,
        "not before the manager starts"
    );
    let (stop, running) = start(&m);
    Api::<ConfigMap>::namespaced(ns.client(), ns.name())
        .create(&PostParams::default(), &named("works"))
        .await
        .unwrap();
    assert_eq!(
        next(&mut seen).await,
        Request::namespaced(ns.name(), "works")
    );
    stop.cancel();
    running.await.unwrap().unwrap();
}

/// Defect 5 of issue 11: `complete` checks every type it watches through the cache, those
/// of `watches_kind` too.
#[tokio::test]
async fn watches_kind_of_an_unserved_type_is_an_error() {
    let env = rudder_envtest::TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("builder-watches-kind").await.unwrap();
    let m = manager(&ns);
    let (tx, _seen) = mpsc::unbounded_channel();
    let err = rudder::new_controller(&m)
        .for_::<ConfigMap>()
        .watches_kind::<Phantom, _>(EnqueueObject)
        .named("builder-watches-phantom")
        .complete(Recorder(tx))
        .await
        .unwrap_err();
    assert!(matches!(err, rudder::Error::NotServed { .. }), "{err}");
}

/// `for_with`, `owns_with` and `watches_kind_with` apply their composed predicates to their
/// own watch only.
#[tokio::test]
async fn per_watch_predicates_compose_and_apply_to_their_watch() {
    use rudder::handler::{EnqueueMapped, LabelSelectorPredicate};

    let env = rudder_envtest::TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("builder-with").await.unwrap();
    let m = Arc::new(manager(&ns));
    let (tx, mut seen) = mpsc::unbounded_channel();
    let label = |k: &'static str, v: &'static str| -> LabelSelectorPredicate {
        LabelSelectorPredicate::new([(k, v)].into_iter().collect())
    };
    let namespace = ns.name().to_owned();
    let c = rudder::new_controller(&m)
        // Primary ConfigMaps labelled tier=a or tier=b, but not skip=yes.
        .for_with::<ConfigMap>(
            label("tier", "a")
                .or(label("tier", "b"))
                .and(label("skip", "yes").not()),
        )
        // Owned Secrets only when labelled owned=yes.
        .owns_with::<Secret>(label("owned", "yes"))
        // Any Secret labelled ping=<name> queues the ConfigMap of that name.
        .watches_kind_with::<Secret, _>(
            EnqueueMapped(move |secret: &Secret| {
                let target = secret.metadata.labels.as_ref().and_then(|l| l.get("ping"));
                target
                    .map(|t| vec![Request::namespaced(&namespace, t)])
                    .unwrap_or_default()
            }),
            label("kind", "ping"),
        )
        .named("builder-with")
        .complete(Recorder(tx))
        .await
        .unwrap();
    let (stop, running) = start(&m);
    // ConfigMaps and Secrets listed, empty.
    listed(&c).await;
    let pp = PostParams::default();
    let cms = Api::<ConfigMap>::namespaced(ns.client(), ns.name());
    let secrets = Api::<Secret>::namespaced(ns.client(), ns.name());
    // Created in this order after the first lists, so they arrive by watch in this order; one
    // worker keeps it. Each dropped event would have come before the next one that passes.
    for (name, labels) in [
        ("c-none", &[][..]),
        ("c-skip", &[("tier", "a"), ("skip", "yes")]),
        ("c-a", &[("tier", "a")]),
        ("c-b", &[("tier", "b")]),
    ] {
        cms.create(
            &pp,
            &ConfigMap {
                metadata: labelled(name, labels),
                ..ConfigMap::default()
            },
        )
        .await
        .unwrap();
    }
    assert_eq!(next(&mut seen).await, Request::namespaced(ns.name(), "c-a"));
    assert_eq!(next(&mut seen).await, Request::namespaced(ns.name(), "c-b"));
    let c_a = cms.get("c-a").await.unwrap();
    let owned_by_c_a = |name: &str, labels: &[(&str, &str)]| {
        let mut meta = labelled(name, labels);
        meta.owner_references = Some(vec![OwnerReference {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            name: "c-a".into(),
            uid: c_a.metadata.uid.clone().unwrap(),
            controller: Some(true),
            ..OwnerReference::default()
        }]);
        Secret {
            metadata: meta,
            ..Secret::default()
        }
    };
    secrets
        .create(&pp, &owned_by_c_a("s-unlabelled", &[]))
        .await
        .unwrap();
    // Not labelled kind=ping: the mapped watch drops it.
    secrets
        .create(&pp, &owned_by_c_a("s-ping-wrong", &[("ping", "c-none")]))
        .await
        .unwrap();
    secrets
        .create(
            &pp,
            &owned_by_c_a("s-ping", &[("kind", "ping"), ("ping", "c-none")]),
        )
        .await
        .unwrap();
    assert_eq!(
        next(&mut seen).await,
        Request::namespaced(ns.name(), "c-none"),
        "the unlabelled owned secret and the unlabelled ping were filtered"
    );
    secrets
        .create(&pp, &owned_by_c_a("s-owned", &[("owned", "yes")]))
        .await
        .unwrap();
    assert_eq!(next(&mut seen).await, Request::namespaced(ns.name(), "c-a"));
    stop.cancel();
    running.await.unwrap().unwrap();
}

/// Sends each reconcile's first cause, as text.
struct Causes(mpsc::UnboundedSender<String>);

impl Reconciler for Causes {
    type Error = std::convert::Infallible;
    async fn reconcile(&self, _: Request, ctx: Context) -> Result<Action, Self::Error> {
        let cause = ctx
            .causes()
            .map_or_else(|| "none".to_owned(), |c| c.first().to_string());
        let _ = self.0.send(cause);
        Ok(Action::done())
    }
}

#[tokio::test]
async fn each_reconcile_says_which_watch_and_object_queued_it() {
    let env = rudder_envtest::TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("builder-causes").await.unwrap();
    let m = Arc::new(manager(&ns));
    let (tx, mut seen) = mpsc::unbounded_channel();
    let c = rudder::new_controller(&m)
        .for_::<ConfigMap>()
        .owns::<Secret>()
        .named("builder-causes")
        .complete(Causes(tx))
        .await
        .unwrap();
    let (stop, running) = start(&m);
    listed(&c).await;
    let pp = PostParams::default();
    let owner = Api::<ConfigMap>::namespaced(ns.client(), ns.name())
        .create(
            &pp,
            &ConfigMap {
                metadata: ObjectMeta {
                    name: Some("owner".into()),
                    ..ObjectMeta::default()
                },
                ..ConfigMap::default()
            },
        )
        .await
        .unwrap();
    let cause = tokio::time::timeout(Duration::from_secs(30), seen.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        cause,
        format!(
            "for/create ConfigMap {}/owner@{}",
            ns.name(),
            owner.metadata.resource_version.clone().unwrap()
        )
    );
    let owned = Api::<Secret>::namespaced(ns.client(), ns.name())
        .create(
            &pp,
            &Secret {
                metadata: ObjectMeta {
                    name: Some("owned".into()),
                    owner_references: Some(vec![OwnerReference {
                        api_version: "v1".into(),
                        kind: "ConfigMap".into(),
                        name: "owner".into(),
                        uid: owner.metadata.uid.clone().unwrap(),
                        controller: Some(true),
                        ..OwnerReference::default()
                    }]),
                    ..ObjectMeta::default()
                },
                ..Secret::default()
            },
        )
        .await
        .unwrap();
    let cause = tokio::time::timeout(Duration::from_secs(30), seen.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        cause,
        format!(
            "owns/create Secret {}/owned@{}",
            ns.name(),
            owned.metadata.resource_version.unwrap()
        )
    );
    stop.cancel();
    running.await.unwrap().unwrap();
}
