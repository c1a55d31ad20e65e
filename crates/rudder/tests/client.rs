//! The client helpers against a real API server.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;
use support::field_managers;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::ResourceExt as _;
use kube::api::{Api, DeleteParams, PostParams};
use kube::core::ObjectMeta;
use rudder::client::{
    ClientError, Operation, add_finalizer, apply, create_or_patch, create_or_update, has_finalizer,
    is_controlled_by, remove_finalizer, set_controller_reference, set_owner_reference,
};

fn named(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        ..ObjectMeta::default()
    }
}

#[tokio::test]
async fn owner_references_refuse_a_second_controller() {
    let env = rudder_envtest::TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("owners").await.unwrap();
    let cms: Api<ConfigMap> = ns.api();
    let pp = PostParams::default();
    let a = cms
        .create(
            &pp,
            &ConfigMap {
                metadata: named("a"),
                ..ConfigMap::default()
            },
        )
        .await
        .unwrap();
    let b = cms
        .create(
            &pp,
            &ConfigMap {
                metadata: named("b"),
                ..ConfigMap::default()
            },
        )
        .await
        .unwrap();
    let mut secret = Secret {
        metadata: named("s"),
        ..Secret::default()
    };
    assert!(!is_controlled_by(&a, &secret));
    set_controller_reference(&a, &mut secret).unwrap();
    set_controller_reference(&a, &mut secret).unwrap(); // idempotent
    assert!(is_controlled_by(&a, &secret));
    assert!(!is_controlled_by(&b, &secret));
    let err = set_controller_reference(&b, &mut secret).unwrap_err();
    assert!(
        matches!(err, ClientError::AlreadyOwned { ref name, .. } if name == "a"),
        "{err}"
    );
    set_owner_reference(&b, &mut secret).unwrap();
    let created = ns.api::<Secret>().create(&pp, &secret).await.unwrap();
    let refs = created.metadata.owner_references.unwrap();
    assert_eq!(refs.len(), 2);
    assert!(
        refs.iter()
            .any(|r| r.name == "a" && r.controller == Some(true))
    );
    assert!(refs.iter().any(|r| r.name == "b" && r.controller.is_none()));
    let unsaved = ConfigMap {
        metadata: named("never-created"),
        ..ConfigMap::default()
    };
    assert!(matches!(
        set_controller_reference(&unsaved, &mut Secret::default()),
        Err(ClientError::OwnerIncomplete("uid"))
    ));
}

#[tokio::test]
async fn create_or_update_and_patch_report_what_they_did() {
    let env = rudder_envtest::TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("create-or").await.unwrap();
    let cms: Api<ConfigMap> = ns.api();
    let set = |k: &str, v: &str| {
        let (k, v) = (k.to_owned(), v.to_owned());
        move |cm: &mut ConfigMap| {
            cm.data.get_or_insert_with(BTreeMap::new).insert(k, v);
            Ok(())
        }
    };
    let (cm, op) = create_or_update(&cms, "cfg", set("a", "1")).await.unwrap();
    assert_eq!(op, Operation::Created);
    let rv = cm.metadata.resource_version.clone();
    let (cm, op) = create_or_update(&cms, "cfg", set("a", "1")).await.unwrap();
    assert_eq!(op, Operation::Unchanged);
    assert_eq!(cm.metadata.resource_version, rv, "nothing was written");
    let (cm, op) = create_or_update(&cms, "cfg", set("a", "2")).await.unwrap();
    assert_eq!(op, Operation::Updated);
    assert_eq!(cm.data.unwrap()["a"], "2");

    let (_, op) = create_or_patch(&cms, "cfg", set("b", "x")).await.unwrap();
    assert_eq!(op, Operation::Updated);
    let (cm, op) = create_or_patch(&cms, "cfg", set("b", "x")).await.unwrap();
    assert_eq!(op, Operation::Unchanged);
    let data = cm.data.unwrap();
    assert_eq!((data["a"].as_str(), data["b"].as_str()), ("2", "x"));
    let (_, op) = create_or_patch(&cms, "other", set("c", "y")).await.unwrap();
    assert_eq!(op, Operation::Created);
    // Setting the namespace the object has anyway is no rename, new or not.
    let same_namespace = |cm: &mut ConfigMap| {
        cm.metadata.namespace = Some(ns.name().to_owned());
        Ok(())
    };
    let (_, op) = create_or_update(&cms, "placed", same_namespace)
        .await
        .unwrap();
    assert_eq!(op, Operation::Created);
    let (_, op) = create_or_update(&cms, "placed", same_namespace)
        .await
        .unwrap();
    assert_eq!(op, Operation::Unchanged);

    // A failing mutation writes nothing, whether the object exists or not.
    let refuse = |cm: &mut ConfigMap| {
        cm.data = None;
        Err(ClientError::mutate("no data for you"))
    };
    let err = create_or_update(&cms, "cfg", refuse).await.unwrap_err();
    assert!(matches!(err, ClientError::Mutate(_)), "{err}");
    let err = create_or_patch(&cms, "never", refuse).await.unwrap_err();
    assert!(matches!(err, ClientError::Mutate(_)), "{err}");
    assert!(cms.get_opt("never").await.unwrap().is_none());
    assert_eq!(cms.get("cfg").await.unwrap().data.unwrap().len(), 2);
    // Renaming in the mutation would write another object: refused.
    let rename = |cm: &mut ConfigMap| {
        cm.metadata.name = Some("elsewhere".into());
        Ok(())
    };
    let err = create_or_patch(&cms, "cfg", rename).await.unwrap_err();
    assert!(matches!(err, ClientError::Renamed), "{err}");
    // The helpers' own errors pass through a mutation.
    let owner = cms.get("other").await.unwrap();
    let (owned, _) = create_or_update(&cms, "owned", |cm| set_controller_reference(&owner, cm))
        .await
        .unwrap();
    assert!(is_controlled_by(&owner, &owned));
    let err = create_or_update(&cms, "owned", |cm| {
        set_controller_reference(&cms_owner_stub(), cm)
    })
    .await
    .unwrap_err();
    assert!(matches!(err, ClientError::AlreadyOwned { .. }), "{err}");
    assert!(
        cms.get("missing")
            .await
            .map_err(ClientError::from)
            .unwrap_err()
            .is_not_found()
    );
}

