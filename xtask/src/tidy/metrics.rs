//! The metric names the docs give against the names the code registers.
//!
//! Registered: every `"rudder_…"` string literal in the crates' sources (outside their test
//! modules), which is how each crate names its metrics (constants beside the
//! `metrics::counter!`/`gauge!`/`histogram!` and `describe_*` calls, or the Prometheus
//! registry's names), but rudder-manifests', whose alerts and dashboards only query them.
//!
//! Named: each `rudder_…` word of README.md, ARCHITECTURE.md, `docs/*.md`, the crates' doc
//! comments and rudder-manifests' queries, but a crate's name (`rudder_core`, or a path
//! through one, `rudder_cache::…`). A word ending in `_` is a family (`rudder_cache_*`);
//! `_bucket`, `_sum` and `_count` are a histogram's series.
//!
//! Every name the docs give is registered (or a family with a registered member), and every
//! registered name is given by name somewhere in the docs, so a metric added or renamed
//! without its docs fails.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A histogram's series, named in queries beside the metric.
const SERIES: &[&str] = &["_bucket", "_sum", "_count"];

/// Every disagreement between the docs and the code, one problem each.
pub(super) fn check(root: &Path) -> Result<Vec<String>, String> {
    let crates = crate_dirs(root)?;
    let libs: BTreeSet<String> = crates.iter().map(|(lib, _)| lib.clone()).collect();
    let mut registered = BTreeSet::new();
    // (where, name) of every name a reader is given.
    let mut named: Vec<(String, String)> = Vec::new();
    let mut docs = vec![root.join("README.md"), root.join("ARCHITECTURE.md")];
    let docs_dir = root.join("docs");
    for entry in std::fs::read_dir(&docs_dir)
        .map_err(|e| format!("reading {}: {e}", docs_dir.display()))?
        .filter_map(Result::ok)
    {
        if entry.path().extension().is_some_and(|x| x == "md") {
            docs.push(entry.path());
        }
    }
    docs.sort();
    for page in &docs {
        let text = read(page)?;
        named.extend(words(&text, &libs).map(|(line, w)| (shown(root, page, line), w)));
    }
    for (lib, dir) in &crates {
        for file in rust_files(&dir.join("src")) {
            let text = read(&file)?;
            let text = without_tests(&text);
            for (number, line) in text.lines().enumerate() {
                let trimmed = line.trim_start();
                if trimmed.starts_with("//!") || trimmed.starts_with("///") {
                    named.extend(
                        words(line, &libs).map(|(_, w)| (shown(root, &file, number + 1), w)),
                    );
                } else if lib == "rudder_manifests" {
                    named.extend(
                        literals(line).map(|w| (shown(root, &file, number + 1), w.to_owned())),
                    );
                } else {
                    registered.extend(literals(line).map(str::to_owned));
                }
            }
        }
    }
    Ok(compare(&registered, &named))
}

/// The problems of `named` against `registered`: names nothing registers, then registered
/// names no doc gives.
fn compare(registered: &BTreeSet<String>, named: &[(String, String)]) -> Vec<String> {
    let mut problems = Vec::new();
    let mut given = BTreeSet::new();
    let mut unknown: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (at, name) in named {
        let base = SERIES
            .iter()
            .find_map(|s| name.strip_suffix(s).filter(|b| registered.contains(*b)))
            .unwrap_or(name);
        let known = if base.ends_with('_') {
            registered.iter().any(|r| r.starts_with(base))
        } else {
            registered.contains(base)
        };
        if known {
            given.insert(base.to_owned());
        } else {
            unknown.entry(name).or_default().push(at);
        }
    }
    for (name, places) in unknown {
        problems.push(format!(
            "{}: `{name}` is no metric the code registers (a crate's `\"rudder_…\"` names)",
            places.join(", ")
        ));
    }
    for name in registered {
        if !given.contains(name) {
            problems.push(format!(
                "the metric `{name}` is registered but named in no doc (README, docs/, ARCHITECTURE.md, its crate's docs)"
            ));
        }
    }
    problems
}

fn read(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))
}

fn shown(root: &Path, file: &Path, line: usize) -> String {
    format!(
        "{}:{line}",
        file.strip_prefix(root).unwrap_or(file).display()
    )
}

