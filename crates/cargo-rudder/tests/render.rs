//! Projects and crates rendered into temporary directories, read back: by version, by
//! path to this checkout, by git, and a controller joining a workspace.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::path::{Path, PathBuf};

use cargo_rudder::{
    ControllerOptions, Error, OperatorOptions, RudderSource, new_controller, new_operator, run,
};

/// A fresh temporary directory, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("cargo-rudder-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn read(path: impl AsRef<Path>) -> String {
    let path = path.as_ref();
    fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The root of the Rudder checkout these tests run in.
fn checkout() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

#[test]
fn an_operator_by_version_names_rudders_release_and_no_lockfile() {
    let temp = TempDir::new("by-version");
    let dir = new_operator(&temp.0.join("shop-op"), &OperatorOptions::default()).unwrap();
    let workspace = read(dir.join("Cargo.toml"));
    assert!(
        workspace.lines().any(|l| l == "rudder-runtime = \"0.1\""),
        "{workspace}"
    );
    assert!(workspace.contains("kube = { version = \"5\", default-features = false }"));
    assert!(!dir.join("Cargo.lock").exists());
    let lib = read(dir.join("operator/src/lib.rs"));
    assert!(lib.contains("kind = \"ShopOp\""), "{lib}");
    assert!(lib.contains("group = \"shop-op.example.com\""), "{lib}");
    assert!(!dir.join("operator/src/webhook.rs").exists());
    assert!(read(dir.join(".cargo/config.toml")).contains("--package shop-op-xtask"));
    for file in [
        "README.md",
        "operator/src/main.rs",
        "operator/tests/operator.rs",
    ] {
        assert!(!read(dir.join(file)).contains("{{"), "{file}");
    }
}

#[test]
fn an_operator_by_path_depends_on_the_checkout_and_starts_from_its_lockfile() {
    let temp = TempDir::new("by-path");
    let options = OperatorOptions {
        kind: Some("Widget".into()),
        group: Some("widgets.acme.io".into()),
        webhook: true,
        rudder: RudderSource::Path(checkout()),
        ..OperatorOptions::default()
    };
    let dir = new_operator(&temp.0.join("widgets"), &options).unwrap();
    let workspace = read(dir.join("Cargo.toml"));
    // Written as published, resolved to the checkout by a patch.
    assert!(
        workspace.lines().any(|l| l == "rudder-runtime = \"0.1\""),
        "{workspace}"
    );
    let expected = format!(
        "rudder-runtime = {{ path = \"{}/crates/rudder\" }}",
        checkout().display()
    );
    let patch = workspace
        .split("\n[patch.crates-io]\n")
        .nth(1)
        .unwrap_or_else(|| panic!("no [patch.crates-io] in {workspace}"));
    assert!(patch.lines().any(|l| l == expected), "{workspace}");
    assert_eq!(
        read(dir.join("Cargo.lock")),
        read(checkout().join("Cargo.lock"))
    );
    assert!(read(dir.join("operator/src/webhook.rs")).contains("Widget"));
    assert!(dir.join("operator/tests/webhook.rs").exists());
    assert!(read(dir.join("operator/src/lib.rs")).contains("widgets.acme.io"));
}

fn args(line: &str) -> Vec<String> {
    line.split_whitespace().map(str::to_owned).collect()
}

/// The generated files that differ between an operator of one cluster and of a fleet.
const FLEET_FILES: [&str; 5] = [
    "README.md",
    "operator/src/lib.rs",
    "operator/src/main.rs",
    "operator/tests/operator.rs",
    "xtask/src/main.rs",
];

#[test]
fn multi_cluster_runs_the_controller_over_a_fleet_of_kubeconfig_secrets() {
    let temp = TempDir::new("fleet");
    let path = temp.0.join("fleet-op");
    let created = run(&args(&format!(
        "rudder new {} --multi-cluster --kind Fleetling",
        path.display()
    )))
    .unwrap();
    assert!(created.contains("cargo xtask test"), "{created}");
    let lib = read(path.join("operator/src/lib.rs"));
    for expected in [
        "Fleet::builder(&manager)",
        "KubeconfigSecrets::new(fleet_namespace)",
        "pub fleet_namespace: Option<String>,",
        "pub fn add_controller(fleet: &Fleet) -> Result<(), rudder::Error>",
        "status.cluster = ctx.cluster().map(str::to_owned);",
        // Events through the tools' recorder, and what it writes declared, as for one
        // cluster: the fleet records both on the manager.
        ".record(object, EventType::Normal, reason, note)",
        ".subresource::<Fleetling>(\"status\", [Verb::Update])",
    ] {
        assert!(lib.contains(expected), "{expected:?} in\n{lib}");
    }
    assert!(!lib.contains("rudder::new_controller(manager)"), "{lib}");
    let main = read(path.join("operator/src/main.rs"));
    assert!(main.contains("--fleet-namespace"), "{main}");
    let test = read(path.join("operator/tests/operator.rs"));
    for expected in [
        "env.kubeconfig_path()",
        "\"sigs.k8s.io/multicluster-runtime-kubeconfig\": \"true\"",
        "\"kubeconfig\": kubeconfig",
        "status.cluster.as_deref() == Some(\"member\")",
        "the Event of the Deployment made",
    ] {
        assert!(test.contains(expected), "{expected:?} in\n{test}");
    }
    let readme = read(path.join("README.md"));
    assert!(
        readme.contains("installed in each member cluster"),
        "{readme}"
    );
    assert!(!path.join("operator/src/webhook.rs").exists());
    for file in FLEET_FILES {
        let text = read(path.join(file));
        assert!(!text.contains("{{"), "{file}");
        assert!(!text.contains("multi_cluster}}"), "{file}");
    }
}

