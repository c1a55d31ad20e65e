//! `cargo xtask new-controller NAME`: a new controller crate in `examples/NAME`, with a
//! custom resource, a reconciler, an operator binary and an envtest test, ready to build,
//! run and test; CI scaffolds one and runs its checks and test with the rest.

use std::fs;
use std::path::{Path, PathBuf};

use crate::util::{cargo, run as sh, workspace_root};

const CARGO_TOML: &str = include_str!("../templates/controller/Cargo.toml.tmpl");
const LIB_RS: &str = include_str!("../templates/controller/lib.rs.tmpl");
const MAIN_RS: &str = include_str!("../templates/controller/main.rs.tmpl");
const TEST_RS: &str = include_str!("../templates/controller/test.rs.tmpl");

/// The crate CI scaffolds, checks and tests, then removes.
pub(crate) const CI_CHECK: &str = "scaffold-check";
/// Marks a crate CI scaffolded, so a leftover from an interrupted run can be removed safely.
const CI_MARKER: &str = ".scaffolded-by-ci";

const HELP: &str = "\
cargo xtask new-controller NAME [--kind KIND] [--group GROUP]

Creates examples/NAME: a crate with a custom resource KIND (default: NAME in PascalCase) in
API group GROUP (default: NAME.example.com), a reconciler, an operator binary and a test
against a real API server. NAME: lowercase letters, digits and '-', starting with a letter.";

/// Kinds the generated code cannot use: names it defines or imports.
const TAKEN_KINDS: &[&str] = &[
    "Action",
    "Api",
    "Cache",
    "Context",
    "Controller",
    "CustomResource",
    "Deserialize",
    "Duration",
    "EnqueueObject",
    "EnqueueOwner",
    "Error",
    "Event",
    "EventType",
    "GenerationChanged",
    "JsonSchema",
    "Kind",
    "Manager",
    "Patch",
    "PatchParams",
    "Reconciler",
    "Request",
    "Serialize",
    "TerminalError",
    "Tools",
];

/// Package names the generated crate cannot take: the workspace's own and its dependencies'.
const TAKEN_CRATES: &[&str] = &[
    "rudder",
    "kube",
    "kube-runtime",
    "k8s-openapi",
    "schemars",
    "serde",
    "serde-json",
    "serde-yaml",
    "thiserror",
    "tokio",
    "tokio-util",
    "tracing",
    "xtask",
];

/// The names a scaffold is made of.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Names {
    /// The package: `cron-tab`.
    pub(crate) name: String,
    /// The crate as Rust names it: `cron_tab`.
    pub(crate) krate: String,
    /// The resource's kind: `CronTab`.
    pub(crate) kind: String,
    /// The API group: `cron-tab.example.com`.
    pub(crate) group: String,
}

impl Names {
    pub(crate) fn new(name: &str, kind: Option<&str>, group: Option<&str>) -> Result<Self, String> {
        let valid_name = name.len() <= 40
            && name.starts_with(|c: char| c.is_ascii_lowercase())
            && !name.ends_with('-')
            && !name.contains("--")
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        if !valid_name {
            return Err(format!(
                "bad name {name:?}: use lowercase letters, digits and single '-' (at most 40), starting with a letter"
            ));
        }
        let kind = match kind {
            Some(kind) => kind.to_owned(),
            None => name
                .split('-')
                .map(|part| {
                    let mut chars = part.chars();
                    chars.next().map_or_else(String::new, |first| {
                        first.to_ascii_uppercase().to_string() + chars.as_str()
                    })
                })
                .collect(),
        };
        let valid_kind = kind.starts_with(|c: char| c.is_ascii_uppercase())
            && kind.chars().all(|c| c.is_ascii_alphanumeric());
        if !valid_kind {
            return Err(format!(
                "bad kind {kind:?}: use letters and digits, starting with a capital"
            ));
        }
        if TAKEN_KINDS.contains(&kind.as_str()) {
            return Err(format!(
                "kind {kind:?} would clash with a name the generated code uses: pick another with --kind"
            ));
        }
        let taken = TAKEN_CRATES.contains(&name)
            || ["crates", "examples"]
                .iter()
                .any(|dir| workspace_root().join(dir).join(name).exists());
        if taken {
            return Err(format!(
                "name {name:?} is a crate the workspace already has or depends on: pick another"
            ));
        }
        let group = group.map_or_else(|| format!("{name}.example.com"), str::to_owned);
        let valid_group = group.contains('.')
            && group.split('.').all(|label| {
                !label.is_empty()
                    && !label.starts_with('-')
                    && !label.ends_with('-')
                    && label
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            });
        if !valid_group {
            return Err(format!(
                "bad group {group:?}: use a DNS name with a dot, such as example.com"
            ));
        }
        Ok(Self {
            name: name.to_owned(),
            krate: name.replace('-', "_"),
            kind,
            group,
        })
    }

    /// `template` with the names filled in.
    pub(crate) fn render(&self, template: &str) -> String {
        template
            .replace("{{name}}", &self.name)
            .replace("{{crate}}", &self.krate)
            .replace("{{Kind}}", &self.kind)
            .replace("{{group}}", &self.group)
    }
}

