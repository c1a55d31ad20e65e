//! The `chaospod` operator binary as a user runs it: `--crd` prints an installable CRD, and
//! the operator, pointed at a cluster by `KUBECONFIG`, runs Pods for ChaosPods and stops
//! cleanly on SIGTERM.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;
use support::chaos_pod;

use std::process::{Command, Stdio};
use std::time::Duration;

use chaospod::ChaosPod;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};

#[test]
fn crd_flag_prints_the_crd() {
    let out = Command::new(env!("CARGO_BIN_EXE_chaospod"))
        .arg("--crd")
        .output()
        .unwrap();
    assert!(out.status.success());
    let crd: CustomResourceDefinition = serde_yaml::from_slice(&out.stdout).unwrap();
    assert_eq!(
        crd.metadata.name.as_deref(),
        Some("chaospods.examples.rudder.dev")
    );
    // --manifests: the CRD, then the webhook configurations pointing at the Service named.
    let out = Command::new(env!("CARGO_BIN_EXE_chaospod"))
        .args([
            "--manifests",
            "--webhook-service",
            "chaos-hooks",
            "--webhook-namespace",
            "ops",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let docs: Vec<serde_yaml::Value> = serde_yaml::Deserializer::from_slice(&out.stdout)
        .map(|doc| serde::Deserialize::deserialize(doc).unwrap())
        .collect();
    let kinds: Vec<&str> = docs.iter().map(|d| d["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "CustomResourceDefinition",
            "MutatingWebhookConfiguration",
            "ValidatingWebhookConfiguration"
        ]
    );
    let service = &docs[1]["webhooks"][0]["clientConfig"]["service"];
    assert_eq!(service["name"].as_str(), Some("chaos-hooks"));
    assert_eq!(service["namespace"].as_str(), Some("ops"));
    assert_eq!(
        service["path"].as_str(),
        Some("/mutate-examples-rudder-dev-v1-chaospod")
    );
    let bad = Command::new(env!("CARGO_BIN_EXE_chaospod"))
        .arg("--bogus")
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
}

/// `--manifests --webhook-self-signed`: the CRD, the webhook configurations, then the RBAC the
/// self-signed mode needs, bound to the ServiceAccount named.
#[test]
fn manifests_with_self_signed_certificates_print_their_rbac() {
    let out = Command::new(env!("CARGO_BIN_EXE_chaospod"))
        .args([
            "--manifests",
            "--webhook-self-signed",
            "chaos-certs",
            "--webhook-namespace",
            "ops",
            "--service-account",
            "chaos-operator",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let docs: Vec<serde_yaml::Value> = serde_yaml::Deserializer::from_slice(&out.stdout)
        .map(|doc| serde::Deserialize::deserialize(doc).unwrap())
        .collect();
    let kinds: Vec<&str> = docs.iter().map(|d| d["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "CustomResourceDefinition",
            "MutatingWebhookConfiguration",
            "ValidatingWebhookConfiguration",
            "Role",
            "RoleBinding",
            "ClusterRole",
            "ClusterRoleBinding",
        ]
    );
    let strings = |v: &serde_yaml::Value| -> Vec<String> {
        v.as_sequence()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap().to_owned())
            .collect()
    };
    // The Secret by name but for its creation; the webhook configurations by name.
    let role = &docs[3];
    assert_eq!(role["metadata"]["namespace"].as_str(), Some("ops"));
    assert_eq!(strings(&role["rules"][0]["resources"]), ["secrets"]);
    assert!(role["rules"][0]["resourceNames"].is_null());
    assert_eq!(strings(&role["rules"][0]["verbs"]), ["create"]);
    assert_eq!(strings(&role["rules"][1]["resources"]), ["secrets"]);
    assert_eq!(strings(&role["rules"][1]["resourceNames"]), ["chaos-certs"]);
    assert_eq!(
        strings(&role["rules"][1]["verbs"]),
        ["get", "list", "watch", "update"]
    );
    let cluster_role = &docs[5];
    let rules = cluster_role["rules"].as_sequence().unwrap();
    assert_eq!(rules.len(), 1);
    assert_eq!(
        strings(&rules[0]["resources"]),
        [
            "mutatingwebhookconfigurations",
            "validatingwebhookconfigurations",
        ]
    );
    let configurations: Vec<&str> = docs[1..3]
        .iter()
        .map(|d| d["metadata"]["name"].as_str().unwrap())
        .collect();
    for name in strings(&rules[0]["resourceNames"]) {
        assert!(configurations.contains(&name.as_str()), "{name}");
    }
    assert_eq!(
        strings(&rules[0]["verbs"]),
        ["get", "list", "watch", "update"]
    );
    for binding in [&docs[4], &docs[6]] {
        let subject = &binding["subjects"][0];
        assert_eq!(subject["kind"].as_str(), Some("ServiceAccount"));
        assert_eq!(subject["name"].as_str(), Some("chaos-operator"));
        assert_eq!(subject["namespace"].as_str(), Some("ops"));
    }
    assert_eq!(docs[4]["roleRef"]["name"], role["metadata"]["name"]);
    assert_eq!(docs[6]["roleRef"]["name"], cluster_role["metadata"]["name"]);

    // Both certificate sources at once is a usage error.
    let both = Command::new(env!("CARGO_BIN_EXE_chaospod"))
        .args(["--webhook-self-signed", "s", "--webhook-cert-dir", "/tmp"])
        .output()
        .unwrap();
    assert_eq!(both.status.code(), Some(2));
}

/// Kills the operator if the test fails before it exits, so no process outlives the test.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn operator_runs_chaospods_and_stops_on_sigterm() {
    let env = rudder_envtest::TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("chaospod-bin").await.unwrap();
    chaospod::install_crd(&ns.client()).await.unwrap();
    let mut operator = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_chaospod"))
            .args([
                "--namespace",
                ns.name(),
                "--leader-election-namespace",
                ns.name(),
            ])
            .args([
                "--health-address",
                "127.0.0.1:0",
                "--metrics-address",
                "127.0.0.1:0",
            ])
            .env("KUBECONFIG", env.kubeconfig_path())
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );

    let chaospods: Api<ChaosPod> = ns.api();
    chaospods
        .create(
            &PostParams::default(),
            &chaos_pod("bin", Duration::from_secs(60)),
        )
        .await
        .unwrap();
    let pods: Api<Pod> = ns.api();
    rudder_envtest::poll::eventually("the operator's pod", Duration::from_secs(30), async || {
        pods.get_opt("bin").await.unwrap()
    })
    .await;

    let killed = Command::new("kill")
        .args(["-TERM", &operator.0.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = rudder_envtest::poll::eventually(
        "the operator to exit",
        Duration::from_secs(30),
        async || operator.0.try_wait().unwrap(),
    )
    .await;
    assert!(status.success(), "exited with {status}");
}

/// `--manifests` with secure metrics: after the self-signed certificates' RBAC, a ClusterRole
/// allowing `create` on TokenReviews and SubjectAccessReviews, bound to the ServiceAccount.
#[test]
fn manifests_with_secure_metrics_print_the_review_rbac() {
    let out = Command::new(env!("CARGO_BIN_EXE_chaospod"))
        .args([
            "--manifests",
            "--webhook-self-signed",
            "chaos-certs",
            "--metrics-self-signed",
            "--webhook-namespace",
            "ops",
            "--service-account",
            "chaos-operator",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let docs: Vec<serde_yaml::Value> = serde_yaml::Deserializer::from_slice(&out.stdout)
        .map(|doc| serde::Deserialize::deserialize(doc).unwrap())
        .collect();
    let reviews = docs
        .iter()
        .find(|d| {
            d["metadata"]["name"].as_str() == Some("chaospod-metrics-auth")
                && d["kind"] == "ClusterRole"
        })
        .expect("the ClusterRole for the reviews");
    let rules: Vec<(String, String, String)> = reviews["rules"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|r| {
            let one = |v: &serde_yaml::Value| {
                let seq = v.as_sequence().unwrap();
                assert_eq!(seq.len(), 1, "{v:?}");
                seq[0].as_str().unwrap().to_owned()
            };
            (one(&r["apiGroups"]), one(&r["resources"]), one(&r["verbs"]))
        })
        .collect();
    assert_eq!(
        rules,
        [
            (
                "authentication.k8s.io".to_owned(),
                "tokenreviews".to_owned(),
                "create".to_owned()
            ),
            (
                "authorization.k8s.io".to_owned(),
                "subjectaccessreviews".to_owned(),
                "create".to_owned()
            ),
        ]
    );
    let binding = docs
        .iter()
        .find(|d| {
            d["metadata"]["name"].as_str() == Some("chaospod-metrics-auth")
                && d["kind"] == "ClusterRoleBinding"
        })
        .expect("its binding");
    assert_eq!(
        binding["subjects"][0]["name"].as_str(),
        Some("chaos-operator")
    );
    assert_eq!(binding["subjects"][0]["namespace"].as_str(), Some("ops"));

    // Secure metrics from the self-signed certificates need them configured.
    let refused = Command::new(env!("CARGO_BIN_EXE_chaospod"))
        .args(["--manifests", "--metrics-self-signed"])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("needs --webhook-self-signed"));
}
