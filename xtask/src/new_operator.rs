//! `cargo xtask new-operator PATH`: a standalone Cargo workspace for an operator of one's
//! own, outside Rudder's: the operator crate (a CRD, a reconciler, a manager with probes,
//! metrics and leader election, the manifests it renders), its own xtask (`test`,
//! `manifests`, `run`), a README and a test against a real API server. It depends on this
//! checkout of Rudder by path.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::scaffold::Names;
use crate::util::{run as sh, workspace_root};

const WORKSPACE: &str = include_str!("../templates/operator/Cargo.toml.tmpl");
const CARGO_CONFIG: &str = include_str!("../templates/operator/cargo-config.toml.tmpl");
const GITIGNORE: &str = include_str!("../templates/operator/gitignore.tmpl");
const README: &str = include_str!("../templates/operator/README.md.tmpl");
const OPERATOR_CARGO: &str = include_str!("../templates/operator/operator-Cargo.toml.tmpl");
const LIB_RS: &str = include_str!("../templates/operator/lib.rs.tmpl");
const MAIN_RS: &str = include_str!("../templates/operator/main.rs.tmpl");
const TEST_RS: &str = include_str!("../templates/operator/test.rs.tmpl");
const XTASK_CARGO: &str = include_str!("../templates/operator/xtask-Cargo.toml.tmpl");
const XTASK_MAIN: &str = include_str!("../templates/operator/xtask-main.rs.tmpl");

/// The external dependencies the operator uses, with Rudder's own version requirements.
const DEPENDENCIES: &[&str] = &[
    "k8s-openapi",
    "kube",
    "schemars",
    "serde",
    "serde_json",
    "serde_yaml",
    "tokio",
    "tokio-util",
];

const HELP: &str = "\
cargo xtask new-operator PATH [--kind KIND] [--group GROUP]

Creates a Cargo workspace at PATH (which must not exist) for an operator of your own: the
crate operator/ (a custom resource KIND, default the last part of PATH in PascalCase, in
API group GROUP, default NAME.example.com; its reconciler; a manager with probes, metrics
and leader election; the manifests it renders), xtask/ (cargo xtask test | manifests |
run), a README and a test against a real API server. It depends on this Rudder checkout by
path, and starts from Rudder's Cargo.lock so it builds with the versions Rudder is tested
with.";

/// Entry point for `cargo xtask new-operator PATH [--kind KIND] [--group GROUP]`.
pub(crate) fn run(args: &[&str]) -> Result<(), String> {
    let (mut path, mut kind, mut group) = (None, None, None);
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match *arg {
            "--help" | "-h" => {
                println!("{HELP}");
                return Ok(());
            }
            "--kind" => kind = Some(*args.next().ok_or("--kind needs a value")?),
            "--group" => group = Some(*args.next().ok_or("--group needs a value")?),
            other if other.starts_with('-') => {
                return Err(format!("unknown flag {other:?}\n\n{HELP}"));
            }
            other if path.is_none() => path = Some(other),
            other => return Err(format!("unexpected argument {other:?}\n\n{HELP}")),
        }
    }
    let path = path.ok_or_else(|| format!("a path is needed\n\n{HELP}"))?;
    let dir = create(Path::new(path), kind, group)?;
    println!(
        "created {dir}\n\nnext, in {dir}:\n  \
         cargo xtask test                                   # the operator against a real API server\n  \
         cargo xtask manifests --image IMAGE | kubectl apply -f -   # deploy it",
        dir = dir.display()
    );
    Ok(())
}

