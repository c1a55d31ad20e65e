//! File-level import cycles inside each crate: which source file names an item of which other
//! file (`use` trees, `crate::`, `super::` and `self::` paths, paths through child modules and
//! imported module names), and the loops in that graph.
//!
//! The parser is deliberately small: it strips comments and literals, reads tokens, follows
//! `mod` declarations from each crate root (`src/lib.rs`, `src/main.rs`), records what every module
//! defines and imports, and resolves a path to the file that defines its item, following re-exports
//! (`pub use`) and globs. Items under `#[cfg(test)]` or `#[cfg(doc)]` are left out: a loop through
//! test code or doc links says nothing of the library's shape. `#[path]` attributes are not read
//! (the workspace uses none in its sources).

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::fs;
use std::path::{Path, PathBuf};

/// The import cycles of every crate under `root` (the workspace root: each directory of
/// `crates/` and `xtask`), each a list of files relative to `root`, starting at its smallest
/// path, the file it imports next and so on; for each import that lies on a loop, the
/// shortest loop through it is reported once.
pub(crate) fn import_cycles(root: &Path) -> Vec<Vec<PathBuf>> {
    let mut cycles = Vec::new();
    for package in packages(root) {
        for crate_root in ["src/lib.rs", "src/main.rs"] {
            let file = package.join(crate_root);
            if file.is_file() {
                let tree = ModuleTree::read(&file);
                for cycle in tree.cycles() {
                    cycles.push(
                        cycle
                            .into_iter()
                            .map(|path| {
                                path.strip_prefix(root)
                                    .map(Path::to_path_buf)
                                    .unwrap_or(path)
                            })
                            .collect(),
                    );
                }
            }
        }
    }
    cycles
}

/// The package directories whose crates are checked: each of `crates/*`, and `xtask`.
fn packages(root: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = fs::read_dir(root.join("crates"))
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|entry| entry.path())
                .filter(|path| path.join("Cargo.toml").is_file())
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    if root.join("xtask/Cargo.toml").is_file() {
        found.push(root.join("xtask"));
    }
    found
}

/// A module's path from its crate root (`[]` is the root).
type ModPath = Vec<String>;

/// One name a `use` tree brings in: the path as written and the name it is bound to (`None`
/// for a glob).
#[derive(Debug, Clone)]
struct UseItem {
    segments: Vec<String>,
    binding: Option<String>,
}

/// A path named somewhere in a file, with the module it was written in.
#[derive(Debug, Clone)]
struct Reference {
    module: ModPath,
    segments: Vec<String>,
}

/// What the parser knows of one module.
#[derive(Debug, Default)]
struct Module {
    file: PathBuf,
    children: BTreeSet<String>,
    definitions: BTreeSet<String>,
    /// Module-level `use` items, by which names in the module resolve.
    uses: Vec<UseItem>,
}

/// Every module of one crate and every path its files name.
#[derive(Debug, Default)]
struct ModuleTree {
    modules: BTreeMap<ModPath, Module>,
    references: Vec<(PathBuf, Reference)>,
}

impl ModuleTree {
    /// Reads the crate whose root file is `root`, following its `mod` declarations.
    fn read(root: &Path) -> Self {
        let mut tree = ModuleTree::default();
        let mut pending = vec![(Vec::new(), root.to_path_buf(), true)];
        while let Some((path, file, owns_dir)) = pending.pop() {
            let Ok(text) = fs::read_to_string(&file) else {
                continue;
            };
            let dir = if owns_dir {
                file.parent().map(Path::to_path_buf).unwrap_or_default()
            } else {
                let stem = file.file_stem().map(|s| s.to_string_lossy().into_owned());
                file.with_file_name(stem.unwrap_or_default())
            };
            let tokens = tokenize(&strip(&text));
            for (child_path, inline_dir) in tree.parse_file(&path, &file, &tokens) {
                let name = child_path.last().cloned().unwrap_or_default();
                let base = inline_dir
                    .iter()
                    .fold(dir.clone(), |base, segment| base.join(segment));
                let flat = base.join(format!("{name}.rs"));
                let nested = base.join(&name).join("mod.rs");
                if flat.is_file() {
                    pending.push((child_path, flat, false));
                } else if nested.is_file() {
                    pending.push((child_path, nested, true));
                }
            }
        }
        tree
    }

