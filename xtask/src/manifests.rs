//! The little of the crates' manifests that the tasks read (names, dependencies on each other,
//! features, whether published), line by line: xtask has no TOML parser, and the manifests
//! keep to one shape.

use std::collections::BTreeMap;
use std::path::Path;

/// A workspace crate as its manifest declares it.
#[derive(Debug)]
pub(crate) struct Manifest {
    /// The package name.
    pub(crate) name: String,
    /// The workspace crates it depends on (normal dependencies), and whether optionally.
    pub(crate) depends_on: BTreeMap<String, bool>,
    /// Its features other than `default`.
    pub(crate) features: Vec<String>,
    /// Whether it is published (`publish = false` is absent).
    pub(crate) publish: bool,
}

/// The features a manifest declares, but `default`.
pub(crate) fn parse_features(text: &str) -> Vec<String> {
    parse(text).map(|m| m.features).unwrap_or_default()
}

/// The manifests of the crates under `crates/`, by name.
pub(crate) fn manifests(root: &Path) -> Result<BTreeMap<String, Manifest>, String> {
    let dir = root.join("crates");
    let entries = std::fs::read_dir(&dir).map_err(|e| format!("reading {}: {e}", dir.display()))?;
    let mut out = BTreeMap::new();
    for entry in entries.filter_map(Result::ok) {
        let path = entry.path().join("Cargo.toml");
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let manifest =
            parse(&text).ok_or_else(|| format!("{}: no [package] name", path.display()))?;
        out.insert(manifest.name.clone(), manifest);
    }
    Ok(out)
}

/// Reads the little of a manifest the checks need, line by line: its name, its
/// `[dependencies]` on `rudder` crates, its `[features]`, `publish`.
pub(crate) fn parse(text: &str) -> Option<Manifest> {
    let mut section = String::new();
    let mut name = None;
    let mut depends_on = BTreeMap::new();
    let mut features = Vec::new();
    let mut publish = true;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        if line.starts_with('[') {
            section = line.trim_matches(|c| c == '[' || c == ']').to_owned();
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let key = key.trim();
        let value = value.trim();
        match section.as_str() {
            "package" if key == "name" => name = Some(value.trim_matches('"').to_owned()),
            "package" if key == "publish" => publish = value != "false",
            "dependencies" => {
                let dep = key.split('.').next().unwrap_or(key);
                if dep.starts_with("rudder") {
                    depends_on.insert(dep.to_owned(), value.contains("optional = true"));
                }
            }
            "features" if key != "default" => features.push(key.to_owned()),
            _ => {}
        }
    }
    Some(Manifest {
        name: name?,
        depends_on,
        features,
        publish,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manifest_gives_its_name_rudder_dependencies_and_features() {
        let text = r#"
[package]
name = "rudder-x"
publish = false

[features]
default = ["a"]
## Doc.
a = ["dep:rudder-y"]

[dependencies]
rudder-y = { workspace = true, optional = true }
rudder-z.workspace = true
tokio.workspace = true

[dev-dependencies]
rudder-envtest.workspace = true
"#;
        let m = parse(text).unwrap_or_else(|| unreachable!());
        assert_eq!(m.name, "rudder-x");
        assert!(!m.publish);
        assert_eq!(m.features, ["a"]);
        assert_eq!(
            m.depends_on.into_iter().collect::<Vec<_>>(),
            [
                ("rudder-y".to_owned(), true),
                ("rudder-z".to_owned(), false)
            ]
        );
    }
}