/// A ConfigMap that looks read back from the server (name and uid), to own things.
fn cms_owner_stub() -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some("stub".into()),
            uid: Some("00000000-0000-0000-0000-000000000001".into()),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    }
}

#[tokio::test]
async fn finalizers_and_server_side_apply() {
    let env = rudder_envtest::TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("finalizers").await.unwrap();
    let cms: Api<ConfigMap> = ns.api();
    let desired = ConfigMap {
        metadata: named("applied"),
        data: Some(BTreeMap::from([("k".to_owned(), "v".to_owned())])),
        ..ConfigMap::default()
    };
    let cm = apply(&cms, &desired, "rudder-test").await.unwrap();
    let managers = field_managers(&cm.metadata);
    assert!(managers.iter().any(|m| m == "rudder-test"), "{managers:?}");

    let cm = add_finalizer(&cms, &cm, "rudder.dev/cleanup")
        .await
        .unwrap();
    assert!(has_finalizer(&cm, "rudder.dev/cleanup"));
    let again = add_finalizer(&cms, &cm, "rudder.dev/cleanup")
        .await
        .unwrap();
    assert_eq!(again.finalizers().len(), 1);
    // Deletion waits for the finalizer.
    cms.delete("applied", &DeleteParams::default())
        .await
        .unwrap();
    let pending = cms.get("applied").await.unwrap();
    assert!(pending.metadata.deletion_timestamp.is_some());
    let removed = remove_finalizer(&cms, &pending, "rudder.dev/cleanup")
        .await
        .unwrap();
    // The server answers with the object's last state, without the finalizer.
    assert!(!has_finalizer(&removed.unwrap(), "rudder.dev/cleanup"));
    assert!(
        cms.get_opt("applied").await.unwrap().is_none(),
        "gone once the finalizer is"
    );
    // A reconcile from a stale cache removing it again: success, nothing to write.
    let again = remove_finalizer(&cms, &pending, "rudder.dev/cleanup")
        .await
        .unwrap();
    assert!(again.is_none());
}

#[tokio::test]
async fn apply_crd_waits_until_its_resources_are_served() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let env = rudder_envtest::TestEnv::builder().shared().await.unwrap();
    let client = env.client().unwrap();
    let crd = |name: &str, plural: &str| -> CustomResourceDefinition {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": { "name": name },
            "spec": {
                "group": "apply.rudder.dev",
                "names": { "kind": "Gadget", "plural": plural },
                "scope": "Namespaced",
                "versions": [{
                    "name": "v1", "served": true, "storage": true,
                    "schema": { "openAPIV3Schema": {
                        "type": "object", "x-kubernetes-preserve-unknown-fields": true
                    } }
                }]
            }
        }))
        .unwrap()
    };
    let good = crd("gadgets.apply.rudder.dev", "gadgets");
    let timeout = std::time::Duration::from_secs(30);
    rudder::client::apply_crd(&client, &good, "rudder-test", timeout)
        .await
        .unwrap();
    // Served at once: no wait needed before using it.
    let resource = kube::core::ApiResource {
        group: "apply.rudder.dev".into(),
        version: "v1".into(),
        api_version: "apply.rudder.dev/v1".into(),
        kind: "Gadget".into(),
        plural: "gadgets".into(),
    };
    let gadgets: Api<kube::core::DynamicObject> = Api::all_with(client.clone(), &resource);
    assert!(
        gadgets
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    // Again: harmless.
    rudder::client::apply_crd(&client, &good, "rudder-test", timeout)
        .await
        .unwrap();
    // A CRD the server refuses (its name must be <plural>.<group>) is its error, at once.
    let bad = crd("wrong.apply.rudder.dev", "gadgets");
    let err = rudder::client::apply_crd(&client, &bad, "rudder-test", timeout)
        .await
        .unwrap_err();
    assert_eq!(err.status_code(), Some(422), "{err}");
}