    /// Records the modules, definitions, uses and references of one file; returns the file
    /// modules it declares, each with the inline modules it sits in within this file.
    fn parse_file(
        &mut self,
        module: &ModPath,
        file: &Path,
        tokens: &[Token],
    ) -> Vec<(ModPath, Vec<String>)> {
        let mut declared = Vec::new();
        // The inline modules open at this point: (path, brace depth of its body).
        let mut scopes: Vec<(ModPath, usize)> = vec![(module.clone(), 0)];
        let mut inline_dirs: Vec<String> = Vec::new();
        self.modules.entry(module.clone()).or_default().file = file.to_path_buf();
        let mut depth = 0usize;
        let mut cfg_test = false;
        // Names this file re-exports, and every bare name it uses.
        let mut reexported: Vec<(String, Reference)> = Vec::new();
        let mut used: BTreeSet<String> = BTreeSet::new();
        let mut i = 0;
        while i < tokens.len() {
            let (current, body_depth) = match scopes.last() {
                Some((path, body)) => (path.clone(), *body),
                None => (module.clone(), 0),
            };
            let at_module_level = depth == body_depth;
            match &tokens[i] {
                Token::Punct('#') if is_cfg_test(tokens, i) => {
                    cfg_test = true;
                    i = skip_attribute(tokens, i);
                    continue;
                }
                Token::Punct('#') => {
                    i = skip_attribute(tokens, i);
                    continue;
                }
                _ if cfg_test => {
                    // The whole item under `#[cfg(test)]` is skipped: to its `;` or its block.
                    i = skip_item(tokens, i);
                    cfg_test = false;
                    continue;
                }
                Token::Punct('{') => depth += 1,
                Token::Punct('}') => {
                    depth = depth.saturating_sub(1);
                    if scopes.len() > 1 && depth + 1 == body_depth {
                        scopes.pop();
                        inline_dirs.pop();
                    }
                }
                Token::Ident(word) if word == "mod" && at_module_level => {
                    if let Some(Token::Ident(name)) = tokens.get(i + 1) {
                        let mut child = current.clone();
                        child.push(name.clone());
                        self.modules
                            .entry(current.clone())
                            .or_default()
                            .children
                            .insert(name.clone());
                        match tokens.get(i + 2) {
                            Some(Token::Punct('{')) => {
                                self.modules.entry(child.clone()).or_default().file =
                                    file.to_path_buf();
                                depth += 1;
                                scopes.push((child, depth));
                                inline_dirs.push(name.clone());
                                i += 3;
                                continue;
                            }
                            _ => declared.push((child, inline_dirs.clone())),
                        }
                        i += 2;
                        continue;
                    }
                }
                Token::Ident(word) if word == "use" => {
                    let end = statement_end(tokens, i + 1);
                    let mut items = Vec::new();
                    parse_use_tree(&tokens[i + 1..end], &[], &mut items);
                    // A re-export (`pub use`) passes a name on for others; it is followed
                    // when they are resolved, and is an import only if this file uses the
                    // name itself.
                    let reexport = is_public(tokens, i);
                    for item in &items {
                        let reference = Reference {
                            module: current.clone(),
                            segments: item.segments.clone(),
                        };
                        match (&item.binding, reexport) {
                            (_, false) => self.references.push((file.to_path_buf(), reference)),
                            (Some(name), true) => reexported.push((name.clone(), reference)),
                            (None, true) => {}
                        }
                    }
                    if at_module_level {
                        self.modules
                            .entry(current.clone())
                            .or_default()
                            .uses
                            .extend(items);
                    }
                    i = end;
                    continue;
                }
                Token::Ident(word) if at_module_level && is_item_keyword(word) => {
                    if let Some(name) = defined_name(tokens, i) {
                        self.modules
                            .entry(current.clone())
                            .or_default()
                            .definitions
                            .insert(name);
                    }
                }
                Token::Ident(first) if !follows_path_separator(tokens, i) => {
                    if matches!(tokens.get(i + 1), Some(Token::PathSep)) {
                        let (segments, end) = read_path(tokens, i, first);
                        self.references.push((
                            file.to_path_buf(),
                            Reference {
                                module: current.clone(),
                                segments,
                            },
                        ));
                        i = end;
                        continue;
                    }
                    used.insert(first.clone());
                }
                _ => {}
            }
            i += 1;
        }
        for (name, reference) in reexported {
            if used.contains(&name) {
                self.references.push((file.to_path_buf(), reference));
            }
        }
        declared
    }

