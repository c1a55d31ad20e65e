//! `cargo rudder new-controller NAME`: a controller crate in an existing workspace, with a
//! custom resource, a reconciler, an operator binary and a test against a real API server,
//! ready to build, run and test.
//!
//! The crate inherits from the workspace what the workspace declares (package fields,
//! dependencies, lints) and states the rest itself, so one template serves Rudder's own
//! workspace, a project made by `cargo rudder new`, and any other.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::names::Names;
use crate::source::{Dependency, RudderSource, absolute, inherited};
use crate::template::{GeneratedFile, cargo, output, sections, write_all};

const CARGO_TOML: &str = include_str!("../templates/controller/Cargo.toml.tmpl");
const LIB_RS: &str = include_str!("../templates/controller/lib.rs.tmpl");
const MAIN_RS: &str = include_str!("../templates/controller/main.rs.tmpl");
const TEST_RS: &str = include_str!("../templates/controller/test.rs.tmpl");

/// What [`new_controller`] makes, beyond the crate's name.
#[derive(Debug, Clone, Default)]
pub struct ControllerOptions {
    /// The custom resource's kind; by default the crate's name in PascalCase.
    pub kind: Option<String>,
    /// The custom resource's API group; by default `NAME.example.com`.
    pub group: Option<String>,
    /// The custom resource's API version; by default `v1` (see [`Names::with_version`]).
    pub version: Option<String>,
    /// Where the crate takes Rudder from when the workspace declares no `rudder` in its
    /// `[workspace.dependencies]` (when it does, the crate inherits that).
    pub rudder: RudderSource,
}

/// Creates the controller crate at `dir` (which must not exist; its last part names the
/// crate) in the workspace enclosing `dir`'s parent, as cargo finds it, and formats it.
///
/// The crate is made with `cargo new` first, so cargo adds it to the workspace's `members`
/// when no glob there covers it yet. Fails when there is no workspace, or when the name is
/// a package the workspace already has or depends on (its `Cargo.lock` lists it). Returns
/// the crate's absolute directory.
pub fn new_controller(dir: &Path, options: &ControllerOptions) -> Result<PathBuf> {
    let dir = absolute(dir)?;
    if dir.exists() {
        return Err(Error::Exists(dir));
    }
    let (Some(parent), Some(name)) = (dir.parent(), dir.file_name().and_then(|n| n.to_str()))
    else {
        return Err(Error::Invalid(format!(
            "{} has no name to call the crate by",
            dir.display()
        )));
    };
    let mut names = Names::new(name, options.kind.as_deref(), options.group.as_deref())?;
    if let Some(version) = &options.version {
        names = names.with_version(version)?;
    }
    let options = &ControllerOptions {
        rudder: options.rudder.resolved()?,
        ..options.clone()
    };
    let root = workspace_root(parent)?;
    let manifest_path = root.join("Cargo.toml");
    let manifest =
        fs::read_to_string(&manifest_path).map_err(|e| Error::io("read", &manifest_path, e))?;
    if let Ok(lock) = fs::read_to_string(root.join("Cargo.lock")) {
        let entry = format!("name = \"{name}\"");
        if lock.lines().any(|line| line.trim() == entry) {
            return Err(Error::Invalid(format!(
                "name {name:?} is a package the workspace at {} already has or depends on: pick another",
                root.display()
            )));
        }
    }
    let files = controller_files(&names, &manifest, options)?;
    output(
        cargo(parent)
            .args(["new", "--quiet", "--vcs", "none", "--lib", "--name", name])
            .arg(&dir),
    )?;
    let written = write_all(&dir, &files)
        .and_then(|()| output(cargo(&root).args(["fmt", "-p", name])).map(drop));
    if let Err(error) = written {
        let _ = fs::remove_dir_all(&dir);
        return Err(error);
    }
    Ok(dir)
}

