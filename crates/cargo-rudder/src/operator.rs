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
const WEBHOOK_RS: &str = include_str!("../templates/operator/webhook.rs.tmpl");
const WEBHOOK_TEST_RS: &str = include_str!("../templates/operator/webhook-test.rs.tmpl");

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
cargo xtask new-operator PATH [--kind KIND] [--group GROUP] [--webhook]

Creates a Cargo workspace at PATH (which must not exist) for an operator of your own: the
crate operator/ (a custom resource KIND, default the last part of PATH in PascalCase, in
API group GROUP, default NAME.example.com; its reconciler; a manager with probes, metrics
and leader election; the manifests it renders), xtask/ (cargo xtask test | manifests |
run), a README and a test against a real API server. It depends on this Rudder checkout by
path, and starts from Rudder's Cargo.lock so it builds with the versions Rudder is tested
with.

With --webhook, the operator also has a defaulting and a validating webhook for KIND
(operator/src/webhook.rs), served with certificates it makes itself when deployed (a Secret
in its namespace, the CA injected into the webhook configurations its manifests render),
and a test of them called by the real API server.";

/// Entry point for `cargo xtask new-operator PATH [--kind KIND] [--group GROUP]`.
pub(crate) fn run(args: &[&str]) -> Result<(), String> {
    let (mut path, mut kind, mut group, mut webhook) = (None, None, None, false);
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match *arg {
            "--help" | "-h" => {
                println!("{HELP}");
                return Ok(());
            }
            "--kind" => kind = Some(*args.next().ok_or("--kind needs a value")?),
            "--group" => group = Some(*args.next().ok_or("--group needs a value")?),
            "--webhook" => webhook = true,
            other if other.starts_with('-') => {
                return Err(format!("unknown flag {other:?}\n\n{HELP}"));
            }
            other if path.is_none() => path = Some(other),
            other => return Err(format!("unexpected argument {other:?}\n\n{HELP}")),
        }
    }
    let path = path.ok_or_else(|| format!("a path is needed\n\n{HELP}"))?;
    let dir = create(Path::new(path), kind, group, webhook)?;
    println!(
        "created {dir}\n\nnext, in {dir}:\n  \
         cargo xtask test                                   # the operator against a real API server\n  \
         cargo xtask manifests --image IMAGE | kubectl apply -f -   # deploy it",
        dir = dir.display()
    );
    Ok(())
}

/// Keeps what `{{#webhook}}` ... `{{/webhook}}` (each on a line of its own) enclose when
/// `webhook`, drops it otherwise; the marker lines go either way.
fn sections(template: &str, webhook: bool) -> String {
    let mut out = String::with_capacity(template.len());
    let mut inside = false;
    for line in template.split_inclusive('\n') {
        match line.trim() {
            "{{#webhook}}" => inside = true,
            "{{/webhook}}" => inside = false,
            _ if inside && !webhook => {}
            _ => out.push_str(line),
        }
    }
    out
}

/// Creates the project at `path` (which must not exist), with the webhooks if `webhook`,
/// and formats it; returns its absolute directory.
pub(crate) fn create(
    path: &Path,
    kind: Option<&str>,
    group: Option<&str>,
    webhook: bool,
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
    let mut files = vec![
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
    if webhook {
        files.push(("operator/src/webhook.rs", WEBHOOK_RS));
        files.push(("operator/tests/webhook.rs", WEBHOOK_TEST_RS));
    }
    for (file, template) in files {
        let target = path.join(file);
        if let Some(parent) = target.parent() {
            fs::create_dir_all(parent)
                .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
        }
        let text = names
            .render(&sections(template, webhook))
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

/// For CI: scaffolds two projects (without and with webhooks) into a temporary directory
/// outside the workspace, runs each one's own test command (`cargo xtask test`, against the
/// control plane in `assets`) and renders its manifests, then removes them. They build into
/// Rudder's target directory from Rudder's Cargo.lock, so no crate version Rudder's build
/// did not compile is compiled again.
pub(crate) fn ci_check(assets: &Path) -> Result<(), String> {
    let parent = std::env::temp_dir().join(format!("rudder-ci-{}", std::process::id()));
    let _ = fs::remove_dir_all(&parent);
    let guard = RemoveOnDrop(parent.clone());
    let plain = [
        "kind: CustomResourceDefinition",
        "kind: ServiceAccount",
        "kind: ClusterRole",
        "kind: Deployment",
    ];
    check_project(&parent.join("ci-operator"), false, assets, &plain)?;
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
    check_project(&parent.join("ci-webhook-operator"), true, assets, &webhooks)?;
    drop(guard);
    Ok(())
}

/// Scaffolds one project at `path`, runs its tests and checks its manifests hold `expected`.
fn check_project(
    path: &Path,
    webhook: bool,
    assets: &Path,
    expected: &[&str],
) -> Result<(), String> {
    let dir = create(path, None, None, webhook)?;
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
    for line in expected {
        if !yaml.contains(line) {
            return Err(format!("the project's manifests lack {line:?}:\n{yaml}"));
        }
    }
    println!(
        "new-operator: {} scaffolded (webhooks: {webhook}), tested, {} manifest documents rendered",
        dir.display(),
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
    fn sections_are_kept_or_dropped_with_their_markers() {
        let template = "a\n{{#webhook}}\nb\n  {{/webhook}}\nc\n";
        assert_eq!(sections(template, true), "a\nb\nc\n");
        assert_eq!(sections(template, false), "a\nc\n");
    }

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
        assert!(
            create(&dir, None, None, false)
                .unwrap_err()
                .contains("exists")
        );
        let names = Names::new("my-op", None, None).unwrap();
        for template in [
            WORKSPACE,
            README,
            OPERATOR_CARGO,
            LIB_RS,
            MAIN_RS,
            TEST_RS,
            XTASK_MAIN,
            WEBHOOK_RS,
            WEBHOOK_TEST_RS,
        ] {
            for webhook in [false, true] {
                let text = names
                    .render(&sections(template, webhook))
                    .replace("{{rudder}}", "/r")
                    .replace("{{deps}}", "");
                assert!(!text.contains("{{"), "{text}");
            }
        }
        fs::remove_dir_all(&dir).unwrap();
    }
}