/// Writes the crate for `names` into `dir`, which must not exist.
fn write(dir: &Path, names: &Names) -> Result<(), String> {
    if dir.exists() {
        return Err(format!(
            "{} already exists: pick another name, or remove it",
            dir.display()
        ));
    }
    let files = [
        ("Cargo.toml".to_owned(), CARGO_TOML),
        ("src/lib.rs".to_owned(), LIB_RS),
        ("src/main.rs".to_owned(), MAIN_RS),
        (format!("tests/{}.rs", names.krate), TEST_RS),
    ];
    for (path, template) in files {
        let path = dir.join(path);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent)
                .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
        }
        let text = names.render(template);
        if let Some(at) = text.find("{{") {
            return Err(format!(
                "template left a placeholder in {}: {}",
                path.display(),
                &text[at..]
            ));
        }
        fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(())
}

/// Scaffolds `examples/<names.name>` and formats it; returns its directory.
fn scaffold(names: &Names) -> Result<PathBuf, String> {
    let dir = workspace_root().join("examples").join(&names.name);
    write(&dir, names)?;
    // The templates are close to rustfmt's style; names of other lengths shift lines.
    let formatted = sh(cargo().args(["fmt", "-p", &names.name]));
    if let Err(error) = formatted {
        let _ = fs::remove_dir_all(&dir);
        return Err(error);
    }
    Ok(dir)
}

/// Entry point for `cargo xtask new-controller NAME [--kind KIND] [--group GROUP]`.
pub(crate) fn run(args: &[&str]) -> Result<(), String> {
    let (mut name, mut kind, mut group) = (None, None, None);
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
            other if name.is_none() => name = Some(other),
            other => return Err(format!("unexpected argument {other:?}\n\n{HELP}")),
        }
    }
    let name = name.ok_or_else(|| format!("a name is needed\n\n{HELP}"))?;
    let names = Names::new(name, kind, group)?;
    let dir = scaffold(&names)?;
    println!(
        "created {dir}: the {kind} resource ({group}/v1) and its controller\n\n\
         next:\n  \
         cargo test -p {name}                 # against a real API server (run `cargo xtask envtest install` once)\n  \
         cargo run -p {name} -- --crd         # the CRD, for `kubectl apply -f -`\n  \
         cargo run -p {name}                  # the operator, on the cluster your kubeconfig names\n\n\
         Edit the spec and the reconcile in {dir}/src/lib.rs; docs/writing-an-operator.md walks through a whole operator.",
        dir = dir.display(),
        kind = names.kind,
        group = names.group,
    );
    Ok(())
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
    let names = Names::new(CI_CHECK, Some("ScaffoldCheck"), Some("scaffold.rudder.dev"))?;
    write(&dir, &names)?;
    fs::write(dir.join(CI_MARKER), "")
        .map_err(|e| format!("cannot mark {}: {e}", dir.display()))?;
    sh(cargo().args(["fmt", "-p", CI_CHECK]))?;
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn names_are_derived_and_checked() {
        let names = Names::new("cron-tab", None, None).unwrap();
        assert_eq!(
            names,
            Names {
                name: "cron-tab".into(),
                krate: "cron_tab".into(),
                kind: "CronTab".into(),
                group: "cron-tab.example.com".into(),
            }
        );
        let named = Names::new("db", Some("Database"), Some("data.acme.io")).unwrap();
        assert_eq!(
            (named.kind.as_str(), named.group.as_str()),
            ("Database", "data.acme.io")
        );
        for bad in ["", "Cron", "9lives", "a_b", "tab-", "a--b", &"x".repeat(41)] {
            assert!(Names::new(bad, None, None).is_err(), "{bad:?}");
        }
        assert!(Names::new("ok", Some("lower"), None).is_err());
        assert!(Names::new("ok", Some("Manager"), None).is_err());
        assert!(Names::new("manager", None, None).is_err(), "kind Manager");
        assert!(Names::new("tokio", None, None).is_err());
        assert!(
            Names::new("chaospod", None, None).is_err(),
            "an example already"
        );
        assert!(
            Names::new("rudder-cache", None, None).is_err(),
            "a crate already"
        );
        assert!(Names::new("ok", None, Some("nodot")).is_err());
        assert!(Names::new("ok", None, Some("Upper.io")).is_err());
    }

    #[test]
    fn every_placeholder_is_filled_and_an_existing_directory_is_refused() {
        let dir = std::env::temp_dir().join(format!("rudder-scaffold-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let names = Names::new("cron-tab", None, None).unwrap();
        write(&dir, &names).unwrap();
        let lib = fs::read_to_string(dir.join("src/lib.rs")).unwrap();
        assert!(lib.contains("kind = \"CronTab\""));
        assert!(lib.contains("group = \"cron-tab.example.com\""));
        assert!(
            fs::read_to_string(dir.join("tests/cron_tab.rs"))
                .unwrap()
                .contains("use cron_tab::")
        );
        assert!(write(&dir, &names).unwrap_err().contains("already exists"));
        fs::remove_dir_all(&dir).unwrap();
    }
}
