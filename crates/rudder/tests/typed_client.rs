//! The typed client against a real API server: reads from the cache, writes with the
//! object's own `Api`, conflicts reported as such.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;
use support::field_managers;

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, PodSpec, PodStatus};
use kube::ResourceExt as _;
use kube::api::Patch;
use kube::core::ObjectMeta;
use rudder::cache::{Cache, ListOptions};
use rudder::client::Client;
use rudder::{Request, client::ClientError};
use rudder_envtest::TestNamespace;
use rudder_envtest::poll::eventually;
use tokio_util::sync::CancellationToken;

fn client(ns: &TestNamespace, token: &CancellationToken) -> Client {
    let cache = Cache::builder(ns.client())
        .default_namespace(ns.name())
        .build(token);
    Client::new(ns.client(), cache, "typed-client-test")
}

fn configmap(ns: &TestNamespace, name: &str, value: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.name().into()),
            ..ObjectMeta::default()
        },
        data: Some([("value".to_owned(), value.to_owned())].into()),
        ..ConfigMap::default()
    }
}

fn value(cm: &ConfigMap) -> Option<&str> {
    cm.data.as_ref()?.get("value").map(String::as_str)
}

#[tokio::test]
async fn writes_infer_the_api_and_stale_writes_are_conflicts() {
    let env = rudder_envtest::TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("typed-writes").await.unwrap();
    let token = CancellationToken::new();
    let client = client(&ns, &token);

    let created = client.create(&configmap(&ns, "a", "1")).await.unwrap();
    assert_eq!(created.namespace().as_deref(), Some(ns.name()));
    let again = client.create(&configmap(&ns, "a", "1")).await.unwrap_err();
    assert!(
        again.is_conflict(),
        "a second create is a conflict: {again}"
    );

    // Update carries the resourceVersion read: the first write wins, the stale one is a
    // conflict, not a lost update.
    let mut first = created.clone();
    first.data = Some([("value".to_owned(), "2".to_owned())].into());
    let updated = client.update(&first).await.unwrap();
    assert_eq!(value(&updated), Some("2"));
    let mut stale = created.clone();
    stale.data = Some([("value".to_owned(), "stale".to_owned())].into());
    let err = client.update(&stale).await.unwrap_err();
    assert!(err.is_conflict(), "{err}");

    let patched = client
        .patch(
            &updated,
            &Patch::Merge(serde_json::json!({ "data": { "extra": "x" } })),
        )
        .await
        .unwrap();
    assert_eq!(
        patched
            .data
            .as_ref()
            .unwrap()
            .get("extra")
            .map(String::as_str),
        Some("x")
    );

    // Server-side apply under the client's field manager.
    let applied = client
        .apply(&ConfigMap {
            metadata: ObjectMeta {
                name: Some("applied".into()),
                namespace: Some(ns.name().into()),
                ..ObjectMeta::default()
            },
            data: Some([("value".to_owned(), "ssa".to_owned())].into()),
            ..ConfigMap::default()
        })
        .await
        .unwrap();
    assert_eq!(value(&applied), Some("ssa"));
    let managers = field_managers(&applied.metadata);
    assert!(
        managers.iter().any(|m| m == "typed-client-test"),
        "{managers:?}"
    );

    // Delete is conditional on the uid read: a newer object of the same name survives.
    assert!(client.delete(&patched).await.unwrap());
    eventually("a is gone", Duration::from_secs(30), async || {
        ns.api::<ConfigMap>()
            .get_opt("a")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    assert!(!client.delete(&patched).await.unwrap(), "already gone");
    let newer = client.create(&configmap(&ns, "a", "new")).await.unwrap();
    assert!(
        !client.delete(&patched).await.unwrap(),
        "the old uid does not delete the new object"
    );
    let still = ns.api::<ConfigMap>().get("a").await.unwrap();
    assert_eq!(still.uid(), newer.uid());
    token.cancel();
}

fn pod(ns: &TestNamespace, name: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.name().into()),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "main".into(),
                image: Some("registry.k8s.io/pause:3.9".into()),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
        status: None,
    }
}

#[tokio::test]
async fn status_writes_are_conditional_on_the_version_read() {
    let env = rudder_envtest::TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("typed-status").await.unwrap();
    let token = CancellationToken::new();
    let client = client(&ns, &token);
    let created = client.create(&pod(&ns, "p")).await.unwrap();

    let status = PodStatus {
        message: Some("first".into()),
        ..PodStatus::default()
    };
    let written = client.patch_status(&created, &status).await.unwrap();
    assert_eq!(
        written.status.as_ref().and_then(|s| s.message.as_deref()),
        Some("first")
    );
    // Computed from the version before that write: refused.
    let stale = PodStatus {
        message: Some("stale".into()),
        ..PodStatus::default()
    };
    let err = client.patch_status(&created, &stale).await.unwrap_err();
    assert!(err.is_conflict(), "{err}");

    let mut next = written.clone();
    next.status.get_or_insert_default().message = Some("replaced".into());
    let replaced = client.update_status(&next).await.unwrap();
    assert_eq!(
        replaced.status.as_ref().and_then(|s| s.message.as_deref()),
        Some("replaced")
    );
    let err = client.update_status(&next).await.unwrap_err();
    assert!(err.is_conflict(), "the second replace is stale: {err}");
    token.cancel();
}

#[tokio::test]
async fn reads_come_from_the_cache() {
    let env = rudder_envtest::TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("typed-reads").await.unwrap();
    let token = CancellationToken::new();
    let client = client(&ns, &token);
    client.create(&configmap(&ns, "r1", "1")).await.unwrap();
    client.create(&configmap(&ns, "r2", "2")).await.unwrap();
    let request = Request::namespaced(ns.name(), "r1");
    let got = eventually("r1 in the cache", Duration::from_secs(30), async || {
        client.get::<ConfigMap>(&request).await.unwrap()
    })
    .await;
    assert_eq!(value(&got), Some("1"));
    let all = eventually("both listed", Duration::from_secs(30), async || {
        let list = client
            .list::<ConfigMap>(&ListOptions::default().namespace(ns.name()))
            .await
            .unwrap();
        (list
            .iter()
            .filter(|cm| cm.name_any().starts_with('r'))
            .count()
            == 2)
            .then_some(list)
    })
    .await;
    assert!(all.iter().any(|cm| cm.name_any() == "r2"));
    assert!(
        client
            .get::<ConfigMap>(&Request::namespaced(ns.name(), "missing"))
            .await
            .unwrap()
            .is_none()
    );
    // A namespace the cache does not hold is an error from the cache, not a silent miss.
    let err = client
        .get::<ConfigMap>(&Request::namespaced("elsewhere", "x"))
        .await
        .unwrap_err();
    assert!(matches!(err, ClientError::Cache(_)), "{err}");
    token.cancel();
}
