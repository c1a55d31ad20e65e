//! Where a generated project takes Rudder from, and the versions of what else it uses.

use std::path::{Path, PathBuf};

/// Where the generated project's Rudder dependency comes from.
///
/// Rudder's facade is published as the package `rudder-runtime` (the name
/// `rudder` on crates.io belongs to an unrelated crate); its library is named `rudder`, so
/// code writes `use rudder::prelude::*` whatever the source.
///
/// The default is crates.io at this scaffold's own version (`rudder-runtime = "0.1"`). To
/// work on Rudder itself, point the project at a checkout ([`RudderSource::Path`]: the
/// dependency stays written as published and a `[patch.crates-io]` section resolves it to the
/// checkout, so removing that section is all it takes to move to the release) or a git
/// repository ([`RudderSource::Git`]).
///
/// ```
/// use cargo_rudder::RudderSource;
///
/// assert_eq!(RudderSource::default().dependency(&[]), r#"rudder-runtime = "0.1""#);
/// let git = RudderSource::Git {
///     url: "https://github.com/rudder-rs/rudder".into(),
///     rev: Some("main".into()),
/// };
/// assert_eq!(
///     git.dependency(&["envtest"]),
///     r#"rudder-runtime = { git = "https://github.com/rudder-rs/rudder", rev = "main", features = ["envtest"] }"#
/// );
/// let path = RudderSource::Path("/src/rudder".into());
/// assert_eq!(path.published().dependency(&[]), r#"rudder-runtime = "0.1""#);
/// assert_eq!(
///     path.patch().as_deref(),
///     Some(
///         "[patch.crates-io]\n\
///          rudder-runtime = { path = \"/src/rudder/crates/rudder\" }\n\
///          rudder-envtest-setup = { path = \"/src/rudder/crates/rudder-envtest-setup\" }\n"
///     )
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RudderSource {
    /// A version requirement on crates.io, such as `0.1`.
    Version(String),
    /// The root of a checkout of Rudder's repository (a relative path is taken from the
    /// current directory): the project depends on its
    /// `crates/rudder` by path and starts from its `Cargo.lock`, so it builds with the
    /// versions Rudder is tested with.
    Path(PathBuf),
    /// A git repository holding Rudder's workspace, at a revision (a branch, tag or commit)
    /// if given, else its default branch.
    Git {
        /// The repository's URL.
        url: String,
        /// The revision, if any.
        rev: Option<String>,
    },
}

/// The package name of Rudder's facade on crates.io; its library (what code imports) is
/// `rudder`.
pub(crate) const PACKAGE: &str = "rudder-runtime";

/// The package that downloads the test control plane.
const SETUP_PACKAGE: &str = "rudder-envtest-setup";

/// The directory of `package` in a checkout of Rudder at `root` (the facade's directory is
/// `crates/rudder`, the others' their package name).
fn crate_dir(root: &Path, package: &str) -> PathBuf {
    let dir = if package == PACKAGE {
        "rudder"
    } else {
        package
    };
    root.join("crates").join(dir)
}

impl Default for RudderSource {
    /// crates.io, at the `MAJOR.MINOR` of this scaffold's version (the two are released
    /// together).
    fn default() -> Self {
        let version = env!("CARGO_PKG_VERSION");
        let minor = version.splitn(3, '.').take(2).collect::<Vec<_>>().join(".");
        Self::Version(minor)
    }
}

impl RudderSource {
    /// The `rudder-runtime = ...` line of a `Cargo.toml` for this source, with `features`.
    pub fn dependency(&self, features: &[&str]) -> String {
        self.line(PACKAGE, features)
    }

    /// The `rudder-envtest-setup = ...` line: the crate a generated xtask downloads the test
    /// control plane with.
    pub(crate) fn setup_dependency(&self) -> String {
        self.line(SETUP_PACKAGE, &[])
    }

