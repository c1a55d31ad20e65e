//! The crate trees drawn in the docs against `cargo metadata`'s dependencies.
//!
//! A tree is a fenced block of README.md, ARCHITECTURE.md or `docs/*.md` with lines
//! `├── <crate>` / `└── <crate>` under a line starting with a crate (`rudder (facade)`, the
//! crate's directory or package name). What the drawing says, and what is checked:
//!
//! - each crate under another is one of its dependencies, directly or through the others
//!   (the facade's layers);
//! - crates under one parent are layered, each depending only on the ones drawn below it:
//!   none depends, directly or through others, on a crate drawn above it.
//!
//! The dependencies are `cargo metadata`'s normal and build dependencies between workspace
//! packages (without `--locked`: CI adds a crate to the workspace for the length of its run).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_json::Value;
use xtask::util::cargo;

/// Dependencies between workspace packages, by package name.
type Graph = BTreeMap<String, BTreeSet<String>>;

/// Every disagreement between a drawn tree and the dependencies, one problem each.
pub(super) fn check(root: &Path) -> Result<Vec<String>, String> {
    let mut pages = vec![root.join("README.md"), root.join("ARCHITECTURE.md")];
    let docs = root.join("docs");
    for entry in std::fs::read_dir(&docs)
        .map_err(|e| format!("reading {}: {e}", docs.display()))?
        .filter_map(Result::ok)
    {
        if entry.path().extension().is_some_and(|x| x == "md") {
            pages.push(entry.path());
        }
    }
    pages.sort();
    let mut trees = Vec::new();
    for page in &pages {
        let text = std::fs::read_to_string(page)
            .map_err(|e| format!("reading {}: {e}", page.display()))?;
        let shown = page
            .strip_prefix(root)
            .unwrap_or(page)
            .display()
            .to_string();
        trees.extend(drawn(&text).into_iter().map(|t| (shown.clone(), t)));
    }
    if trees.is_empty() {
        return Ok(Vec::new());
    }
    let (graph, dirs) = metadata(root)?;
    Ok(trees
        .iter()
        .flat_map(|(page, tree)| problems(page, tree, &graph, &dirs))
        .collect())
}

/// One drawn parent and its children, top to bottom, with the line each is on.
#[derive(Debug, PartialEq, Eq)]
struct Drawn {
    parent: (usize, String),
    children: Vec<(usize, String)>,
}

/// The parents and children drawn in `text`'s fenced blocks.
fn drawn(text: &str) -> Vec<Drawn> {
    let mut out: Vec<Drawn> = Vec::new();
    let mut fenced = false;
    let mut parent: Option<usize> = None;
    for (number, line) in text.lines().enumerate() {
        let number = number + 1;
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            parent = None;
            continue;
        }
        if !fenced {
            continue;
        }
        let first = |s: &str| -> Option<String> {
            let word = s.split_whitespace().next()?;
            (word.starts_with("rudder") || word.starts_with("cargo-rudder"))
                .then(|| word.to_owned())
        };
        if let Some(branch) = line.find("── ") {
            if let (Some(at), Some(child)) = (parent, first(&line[branch + "── ".len()..])) {
                out[at].children.push((number, child));
            }
        } else if !line.starts_with(' ') && !line.starts_with('│') {
            parent = first(line).map(|name| {
                out.push(Drawn {
                    parent: (number, name),
                    children: Vec::new(),
                });
                out.len() - 1
            });
        }
    }
    out.retain(|d| !d.children.is_empty());
    out
}

/// What is wrong with one drawn parent and its children.
fn problems(
    page: &str,
    tree: &Drawn,
    graph: &Graph,
    dirs: &BTreeMap<String, String>,
) -> Vec<String> {
    let name = |drawn: &str| dirs.get(drawn).cloned().unwrap_or_else(|| drawn.to_owned());
    let mut out = Vec::new();
    let (parent_line, parent) = (&tree.parent.0, name(&tree.parent.1));
    if !graph.contains_key(&parent) {
        return vec![format!(
            "{page}:{parent_line}: the tree's `{}` is no workspace crate",
            tree.parent.1
        )];
    }
    for (i, (line, child)) in tree.children.iter().enumerate() {
        let child = name(child);
        if !graph.contains_key(&child) {
            out.push(format!("{page}:{line}: `{child}` is no workspace crate"));
            continue;
        }
        if !depends(graph, &parent, &child) {
            out.push(format!(
                "{page}:{line}: `{child}` is drawn under `{parent}`, which does not depend on it, directly or through others"
            ));
        }
        for (above_line, above) in &tree.children[..i] {
            let above = name(above);
            if depends(graph, &child, &above) {
                out.push(format!(
                    "{page}:{line}: `{child}` depends on `{above}`, drawn above it (line {above_line}); draw it above `{above}`"
                ));
            }
        }
    }
    out
}

/// Whether `from` depends on `to`, directly or through other workspace crates.
fn depends(graph: &Graph, from: &str, to: &str) -> bool {
    let mut seen = BTreeSet::new();
    let mut stack = vec![from.to_owned()];
    while let Some(at) = stack.pop() {
        for dep in graph.get(&at).into_iter().flatten() {
            if dep == to {
                return true;
            }
            if seen.insert(dep.clone()) {
                stack.push(dep.clone());
            }
        }
    }
    false
}

