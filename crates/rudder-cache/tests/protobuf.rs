//! Informers of built-in types list and watch in protobuf, and hold what JSON informers hold:
//! a streaming list (or, on a server without it, pages), watch events, a paginated list of
//! small pages; custom and dynamic types stay JSON. (The relist after 410 Gone, in protobuf,
//! is in `informer.rs`.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, PodSpec, Secret};
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, ObjectMeta, Patch, PatchParams, PostParams,
};
use kube::{Api, Resource};
use rudder_cache::{Informer, ListStrategy, WireFormat};
use rudder_envtest::TestEnv;
use rudder_envtest::poll::until;
use serde::Serialize;
use serde::de::DeserializeOwned;

const WAIT: Duration = Duration::from_secs(30);

fn labels() -> BTreeMap<String, String> {
    [("test".to_owned(), "protobuf".to_owned())].into()
}

fn config_map(name: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(labels()),
            annotations: Some([("note".to_owned(), "ünïcode ✓".to_owned())].into()),
            ..ObjectMeta::default()
        },
        data: Some(
            [
                ("empty".to_owned(), String::new()),
                ("text".to_owned(), "a\nb\tc \"quoted\"".to_owned()),
            ]
            .into(),
        ),
        binary_data: Some([("bytes".to_owned(), ByteString(vec![0, 1, 2, 255]))].into()),
        immutable: Some(false),
    }
}

fn pod(name: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(labels()),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "app".into(),
                image: Some("registry.example/app:1".into()),
                args: Some(vec!["--port".into(), "8080".into()]),
                ..Container::default()
            }],
            termination_grace_period_seconds: Some(0),
            ..PodSpec::default()
        }),
        status: None,
    }
}

/// Two informers of `api`'s objects, one in protobuf and one in JSON, started and synced.
async fn pair<K>(api: &Api<K>, strategy: ListStrategy, page: u32) -> (Informer<K>, Informer<K>)
where
    K: Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug + Send + Sync + 'static,
{
    let start = |wire| {
        Informer::builder(api.clone())
            .labels("test=protobuf")
            .page_size(page)
            .list_strategy(strategy)
            .wire_format(wire)
            .transform_opt(None)
            .start()
    };
    let (protobuf, json) = (start(WireFormat::Protobuf), start(WireFormat::Json));
    protobuf.wait_for_sync(WAIT).await.unwrap();
    json.wait_for_sync(WAIT).await.unwrap();
    (protobuf, json)
}

/// Each informer's objects, by name, as JSON values (k8s-openapi's types compare as such).
fn held<K: Resource + Serialize + Clone + Send + Sync + 'static>(
    informer: &Informer<K>,
) -> BTreeMap<String, serde_json::Value> {
    informer
        .store()
        .list()
        .into_iter()
        .map(|object| {
            (
                object.meta().name.clone().unwrap(),
                serde_json::to_value(&*object).unwrap(),
            )
        })
        .collect()
}

/// Polls until both informers hold the same objects as `expected` names, then compares them.
async fn agree<K>(protobuf: &Informer<K>, json: &Informer<K>, expected: &[&str])
where
    K: Resource + Clone + Serialize + std::fmt::Debug + Send + Sync + 'static,
{
    let names = |informer: &Informer<K>| held(informer).into_keys().collect::<Vec<_>>();
    until("both informers to hold the objects", WAIT, || {
        names(protobuf) == expected && names(json) == expected && held(protobuf) == held(json)
    })
    .await;
}