    /// The line of `package`, one of Rudder's crates, for this source.
    fn line(&self, package: &str, features: &[&str]) -> String {
        let mut fields = match self {
            Self::Version(version) if features.is_empty() => {
                return format!("{package} = {}", toml_string(version));
            }
            Self::Version(version) => vec![format!("version = {}", toml_string(version))],
            Self::Path(root) => vec![format!(
                "path = {}",
                toml_string(&crate_dir(root, package).display().to_string())
            )],
            Self::Git { url, rev } => {
                let mut fields = vec![format!("git = {}", toml_string(url))];
                if let Some(rev) = rev {
                    fields.push(format!("rev = {}", toml_string(rev)));
                }
                fields
            }
        };
        if !features.is_empty() {
            fields.push(format!("features = {}", toml_list(features)));
        }
        format!("{package} = {{ {} }}", fields.join(", "))
    }

    /// The source the dependency line names as it will be once published: a checkout is
    /// written as the release it is (this scaffold's `MAJOR.MINOR`) and resolved to the
    /// checkout by [`patch`](Self::patch); the other sources are themselves.
    pub fn published(&self) -> Self {
        match self {
            Self::Path(_) => Self::default(),
            other => other.clone(),
        }
    }

    /// The `[patch.crates-io]` section that resolves the published name to a checkout, for
    /// [`RudderSource::Path`]; `None` for the other sources.
    pub fn patch(&self) -> Option<String> {
        let Self::Path(root) = self else {
            return None;
        };
        let mut section = "[patch.crates-io]\n".to_owned();
        for package in [PACKAGE, SETUP_PACKAGE] {
            let path = crate_dir(root, package).display().to_string();
            section.push_str(&format!(
                "{package} = {{ path = {} }}\n",
                toml_string(&path)
            ));
        }
        Some(section)
    }

    /// The `Cargo.lock` a new project starts from: a checkout's own.
    pub(crate) fn lockfile(&self) -> Option<PathBuf> {
        match self {
            Self::Path(root) => Some(root.join("Cargo.lock")),
            Self::Version(_) | Self::Git { .. } => None,
        }
    }

    /// This source with a path made absolute (a relative one is taken from the current
    /// directory, as a command line names it); fails unless a path source is a checkout of
    /// Rudder (it has `crates/rudder`).
    pub(crate) fn resolved(&self) -> crate::Result<Self> {
        let Self::Path(root) = self else {
            return Ok(self.clone());
        };
        let root = absolute(root)?;
        let manifest = root.join("crates").join("rudder").join("Cargo.toml");
        if !manifest.is_file() {
            return Err(crate::Error::Invalid(format!(
                "{} is not a checkout of Rudder: it has no crates/rudder/Cargo.toml",
                root.display()
            )));
        }
        Ok(Self::Path(root))
    }
}

/// One external dependency of the generated code, as Rudder's own workspace declares it.
#[derive(Debug)]
pub(crate) struct Dependency {
    pub(crate) name: &'static str,
    version: &'static str,
    default_features: bool,
    features: &'static [&'static str],
}

/// The external dependencies the generated code uses, with the requirements Rudder is built
/// and tested with (a test keeps them equal to Rudder's `[workspace.dependencies]`).
pub(crate) const DEPENDENCIES: &[Dependency] = &[
    Dependency {
        name: "k8s-openapi",
        version: "0.29",
        default_features: false,
        features: &[],
    },
    Dependency {
        name: "kube",
        version: "5",
        default_features: false,
        features: &[],
    },
    Dependency {
        name: "schemars",
        version: "1",
        default_features: true,
        features: &[],
    },
    Dependency {
        name: "serde",
        version: "1",
        default_features: true,
        features: &["derive"],
    },
    Dependency {
        name: "serde_json",
        version: "1",
        default_features: true,
        // Floats read correctly rounded, as Rudder's own crates read them.
        features: &["float_roundtrip"],
    },
    Dependency {
        name: "serde_yaml",
        version: "0.9",
        default_features: true,
        features: &[],
    },
    Dependency {
        name: "tokio",
        version: "1.54",
        default_features: false,
        features: &[],
    },
    Dependency {
        name: "tokio-util",
        version: "0.7",
        default_features: false,
        features: &[],
    },
    Dependency {
        name: "tracing",
        version: "0.1",
        default_features: false,
        features: &["std"],
    },
    Dependency {
        name: "tracing-subscriber",
        version: "0.3",
        default_features: false,
        features: &["registry", "std"],
    },
];

