//! `cargo xtask tidy`: checks what a reader trusts and a compiler does not.
//!
//! - Every crate under `crates/` is on ARCHITECTURE.md's map: a line of the bird's-eye view
//!   and a `### crates/<dir>` section; every xtask command is named on the map's xtask line.
//! - Every feature a crate's `Cargo.toml` declares (but `default`) is a row of the
//!   `# Features` table of its `lib.rs`, and every row there is a feature.
//! - Every xtask command is in README.md (as `cargo xtask <command>`).
//! - No two source files of a crate import each other, directly or round a cycle.
//! - The diagrams in `docs/diagrams/` are what `cargo xtask diagrams` makes of their sources
//!   (the crate graph from the manifests, each `.svg` from its `.dot`).
//! - rudder-protobuf's `src/generated.rs` is what `cargo xtask protobuf` makes of the
//!   committed `schema.json` and k8s-openapi's source (CI's Go step checks the schema
//!   against the Go program).
//! - Every relative link and `#anchor` of the book's pages (`docs/*.md`) resolves to a file
//!   in `docs/` and a heading of it (`links.rs`).
//!
//! - Every `rudder_…` metric name in the docs (README.md, ARCHITECTURE.md, `docs/*.md`, the
//!   crates' doc comments, rudder-manifests' alerts and dashboards) is one the code
//!   registers, and every registered one is named in some doc (`metrics.rs`).
//! - Each crate tree drawn in a fenced block (ARCHITECTURE.md's) draws under a crate only
//!   its dependencies, each above the ones it depends on, per `cargo metadata` (`tree.rs`).
//! - README.md and every page of `docs/` are included by `doctests/src/lib.rs`, so
//!   `cargo test --doc -p rudder-doctests` compiles their Rust blocks, and each of their code
//!   blocks names its language (a bare fence would be compiled as Rust).
//!
//! Each check reports every problem it finds, naming the file and what to change.

use std::path::Path;

use crate::diagrams;
use xtask::util::workspace_root;

mod cycles;
mod links;
mod metrics;
mod tree;

/// Runs every check; fails listing all the problems found.
pub(crate) fn run(args: &[&str], commands: &[&str]) -> Result<(), String> {
    if let Some(extra) = args.first() {
        return Err(format!("tidy takes no arguments (got `{extra}`)"));
    }
    let root = workspace_root();
    let mut problems = Vec::new();
    problems.extend(architecture_map(&root, commands)?);
    problems.extend(feature_tables(&root)?);
    problems.extend(readme_commands(&root, commands)?);
    problems.extend(import_cycles(&root));
    problems.extend(diagrams_current(&root)?);
    problems.extend(crate::protobuf::stale(&root)?);
    problems.extend(links::check(&root)?);
    problems.extend(metrics::check(&root)?);
    problems.extend(tree::check(&root)?);
    problems.extend(doctest_pages(&root)?);
    if problems.is_empty() {
        println!(
            "tidy: the map, the feature tables, the README, the imports, the diagrams, the generated decoders, the book's links, the metric names, the crate tree and the doctested pages agree with the code"
        );
        Ok(())
    } else {
        Err(format!(
            "tidy found {} problem(s):\n  - {}",
            problems.len(),
            problems.join("\n  - ")
        ))
    }
}

fn read(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))
}

