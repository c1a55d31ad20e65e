//! The rendered deployment manifests against a real API server: every object is accepted by
//! a server-side dry-run apply (the Namespace applied for real first).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use chaospod::Options;
use rudder::manager::leader_election::LeaderElectionConfig;
use rudder::manifests::DeployOptions;

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
        let manifests = chaospod::deploy_manifests(
            options,
            DeployOptions::new(chaospod::CONTROLLER, namespace, "example/chaospod:1")
                .webhook_service("chaospod-webhook"),
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
        let objects = manifests.objects();
        env.apply(&objects[..1], false).await.unwrap();
        env.apply(&objects[1..], true).await.unwrap();
    }
}
