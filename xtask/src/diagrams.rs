//! `cargo xtask diagrams`: the pictures of the house, drawn from text in the repository.
//!
//! `docs/diagrams/crates.dot` is generated here from the crates' manifests (which workspace
//! crate depends on which), so it cannot drift from the code; the flow diagrams
//! (`reconcile.dot`, `webhook.dot`) are written by hand. Every `docs/diagrams/*.dot` is
//! rendered to an `.svg` beside it with Graphviz's `dot` (Debian's `graphviz` package).
//! `cargo xtask tidy` fails when a committed file differs from what this would write.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::util::workspace_root;

/// The directory of the diagrams' sources and renderings.
pub(crate) fn dir(root: &Path) -> PathBuf {
    root.join("docs").join("diagrams")
}

pub(crate) fn run(args: &[&str]) -> Result<(), String> {
    if let Some(extra) = args.first() {
        return Err(format!("diagrams takes no arguments (got `{extra}`)"));
    }
    let root = workspace_root();
    let dir = dir(&root);
    let crates = dir.join("crates.dot");
    std::fs::write(&crates, crate_graph(&root)?)
        .map_err(|e| format!("writing {}: {e}", crates.display()))?;
    for source in sources(&dir)? {
        let svg = render(&source)?;
        let target = source.with_extension("svg");
        std::fs::write(&target, svg).map_err(|e| format!("writing {}: {e}", target.display()))?;
        println!("rendered {}", target.display());
    }
    Ok(())
}

/// The `.dot` files in `dir`, sorted.
pub(crate) fn sources(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("reading {}: {e}", dir.display()))?;
    let mut out: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "dot"))
        .collect();
    out.sort();
    Ok(out)
}

/// `source` rendered to SVG by Graphviz.
pub(crate) fn render(source: &Path) -> Result<Vec<u8>, String> {
    let output = Command::new("dot")
        .arg("-Tsvg")
        .arg(source)
        .output()
        .map_err(|e| {
            format!(
                "could not run Graphviz's `dot` ({e}); install it (Debian: apt-get install graphviz)"
            )
        })?;
    if !output.status.success() {
        return Err(format!(
            "dot -Tsvg {} failed: {}",
            source.display(),
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    Ok(output.stdout)
}

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
    parse_manifest(text).map(|m| m.features).unwrap_or_default()
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
        let manifest = parse_manifest(&text)
            .ok_or_else(|| format!("{}: no [package] name", path.display()))?;
        out.insert(manifest.name.clone(), manifest);
    }
    Ok(out)
}

/// Reads the little of a manifest the checks need, line by line: its name, its
/// `[dependencies]` on `rudder` crates, its `[features]`, `publish`.
fn parse_manifest(text: &str) -> Option<Manifest> {
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

/// The crate graph in DOT: one node per crate under `crates/`, an arrow from each to the
/// workspace crates it depends on (dashed when optional, behind a feature).
pub(crate) fn crate_graph(root: &Path) -> Result<String, String> {
    let manifests = manifests(root)?;
    let mut dot = String::from(
        "// Generated by `cargo xtask diagrams` from the crates' manifests: do not edit.\n\
         digraph crates {\n\
         \x20   graph [rankdir=TB, fontname=\"Helvetica\", nodesep=0.3, ranksep=0.45];\n\
         \x20   node [shape=box, style=\"rounded,filled\", fillcolor=\"#eef3fb\", fontname=\"Helvetica\", fontsize=11];\n\
         \x20   edge [color=\"#5b6b80\", arrowsize=0.7];\n",
    );
    for (name, manifest) in &manifests {
        let fill = if name == "rudder" {
            ", fillcolor=\"#d6e4f7\""
        } else if !manifest.publish {
            ", fillcolor=\"#f2f2f2\""
        } else {
            ""
        };
        dot.push_str(&format!("    \"{name}\" [label=\"{name}\"{fill}];\n"));
    }
    for (name, manifest) in &manifests {
        for (dep, optional) in &manifest.depends_on {
            if !manifests.contains_key(dep) {
                continue;
            }
            let style = if *optional { " [style=dashed]" } else { "" };
            dot.push_str(&format!("    \"{name}\" -> \"{dep}\"{style};\n"));
        }
    }
    dot.push_str("}\n");
    Ok(dot)
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
        let m = parse_manifest(text).unwrap_or_else(|| unreachable!());
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

    #[test]
    fn the_committed_crate_graph_is_the_generated_one() {
        let root = workspace_root();
        let committed = std::fs::read_to_string(dir(&root).join("crates.dot")).unwrap_or_default();
        assert_eq!(
            committed,
            crate_graph(&root).unwrap_or_default(),
            "run `cargo xtask diagrams`"
        );
    }
}
