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
use tokio_util::sync::CancellationToken;

struct Recorder(mpsc::UnboundedSender<Request>);

async fn next(seen: &mut mpsc::UnboundedReceiver<Request>) -> Request {
    tokio::time::timeout(Duration::from_secs(30), seen.recv())
        .await
        .unwrap()
        .unwrap()
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
    let c = rudder::controller(&m)
        .for_::<ConfigMap>()
        .owns::<Secret>()
        .named("builder-owns")
        .complete(Recorder(tx))
        .await
        .unwrap();
    assert_eq!(c.name(), "builder-owns");
    let stop = CancellationToken::new();
    let running = tokio::spawn({
        let (m, stop) = (Arc::clone(&m), stop.clone());
        async move { m.start(stop).await }
    });
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

    let err = rudder::controller(&m)
        .for_::<Phantom>()
        .complete(Recorder(tx.clone()))
        .await
        .unwrap_err();
    assert!(matches!(err, rudder::Error::NotServed { .. }), "{err}");
    assert_eq!(
        err.to_string(),
        "the API server does not serve nowhere.rudder.dev/v1 Phantom"
    );

    let _first = rudder::controller(&m)
        .for_::<ConfigMap>()
        .named("builder-dup")
        .complete(Recorder(tx.clone()))
        .await
        .unwrap();
    let err = rudder::controller(&m)
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
    type Error = rudder::cache::Error;
    async fn reconcile(&self, request: Request, _: Context) -> Result<Action, Self::Error> {
        let cm = self.tools.get::<ConfigMap>(&request).await?;
        let value = cm
            .as_ref()
            .and_then(|cm| cm.data.as_ref()?.get("value").cloned());
        if let Some(cm) = cm {
            let event = kube_runtime::events::Event {
                type_: kube_runtime::events::EventType::Normal,
                reason: "Read".into(),
                note: value.clone(),
                action: "Reconcile".into(),
                secondary: None,
            };
            self.tools.publish(&*cm, &event).await.unwrap();
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
    rudder::controller(&m)
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
    let stop = CancellationToken::new();
    let running = tokio::spawn({
        let (m, stop) = (Arc::clone(&m), stop.clone());
        async move { m.start(stop).await }
    });
    let next = async |seen: &mut mpsc::UnboundedReceiver<_>| {
        tokio::time::timeout(Duration::from_secs(30), seen.recv())
            .await
            .unwrap()
            .unwrap()
    };
    let pp = PostParams::default();
    let cms = Api::<ConfigMap>::namespaced(ns.client(), ns.name());
    let mut created = Vec::new();
    // "a-skip" comes first both in creation order (watch events) and in name order (a
    // list, should the informer list after the creates).
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
    rudder::controller(&m)
        .for_::<ConfigMap>()
        // Drops every event of every object watch, saying which it judged...
        .event_filter(move |event: rudder::handler::MetaEvent<'_>| {
            let _ = judged_tx.send(event.meta().name.clone().unwrap_or_default());
            false
        })
        // ...but not those of a raw source, whose items are no objects.
        .watches_raw(
            source,
            move |event: &rudder::handler::Event<String>, queue: &rudder::handler::Queue| {
                queue.add(Request::namespaced(&namespace, event.object()));
            },
            Vec::new(),
        )
        .named("builder-raw")
        .complete(Recorder(tx))
        .await
        .unwrap();
    let stop = CancellationToken::new();
    let running = tokio::spawn({
        let (m, stop) = (Arc::clone(&m), stop.clone());
        async move { m.start(stop).await }
    });
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
        .send(rudder::handler::Event::Generic {
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