    /// The file each reference leads to, as edges between files (a file naming its own items
    /// is no edge).
    fn edges(&self) -> BTreeMap<PathBuf, BTreeSet<PathBuf>> {
        let mut edges: BTreeMap<PathBuf, BTreeSet<PathBuf>> = BTreeMap::new();
        for module in self.modules.values() {
            edges.entry(module.file.clone()).or_default();
        }
        for (file, reference) in &self.references {
            if let Some(target) = self.resolve(&reference.module, &reference.segments, 0)
                && &target != file
            {
                edges.entry(file.clone()).or_default().insert(target);
            }
        }
        edges
    }

    /// The file defining what `segments`, written in `module`, names; `None` for paths
    /// outside the crate.
    fn resolve(&self, module: &ModPath, segments: &[String], hops: usize) -> Option<PathBuf> {
        if hops > 16 {
            return None;
        }
        let Some((start, rest)) = self.start_of(module, segments, hops) else {
            // A path through an imported item (`Type::new`) leads to the item's file.
            let first = segments.first()?;
            let import = self
                .modules
                .get(module)?
                .uses
                .iter()
                .find(|item| item.binding.as_deref() == Some(first.as_str()))?;
            return self.resolve(module, &import.segments, hops + 1);
        };
        let mut current = start;
        let mut index = 0;
        while let Some(segment) = rest.get(index) {
            let children = &self.modules.get(&current)?.children;
            if !children.contains(segment) {
                break;
            }
            current.push(segment.clone());
            index += 1;
        }
        match rest.get(index) {
            None => self.modules.get(&current).map(|m| m.file.clone()),
            Some(leaf) => self.find_item(&current, leaf, hops + 1),
        }
    }

    /// Where a path starts: the module its first segments name and the segments left.
    fn start_of(
        &self,
        module: &ModPath,
        segments: &[String],
        hops: usize,
    ) -> Option<(ModPath, Vec<String>)> {
        let first = segments.first()?;
        match first.as_str() {
            "crate" => Some((Vec::new(), segments[1..].to_vec())),
            "self" => Some((module.clone(), segments[1..].to_vec())),
            "super" => {
                let mut current = module.clone();
                let mut index = 0;
                while segments.get(index).map(String::as_str) == Some("super") {
                    current.pop()?;
                    index += 1;
                }
                Some((current, segments[index..].to_vec()))
            }
            _ => {
                let here = self.modules.get(module)?;
                if here.children.contains(first) {
                    return Some((module.clone(), segments.to_vec()));
                }
                // A name imported into this module: continue from what it names.
                let import = here
                    .uses
                    .iter()
                    .find(|item| item.binding.as_deref() == Some(first.as_str()))?;
                let target = self.module_named(module, &import.segments, hops + 1)?;
                Some((target, segments[1..].to_vec()))
            }
        }
    }

    /// The module a path names, if it names one.
    fn module_named(&self, module: &ModPath, segments: &[String], hops: usize) -> Option<ModPath> {
        if hops > 16 {
            return None;
        }
        let (mut current, rest) = self.start_of(module, segments, hops)?;
        for segment in rest {
            if !self.modules.get(&current)?.children.contains(&segment) {
                return None;
            }
            current.push(segment);
        }
        Some(current)
    }