/// ARCHITECTURE.md names every crate in its bird's-eye view (the first fenced block) and has
/// a code-map section for each; its xtask line names every command.
fn architecture_map(root: &Path, commands: &[&str]) -> Result<Vec<String>, String> {
    let text = read(&root.join("ARCHITECTURE.md"))?;
    let birds_eye = text
        .split("```")
        .nth(1)
        .ok_or("ARCHITECTURE.md: no fenced bird's-eye view")?;
    let mut problems = Vec::new();
    let crates_dir = root.join("crates");
    for entry in std::fs::read_dir(&crates_dir)
        .map_err(|e| format!("reading {}: {e}", crates_dir.display()))?
        .filter_map(Result::ok)
    {
        if !entry.path().join("Cargo.toml").is_file() {
            continue;
        }
        let dir = entry.file_name().to_string_lossy().into_owned();
        let named = birds_eye.lines().any(|line| {
            line.trim_start_matches(|c: char| !c.is_alphanumeric())
                .split_whitespace()
                .next()
                == Some(dir.as_str())
        });
        if !named {
            problems.push(format!(
                "ARCHITECTURE.md: the bird's-eye view has no line for crates/{dir}"
            ));
        }
        if !text.contains(&format!("### `crates/{dir}`")) {
            problems.push(format!(
                "ARCHITECTURE.md: no code-map section \"### `crates/{dir}`\""
            ));
        }
    }
    // The xtask entry: its line and the indented lines continuing it.
    let mut entry = birds_eye
        .lines()
        .skip_while(|l| !l.starts_with("xtask "))
        .enumerate()
        .take_while(|(i, l)| *i == 0 || l.starts_with("    "))
        .map(|(_, l)| l)
        .peekable();
    match entry.peek() {
        None => problems.push("ARCHITECTURE.md: the bird's-eye view has no xtask line".into()),
        Some(_) => {
            let line = entry.collect::<Vec<_>>().join(" ");
            for command in commands {
                // `envtest install` is named by its first word.
                let command = command.split(' ').next().unwrap_or(command);
                if !line.split([' ', ',']).any(|word| word == command) {
                    problems.push(format!(
                        "ARCHITECTURE.md: the bird's-eye view's xtask line does not name `{command}`"
                    ));
                }
            }
        }
    }
    Ok(problems)
}

/// The feature names of a `lib.rs`'s `# Features` table: the first column's backticked name
/// of each row after the header.
fn table_features(lib: &str) -> Option<Vec<String>> {
    let mut lines = lib
        .lines()
        .map(|l| l.trim_start().trim_start_matches("//!").trim())
        .skip_while(|l| *l != "# Features");
    lines.next()?;
    let rows: Vec<String> = lines
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2) // the header and its rule
        .filter_map(|row| {
            let first = row.trim_start_matches('|').split('|').next()?.trim();
            Some(first.trim_matches('`').to_owned())
        })
        .collect();
    Some(rows)
}

/// Each crate's `# Features` table and its manifest's features agree.
fn feature_tables(root: &Path) -> Result<Vec<String>, String> {
    let mut problems = Vec::new();
    let crates_dir = root.join("crates");
    for entry in std::fs::read_dir(&crates_dir)
        .map_err(|e| format!("reading {}: {e}", crates_dir.display()))?
        .filter_map(Result::ok)
    {
        let dir = entry.path();
        let Ok(manifest) = std::fs::read_to_string(dir.join("Cargo.toml")) else {
            continue;
        };
        let Ok(lib) = std::fs::read_to_string(dir.join("src").join("lib.rs")) else {
            continue;
        };
        let declared = crate::manifests::parse_features(&manifest);
        let shown = dir.strip_prefix(root).unwrap_or(&dir).display().to_string();
        match table_features(&lib) {
            None if declared.is_empty() => {}
            None => problems.push(format!(
                "{shown}/src/lib.rs: no `# Features` table, but Cargo.toml declares {}",
                declared.join(", ")
            )),
            Some(rows) => {
                for feature in &declared {
                    if !rows.contains(feature) {
                        problems.push(format!(
                            "{shown}/src/lib.rs: the `# Features` table has no row for `{feature}`"
                        ));
                    }
                }
                for row in &rows {
                    if row != "default" && !declared.contains(row) {
                        problems.push(format!(
                            "{shown}/src/lib.rs: the `# Features` table lists `{row}`, which Cargo.toml does not declare"
                        ));
                    }
                }
            }
        }
    }
    Ok(problems)
}

/// README.md names every xtask command.
fn readme_commands(root: &Path, commands: &[&str]) -> Result<Vec<String>, String> {
    let readme = read(&root.join("README.md"))?;
    Ok(commands
        .iter()
        .filter(|c| !readme.contains(&format!("cargo xtask {c}")))
        .map(|c| format!("README.md: no `cargo xtask {c}`"))
        .collect())
}

