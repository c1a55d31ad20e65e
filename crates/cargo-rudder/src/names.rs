//! The names a scaffold is made of, derived from one name and checked once.

use crate::error::{Error, Result};

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

/// The custom resource's API version unless one is chosen.
const DEFAULT_VERSION: &str = "v1";

/// Package names a generated crate cannot take: Rudder's and the dependencies' it uses.
const TAKEN_CRATES: &[&str] = &[
    "rudder",
    "rudder-runtime",
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

/// The names of one scaffold: its package, the crate as Rust names it, the custom
/// resource's kind, its API group and its API version.
///
/// ```
/// let names = cargo_rudder::Names::new("cron-tab", None, None)?;
/// assert_eq!(names.krate(), "cron_tab");
/// assert_eq!(names.kind(), "CronTab");
/// assert_eq!(names.group(), "cron-tab.example.com");
/// assert_eq!(names.version(), "v1");
/// assert_eq!(names.with_version("v1alpha1")?.version(), "v1alpha1");
/// # Ok::<(), cargo_rudder::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Names {
    name: String,
    krate: String,
    kind: String,
    group: String,
    version: String,
}

impl Names {
    /// Checks `name` (lowercase letters, digits and single `-`, at most 40, starting with a
    /// letter) and derives the rest: the kind defaults to `name` in PascalCase, the group to
    /// `NAME.example.com`. Fails with [`Error::Invalid`] on a name, kind or group the
    /// generated code or Kubernetes would refuse.
    pub fn new(name: &str, kind: Option<&str>, group: Option<&str>) -> Result<Self> {
        let valid_name = name.len() <= 40
            && name.starts_with(|c: char| c.is_ascii_lowercase())
            && !name.ends_with('-')
            && !name.contains("--")
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        if !valid_name {
            return Err(Error::Invalid(format!(
                "bad name {name:?}: use lowercase letters, digits and single '-' (at most 40), starting with a letter"
            )));
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
            return Err(Error::Invalid(format!(
                "bad kind {kind:?}: use letters and digits, starting with a capital"
            )));
        }
        if TAKEN_KINDS.contains(&kind.as_str()) {
            return Err(Error::Invalid(format!(
                "kind {kind:?} would clash with a name the generated code uses: pick another with --kind"
            )));
        }
        if TAKEN_CRATES.contains(&name) {
            return Err(Error::Invalid(format!(
                "name {name:?} is a crate the generated code depends on: pick another"
            )));
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
            return Err(Error::Invalid(format!(
                "bad group {group:?}: use a DNS name with a dot, such as example.com"
            )));
        }
        Ok(Self {
            name: name.to_owned(),
            krate: name.replace('-', "_"),
            kind,
            group,
            version: DEFAULT_VERSION.to_owned(),
        })
    }

    /// These names with the custom resource's API version `version` instead of `v1`. Fails
    /// with [`Error::Invalid`] unless it has the form Kubernetes orders versions by: `v`, a
    /// number, and optionally `alpha` or `beta` and a number (`v1`, `v2beta1`, `v1alpha3`).
    pub fn with_version(mut self, version: &str) -> Result<Self> {
        let valid = version.strip_prefix('v').is_some_and(|rest| {
            let (major, pre) = match rest.find(|c: char| !c.is_ascii_digit()) {
                Some(at) => rest.split_at(at),
                None => (rest, ""),
            };
            let pre_ok = pre.is_empty()
                || ["alpha", "beta"].iter().any(|stage| {
                    pre.strip_prefix(stage).is_some_and(|n| {
                        !n.is_empty()
                            && !n.starts_with('0')
                            && n.chars().all(|c| c.is_ascii_digit())
                    })
                });
            !major.is_empty() && !major.starts_with('0') && pre_ok
        });
        if !valid {
            return Err(Error::Invalid(format!(
                "bad API version {version:?}: use v1, v2beta1, v1alpha1 and the like"
            )));
        }
        self.version = version.to_owned();
        Ok(self)
    }

    /// The package's name: `cron-tab`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The crate's name as Rust code writes it: `cron_tab`.
    pub fn krate(&self) -> &str {
        &self.krate
    }

    /// The custom resource's kind: `CronTab`.
    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// The custom resource's API group: `cron-tab.example.com`.
    pub fn group(&self) -> &str {
        &self.group
    }

    /// The custom resource's API version: `v1` unless [`with_version`](Self::with_version)
    /// chose another.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// `template` with `{{name}}`, `{{crate}}`, `{{Kind}}`, `{{kind}}` (lowercase),
    /// `{{group}}` and `{{version}}` filled in.
    pub(crate) fn render(&self, template: &str) -> String {
        template
            .replace("{{name}}", &self.name)
            .replace("{{crate}}", &self.krate)
            .replace("{{Kind}}", &self.kind)
            .replace("{{kind}}", &self.kind.to_ascii_lowercase())
            .replace("{{group}}", &self.group)
            .replace("{{version}}", &self.version)
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
                version: "v1".into(),
            }
        );
        for good in ["v1", "v2", "v1alpha1", "v2beta3", "v10beta12"] {
            assert_eq!(names.clone().with_version(good).unwrap().version(), good);
        }
        for bad in [
            "", "1", "v", "v0", "v01", "v1gamma1", "v1alpha", "v1alpha0", "V1", "v1-beta1",
        ] {
            assert!(names.clone().with_version(bad).is_err(), "{bad:?}");
        }
        let named = Names::new("db", Some("Database"), Some("data.acme.io")).unwrap();
        assert_eq!((named.kind(), named.group()), ("Database", "data.acme.io"));
        for bad in ["", "Cron", "9lives", "a_b", "tab-", "a--b", &"x".repeat(41)] {
            assert!(Names::new(bad, None, None).is_err(), "{bad:?}");
        }
        assert!(Names::new("ok", Some("lower"), None).is_err());
        assert!(Names::new("ok", Some("Manager"), None).is_err());
        assert!(Names::new("manager", None, None).is_err(), "kind Manager");
        assert!(Names::new("tokio", None, None).is_err());
        assert!(Names::new("ok", None, Some("nodot")).is_err());
        assert!(Names::new("ok", None, Some("Upper.io")).is_err());
    }
}
