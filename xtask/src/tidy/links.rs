//! The book's local links: every relative link and `#anchor` in `docs/*.md` resolves.
//!
//! A link is `[text](target)`, `![alt](target)` or a reference definition `[name]: target`,
//! outside fenced code blocks and code spans. A target with a scheme (`https:`, `mailto:`)
//! is left alone. Any other target must name a file inside `docs/` that exists (the book is
//! built from `docs/` alone, so a file outside it would be a dead link in the book), and its
//! `#anchor`, if any, a heading of that file (or of the page itself for a bare `#anchor`),
//! slugged as mdBook and GitHub slug them.

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};

/// Every broken link of the Markdown pages directly under `root/docs`, one problem each.
pub(super) fn check(root: &Path) -> Result<Vec<String>, String> {
    let docs = root.join("docs");
    let mut pages: Vec<PathBuf> = std::fs::read_dir(&docs)
        .map_err(|e| format!("reading {}: {e}", docs.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    pages.sort();
    let mut problems = Vec::new();
    for page in &pages {
        let text = std::fs::read_to_string(page)
            .map_err(|e| format!("reading {}: {e}", page.display()))?;
        let name = page
            .strip_prefix(root)
            .unwrap_or(page)
            .display()
            .to_string();
        for (line, target) in links(&text) {
            if let Some(problem) = broken(&docs, page, &text, target) {
                problems.push(format!("{name}:{line}: link `{target}`: {problem}"));
            }
        }
    }
    Ok(problems)
}

/// Why `target`, linked from `page` (whose text is `text`) inside `docs`, does not resolve;
/// `None` when it does.
fn broken(docs: &Path, page: &Path, text: &str, target: &str) -> Option<String> {
    if has_scheme(target) {
        return None;
    }
    let (path, anchor) = match target.split_once('#') {
        Some((path, anchor)) => (path, Some(anchor)),
        None => (target, None),
    };
    let (file, file_text) = if path.is_empty() {
        (page.to_path_buf(), Some(text.to_owned()))
    } else {
        if path.starts_with('/') {
            return Some("an absolute path; link relative to the page".into());
        }
        let dir = page.parent().unwrap_or(docs);
        let file = normalize(&dir.join(path));
        if !file.starts_with(docs) {
            return Some("outside docs/, so not in the book; link it by its repository URL".into());
        }
        if !file.exists() {
            return Some(format!("no file {}", file.display()));
        }
        let is_md = file.extension().is_some_and(|x| x == "md");
        (
            file.clone(),
            is_md.then(|| std::fs::read_to_string(&file).unwrap_or_default()),
        )
    };
    let anchor = anchor?;
    let Some(file_text) = file_text else {
        return Some(format!(
            "#{anchor} on {}, which is not a page",
            file.display()
        ));
    };
    if anchors(&file_text).contains(anchor) {
        None
    } else {
        Some(format!("no heading #{anchor} in {}", file.display()))
    }
}

fn has_scheme(target: &str) -> bool {
    target.split_once(':').is_some_and(|(scheme, _)| {
        !scheme.is_empty()
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
    })
}

/// `path` without `.` and `..` components (lexically; the file need not exist).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// The lines of `text` that are not inside a fenced code block, numbered from 1.
fn prose(text: &str) -> impl Iterator<Item = (usize, &str)> {
    let mut fence: Option<&str> = None;
    text.lines().enumerate().filter_map(move |(i, line)| {
        let trimmed = line.trim_start();
        let marker = ["```", "~~~"].into_iter().find(|m| trimmed.starts_with(m));
        match (fence, marker) {
            (None, Some(m)) => {
                fence = Some(m);
                None
            }
            (Some(open), Some(m)) if open == m => {
                fence = None;
                None
            }
            (Some(_), _) => None,
            (None, None) => Some((i + 1, line)),
        }
    })
}

/// `line` with its code spans blanked out, so that what they show is not read as a link.
fn without_code(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
            out.push(' ');
        } else if in_code {
            // As many bytes as the character, so offsets into `line` still hold.
            out.extend(std::iter::repeat_n(' ', c.len_utf8()));
        } else {
            out.push(c);
        }
    }
    out
}

/// Every link target of `text`, with its line number.
fn links(text: &str) -> Vec<(usize, &str)> {
    let mut found = Vec::new();
    for (number, line) in prose(text) {
        let plain = without_code(line);
        // Reference definitions: `[name]: target`.
        let trimmed = plain.trim_start();
        if trimmed.starts_with('[')
            && let Some(end) = trimmed.find("]:")
        {
            let offset = plain.len() - trimmed.len() + end + 2;
            if let Some(target) = line[offset..].split_whitespace().next() {
                found.push((number, target));
            }
            continue;
        }
        // Inline links and images: `](target)`, a title after a space left off.
        let mut from = 0;
        while let Some(i) = plain[from..].find("](") {
            let start = from + i + 2;
            let Some(len) = plain[start..].find(')') else {
                break;
            };
            let inner = line[start..start + len].trim();
            let target = inner.split_whitespace().next().unwrap_or("");
            let target = target.trim_start_matches('<').trim_end_matches('>');
            if !target.is_empty() {
                found.push((number, target));
            }
            from = start + len;
        }
    }
    found
}

