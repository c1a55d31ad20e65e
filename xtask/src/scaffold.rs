//! `cargo xtask new-operator` and `new-controller`: cargo-rudder's scaffolds from this
//! checkout, depending on it by path; and CI's checks of both.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use cargo_rudder::{ControllerOptions, OperatorOptions, RudderSource};
use xtask::versions::DEFAULT_KUBERNETES;

use crate::mirror::Mirror;

use xtask::util::{run as sh, workspace_root};

/// The crate CI scaffolds, checks and tests, then removes.
pub(crate) const CI_CHECK: &str = "scaffold-check";
/// Marks a crate CI scaffolded, so a leftover from an interrupted run can be removed safely.
const CI_MARKER: &str = ".scaffolded-by-ci";

/// This checkout, as the scaffolds' Rudder.
fn this_checkout() -> RudderSource {
    RudderSource::Path(workspace_root())
}

/// `cargo xtask new-operator PATH`: cargo-rudder's `new` with `options` and this checkout
/// as Rudder (whatever `options.rudder` says).
pub(crate) fn new_operator(path: &str, options: OperatorOptions) -> Result<(), String> {
    let options = OperatorOptions {
        rudder: this_checkout(),
        ..options
    };
    let dir = cargo_rudder::new_operator(Path::new(path), &options).map_err(|e| e.to_string())?;
    println!(
        "created {dir}\n\nnext, in {dir}:\n  \
         cargo xtask test                                   # the operator against a real API server\n  \
         cargo xtask manifests --image IMAGE | kubectl apply -f -   # deploy it",
        dir = dir.display()
    );
    Ok(())
}

/// `cargo xtask new-controller NAME`: cargo-rudder's `new-controller` into `examples/NAME`.
pub(crate) fn new_controller(
    name: &str,
    kind: Option<&str>,
    group: Option<&str>,
) -> Result<(), String> {
    let dir = controller(name, kind, group)?;
    let names = cargo_rudder::Names::new(name, kind, group).map_err(|e| e.to_string())?;
    println!(
        "created {dir}: the {kind} resource ({group}/v1) and its controller\n\n\
         next:\n  \
         cargo test -p {name}                 # against a real API server (run `cargo xtask envtest install` once)\n  \
         cargo run -p {name} -- --crd         # the CRD, for `kubectl apply -f -`\n  \
         cargo run -p {name}                  # the operator, on the cluster your kubeconfig names\n\n\
         Edit the spec and the reconcile in {dir}/src/lib.rs; docs/writing-an-operator.md walks through a whole operator.",
        dir = dir.display(),
        kind = names.kind(),
        group = names.group(),
    );
    Ok(())
}

fn controller(name: &str, kind: Option<&str>, group: Option<&str>) -> Result<PathBuf, String> {
    let options = ControllerOptions {
        kind: kind.map(str::to_owned),
        group: group.map(str::to_owned),
        version: None,
        rudder: this_checkout(),
    };
    let dir = workspace_root().join("examples").join(name);
    cargo_rudder::new_controller(&dir, &options).map_err(|e| e.to_string())
}

/// For CI: scaffolds [`CI_CHECK`] so the workspace's checks and tests include it. A
/// leftover from an interrupted run is replaced; a crate of that name that CI did not make
/// is an error.
pub(crate) fn scaffold_for_ci() -> Result<CiScaffold, String> {
    let dir = workspace_root().join("examples").join(CI_CHECK);
    if dir.exists() {
        if !dir.join(CI_MARKER).exists() {
            return Err(format!(
                "{} exists and was not made by CI: rename it",
                dir.display()
            ));
        }
        fs::remove_dir_all(&dir).map_err(|e| format!("cannot remove {}: {e}", dir.display()))?;
    }
    let lock = workspace_root().join("Cargo.lock");
    let saved_lock = fs::read(&lock).ok();
    let guard = CiScaffold {
        dir: dir.clone(),
        lock,
        saved_lock,
    };
    controller(CI_CHECK, Some("ScaffoldCheck"), Some("scaffold.rudder.dev"))?;
    fs::write(dir.join(CI_MARKER), "")
        .map_err(|e| format!("cannot mark {}: {e}", dir.display()))?;
    Ok(guard)
}

/// Removes CI's scaffold and puts `Cargo.lock` back as it was, when dropped.
pub(crate) struct CiScaffold {
    dir: PathBuf,
    lock: PathBuf,
    saved_lock: Option<Vec<u8>>,
}

impl Drop for CiScaffold {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
        if let Some(lock) = &self.saved_lock {
            let _ = fs::write(&self.lock, lock);
        }
    }
}

