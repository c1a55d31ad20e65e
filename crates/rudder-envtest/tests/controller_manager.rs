//! With kube-controller-manager on: owner references cascade and namespaces really go away.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams};
use rudder_envtest::TestEnv;

/// The garbage collector needs its informers synced first; allow generously for a loaded CI.
const WITHIN: Duration = Duration::from_secs(90);

async fn gone<K>(api: &Api<K>, name: &str, what: &str)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let deadline = Instant::now() + WITHIN;
    while api.get_opt(name).await.unwrap().is_some() {
        assert!(
            Instant::now() < deadline,
            "{what} still exists after {WITHIN:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn cm(name: &str, owner: Option<&ConfigMap>) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            owner_references: owner.map(|o| {
                vec![OwnerReference {
                    api_version: "v1".into(),
                    kind: "ConfigMap".into(),
                    name: o.metadata.name.clone().unwrap(),
                    uid: o.metadata.uid.clone().unwrap(),
                    ..Default::default()
                }]
            }),
            ..Default::default()
        },
        ..Default::default()
    }
}

#[tokio::test]
async fn deleting_an_owner_deletes_its_dependents_and_deleting_a_namespace_empties_it() {
    let env = TestEnv::builder()
        .controller_manager(true)
        .start()
        .await
        .unwrap();
    assert!(env.has_controller_manager());
    assert_eq!(env.pids().len(), 3);

    // Owner references.
    let ns = env.namespace("cascade").await.unwrap();
    let cms = ns.api::<ConfigMap>();
    let owner = cms
        .create(&PostParams::default(), &cm("owner", None))
        .await
        .unwrap();
    cms.create(&PostParams::default(), &cm("dependent", Some(&owner)))
        .await
        .unwrap();
    cms.delete("owner", &DeleteParams::background())
        .await
        .unwrap();
    gone(&cms, "dependent", "the dependent ConfigMap").await;

    // Namespace deletion: the namespace controller empties it, then it is removed.
    let doomed = env.namespace("doomed").await.unwrap();
    doomed
        .api::<ConfigMap>()
        .create(&PostParams::default(), &cm("inside", None))
        .await
        .unwrap();
    doomed.delete().await.unwrap();
    let namespaces: Api<Namespace> = Api::all(env.client().unwrap());
    gone(&namespaces, doomed.name(), "the deleted namespace").await;
    let everywhere: Api<ConfigMap> = Api::all(env.client().unwrap());
    let left = everywhere
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|c| c.metadata.namespace.as_deref() == Some(doomed.name()))
        .count();
    assert_eq!(left, 0);

    let pids = env.pids();
    env.stop().unwrap();
    for (name, pid) in pids {
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "{name} still runs"
        );
    }
}

/// A custom owner's children are collected within seconds of the owner going, round after
/// round: the builder's CRDs are established before kube-controller-manager starts, so its
/// garbage collector knows the kind from its first discovery.
#[tokio::test]
async fn children_of_a_custom_owner_given_to_the_builder_are_collected_within_5_s() {
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
    use rudder_envtest::TestCrd;
    use rudder_envtest::poll::Poll;

    const GROUP: &str = "gc.rudder.test";
    let env = TestEnv::builder()
        .controller_manager(true)
        .crds([TestCrd::new(GROUP, "Keeper", "keepers").build()])
        .start()
        .await
        .unwrap();
    let ns = env.namespace("collect").await.unwrap();
    let resource =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, "v1", "Keeper"), "keepers");
    let owners: Api<DynamicObject> =
        Api::namespaced_with(env.client().unwrap(), ns.name(), &resource);
    let cms = ns.api::<ConfigMap>();
    let round = async |i: usize, within: Duration| {
        let name = format!("keeper-{i}");
        let owner = DynamicObject::new(&name, &resource).within(ns.name());
        let owner = owners.create(&PostParams::default(), &owner).await.unwrap();
        let mut child = cm(&format!("child-{i}"), None);
        child.metadata.owner_references = Some(vec![OwnerReference {
            api_version: format!("{GROUP}/v1"),
            kind: "Keeper".into(),
            name: name.clone(),
            uid: owner.metadata.uid.clone().unwrap(),
            ..Default::default()
        }]);
        cms.create(&PostParams::default(), &child).await.unwrap();
        owners
            .delete(&name, &DeleteParams::background())
            .await
            .unwrap();
        let child = format!("child-{i}");
        let started = tokio::time::Instant::now();
        Poll::new(&format!("round {i}: the child collected"), within)
            .eventually(async || cms.get_opt(&child).await.unwrap().is_none().then_some(()))
            .await;
        started.elapsed()
    };
    // The collector acts once its own informers have synced, a few seconds after it starts:
    // a round of a built-in owner first, with room for that. It teaches the collector
    // nothing of the custom kind, so the rounds below pass only if it knew that kind from
    // its first discovery.
    let owner = cms
        .create(&PostParams::default(), &cm("warm-up-owner", None))
        .await
        .unwrap();
    cms.create(&PostParams::default(), &cm("warm-up-child", Some(&owner)))
        .await
        .unwrap();
    cms.delete("warm-up-owner", &DeleteParams::background())
        .await
        .unwrap();
    gone(&cms, "warm-up-child", "the warm-up child").await;
    let mut slowest = Duration::ZERO;
    for i in 1..=20 {
        slowest = slowest.max(round(i, Duration::from_secs(5)).await);
    }
    eprintln!("slowest of 20 collections: {slowest:?}");
}