async fn both_wires<K>(api: &Api<K>, strategy: ListStrategy, page: u32, make: fn(&str) -> K)
where
    K: Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug + Send + Sync + 'static,
{
    for name in ["a", "b", "c"] {
        api.create(&PostParams::default(), &make(name))
            .await
            .unwrap();
    }
    let (protobuf, json) = pair(api, strategy, page).await;
    assert_eq!(protobuf.stats().wire_format, WireFormat::Protobuf);
    assert_eq!(json.stats().wire_format, WireFormat::Json);
    // The list.
    agree(&protobuf, &json, &["a", "b", "c"]).await;
    // Watch events: an update, a create, a delete.
    let patch = serde_json::json!({"metadata": {"annotations": {"changed": "yes"}}});
    api.patch("a", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    api.create(&PostParams::default(), &make("d"))
        .await
        .unwrap();
    api.delete("b", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    agree(&protobuf, &json, &["a", "c", "d"]).await;
    assert_eq!(
        protobuf.stats().wire_format,
        WireFormat::Protobuf,
        "{:?}",
        protobuf.stats()
    );
    assert_eq!(protobuf.stats().malformed_objects, 0);
    assert_eq!(protobuf.stats().watch_errors, 0, "{:?}", protobuf.stats());
    if strategy == ListStrategy::Paginated {
        assert_eq!(protobuf.list_strategy(), ListStrategy::Paginated);
    }
    protobuf.stop().await;
    json.stop().await;
}

#[tokio::test]
async fn config_maps_stream_in_protobuf_as_json_informers_see_them() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("protobuf-configmaps").await.unwrap();
    both_wires(
        &ns.api::<ConfigMap>(),
        ListStrategy::Streaming,
        500,
        config_map,
    )
    .await;
}

#[tokio::test]
async fn pods_and_secrets_list_in_protobuf_pages() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("protobuf-pages").await.unwrap();
    // Pages of one object: every page's continue token and the list's version in protobuf.
    both_wires(&ns.api::<Pod>(), ListStrategy::Paginated, 1, pod).await;
    both_wires(&ns.api::<Secret>(), ListStrategy::Paginated, 2, |name| {
        Secret {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some(labels()),
                ..ObjectMeta::default()
            },
            data: Some([("password".to_owned(), ByteString(b"s3cr\xffet".to_vec()))].into()),
            string_data: None,
            type_: Some("Opaque".into()),
            immutable: None,
        }
    })
    .await;
}

#[tokio::test]
async fn dynamic_objects_stay_json() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("protobuf-dynamic").await.unwrap();
    ns.api::<ConfigMap>()
        .create(&PostParams::default(), &config_map("a"))
        .await
        .unwrap();
    let resource = ApiResource::erase::<ConfigMap>(&());
    let api: Api<DynamicObject> = Api::namespaced_with(env.client().unwrap(), ns.name(), &resource);
    let informer = Informer::builder(api).start();
    informer.wait_for_sync(WAIT).await.unwrap();
    assert_eq!(informer.store().list().len(), 1);
    assert_eq!(informer.stats().wire_format, WireFormat::Json);
    informer.stop().await;
}

/// With the default transform (managedFields dropped) a protobuf informer skips them unread;
/// what it holds is what a JSON informer that strips them holds.
#[tokio::test]
async fn default_informers_skip_managed_fields_and_agree() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("protobuf-lean").await.unwrap();
    let api = ns.api::<Pod>();
    for name in ["a", "b"] {
        api.create(&PostParams::default(), &pod(name))
            .await
            .unwrap();
    }
    let start = |wire| {
        Informer::builder(api.clone())
            .labels("test=protobuf")
            .wire_format(wire)
            .start()
    };
    let (protobuf, json) = (start(WireFormat::Protobuf), start(WireFormat::Json));
    protobuf.wait_for_sync(WAIT).await.unwrap();
    json.wait_for_sync(WAIT).await.unwrap();
    agree(&protobuf, &json, &["a", "b"]).await;
    assert!(
        protobuf
            .store()
            .list()
            .iter()
            .all(|pod| pod.metadata.managed_fields.is_none())
    );
    assert_eq!(protobuf.stats().wire_format, WireFormat::Protobuf);
    protobuf.stop().await;
    json.stop().await;
}