    /// The file defining `name` as seen in `module`: defined there, imported or re-exported
    /// there (followed), or brought in by a glob; the module's own file when none says.
    fn find_item(&self, module: &ModPath, name: &str, hops: usize) -> Option<PathBuf> {
        let here = self.modules.get(module)?;
        if here.definitions.contains(name) || hops > 16 {
            return Some(here.file.clone());
        }
        if let Some(import) = here
            .uses
            .iter()
            .find(|item| item.binding.as_deref() == Some(name))
        {
            return self
                .resolve(module, &import.segments, hops + 1)
                .or_else(|| Some(here.file.clone()));
        }
        for glob in here.uses.iter().filter(|item| item.binding.is_none()) {
            if let Some(target) = self.module_named(module, &glob.segments, hops + 1)
                && self
                    .modules
                    .get(&target)
                    .is_some_and(|m| m.definitions.contains(name))
            {
                return self.find_item(&target, name, hops + 1);
            }
        }
        Some(here.file.clone())
    }

    /// For each edge on a loop, the shortest loop through it, each loop once.
    fn cycles(&self) -> Vec<Vec<PathBuf>> {
        let edges = self.edges();
        let mut found = BTreeSet::new();
        for (from, targets) in &edges {
            for to in targets {
                if let Some(back) = shortest_path(&edges, to, from) {
                    // `back` runs from `to` to `from`; the loop is from, to, ..., (from).
                    let mut cycle = vec![from.clone()];
                    cycle.extend(back.into_iter().take_while(|file| file != from));
                    found.insert(rotate_to_smallest(cycle));
                }
            }
        }
        found.into_iter().collect()
    }
}

/// The shortest path from `from` to `to` (both included), breadth first.
fn shortest_path(
    edges: &BTreeMap<PathBuf, BTreeSet<PathBuf>>,
    from: &PathBuf,
    to: &PathBuf,
) -> Option<Vec<PathBuf>> {
    let mut previous: HashMap<&PathBuf, &PathBuf> = HashMap::new();
    let mut queue = VecDeque::from([from]);
    let mut seen = BTreeSet::from([from]);
    while let Some(node) = queue.pop_front() {
        if node == to {
            let mut path = vec![node.clone()];
            let mut at = node;
            while let Some(prev) = previous.get(at) {
                path.push((*prev).clone());
                at = prev;
            }
            path.reverse();
            return Some(path);
        }
        for next in edges.get(node).into_iter().flatten() {
            if seen.insert(next) {
                previous.insert(next, node);
                queue.push_back(next);
            }
        }
    }
    None
}

/// The same loop starting at its smallest file, so each loop is reported once.
fn rotate_to_smallest(mut cycle: Vec<PathBuf>) -> Vec<PathBuf> {
    if let Some(start) = (0..cycle.len()).min_by_key(|&i| &cycle[i]) {
        cycle.rotate_left(start);
    }
    cycle
}

/// A token of stripped source: what the parser needs and nothing more.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Ident(String),
    PathSep,
    Punct(char),
}

/// The source with comments, string and character literals blanked out.
fn strip(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut nesting = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    nesting += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    nesting -= 1;
                    i += 2;
                    if nesting == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if let Some(hashes) = raw_string_start(&chars, i) {
            // r"..", r#".."#, br".." and so on: skip to the quote and as many hashes.
            i += chars[i..].iter().position(|&ch| ch == '"').unwrap_or(0) + 1;
            while i < chars.len() {
                if chars[i] == '"'
                    && chars[i + 1..]
                        .iter()
                        .take(hashes)
                        .filter(|&&h| h == '#')
                        .count()
                        == hashes
                {
                    i += 1 + hashes;
                    break;
                }
                i += 1;
            }
            out.push_str("\"\"");
            continue;
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
            continue;
        } else if c == '\'' {
            // A character literal ('x', '\n', '\u{..}'), not a lifetime ('a).
            let close = if next == Some('\\') {
                chars[i + 2..]
                    .iter()
                    .position(|&ch| ch == '\'')
                    .map(|p| i + 2 + p)
            } else if chars.get(i + 2) == Some(&'\'') {
                Some(i + 2)
            } else {
                None
            };
            match close {
                Some(end) => {
                    i = end + 1;
                    out.push(' ');
                }
                None => {
                    out.push(c);
                    i += 1;
                }
            }
            continue;
        } else {
            out.push(c);
            i += 1;
            continue;
        }
    }
    out
}