#[test]
fn without_multi_cluster_there_is_no_fleet() {
    let temp = TempDir::new("one-cluster");
    let dir = new_operator(&temp.0.join("one-op"), &OperatorOptions::default()).unwrap();
    for file in FLEET_FILES {
        let text = read(dir.join(file));
        for fleet in ["Fleet::builder", "multicluster", "fleet"] {
            assert!(!text.contains(fleet), "{fleet:?} in {file}");
        }
    }
    assert!(read(dir.join("operator/src/lib.rs")).contains("rudder::new_controller(manager)"));
}

#[test]
fn multi_cluster_is_refused_by_new_controller_and_with_webhooks() {
    let temp = TempDir::new("fleet-refused");
    for line in [
        format!(
            "rudder new-controller x --multi-cluster --workspace {}",
            temp.0.display()
        ),
        format!(
            "rudder new {} --multi-cluster --webhook",
            temp.0.join("both").display()
        ),
    ] {
        let refused = run(&args(&line));
        assert!(
            matches!(refused, Err(Error::Invalid(_))),
            "{line}: {refused:?}"
        );
    }
    assert_eq!(fs::read_dir(&temp.0).unwrap().count(), 0);
}

#[test]
fn a_path_that_is_no_checkout_is_refused() {
    let temp = TempDir::new("no-checkout");
    let options = OperatorOptions {
        rudder: RudderSource::Path(temp.0.clone()),
        ..OperatorOptions::default()
    };
    let refused = new_operator(&temp.0.join("op"), &options);
    assert!(matches!(refused, Err(Error::Invalid(_))), "{refused:?}");
    assert!(!temp.0.join("op").exists());
}

#[test]
fn a_controller_joins_the_workspace_and_inherits_what_it_declares() {
    let temp = TempDir::new("controller");
    fs::write(
        temp.0.join("Cargo.toml"),
        "[workspace]\nresolver = \"3\"\nmembers = []\n\n[workspace.package]\nedition = \"2024\"\n\n\
         [workspace.dependencies]\ntokio = { version = \"1.54\", default-features = false }\n",
    )
    .unwrap();
    let options = ControllerOptions {
        rudder: RudderSource::Git {
            url: "https://github.com/rudder-rs/rudder".into(),
            rev: Some("main".into()),
        },
        ..ControllerOptions::default()
    };
    let dir = new_controller(&temp.0.join("cron-tab"), &options).unwrap();
    let manifest = read(dir.join("Cargo.toml"));
    for line in [
        "name = \"cron-tab\"",
        "edition.workspace = true",
        "version = \"0.1.0\"",
        "rudder-runtime = { git = \"https://github.com/rudder-rs/rudder\", rev = \"main\" }",
        "tokio = { workspace = true, features = [\"rt-multi-thread\", \"macros\", \"time\"] }",
        "serde = { version = \"1\", features = [\"derive\"] }",
    ] {
        assert!(
            manifest.lines().any(|l| l == line),
            "{line:?} in\n{manifest}"
        );
    }
    assert!(!manifest.contains("[lints]"), "{manifest}");
    assert!(dir.join("tests/cron_tab.rs").exists());
    // `cargo new` added the crate to the workspace's members.
    assert!(read(temp.0.join("Cargo.toml")).contains("\"cron-tab\""));
    let again = new_controller(&temp.0.join("cron-tab"), &options);
    assert!(matches!(again, Err(Error::Exists(_))), "{again:?}");
}

#[test]
fn a_controller_needs_a_workspace() {
    let temp = TempDir::new("no-workspace");
    let refused = new_controller(&temp.0.join("lonely"), &ControllerOptions::default());
    assert!(matches!(refused, Err(Error::Invalid(_))), "{refused:?}");
    assert!(!temp.0.join("lonely").exists());
}