impl Dependency {
    /// The dependency named `name`, if the generated code uses it.
    pub(crate) fn named(name: &str) -> Option<&'static Self> {
        DEPENDENCIES.iter().find(|dep| dep.name == name)
    }

    /// Its line in a `Cargo.toml`, with `extra` features beside its own.
    pub(crate) fn line(&self, extra: &[&str]) -> String {
        let features: Vec<&str> = self.features.iter().chain(extra).copied().collect();
        if self.default_features && features.is_empty() {
            return format!("{} = {}", self.name, toml_string(self.version));
        }
        let mut fields = vec![format!("version = {}", toml_string(self.version))];
        if !self.default_features {
            fields.push("default-features = false".to_owned());
        }
        if !features.is_empty() {
            fields.push(format!("features = {}", toml_list(&features)));
        }
        format!("{} = {{ {} }}", self.name, fields.join(", "))
    }
}

/// The line inheriting `name` from the workspace, with `features`.
pub(crate) fn inherited(name: &str, features: &[&str]) -> String {
    if features.is_empty() {
        format!("{name}.workspace = true")
    } else {
        format!(
            "{name} = {{ workspace = true, features = {} }}",
            toml_list(features)
        )
    }
}

/// `s` as a TOML basic string.
pub(crate) fn toml_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn toml_list(items: &[&str]) -> String {
    let items: Vec<String> = items.iter().map(|item| toml_string(item)).collect();
    format!("[{}]", items.join(", "))
}

/// The absolute form of `path`, resolved against the current directory if relative (the
/// path need not exist).
pub(crate) fn absolute(path: &Path) -> crate::Result<PathBuf> {
    std::path::absolute(path).map_err(|e| crate::Error::io("resolve", path, e))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// The table above against Rudder's own `[workspace.dependencies]`, when this crate is
    /// built inside Rudder's workspace (a packaged copy has no workspace to compare with).
    #[test]
    fn the_dependencies_are_rudders_workspace_dependencies() {
        let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../Cargo.toml");
        let Ok(manifest) = std::fs::read_to_string(manifest) else {
            return;
        };
        for dep in DEPENDENCIES {
            let line = dep.line(&[]);
            assert!(
                manifest.lines().any(|l| l.trim() == line),
                "Rudder's Cargo.toml has no line {line:?}"
            );
        }
    }

    #[test]
    fn sources_render_as_cargo_reads_them() {
        assert_eq!(
            RudderSource::Version("0.1".into()).dependency(&["envtest"]),
            r#"rudder-runtime = { version = "0.1", features = ["envtest"] }"#
        );
        assert_eq!(
            RudderSource::Path("/src/rud\"der".into()).dependency(&[]),
            r#"rudder-runtime = { path = "/src/rud\"der/crates/rudder" }"#
        );
        assert_eq!(
            RudderSource::Git {
                url: "https://example.com/r.git".into(),
                rev: None
            }
            .dependency(&[]),
            r#"rudder-runtime = { git = "https://example.com/r.git" }"#
        );
        assert_eq!(
            Dependency::named("kube").unwrap().line(&["client"]),
            r#"kube = { version = "5", default-features = false, features = ["client"] }"#
        );
        assert_eq!(inherited("tokio-util", &[]), "tokio-util.workspace = true");
    }
}