/// The file-level import cycles inside each crate: each a misplaced name, to move to the
/// file where it belongs.
fn import_cycles(root: &Path) -> Vec<String> {
    cycles::import_cycles(root)
        .into_iter()
        .map(|cycle| {
            let files: Vec<String> = cycle.iter().map(|f| f.display().to_string()).collect();
            format!(
                "an import cycle: {} -> {} (move the name that closes it to the file it belongs in)",
                files.join(" -> "),
                files.first().map_or("", String::as_str)
            )
        })
        .collect()
}

/// README.md and every `docs/*.md` page are a doctest item of `doctests/src/lib.rs`.
fn doctest_pages(root: &Path) -> Result<Vec<String>, String> {
    let lib = read(&root.join("doctests/src/lib.rs"))?;
    let mut pages = vec!["README.md".to_owned()];
    let docs = root.join("docs");
    for entry in std::fs::read_dir(&docs)
        .map_err(|e| format!("reading {}: {e}", docs.display()))?
        .filter_map(Result::ok)
    {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(".md") {
            pages.push(format!("docs/{name}"));
        }
    }
    pages.sort();
    let mut problems = Vec::new();
    for page in &pages {
        let text = read(&root.join(page))?;
        problems.extend(
            bare_fences(&text)
                .into_iter()
                .map(|line| format!("{page}:{line}: a code block without a language: mark it `rust` (compiled) or its language (`sh`, `toml`, `text`)")),
        );
    }
    Ok(problems
        .into_iter()
        .chain(pages
        .into_iter()
        .filter(|page| !lib.contains(&format!("include_str!(\"../../{page}\")")))
        .map(|page| {
            format!(
                "doctests/src/lib.rs: no `#[doc = include_str!(\"../../{page}\")]` item, so {page}'s Rust blocks are not compiled"
            )
        }))
        .collect())
}

/// The lines of the code blocks of `text` opened by a fence without a language, which
/// rustdoc compiles as Rust and a reader cannot tell.
fn bare_fences(text: &str) -> Vec<usize> {
    let mut open = false;
    let mut out = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let Some(info) = line.trim_start().strip_prefix("```") else {
            continue;
        };
        if !open && info.trim().is_empty() {
            out.push(number + 1);
        }
        open = !open;
    }
    out
}

/// The committed diagrams are what `cargo xtask diagrams` makes.
fn diagrams_current(root: &Path) -> Result<Vec<String>, String> {
    let dir = diagrams::dir(root);
    let mut problems = Vec::new();
    let crates = dir.join("crates.dot");
    if std::fs::read_to_string(&crates).ok() != Some(diagrams::crate_graph(root)?) {
        problems.push(format!(
            "{}: not the crate graph of the manifests; run `cargo xtask diagrams`",
            crates.display()
        ));
    }
    for source in diagrams::sources(&dir)? {
        let svg = source.with_extension("svg");
        let committed = std::fs::read(&svg).unwrap_or_default();
        if committed != diagrams::render(&source)? {
            problems.push(format!(
                "{}: not the rendering of {}; run `cargo xtask diagrams`",
                svg.display(),
                source.display()
            ));
        }
    }
    Ok(problems)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_planted_block_without_a_language_is_found() {
        let page = "Text.\n\n```rust\nlet a = 1;\n```\n\n```\nplain\n```\n\n```sh\nls\n```\n";
        assert_eq!(bare_fences(page), [7]);
        assert!(bare_fences("```text\nx\n```\n").is_empty());
    }

    #[test]
    fn a_feature_table_gives_its_first_column() {
        let lib = "//! Intro.\n//!\n//! # Features\n//!\n//! | feature | default | adds |\n//! |---|---|---|\n//! | `metrics` | no | counters |\n//! | `http2` | yes | h2 |\n//!\n//! More.\n";
        assert_eq!(
            table_features(lib),
            Some(vec!["metrics".to_owned(), "http2".to_owned()])
        );
        assert_eq!(table_features("//! No table.\n"), None);
    }
}