/// Every `Vec` of a stored Pod's spec that has spare room: (what, length, capacity).
fn spare_room(pod: &Pod) -> Vec<(String, usize, usize)> {
    let mut spare = Vec::new();
    let mut check = |what: String, len: usize, capacity: usize| {
        if len != capacity {
            spare.push((what, len, capacity));
        }
    };
    let spec = pod.spec.as_ref().unwrap();
    check(
        "containers".into(),
        spec.containers.len(),
        spec.containers.capacity(),
    );
    for container in &spec.containers {
        let args = container.args.as_ref().unwrap();
        check(
            format!("{}.args", container.name),
            args.len(),
            args.capacity(),
        );
        let env = container.env.as_ref().unwrap();
        check(format!("{}.env", container.name), env.len(), env.capacity());
    }
    spare
}

/// What the cache stores holds no spare capacity, whichever the wire: the protobuf decoder
/// sizes each repeated field once for all its values (so the informer stores its objects as
/// decoded), and a JSON object is copied exactly before it is stored.
#[tokio::test]
async fn stored_objects_hold_no_spare_room_in_either_wire() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("protobuf-exact").await.unwrap();
    let api = ns.api::<Pod>();
    let mut made = pod("exact");
    let spec = made.spec.as_mut().unwrap();
    let container = |name: &str| Container {
        name: name.into(),
        image: Some("registry.example/app:1".into()),
        // Three and five values: a `Vec` grown one at a time would have room for four and
        // eight.
        args: Some(vec!["--port".into(), "8080".into(), "--verbose".into()]),
        env: Some(
            (0..5)
                .map(|i| k8s_openapi::api::core::v1::EnvVar {
                    name: format!("VAR_{i}"),
                    value: Some(i.to_string()),
                    value_from: None,
                })
                .collect(),
        ),
        ..Container::default()
    };
    spec.containers = vec![container("app"), container("sidecar"), container("proxy")];
    api.create(&PostParams::default(), &made).await.unwrap();
    let (protobuf, json) = pair(&api, ListStrategy::Streaming, 500).await;
    agree(&protobuf, &json, &["exact"]).await;
    // And with the default transform (managedFields stripped, skipped by the decoder).
    let default = Informer::builder(api.clone())
        .labels("test=protobuf")
        .start();
    default.wait_for_sync(WAIT).await.unwrap();
    // And with a transform of the caller's that grows a list: a decoded object it changed
    // may hold spare room, so it is copied exactly before it is stored.
    let growing = Informer::builder(api.clone())
        .labels("test=protobuf")
        .transform(|pod: &mut Pod| {
            for container in &mut pod.spec.as_mut().unwrap().containers {
                container
                    .args
                    .get_or_insert_default()
                    .push("--added".into());
            }
        })
        .start();
    growing.wait_for_sync(WAIT).await.unwrap();
    assert_eq!(growing.stats().wire_format, WireFormat::Protobuf);
    for informer in [&protobuf, &json, &default, &growing] {
        let stored = informer.store().list();
        assert_eq!(stored.len(), 1);
        assert_eq!(
            spare_room(&stored[0]),
            [],
            "{:?}",
            informer.stats().wire_format
        );
    }
    // A watch event's object too.
    let patch = serde_json::json!({"metadata": {"annotations": {"changed": "yes"}}});
    api.patch("exact", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    for informer in [&protobuf, &json, &default, &growing] {
        until("the update to be stored", WAIT, || {
            informer.store().list().iter().all(|pod| {
                pod.metadata
                    .annotations
                    .as_ref()
                    .is_some_and(|a| a.contains_key("changed"))
            })
        })
        .await;
        assert_eq!(
            spare_room(&informer.store().list()[0]),
            [],
            "{:?}",
            informer.stats().wire_format
        );
    }
    assert_eq!(
        growing.store().list()[0].spec.as_ref().unwrap().containers[0]
            .args
            .as_deref()
            .unwrap()
            .last()
            .map(String::as_str),
        Some("--added"),
        "the transform ran"
    );
    protobuf.stop().await;
    json.stop().await;
    default.stop().await;
    growing.stop().await;
}
