//! The demo binary against a cluster given by `--kubeconfig` (here the test control plane),
//! as a user would run it: it must exit 0, narrate, summarise and clean up its namespace.

#![allow(
    clippy::disallowed_methods,
    reason = "tests may spawn: the test owns its tasks"
)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::Api;

#[tokio::test]
async fn demo_runs_against_a_kubeconfig_and_cleans_up() {
    let env = rudder_envtest::TestEnv::builder().shared().await.unwrap();
    let kubeconfig = env.kubeconfig_path().to_owned();
    let output = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_demo"))
            .args(["--duration", "7", "--kubeconfig"])
            .arg(kubeconfig)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "demo failed:\n{stdout}\n{stderr}");
    for expected in [
        "using the cluster at",
        "leader election: this manager",
        "readyz: ok",
        "pod alpha  created",
        "pod alpha  deleted",
        "controller_runtime_reconcile_total{controller=\"chaospod\"",
        "controller_runtime_reconcile_errors_total{controller=\"chaospod\"} 0",
        "manager stopped cleanly",
    ] {
        assert!(stdout.contains(expected), "no {expected:?} in:\n{stdout}");
    }

    // Its namespace is being deleted (no namespace controller runs here to finish it).
    let namespace = stdout
        .lines()
        .find_map(|l| l.split("deleted namespace ").nth(1))
        .expect("the demo says it deleted its namespace")
        .trim()
        .to_owned();
    let ns = Api::<Namespace>::all(env.client().unwrap())
        .get_opt(&namespace)
        .await
        .unwrap();
    assert!(
        ns.is_none_or(|ns| ns.metadata.deletion_timestamp.is_some()),
        "{namespace} is not being deleted"
    );

    // Bad arguments are a usage error, not a panic.
    let bad = Command::new(env!("CARGO_BIN_EXE_demo"))
        .args(["--duration", "soon"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--duration wants whole seconds"));
}
