//! The generator against a real API server (no garbage collector runs there, so whatever
//! disappears was deleted by the reconciler): create, scale down, change data, delete.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;
use support::{manager, start};

use std::collections::BTreeMap;
use std::time::Duration;

use configmap_generator::{
    CONTROLLER_NAME, ConfigMapGenerator, ConfigMapGeneratorSpec, FINALIZER, INDEX_KEY,
};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{CustomResourceExt, ResourceExt};
use rudder_envtest::poll::eventually;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::prelude::*;

/// How long a test waits for the operator to do something.
const WAIT: Duration = Duration::from_secs(30);

/// The ConfigMaps in the namespace, by name.
async fn configmaps(api: &Api<ConfigMap>) -> BTreeMap<String, ConfigMap> {
    api.list(&ListParams::default())
        .await
        .unwrap()
        .into_iter()
        .filter(|cm| cm.name_any() != "kube-root-ca.crt")
        .map(|cm| (cm.name_any(), cm))
        .collect()
}

fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// Whether the ConfigMaps are exactly `web-0` .. `web-<count-1>`, each with `want` plus its
/// index, controlled by `owner`.
fn generated(
    cms: &BTreeMap<String, ConfigMap>,
    owner: &ConfigMapGenerator,
    count: u32,
    want: &BTreeMap<String, String>,
) -> bool {
    let names: Vec<String> = (0..count).map(|i| format!("web-{i}")).collect();
    if cms.keys().cloned().collect::<Vec<_>>() != names {
        return false;
    }
    (0..count).all(|i| {
        let cm = &cms[&format!("web-{i}")];
        let mut expected = want.clone();
        expected.insert(INDEX_KEY.to_owned(), i.to_string());
        let controller = cm
            .owner_references()
            .iter()
            .filter(|r| r.controller == Some(true))
            .collect::<Vec<_>>();
        cm.data.as_ref() == Some(&expected)
            && controller.len() == 1
            && controller[0].uid == owner.uid().unwrap()
            && controller[0].kind == "ConfigMapGenerator"
            && controller[0].api_version == "examples.rudder.dev/v1"
            && controller[0].name == "web"
    })
}

fn status_generated(g: &ConfigMapGenerator) -> Option<(u32, Option<i64>)> {
    g.status
        .as_ref()
        .map(|s| (s.generated, s.observed_generation))
}

#[tokio::test]
async fn generates_scales_updates_and_cleans_up() {
    // Reconcile errors show in the output of a failing run.
    let _ = tracing_subscriber::registry()
        .with(tracing_subscriber::fmt::layer().with_test_writer())
        .with(LevelFilter::INFO)
        .try_init();
    let env = rudder_envtest::TestEnv::builder().shared().await.unwrap();
    assert!(
        !env.has_controller_manager(),
        "no garbage collector, so the finalizer alone must delete the ConfigMaps"
    );
    env.install_crds([ConfigMapGenerator::crd()]).await.unwrap();
    let ns = env.namespace("cmgen").await.unwrap();

    let manager = manager(&ns);
    configmap_generator::register(&manager).await.unwrap();
    let (stop, running) = start(&manager);

    let generators: Api<ConfigMapGenerator> = ns.api();
    let cms: Api<ConfigMap> = ns.api();

    // (1) count 3: three ConfigMaps with the data and a controller reference, the
    // finalizer, status.generated 3.
    let first = data(&[("color", "blue"), ("size", "large")]);
    let created = generators
        .create(
            &PostParams::default(),
            &ConfigMapGenerator::new(
                "web",
                ConfigMapGeneratorSpec {
                    data: first.clone(),
                    count: 3,
                },
            ),
        )
        .await
        .unwrap();
    eventually("three ConfigMaps generated", WAIT, async || {
        generated(&configmaps(&cms).await, &created, 3, &first).then_some(())
    })
    .await;
    let current = eventually("status.generated == 3", WAIT, async || {
        let g = generators.get("web").await.unwrap();
        (status_generated(&g) == Some((3, g.metadata.generation))).then_some(g)
    })
    .await;
    assert!(
        current.finalizers().iter().any(|f| f == FINALIZER),
        "finalizer added: {:?}",
        current.finalizers()
    );

    // (2) count 1: the two extra ConfigMaps are deleted, the status follows.
    let pp = PatchParams::default();
    let patched = generators
        .patch(
            "web",
            &pp,
            &Patch::Merge(serde_json::json!({ "spec": { "count": 1 } })),
        )
        .await
        .unwrap();
    eventually("scaled down to one ConfigMap", WAIT, async || {
        generated(&configmaps(&cms).await, &created, 1, &first).then_some(())
    })
    .await;
    eventually("status.generated == 1", WAIT, async || {
        let g = generators.get("web").await.unwrap();
        (status_generated(&g) == Some((1, patched.metadata.generation))).then_some(())
    })
    .await;

    // (3) new data: the remaining ConfigMap follows (a key removed, one changed, one added).
    let second = data(&[("color", "green"), ("tier", "front")]);
    generators
        .patch(
            "web",
            &pp,
            // A merge patch merges maps: `size` goes only with an explicit null.
            &Patch::Merge(serde_json::json!({
                "spec": { "data": { "color": "green", "size": null, "tier": "front" } }
            })),
        )
        .await
        .unwrap();
    eventually("the ConfigMap holds the new data", WAIT, async || {
        generated(&configmaps(&cms).await, &created, 1, &second).then_some(())
    })
    .await;

    // (4) deletion: the finalizer deletes the ConfigMaps (nothing else would here), then
    // the generator goes.
    generators
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the generator is gone", WAIT, async || {
        generators
            .get_opt("web")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    assert!(
        configmaps(&cms).await.is_empty(),
        "the finalizer deletes the generated ConfigMaps before letting the generator go"
    );

    // The reconciler recorded what it did.
    let events: Api<k8s_openapi::api::events::v1::Event> = ns.api();
    let recorded = eventually("a CleanedUp event", WAIT, async || {
        let list = events.list(&ListParams::default()).await.unwrap();
        let recorded: Vec<(String, String)> = list
            .items
            .into_iter()
            .filter(|e| e.reporting_controller.as_deref() == Some(CONTROLLER_NAME))
            .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
            .collect();
        recorded
            .iter()
            .any(|(reason, _)| reason == "CleanedUp")
            .then_some(recorded)
    })
    .await;
    for (reason, note) in [
        ("Generated", "created 3 ConfigMap(s)"),
        ("ScaledDown", "deleted 2 ConfigMap(s)"),
        ("Updated", "updated 1 ConfigMap(s)"),
        ("CleanedUp", "deleted 1 generated ConfigMap(s)"),
    ] {
        assert!(
            recorded.contains(&(reason.to_owned(), note.to_owned())),
            "no {reason} event saying {note:?} in {recorded:?}"
        );
    }

    stop.cancel();
    running.await.unwrap().unwrap();
}