/// For CI: scaffolds three operator projects (plain, with webhooks, over a fleet of member
/// clusters) into a temporary directory outside the workspace, runs each one's own test
/// command (`cargo xtask test`, against the control plane in `assets`) and renders its
/// manifests, then removes them.
/// They build into Rudder's target directory from Rudder's Cargo.lock, so no crate version
/// Rudder's build did not compile is compiled again.
pub(crate) fn operator_ci_check(assets: &Path) -> Result<(), String> {
    let parent = std::env::temp_dir().join(format!("rudder-ci-{}", std::process::id()));
    let _ = fs::remove_dir_all(&parent);
    let guard = RemoveOnDrop(parent.clone());
    let plain = [
        "kind: CustomResourceDefinition",
        "kind: ServiceAccount",
        "kind: ClusterRole",
        "kind: Deployment",
    ];
    let plain_options = OperatorOptions::default();
    check_project(
        &parent.join("ci-operator"),
        &plain_options,
        ControlPlane::Assets(assets),
        &plain,
    )?;
    let webhooks = [
        &plain[..],
        &[
            "kind: Service",
            "kind: MutatingWebhookConfiguration",
            "kind: ValidatingWebhookConfiguration",
            "- secrets",
        ],
    ]
    .concat();
    let webhook_options = OperatorOptions {
        webhook: true,
        ..OperatorOptions::default()
    };
    // The memcached-shaped operator with its webhooks, as a user outside this repository
    // runs it: no RUDDER_ENVTEST_ASSETS, an empty cache, the control plane downloaded and
    // verified by the project's own xtask, here from a mirror in the upstream layouts made
    // from this machine's binaries.
    let mirror = Mirror::start(
        assets,
        &format!("v{DEFAULT_KUBERNETES}"),
        &parent.join("mirror"),
    )?;
    let cache = parent.join("cache");
    check_project(
        &parent.join("ci-webhook-operator"),
        &webhook_options,
        ControlPlane::Downloaded {
            mirror: &mirror,
            cache: &cache,
        },
        &webhooks,
    )?;
    let installed = cache
        .join("rudder")
        .join("envtest")
        .join(format!("v{DEFAULT_KUBERNETES}"));
    for binary in ["kube-apiserver", "etcd", "kube-controller-manager"] {
        if !installed.join(binary).is_file() {
            return Err(format!(
                "the scaffolded operator's tests passed, but {} was not downloaded into {}",
                binary,
                installed.display()
            ));
        }
    }
    drop(mirror);
    let assets = ControlPlane::Assets(assets);
    // The fleet's home cluster: reading the kubeconfig Secrets (a Role, not a ClusterRole:
    // the controller's own RBAC is the members' kubeconfigs' business).
    let fleet = [
        "kind: CustomResourceDefinition",
        "kind: ServiceAccount",
        "kind: Role\n",
        "- secrets",
        "kind: Deployment",
    ];
    let fleet_options = OperatorOptions {
        multi_cluster: true,
        ..OperatorOptions::default()
    };
    check_project(
        &parent.join("ci-fleet-operator"),
        &fleet_options,
        assets,
        &fleet,
    )?;
    drop(guard);
    Ok(())
}

/// Where a scaffolded project's tests take their control plane from.
#[derive(Clone, Copy)]
enum ControlPlane<'a> {
    /// The binaries in this directory (`RUDDER_ENVTEST_ASSETS`).
    Assets(&'a Path),
    /// Downloaded by the project's `cargo xtask test` from `mirror` into `cache` (its
    /// `XDG_CACHE_HOME`), as a user's first run downloads it from the upstream hosts.
    Downloaded { mirror: &'a Mirror, cache: &'a Path },
}

/// Scaffolds one project at `path` with `options` (its switches: `webhook`,
/// `multi_cluster`, ...; Rudder is always this checkout), runs its tests on `plane` and
/// checks its manifests hold `expected`.
fn check_project(
    path: &Path,
    options: &OperatorOptions,
    plane: ControlPlane<'_>,
    expected: &[&str],
) -> Result<(), String> {
    let options = OperatorOptions {
        rudder: this_checkout(),
        ..options.clone()
    };
    let dir = cargo_rudder::new_operator(path, &options).map_err(|e| e.to_string())?;
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| workspace_root().join("target"), PathBuf::from);
    let with_env = |mut cmd: Command| {
        cmd.env("CARGO_TARGET_DIR", &target);
        match plane {
            ControlPlane::Assets(assets) => {
                cmd.env("RUDDER_ENVTEST_ASSETS", assets);
            }
            ControlPlane::Downloaded { mirror, cache } => {
                cmd.env_remove("RUDDER_ENVTEST_ASSETS")
                    .env("XDG_CACHE_HOME", cache)
                    .env("RUDDER_ENVTEST_INDEX_URL", mirror.index_url())
                    .env("RUDDER_ENVTEST_RELEASE_URL", mirror.release_url())
                    .env("RUDDER_ENVTEST_KWOK_URL", mirror.kwok_url());
            }
        }
        cmd
    };
    sh(with_env(project_cargo(&dir)).args(["xtask", "test"]))?;
    let output = with_env(project_cargo(&dir))
        .args(["xtask", "manifests", "--image", "example/ci-operator:ci"])
        .output()
        .map_err(|e| format!("cannot run the project's cargo xtask manifests: {e}"))?;
    let yaml = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        return Err(format!(
            "the project's cargo xtask manifests failed: {}",
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    for line in expected {
        if !yaml.contains(line) {
            return Err(format!("the project's manifests lack {line:?}:\n{yaml}"));
        }
    }
    println!(
        "new-operator: {} scaffolded (webhooks: {}, multi-cluster: {}), tested, {} manifest \
         documents rendered",
        dir.display(),
        options.webhook,
        options.multi_cluster,
        yaml.matches("---\n").count()
    );
    Ok(())
}

/// Removes a directory when dropped.
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// `cargo` run in the project at `dir`.
fn project_cargo(dir: &Path) -> Command {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(dir);
    cmd
}