/// Each crate's library name and directory.
fn crate_dirs(root: &Path) -> Result<Vec<(String, PathBuf)>, String> {
    let dir = root.join("crates");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir)
        .map_err(|e| format!("reading {}: {e}", dir.display()))?
        .filter_map(Result::ok)
    {
        let Ok(text) = std::fs::read_to_string(entry.path().join("Cargo.toml")) else {
            continue;
        };
        if let Some(manifest) = crate::manifests::parse(&text) {
            out.push((
                crate::public_api::lib_name(&text, &manifest.name),
                entry.path(),
            ));
        }
    }
    out.sort();
    Ok(out)
}

/// The `.rs` files under `dir`, recursively, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.filter_map(Result::ok) {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|x| x == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// A source file up to its test module (`#[cfg(test)]` followed by `mod`), which comes last.
fn without_tests(text: &str) -> &str {
    let mut from = 0;
    while let Some(at) = text[from..].find("#[cfg(test)]") {
        let at = from + at;
        let rest = text[at + "#[cfg(test)]".len()..].trim_start();
        if rest.starts_with("mod ") {
            return &text[..at];
        }
        from = at + 1;
    }
    text
}

/// The `rudder_…` words of `text` with their line numbers, but crate names and paths through
/// them.
fn words<'a>(
    text: &'a str,
    libs: &'a BTreeSet<String>,
) -> impl Iterator<Item = (usize, String)> + 'a {
    text.lines().enumerate().flat_map(move |(number, line)| {
        let mut found = Vec::new();
        let bytes = line.as_bytes();
        let mut from = 0;
        while let Some(at) = line[from..].find("rudder_") {
            let start = from + at;
            let end = line[start..]
                .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
                .map_or(line.len(), |n| start + n);
            from = end.max(start + 1);
            let before = start.checked_sub(1).map(|i| bytes[i]);
            if before.is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') {
                continue;
            }
            let word = &line[start..end];
            if libs.contains(word) || line[end..].starts_with("::") {
                continue;
            }
            found.push((number + 1, word.to_owned()));
        }
        found
    })
}

/// The string literals of `line` that are whole `rudder_…` names.
fn literals(line: &str) -> impl Iterator<Item = &str> {
    line.split('"').skip(1).step_by(2).filter(|s| {
        s.starts_with("rudder_")
            && s.len() > "rudder_".len()
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    #[test]
    fn the_repository_s_docs_name_only_registered_metrics() {
        let problems = check(&xtask::util::workspace_root()).unwrap_or_else(|e| vec![e]);
        assert!(problems.is_empty(), "{problems:#?}");
    }

    #[test]
    fn a_planted_drift_either_way_is_reported() {
        let registered = set(&["rudder_cache_objects", "rudder_cache_relists_total"]);
        let doc = "Watch `rudder_cache_objects`, `rudder_cache_*`, `rudder_cache_objects_sum`\n\
                   and the crate rudder_cache (`rudder_cache::Cache`), rudder-cache.\n\
                   Renamed: `rudder_cache_relist_total`.\n";
        let libs = set(&["rudder_cache"]);
        let named: Vec<(String, String)> = words(doc, &libs)
            .map(|(line, w)| (format!("doc.md:{line}"), w))
            .collect();
        assert_eq!(
            named.iter().map(|(_, w)| w.as_str()).collect::<Vec<_>>(),
            [
                "rudder_cache_objects",
                "rudder_cache_",
                "rudder_cache_objects_sum",
                "rudder_cache_relist_total"
            ]
        );
        let problems = compare(&registered, &named);
        assert_eq!(
            problems,
            [
                "doc.md:3: `rudder_cache_relist_total` is no metric the code registers (a crate's `\"rudder_…\"` names)",
                "the metric `rudder_cache_relists_total` is registered but named in no doc (README, docs/, ARCHITECTURE.md, its crate's docs)"
            ]
        );
        // A family with no registered member is reported too.
        let family = vec![("a.md:1".to_owned(), "rudder_queue_".to_owned())];
        assert_eq!(compare(&set(&[]), &family).len(), 1);
    }

    #[test]
    fn literals_and_test_modules() {
        let line = r#"const A: &str = "rudder_shard_members"; let b = "rudder_"; "x rudder_y""#;
        assert_eq!(literals(line).collect::<Vec<_>>(), ["rudder_shard_members"]);
        let file = "fn a() {}\n#[cfg(test)]\nfn helper() {}\n#[cfg(test)]\nmod tests {\n}\n";
        assert_eq!(
            without_tests(file),
            "fn a() {}\n#[cfg(test)]\nfn helper() {}\n"
        );
    }
}