/// The number of hashes of a raw string literal starting at `i`, if one does.
fn raw_string_start(chars: &[char], i: usize) -> Option<usize> {
    if i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_') {
        return None;
    }
    let mut j = i;
    if chars.get(j) == Some(&'b') {
        j += 1;
    }
    if chars.get(j) != Some(&'r') {
        return None;
    }
    j += 1;
    let mut hashes = 0;
    while chars.get(j) == Some(&'#') {
        hashes += 1;
        j += 1;
    }
    (chars.get(j) == Some(&'"')).then_some(hashes)
}

/// Identifiers, `::` and single punctuation characters; literals are left out.
fn tokenize(text: &str) -> Vec<Token> {
    let chars: Vec<char> = text.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let word = word.strip_prefix("r#").map(str::to_owned).unwrap_or(word);
            tokens.push(Token::Ident(word));
        } else if c.is_ascii_digit() {
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
        } else if c == ':' && chars.get(i + 1) == Some(&':') {
            tokens.push(Token::PathSep);
            i += 2;
        } else if c == '\'' {
            // A lifetime ('a, 'static) names no item.
            i += 1;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
        } else {
            if !c.is_whitespace() && c != '"' {
                tokens.push(Token::Punct(c));
            }
            i += 1;
        }
    }
    tokens
}

/// Whether the attribute at `i` is exactly `#[cfg(test)]` or `#[cfg(doc)]`: what it marks
/// is not part of the library's code (an import only doc links use is no dependency).
fn is_cfg_test(tokens: &[Token], i: usize) -> bool {
    ["test", "doc"].iter().any(|flag| {
        let expected = [
            Token::Punct('#'),
            Token::Punct('['),
            Token::Ident("cfg".into()),
            Token::Punct('('),
            Token::Ident((*flag).into()),
            Token::Punct(')'),
            Token::Punct(']'),
        ];
        tokens.get(i..i + expected.len()) == Some(&expected[..])
    })
}

