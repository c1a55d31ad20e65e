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