/// The files of the controller crate for `names`, unformatted, for a workspace whose root
/// `Cargo.toml` holds `workspace_manifest`; nothing is written.
///
/// ```
/// use cargo_rudder::{ControllerOptions, Names, controller_files};
///
/// let names = Names::new("cron-tab", None, None)?;
/// let workspace = "[workspace]\nmembers = [\"cron-tab\"]\n";
/// let files = controller_files(&names, workspace, &ControllerOptions::default())?;
/// let manifest = files.iter().find(|f| f.path.ends_with("Cargo.toml")).unwrap();
/// assert!(manifest.text.contains("rudder-runtime = \"0.1\""));
/// # Ok::<(), cargo_rudder::Error>(())
/// ```
pub fn controller_files(
    names: &Names,
    workspace_manifest: &str,
    options: &ControllerOptions,
) -> Result<Vec<GeneratedFile>> {
    let inherits = Inherits::scan(workspace_manifest);
    let templates = [
        ("Cargo.toml".to_owned(), CARGO_TOML),
        ("src/lib.rs".to_owned(), LIB_RS),
        ("src/main.rs".to_owned(), MAIN_RS),
        (format!("tests/{}.rs", names.krate()), TEST_RS),
    ];
    templates
        .into_iter()
        .map(|(path, template)| {
            let text = sections(template, &[("lints", inherits.lints)]);
            let text = inherits.resolve(&names.render(&text), &options.rudder);
            GeneratedFile::new(path, text)
        })
        .collect()
}

/// The root of the workspace enclosing `dir`, as cargo finds it.
pub(crate) fn workspace_root(dir: &Path) -> Result<PathBuf> {
    let found = output(cargo(dir).args([
        "locate-project",
        "--workspace",
        "--message-format",
        "plain",
    ]))
    .map_err(|e| {
        Error::Invalid(format!(
            "{} is not inside a Cargo workspace ({e}): make one with `cargo rudder new`, or name one with --workspace",
            dir.display()
        ))
    })?;
    let manifest = PathBuf::from(String::from_utf8_lossy(&found.stdout).trim());
    let is_workspace = fs::read_to_string(&manifest)
        .is_ok_and(|text| text.lines().any(|line| line.trim() == "[workspace]"));
    match manifest.parent() {
        Some(root) if is_workspace => Ok(root.to_owned()),
        _ => Err(Error::Invalid(format!(
            "{} is a package, not a workspace: a controller crate goes into a workspace's directory",
            manifest.display()
        ))),
    }
}

/// What a workspace's root manifest lets its members inherit.
#[derive(Debug, Default)]
struct Inherits {
    /// The keys of `[workspace.package]`.
    package: BTreeSet<String>,
    /// The names in `[workspace.dependencies]`.
    dependencies: BTreeSet<String>,
    /// Whether it has `[workspace.lints]`.
    lints: bool,
}

impl Inherits {
    /// Reads the tables a member can inherit from, line by line: each key is on a line of
    /// its own (`name = ...`, `name.workspace = ...`) or is a table of its own
    /// (`[workspace.dependencies.name]`).
    fn scan(manifest: &str) -> Self {
        let mut inherits = Self::default();
        let mut table = String::new();
        for line in manifest.lines().map(str::trim) {
            if let Some(header) = line.strip_prefix('[').and_then(|l| l.split(']').next()) {
                table = header.trim().to_owned();
                if table == "workspace.lints" || table.starts_with("workspace.lints.") {
                    inherits.lints = true;
                }
                if let Some(dep) = table.strip_prefix("workspace.dependencies.") {
                    inherits.dependencies.insert(unquote(dep));
                }
                continue;
            }
            let Some((key, _)) = line.split_once('=') else {
                continue;
            };
            let key = unquote(key.split('.').next().unwrap_or(key));
            match table.as_str() {
                "workspace.package" => inherits.package.insert(key),
                "workspace.dependencies" => inherits.dependencies.insert(key),
                _ => false,
            };
        }
        inherits
    }