/// The index after the attribute starting at `i` (`#[..]` or `#![..]`).
fn skip_attribute(tokens: &[Token], mut i: usize) -> usize {
    i += 1;
    if tokens.get(i) == Some(&Token::Punct('!')) {
        i += 1;
    }
    if tokens.get(i) != Some(&Token::Punct('[')) {
        return i;
    }
    let mut nesting = 0;
    while let Some(token) = tokens.get(i) {
        match token {
            Token::Punct('[') => nesting += 1,
            Token::Punct(']') => {
                nesting -= 1;
                if nesting == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    i
}

/// The index after the item starting at `i`: its `;`, or the end of its first block.
fn skip_item(tokens: &[Token], mut i: usize) -> usize {
    while let Some(token) = tokens.get(i) {
        match token {
            Token::Punct(';') => return i + 1,
            Token::Punct('{') => {
                let mut nesting = 0;
                while let Some(token) = tokens.get(i) {
                    match token {
                        Token::Punct('{') => nesting += 1,
                        Token::Punct('}') => {
                            nesting -= 1;
                            if nesting == 0 {
                                return i + 1;
                            }
                        }
                        _ => {}
                    }
                    i += 1;
                }
                return i;
            }
            _ => {}
        }
        i += 1;
    }
    i
}

/// The index of the `;` ending the statement that starts at `i`.
fn statement_end(tokens: &[Token], mut i: usize) -> usize {
    while let Some(token) = tokens.get(i) {
        if token == &Token::Punct(';') {
            return i;
        }
        i += 1;
    }
    i
}

/// Whether the item whose keyword is at `i` is declared `pub` (`pub`, `pub(crate)`, ...).
fn is_public(tokens: &[Token], i: usize) -> bool {
    let Some(before) = i.checked_sub(1).and_then(|j| tokens.get(j)) else {
        return false;
    };
    match before {
        Token::Ident(word) => word == "pub",
        Token::Punct(')') => tokens[..i - 1]
            .iter()
            .rposition(|token| token == &Token::Punct('('))
            .and_then(|open| open.checked_sub(1))
            .is_some_and(|j| tokens[j] == Token::Ident("pub".into())),
        _ => false,
    }
}

/// Whether the token before `i` is `::` (so `i` is inside a path, not its start).
fn follows_path_separator(tokens: &[Token], i: usize) -> bool {
    i > 0 && tokens[i - 1] == Token::PathSep
}

/// The segments of the path starting at `i` with `first`, and the index after it.
fn read_path(tokens: &[Token], i: usize, first: &str) -> (Vec<String>, usize) {
    let mut segments = vec![first.to_owned()];
    let mut j = i + 1;
    while tokens.get(j) == Some(&Token::PathSep) {
        match tokens.get(j + 1) {
            Some(Token::Ident(next)) => {
                segments.push(next.clone());
                j += 2;
            }
            _ => break,
        }
    }
    (segments, j)
}

/// Keywords after which the next identifier is the name of an item.
fn is_item_keyword(word: &str) -> bool {
    matches!(
        word,
        "struct" | "enum" | "fn" | "trait" | "type" | "const" | "static" | "union" | "macro_rules"
    )
}

/// The name the item keyword at `i` defines (`const fn` defines through its `fn`).
fn defined_name(tokens: &[Token], i: usize) -> Option<String> {
    let mut j = i + 1;
    if tokens.get(j) == Some(&Token::Punct('!')) {
        j += 1;
    }
    match tokens.get(j)? {
        Token::Ident(name)
            if !matches!(name.as_str(), "fn" | "unsafe" | "async" | "extern" | "mut") =>
        {
            Some(name.clone())
        }
        Token::Ident(_) => None,
        _ => None,
    }
}

/// Reads a `use` tree (without `use` and `;`) under `prefix` into `items`.
fn parse_use_tree(tokens: &[Token], prefix: &[String], items: &mut Vec<UseItem>) {
    // A leading `::` names an external crate.
    if tokens.first() == Some(&Token::PathSep) {
        return;
    }
    let mut segments = prefix.to_vec();
    let mut binding = None;
    for (i, token) in tokens.iter().enumerate() {
        match token {
            Token::Ident(word) if word == "as" => {
                if let Some(Token::Ident(alias)) = tokens.get(i + 1) {
                    binding = Some(alias.clone());
                }
                break;
            }
            Token::Ident(word) => segments.push(word.clone()),
            Token::PathSep => {}
            Token::Punct('*') => {
                items.push(UseItem {
                    segments,
                    binding: None,
                });
                return;
            }
            Token::Punct('{') => {
                let end = matching_brace(tokens, i);
                for part in split_top_level(&tokens[i + 1..end]) {
                    parse_use_tree(part, &segments, items);
                }
                return;
            }
            _ => return,
        }
    }
    if segments.len() == prefix.len() {
        return;
    }
    // `use a::b::{self}` names the module `b`.
    if segments.last().map(String::as_str) == Some("self") {
        segments.pop();
    }
    let binding = binding.or_else(|| segments.last().cloned());
    items.push(UseItem { segments, binding });
}

/// The index of the `}` closing the `{` at `open`.
fn matching_brace(tokens: &[Token], open: usize) -> usize {
    let mut nesting = 0;
    for (i, token) in tokens.iter().enumerate().skip(open) {
        match token {
            Token::Punct('{') => nesting += 1,
            Token::Punct('}') => {
                nesting -= 1;
                if nesting == 0 {
                    return i;
                }
            }
            _ => {}
        }
    }
    tokens.len()
}

/// The parts of a brace group's contents separated by top-level commas.
fn split_top_level(tokens: &[Token]) -> Vec<&[Token]> {
    let mut parts = Vec::new();
    let mut nesting = 0;
    let mut start = 0;
    for (i, token) in tokens.iter().enumerate() {
        match token {
            Token::Punct('{') => nesting += 1,
            Token::Punct('}') => nesting -= 1,
            Token::Punct(',') if nesting == 0 => {
                parts.push(&tokens[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if start < tokens.len() {
        parts.push(&tokens[start..]);
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A crate written into a fresh temporary directory, removed when dropped.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(name: &str, files: &[(&str, &str)]) -> Self {
            let root = std::env::temp_dir()
                .join(format!("rudder-tidy-cycles-{name}-{}", std::process::id()));
            let _ = fs::remove_dir_all(&root);
            for (path, text) in files {
                let file = root.join("crates/demo").join(path);
                fs::create_dir_all(file.parent().unwrap()).unwrap();
                fs::write(file, text).unwrap();
            }
            fs::write(root.join("crates/demo/Cargo.toml"), "").unwrap();
            Scratch(root)
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn names(cycles: Vec<Vec<PathBuf>>) -> Vec<Vec<String>> {
        cycles
            .into_iter()
            .map(|cycle| {
                cycle
                    .into_iter()
                    .map(|p| p.to_string_lossy().replace("crates/demo/src/", ""))
                    .collect()
            })
            .collect()
    }

    #[test]
    fn two_files_naming_each_other_are_a_cycle() {
        let scratch = Scratch::new(
            "pair",
            &[
                ("src/lib.rs", "mod a;\nmod b;\n"),
                ("src/a.rs", "use crate::b::B;\npub struct A;\n"),
                (
                    "src/b.rs",
                    "pub struct B;\nfn f() { let _ = crate::a::A; }\n",
                ),
            ],
        );
        assert_eq!(names(import_cycles(&scratch.0)), vec![vec!["a.rs", "b.rs"]]);
    }

    #[test]
    fn a_re_export_leads_to_the_defining_file() {
        // lib.rs re-exports `B`; `a` naming `crate::B` depends on b.rs, not lib.rs, so the
        // root's declarations make no loop.
        let scratch = Scratch::new(
            "reexport",
            &[
                (
                    "src/lib.rs",
                    "mod a;\nmod b;\npub use b::B;\npub use a::A;\n",
                ),
                ("src/a.rs", "use crate::B;\npub struct A;\n"),
                ("src/b.rs", "pub struct B;\n"),
            ],
        );
        assert!(import_cycles(&scratch.0).is_empty());
    }

    #[test]
    fn a_name_defined_in_the_root_and_used_below_it_loops_through_the_root() {
        // The root re-exporting `A` is no import, but the root calling into `a` is.
        let scratch = Scratch::new(
            "root",
            &[
                (
                    "src/lib.rs",
                    "mod a;\npub use a::A;\npub type Nanos = u64;\npub fn f() -> A { a::make() }\n",
                ),
                (
                    "src/a.rs",
                    "use crate::{Nanos, a as _};\npub struct A(Nanos);\npub fn make() -> A { A(0) }\n",
                ),
            ],
        );
        assert_eq!(
            names(import_cycles(&scratch.0)),
            vec![vec!["a.rs", "lib.rs"]]
        );
    }

    #[test]
    fn a_re_export_the_file_uses_itself_is_an_import() {
        let scratch = Scratch::new(
            "reexport-used",
            &[
                (
                    "src/lib.rs",
                    "mod a;\nmod b;\npub use a::Event;\npub struct Holder(Vec<Event>);\n",
                ),
                (
                    "src/a.rs",
                    "pub struct Event;\nfn f(_: &crate::Holder) {}\n",
                ),
                ("src/b.rs", "pub use crate::a::Event as Unused;\n"),
            ],
        );
        assert_eq!(
            names(import_cycles(&scratch.0)),
            vec![vec!["a.rs", "lib.rs"]]
        );
    }

    #[test]
    fn nested_modules_super_paths_and_test_code() {
        let scratch = Scratch::new(
            "nested",
            &[
                ("src/lib.rs", "mod m;\n"),
                (
                    "src/m/mod.rs",
                    "mod inner;\nuse inner::X;\npub(crate) struct Y;\n// use crate::m::inner::Z;\n",
                ),
                (
                    "src/m/inner.rs",
                    "pub struct X;\nconst S: &str = \"super::Y\";\n#[cfg(doc)]\nuse super::Y;\n#[cfg(test)]\nmod tests { use super::super::Y; }\n",
                ),
            ],
        );
        // The inner file names `Y` only in a string, a doc-only import and test code: no loop.
        assert!(import_cycles(&scratch.0).is_empty());
        fs::write(
            scratch.0.join("crates/demo/src/m/inner.rs"),
            "use super::{self as parent, Y};\npub struct X(Y);\n",
        )
        .unwrap();
        assert_eq!(
            names(import_cycles(&scratch.0)),
            vec![vec!["m/inner.rs", "m/mod.rs"]]
        );
    }
}
