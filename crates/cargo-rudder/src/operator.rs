//! `cargo rudder new PATH`: a standalone Cargo workspace for an operator of one's own: the
//! operator crate (a CRD, a reconciler, a manager with probes, metrics and leader election,
//! the manifests it renders), its own xtask (`test`, `manifests`, `run`), a README and a
//! test against a real API server.

use std::fs;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::names::Names;
use crate::source::{DEPENDENCIES, RudderSource, absolute};
use crate::template::{GeneratedFile, cargo, output, sections, write_all};

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
const SAMPLE: &str = include_str!("../templates/operator/sample.yaml.tmpl");

/// What [`new_operator`] makes, beyond the project's name.
#[derive(Debug, Clone, Default)]
pub struct OperatorOptions {
    /// The custom resource's kind; by default the project's name in PascalCase.
    pub kind: Option<String>,
    /// The custom resource's API group; by default `NAME.example.com`.
    pub group: Option<String>,
    /// The custom resource's API version; by default `v1` (see [`Names::with_version`]).
    pub version: Option<String>,
    /// Also a defaulting and a validating webhook for the kind, with the certificates the
    /// operator makes itself when deployed, and a test of them called by the API server.
    pub webhook: bool,
    /// Run the controller over a fleet of member clusters instead of the operator's own
    /// cluster (`rudder::multicluster`): each member is a kubeconfig Secret in a namespace of
    /// the operator's (home) cluster, `--fleet-namespace` of the generated binary. Not with
    /// [`webhook`](Self::webhook).
    pub multi_cluster: bool,
    /// Where the project takes Rudder from.
    pub rudder: RudderSource,
}

/// Creates the operator project at `path` (which must not exist; its last part names the
/// operator) and formats it with `cargo fmt`; returns its absolute directory.
///
/// With a [`RudderSource::Path`] the project starts from that checkout's `Cargo.lock`, so
/// it builds with the versions Rudder is tested with. As [`operator_files`], options that do
/// not go together are refused before anything is written.
pub fn new_operator(path: &Path, options: &OperatorOptions) -> Result<PathBuf> {
    let path = absolute(path)?;
    if path.exists() {
        return Err(Error::Exists(path));
    }
    let name = path.file_name().and_then(|n| n.to_str()).ok_or_else(|| {
        Error::Invalid(format!(
            "{} has no name to call the operator by",
            path.display()
        ))
    })?;
    let mut names = Names::new(name, options.kind.as_deref(), options.group.as_deref())?;
    if let Some(version) = &options.version {
        names = names.with_version(version)?;
    }
    let options = OperatorOptions {
        rudder: options.rudder.resolved()?,
        ..options.clone()
    };
    let files = operator_files(&names, &options)?;
    write_all(&path, &files)?;
    if let Some(lock) = options.rudder.lockfile() {
        // Cargo keeps the locked versions of what the project uses and drops the rest.
        fs::copy(&lock, path.join("Cargo.lock")).map_err(|e| Error::io("copy", &lock, e))?;
    }
    // Not `--all`: that would format the path dependencies too, a Rudder checkout among them.
    output(cargo(&path).arg("fmt"))?;
    Ok(path)
}

/// The files of the operator project for `names`, unformatted, without writing anything.
/// [`OperatorOptions::webhook`] with [`OperatorOptions::multi_cluster`] is refused
/// ([`Error::Invalid`]).
///
/// ```
/// use cargo_rudder::{Names, OperatorOptions, operator_files};
///
/// let names = Names::new("widget-operator", Some("Widget"), None)?;
/// let files = operator_files(&names, &OperatorOptions::default())?;
/// let workspace = files.iter().find(|f| f.path.ends_with("Cargo.toml")).unwrap();
/// assert!(workspace.text.contains("rudder-runtime = \"0.1\""));
/// # Ok::<(), cargo_rudder::Error>(())
/// ```
pub fn operator_files(names: &Names, options: &OperatorOptions) -> Result<Vec<GeneratedFile>> {
    if options.webhook && options.multi_cluster {
        // The webhooks would be served to the home cluster's API server only, while the
        // objects live in the member clusters.
        return Err(Error::Invalid(
            "--webhook and --multi-cluster do not go together yet: a member cluster's API \
             server would not call the operator's webhooks"
                .to_owned(),
        ));
    }
    let mut templates = vec![
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
        ("config/samples/{{kind}}.yaml", SAMPLE),
    ];
    if options.webhook {
        templates.push(("operator/src/webhook.rs", WEBHOOK_RS));
        templates.push(("operator/tests/webhook.rs", WEBHOOK_TEST_RS));
    }
    let deps: Vec<String> = DEPENDENCIES.iter().map(|dep| dep.line(&[])).collect();
    let published = options.rudder.published();
    let rudder = format!(
        "{}\n{}",
        published.dependency(&[]),
        published.setup_dependency()
    );
    let patch = options
        .rudder
        .patch()
        .map(|patch| format!("\n{patch}"))
        .unwrap_or_default();
    let switches = [
        ("webhook", options.webhook),
        ("multi_cluster", options.multi_cluster),
    ];
    templates
        .into_iter()
        .map(|(file, template)| {
            let text = names
                .render(&sections(template, &switches))
                .replace("{{rudder}}", &rudder)
                .replace("{{patch}}", &patch)
                .replace("{{deps}}", &deps.join("\n"));
            GeneratedFile::new(names.render(file), text)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn every_placeholder_is_filled_with_and_without_webhooks() {
        let names = Names::new("my-op", None, None).unwrap();
        for webhook in [false, true] {
            let options = OperatorOptions {
                webhook,
                ..OperatorOptions::default()
            };
            let files = operator_files(&names, &options).unwrap();
            assert_eq!(
                files.iter().any(|f| f.path.ends_with("webhook.rs")),
                webhook
            );
        }
    }

    #[test]
    fn every_placeholder_is_filled_for_a_fleet_and_webhooks_are_refused_with_it() {
        let names = Names::new("my-op", None, None).unwrap();
        let options = OperatorOptions {
            multi_cluster: true,
            ..OperatorOptions::default()
        };
        let files = operator_files(&names, &options).unwrap();
        assert!(!files.iter().any(|f| f.path.ends_with("webhook.rs")));
        let both = OperatorOptions {
            webhook: true,
            ..options
        };
        assert!(matches!(
            operator_files(&names, &both),
            Err(Error::Invalid(_))
        ));
    }

    #[test]
    fn an_existing_path_is_refused() {
        let dir = std::env::temp_dir().join(format!("cargo-rudder-exists-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let refused = new_operator(&dir, &OperatorOptions::default());
        assert!(matches!(refused, Err(Error::Exists(_))), "{refused:?}");
        fs::remove_dir_all(&dir).unwrap();
    }
}