/// Creates the project at `path` (which must not exist) and formats it; returns its
/// absolute directory.
pub(crate) fn create(
    path: &Path,
    kind: Option<&str>,
    group: Option<&str>,
) -> Result<PathBuf, String> {
    if path.exists() {
        return Err(format!("{} already exists", path.display()));
    }
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| format!("{} has no name to call the operator by", path.display()))?;
    let names = Names::new(name, kind, group)?;
    let root = workspace_root();
    let deps = dependency_lines(&root)?;
    let rudder = root.display().to_string();
    let files = [
        ("Cargo.toml", WORKSPACE),
        (".cargo/config.toml", CARGO_CONFIG),
        (".gitignore", GITIGNORE),
        ("README.md", README),
        ("operator/Cargo.toml", OPERATOR_CARGO),
        ("operator/src/lib.rs", LIB_RS),
        ("operator/src/main.rs", MAIN_RS),
        ("operator/tests/operator.rs", TEST_RS),
        ("xtask/Cargo.toml", XTASK_CARGO),
        ("xtask/src/main.rs", XTASK_MAIN),
    ];
    for (file, template) in files {
        let target = path.join(file);
        if let Some(parent) = target.parent() {
            fs::create_dir_all(parent)
                .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
        }
        let text = names
            .render(template)
            .replace("{{rudder}}", &rudder)
            .replace("{{deps}}", &deps);
        if let Some(at) = text.find("{{") {
            return Err(format!(
                "template left a placeholder in {}: {}",
                target.display(),
                &text[at..]
            ));
        }
        fs::write(&target, text).map_err(|e| format!("cannot write {}: {e}", target.display()))?;
    }
    // The versions Rudder is tested with: cargo keeps the locked versions of what the
    // project uses and drops the rest.
    fs::copy(root.join("Cargo.lock"), path.join("Cargo.lock"))
        .map_err(|e| format!("cannot copy Rudder's Cargo.lock: {e}"))?;
    let dir = fs::canonicalize(path).map_err(|e| format!("{}: {e}", path.display()))?;
    sh(project_cargo(&dir).args(["fmt", "--all"]))?;
    Ok(dir)
}

/// For CI: scaffolds a project into a temporary directory outside the workspace, runs its
/// own test command (`cargo xtask test`, against the control plane in `assets`) and renders
/// its manifests, then removes it. It builds into Rudder's target directory from Rudder's
/// Cargo.lock, so no crate version Rudder's build did not compile is compiled again.
pub(crate) fn ci_check(assets: &Path) -> Result<(), String> {
    let parent = std::env::temp_dir().join(format!("rudder-ci-{}", std::process::id()));
    let _ = fs::remove_dir_all(&parent);
    let guard = RemoveOnDrop(parent.clone());
    let dir = create(&parent.join("ci-operator"), None, None)?;
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| workspace_root().join("target"), PathBuf::from);
    let with_env = |mut cmd: Command| {
        cmd.env("CARGO_TARGET_DIR", &target)
            .env("RUDDER_ENVTEST_ASSETS", assets);
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
    for kind in [
        "kind: CustomResourceDefinition",
        "kind: ServiceAccount",
        "kind: ClusterRole",
        "kind: Deployment",
    ] {
        if !yaml.contains(kind) {
            return Err(format!("the project's manifests lack {kind}:\n{yaml}"));
        }
    }
    println!(
        "new-operator: {} scaffolded, tested, {} manifest documents rendered",
        dir.display(),
        yaml.matches("---\n").count()
    );
    drop(guard);
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
pub(crate) fn project_cargo(dir: &Path) -> Command {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(dir);
    cmd
}

/// Rudder's `[workspace.dependencies]` lines for [`DEPENDENCIES`], as they are.
fn dependency_lines(root: &Path) -> Result<String, String> {
    let manifest = fs::read_to_string(root.join("Cargo.toml"))
        .map_err(|e| format!("cannot read Rudder's Cargo.toml: {e}"))?;
    let mut lines = Vec::new();
    for dep in DEPENDENCIES {
        let line = manifest
            .lines()
            .find(|line| {
                line.split_once('=')
                    .is_some_and(|(key, _)| key.trim() == *dep)
            })
            .ok_or_else(|| format!("Rudder's Cargo.toml has no {dep} dependency"))?;
        lines.push(line.to_owned());
    }
    Ok(lines.join("\n"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn the_dependencies_come_from_rudders_workspace() {
        let lines = dependency_lines(&workspace_root()).unwrap();
        assert_eq!(lines.lines().count(), DEPENDENCIES.len());
        assert!(lines.lines().any(|l| l.starts_with("kube =")), "{lines}");
    }

    #[test]
    fn an_existing_path_is_refused_and_every_placeholder_filled() {
        let dir = std::env::temp_dir().join(format!("rudder-new-operator-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        assert!(create(&dir, None, None).unwrap_err().contains("exists"));
        let names = Names::new("my-op", None, None).unwrap();
        for template in [
            WORKSPACE,
            README,
            OPERATOR_CARGO,
            LIB_RS,
            MAIN_RS,
            TEST_RS,
            XTASK_MAIN,
        ] {
            let text = names
                .render(template)
                .replace("{{rudder}}", "/r")
                .replace("{{deps}}", "");
            assert!(!text.contains("{{"), "{text}");
        }
        fs::remove_dir_all(&dir).unwrap();
    }
}
