//! The rendered manifests against a real API server: every object is accepted by a
//! server-side dry-run apply (the Namespace applied for real first, for the objects in it).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use configmap_generator::Settings;
use rudder::manifests::DeployOptions;

#[tokio::test]
async fn every_rendered_object_is_accepted_by_a_dry_run_apply() {
    let env = rudder_envtest::TestEnv::builder().shared().await.unwrap();
    let cases = [
        // All namespaces (a ClusterRole), a leader elected in the operator's namespace.
        (
            "cmgen-deploy-all",
            Settings {
                leader_election_namespace: Some("cmgen-deploy-all".to_owned()),
                ..Settings::default()
            },
        ),
        // One namespace (a Role there), no election, no metrics server.
        (
            "cmgen-deploy-one",
            Settings {
                namespace: Some("apps".to_owned()),
                metrics: None,
                ..Settings::default()
            },
        ),
    ];
    for (namespace, settings) in cases {
        let manifests = configmap_generator::manifests(
            &settings,
            DeployOptions::new("configmap-generator", namespace, "example/cmgen:1").replicas(2),
        )
        .await
        .unwrap();
        let objects = manifests.objects();
        assert_eq!(objects[0]["kind"], "Namespace");
        let kinds: Vec<&str> = objects
            .iter()
            .map(|o| o["kind"].as_str().unwrap())
            .collect();
        for kind in ["CustomResourceDefinition", "ServiceAccount", "Deployment"] {
            assert!(kinds.contains(&kind), "{kind} missing from {kinds:?}");
        }
        // The namespaced manager's rules all live in its namespace.
        assert_eq!(
            manifests.rbac.cluster_role.is_some(),
            settings.namespace.is_none(),
            "{kinds:?}"
        );
        if let Some(watched) = &settings.namespace {
            env.apply(
                &[serde_json::json!({
                    "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": watched },
                })],
                false,
            )
            .await
            .unwrap();
        }
        env.apply(&objects[..1], false).await.unwrap();
        env.apply(&objects[1..], true).await.unwrap();
        // The YAML is the same objects, one document each.
        let yaml = manifests.to_yaml().unwrap();
        assert_eq!(yaml.matches("\n---\n").count() + 1, objects.len(), "{yaml}");
    }
}