/// The workspace's dependency graph and each crate's name by its directory under `crates/`.
fn metadata(root: &Path) -> Result<(Graph, BTreeMap<String, String>), String> {
    let output = cargo()
        .current_dir(root)
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .output()
        .map_err(|e| format!("cargo metadata: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let metadata: Value = serde_json::from_slice(&output.stdout)
        .map_err(|e| format!("cargo metadata printed no JSON: {e}"))?;
    graph(&metadata)
}

fn graph(metadata: &Value) -> Result<(Graph, BTreeMap<String, String>), String> {
    let packages = metadata["packages"]
        .as_array()
        .ok_or("cargo metadata: no packages")?;
    let names: BTreeSet<&str> = packages.iter().filter_map(|p| p["name"].as_str()).collect();
    let mut graph = Graph::new();
    let mut dirs = BTreeMap::new();
    for package in packages {
        let Some(name) = package["name"].as_str() else {
            continue;
        };
        if let Some(dir) = package["manifest_path"]
            .as_str()
            .map(Path::new)
            .and_then(Path::parent)
            .and_then(Path::file_name)
        {
            dirs.insert(dir.to_string_lossy().into_owned(), name.to_owned());
        }
        let deps = package["dependencies"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|d| d["kind"].as_str() != Some("dev"))
            .filter_map(|d| d["name"].as_str())
            .filter(|d| names.contains(d))
            .map(str::to_owned)
            .collect();
        graph.insert(name.to_owned(), deps);
    }
    Ok((graph, dirs))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    const TREE: &str = "Text.\n\n```\nrudder (facade)     re-exports\n  ├── rudder-webhook  webhooks\n  │                   more\n  ├── rudder-certs    certificates\n  └── rudder-core     contracts\nrudder-envtest      tests\n  └── rudder-envtest-setup\nxtask               commands\n```\n";

    fn graph_of(edges: &[(&str, &[&str])]) -> Graph {
        edges
            .iter()
            .map(|(from, to)| {
                (
                    (*from).to_owned(),
                    to.iter().map(|t| (*t).to_owned()).collect(),
                )
            })
            .collect()
    }

    #[test]
    fn a_drawn_tree_is_read_with_its_lines() {
        let trees = drawn(TREE);
        assert_eq!(trees.len(), 2);
        assert_eq!(trees[0].parent, (4, "rudder".to_owned()));
        assert_eq!(
            trees[0].children,
            [
                (5, "rudder-webhook".to_owned()),
                (7, "rudder-certs".to_owned()),
                (8, "rudder-core".to_owned())
            ]
        );
        assert_eq!(trees[1].children, [(10, "rudder-envtest-setup".to_owned())]);
    }

    #[test]
    fn a_planted_drift_in_the_order_or_the_edges_is_reported() {
        let dirs: BTreeMap<String, String> =
            [("rudder".to_owned(), "rudder-runtime".to_owned())].into();
        let right = graph_of(&[
            (
                "rudder-runtime",
                &["rudder-webhook", "rudder-certs", "rudder-core"],
            ),
            ("rudder-webhook", &["rudder-certs", "rudder-core"]),
            ("rudder-certs", &["rudder-core"]),
            ("rudder-core", &[]),
            ("rudder-envtest", &["rudder-envtest-setup"]),
            ("rudder-envtest-setup", &[]),
        ]);
        let trees = drawn(TREE);
        let all = |g: &Graph| -> Vec<String> {
            trees
                .iter()
                .flat_map(|t| problems("A.md", t, g, &dirs))
                .collect()
        };
        assert!(all(&right).is_empty(), "{:?}", all(&right));
        // The drift: rudder-certs comes to depend on rudder-webhook, drawn above it (through
        // nothing else), and the envtest crate no longer depends on its setup.
        let mut wrong = right;
        wrong
            .get_mut("rudder-certs")
            .unwrap()
            .insert("rudder-webhook".to_owned());
        wrong.get_mut("rudder-envtest").unwrap().clear();
        assert_eq!(
            all(&wrong),
            [
                "A.md:7: `rudder-certs` depends on `rudder-webhook`, drawn above it (line 5); draw it above `rudder-webhook`",
                "A.md:10: `rudder-envtest-setup` is drawn under `rudder-envtest`, which does not depend on it, directly or through others"
            ]
        );
    }

    #[test]
    fn the_dependencies_come_from_metadata_without_dev_ones() {
        let metadata = serde_json::json!({"packages": [
            {"name": "a", "manifest_path": "/w/crates/a-dir/Cargo.toml", "dependencies": [
                {"name": "b", "kind": null}, {"name": "c", "kind": "dev"}, {"name": "serde", "kind": null}]},
            {"name": "b", "manifest_path": "/w/crates/b/Cargo.toml", "dependencies": []},
            {"name": "c", "manifest_path": "/w/crates/c/Cargo.toml", "dependencies": [{"name": "b", "kind": "build"}]}
        ]});
        let (graph, dirs) = graph(&metadata).unwrap();
        assert_eq!(graph["a"], ["b".to_owned()].into());
        assert_eq!(graph["c"], ["b".to_owned()].into());
        assert_eq!(dirs["a-dir"], "a");
        assert!(depends(&graph, "a", "b") && !depends(&graph, "b", "a"));
    }

    #[test]
    fn the_repository_s_trees_agree_with_cargo_metadata() {
        let problems = check(&xtask::util::workspace_root()).unwrap_or_else(|e| vec![e]);
        assert!(problems.is_empty(), "{problems:#?}");
    }
}
