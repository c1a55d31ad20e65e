//! The rendered deployment manifests against a real API server: every object is accepted by
//! a server-side dry-run apply (the Namespace applied for real first); the metrics Service
//! and the NetworkPolicy point at the Deployment's ports, the container has a memory limit,
//! and the certificates' RBAC is scoped to the operator's own objects by name.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use chaospod::Options;
use rudder::lease::leader_election::LeaderElectionConfig;
use rudder::manifests::DeployOptions;
use serde_json::json;

#[tokio::test]
async fn every_rendered_object_is_accepted_by_a_dry_run_apply() {
    let env = rudder_envtest::TestEnv::builder().shared().await.unwrap();
    let namespace = "chaospod-deploy";
    let certificates =
        chaospod::self_signed_certificates("chaospod-certs", "chaospod-webhook", namespace)
            .unwrap();
    let cases = [
        // Webhooks from a mounted certificate Secret, leader election.
        Options {
            leader_election: Some(LeaderElectionConfig::new(namespace, "chaospod-leader")),
            webhooks: Some(rudder::webhook::Options::new().cert_dir("/certs")),
            ..Options::default()
        },
        // Self-signed certificates, secure metrics from them, no election.
        Options {
            webhooks: Some(rudder::webhook::Options::new()),
            webhook_certificates: Some(certificates),
            secure_metrics: Some(rudder::manager::SecureMetrics::self_signed()),
            ..Options::default()
        },
    ];
    for options in cases {
        // Certificates from files come from a mounted Secret; self-signed ones need none.
        let mounted = options.webhook_certificates.is_none();
        let self_signed = !mounted;
        let manifests = chaospod::deploy_manifests(
            options,
            DeployOptions::new(chaospod::CONTROLLER, namespace, "example/chaospod:1")
                .webhook_service("chaospod-webhook")
                .metrics_service("chaospod-metrics"),
        )
        .await
        .unwrap();
        assert!(manifests.webhook_service.is_some());
        assert!(manifests.webhooks.mutating.is_some() && manifests.webhooks.validating.is_some());
        let deployment = serde_json::to_value(&manifests.deployment).unwrap();
        let pod = &deployment["spec"]["template"]["spec"];
        assert_eq!(
            pod["terminationGracePeriodSeconds"], 40,
            "30 s shutdown + 10 s"
        );
        let container = &pod["containers"][0];
        assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
        assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
        assert_eq!(pod["volumes"].is_array(), mounted, "{pod}");
        assert_eq!(
            container["resources"],
            json!({
                "requests": { "cpu": "10m", "memory": "64Mi" },
                "limits": { "memory": "128Mi" },
            })
        );
        let port_names: Vec<&str> = container["ports"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap())
            .collect();
        assert_eq!(port_names, ["healthz", "metrics", "webhook-server"]);

        // The metrics Service, named as the flag says, on the container's metrics port; its
        // port's name says the scheme.
        let service = serde_json::to_value(manifests.metrics_service.as_ref().unwrap()).unwrap();
        assert_eq!(service["metadata"]["name"], "chaospod-metrics");
        assert_eq!(
            service["spec"]["selector"],
            deployment["spec"]["selector"]["matchLabels"]
        );
        let scheme = if self_signed { "https" } else { "http" };
        assert_eq!(
            service["spec"]["ports"],
            json!([{ "name": scheme, "port": 8080, "targetPort": "metrics", "protocol": "TCP" }])
        );

        // The NetworkPolicy selects the operator's Pods and admits only the webhook and
        // metrics ports (not the probes' port, which the kubelet reaches anyway).
        let policy = serde_json::to_value(manifests.network_policy.as_ref().unwrap()).unwrap();
        assert_eq!(
            policy["spec"]["podSelector"]["matchLabels"],
            deployment["spec"]["template"]["metadata"]["labels"]
        );
        assert_eq!(policy["spec"]["policyTypes"], json!(["Ingress"]));
        assert_eq!(
            policy["spec"]["ingress"],
            json!([{ "ports": [
                { "port": "metrics", "protocol": "TCP" },
                { "port": "webhook-server", "protocol": "TCP" },
            ] }])
        );

        // Self-signed certificates: the Secret by name but for its creation, the webhook
        // configurations by name, and checkov told why its webhook check does not apply.
        let cluster_role =
            serde_json::to_value(manifests.rbac.cluster_role.as_ref().unwrap()).unwrap();
        let annotation = &cluster_role["metadata"]["annotations"]["checkov.io/skip1"];
        let role = serde_json::to_value(&manifests.rbac.roles[0]).unwrap();
        let secrets: Vec<&serde_json::Value> = role["rules"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["resources"] == json!(["secrets"]))
            .collect();
        let webhooks: Vec<&serde_json::Value> = cluster_role["rules"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["apiGroups"] == json!(["admissionregistration.k8s.io"]))
            .collect();
        if self_signed {
            assert_eq!(
                secrets,
                [
                    &json!({ "apiGroups": [""], "resources": ["secrets"], "verbs": ["create"] }),
                    &json!({
                        "apiGroups": [""],
                        "resources": ["secrets"],
                        "resourceNames": ["chaospod-certs"],
                        "verbs": ["get", "list", "watch", "update"],
                    }),
                ]
            );
            assert_eq!(
                webhooks,
                [&json!({
                    "apiGroups": ["admissionregistration.k8s.io"],
                    "resources": [
                        "mutatingwebhookconfigurations",
                        "validatingwebhookconfigurations",
                    ],
                    "resourceNames": ["chaospod"],
                    "verbs": ["get", "list", "watch", "update"],
                })]
            );
            assert!(
                annotation.as_str().unwrap().starts_with("CKV_K8S_155="),
                "{cluster_role}"
            );
        } else {
            assert!(
                secrets.is_empty() && webhooks.is_empty(),
                "{role} {cluster_role}"
            );
            assert!(annotation.is_null(), "{cluster_role}");
        }

        let objects = manifests.objects();
        let kinds: Vec<&str> = objects
            .iter()
            .map(|o| o["kind"].as_str().unwrap())
            .collect();
        for kind in ["NetworkPolicy", "Service", "Deployment"] {
            assert!(kinds.contains(&kind), "{kind} missing from {kinds:?}");
        }
        env.apply(&objects[..1], false).await.unwrap();
        env.apply(&objects[1..], true).await.unwrap();
    }
}