    /// Replaces each `{{field KEY ["DEFAULT"]}}` and `{{dep NAME [FEATURE,...]}}` line of
    /// `text`: inherited when the workspace declares it, else stated (a field without a
    /// default is then left out).
    fn resolve(&self, text: &str, rudder: &RudderSource) -> String {
        let mut out = String::with_capacity(text.len());
        for line in text.split_inclusive('\n') {
            let directive = line
                .trim()
                .strip_prefix("{{")
                .and_then(|l| l.strip_suffix("}}"));
            let mut words = directive.map(str::split_whitespace).into_iter().flatten();
            let resolved = match (words.next(), words.next(), words.next()) {
                (Some("field"), Some(key), default) if directive.is_some() => {
                    Some(if self.package.contains(key) {
                        format!("{key}.workspace = true")
                    } else if let Some(default) = default {
                        format!("{key} = {default}")
                    } else {
                        String::new()
                    })
                }
                (Some("dep"), Some(name), features) => {
                    let features: Vec<&str> =
                        features.map(|f| f.split(',').collect()).unwrap_or_default();
                    if self.dependencies.contains(name) {
                        Some(inherited(name, &features))
                    } else if name == crate::source::PACKAGE {
                        Some(rudder.dependency(&features))
                    } else {
                        // A name the table lacks stays a placeholder, which fails the render.
                        Dependency::named(name).map(|dep| dep.line(&features))
                    }
                }
                _ => None,
            };
            match resolved {
                Some(resolved) if resolved.is_empty() => {}
                Some(resolved) => {
                    out.push_str(&resolved);
                    out.push('\n');
                }
                None => out.push_str(line),
            }
        }
        out
    }
}

fn unquote(key: &str) -> String {
    key.trim().trim_matches('"').to_owned()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    const RUDDER_LIKE: &str = "\
[workspace]
members = [\"crates/*\"]

[workspace.package]
version = \"0.1.0\"
edition = \"2024\"

[workspace.dependencies]
rudder-runtime = { path = \"crates/rudder\" }
kube = { version = \"5\", default-features = false }
\"tokio\".workspace = true

[workspace.dependencies.serde]
version = \"1\"

[workspace.lints.rust]
unsafe_code = \"forbid\"
";

    #[test]
    fn a_workspace_is_read_for_what_it_offers() {
        let inherits = Inherits::scan(RUDDER_LIKE);
        assert_eq!(
            inherits.package.iter().collect::<Vec<_>>(),
            ["edition", "version"]
        );
        assert_eq!(
            inherits.dependencies.iter().collect::<Vec<_>>(),
            ["kube", "rudder-runtime", "serde", "tokio"]
        );
        assert!(inherits.lints);
        assert!(!Inherits::scan("[workspace]\n").lints);
    }

    #[test]
    fn what_the_workspace_declares_is_inherited_and_the_rest_stated() {
        let names = Names::new("cron-tab", None, None).unwrap();
        let files = controller_files(&names, RUDDER_LIKE, &ControllerOptions::default()).unwrap();
        let manifest = &files[0].text;
        for line in [
            "version.workspace = true",
            "edition.workspace = true",
            "rudder-runtime.workspace = true",
            "rudder-runtime = { workspace = true, features = [\"envtest\"] }",
            "kube = { workspace = true, features = [\"client\", \"derive\"] }",
            "k8s-openapi = { version = \"0.29\", default-features = false, features = [\"latest\"] }",
            "[lints]",
        ] {
            assert!(
                manifest.lines().any(|l| l == line),
                "{line:?} in\n{manifest}"
            );
        }
        assert!(!manifest.contains("rust-version"), "{manifest}");
        let lib = &files[1].text;
        assert!(lib.contains("kind = \"CronTab\""));
        assert!(lib.contains("group = \"cron-tab.example.com\""));
        assert_eq!(files[3].path, Path::new("tests/cron_tab.rs"));
        assert!(files[3].text.contains("use cron_tab::"));
    }
}