/// The anchors of `text`'s headings: each heading's text slugged, a repeated slug given
/// `-1`, `-2`, ... as mdBook and GitHub do; an explicit `{#id}` is its own anchor.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    for (_, line) in prose(text) {
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if hashes == 0 || hashes > 6 || !line[hashes..].starts_with(' ') {
            continue;
        }
        let title = line[hashes..].trim().trim_end_matches('#').trim();
        if let Some(open) = title.rfind("{#")
            && title.ends_with('}')
        {
            seen.insert(title[open + 2..title.len() - 1].to_owned());
            continue;
        }
        let base = slug(&heading_text(title));
        let mut anchor = base.clone();
        let mut n = 0;
        while seen.contains(&anchor) {
            n += 1;
            anchor = format!("{base}-{n}");
        }
        seen.insert(anchor);
    }
    seen
}

/// A heading's text as rendered: links reduced to their text, code and emphasis marks gone.
fn heading_text(title: &str) -> String {
    let mut out = String::new();
    let mut rest = title;
    while let Some(open) = rest.find('[') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        match after.find("](").and_then(|close| {
            after[close + 2..]
                .find(')')
                .map(|end| (close, close + 2 + end + 1))
        }) {
            Some((close, end)) => {
                out.push_str(&after[..close]);
                rest = &after[end..];
            }
            None => {
                out.push('[');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out.replace(['`', '*'], "")
}

/// mdBook's (and GitHub's) anchor of a heading's text: lowercase, letters, digits, `-` and `_`
/// kept, each space a `-`, everything else dropped.
fn slug(text: &str) -> String {
    text.trim()
        .chars()
        .filter_map(|c| {
            if c.is_alphanumeric() || c == '_' || c == '-' {
                Some(c.to_lowercase().collect::<String>())
            } else if c.is_whitespace() {
                Some("-".to_owned())
            } else {
                None
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn headings_slug_as_the_book_slugs_them() {
        let page = "# Deploying an operator: from a scaffold to `kubectl apply`\n\
                    ## 1. Install the scaffold, make a project\n\
                    ```rust\n# not a heading\n#[derive(Debug)]\n```\n\
                    ## Fleet\n## Fleet\n### [client-go](https://x) v0.37.2 *now*\n\
                    ## Explicit {#my-id}\n";
        let got = anchors(page);
        let want: BTreeSet<String> = [
            "deploying-an-operator-from-a-scaffold-to-kubectl-apply",
            "1-install-the-scaffold-make-a-project",
            "fleet",
            "fleet-1",
            "client-go-v0372-now",
            "my-id",
        ]
        .into_iter()
        .map(str::to_owned)
        .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn links_are_read_outside_code_only() {
        let page = "See [a](a.md#x) and ![p](p.svg \"title\") and `[not](code.md)`.\n\
                    ```\n[nor](fenced.md)\n```\n[ref]: b.md#y\n<https://example.com> [w](https://w)\n";
        let got: Vec<&str> = links(page).into_iter().map(|(_, t)| t).collect();
        assert_eq!(got, ["a.md#x", "p.svg", "b.md#y", "https://w"]);
    }

    /// A planted drift for each way a link can break, in a scratch `docs/`: each is reported,
    /// and the good links are not.
    #[test]
    fn every_broken_link_is_reported_and_only_those() {
        let root = std::env::temp_dir().join(format!("tidy-links-{}", std::process::id()));
        let docs = root.join("docs");
        std::fs::create_dir_all(&docs).unwrap();
        std::fs::write(docs.join("b.md"), "# B\n## Some part\n").unwrap();
        std::fs::write(docs.join("p.svg"), "<svg/>").unwrap();
        std::fs::write(root.join("outside.md"), "# Out\n").unwrap();
        std::fs::write(
            docs.join("a.md"),
            "# A\n## Here\n\
             [ok](b.md) [ok](b.md#some-part) [ok](#here) [ok](p.svg) [ok](https://x/y#z)\n\
             [gone](c.md)\n[anchor](b.md#no-such-part)\n[self](#nowhere)\n\
             [out](../outside.md)\n[abs](/docs/b.md)\n[svg](p.svg#x)\n",
        )
        .unwrap();
        let problems = check(&root).unwrap();
        std::fs::remove_dir_all(&root).unwrap();
        let lines: Vec<String> = problems
            .iter()
            .map(|p| p.split(": ").next().unwrap().to_owned())
            .collect();
        assert_eq!(
            lines,
            [
                "docs/a.md:4",
                "docs/a.md:5",
                "docs/a.md:6",
                "docs/a.md:7",
                "docs/a.md:8",
                "docs/a.md:9"
            ],
            "{problems:#?}"
        );
        assert!(problems[0].contains("no file"), "{}", problems[0]);
        assert!(
            problems[1].contains("no heading #no-such-part"),
            "{}",
            problems[1]
        );
        assert!(
            problems[2].contains("no heading #nowhere"),
            "{}",
            problems[2]
        );
        assert!(problems[3].contains("outside docs/"), "{}", problems[3]);
        assert!(problems[4].contains("absolute"), "{}", problems[4]);
        assert!(problems[5].contains("not a page"), "{}", problems[5]);
    }

    #[test]
    fn the_book_links_resolve() {
        let problems = check(&xtask::util::workspace_root()).unwrap();
        assert!(problems.is_empty(), "{problems:#?}");
    }
}
