//! `cargo xtask public-api`: each publishable crate's public API, one line per public item
//! and path, in `crates/<dir>/public-api.txt`, so that every change to the surface is a
//! visible diff.
//!
//! The surface is read from rustdoc's JSON output (nightly's `--output-format json`, all
//! features on) with the `rustdoc-types` crate at the version whose `FORMAT_VERSION` is the
//! installed nightly's: a nightly that writes another format fails with the version to move
//! to. One `cargo +nightly doc --no-deps` documents every crate at once, so their
//! dependencies are checked once and in parallel.
//!
//! The walk starts at the crate root and follows every public module, item and re-export
//! (`pub use`, globs included), so an item reachable at three paths has three lines. Each
//! line is the item's kind, its path and, for functions, fields, constants, statics and type
//! aliases, its signature; an inherent method or associated item is listed under each path
//! of its type, a trait implementation (but auto-trait and blanket ones) as `impl Trait for
//! Path`. A re-export of another crate's item names the item's path in that crate
//! (`= rudder_core::BoxError`). The lines are sorted and unique, so a run gives the same
//! file as the last one when nothing changed.
//!
//! `--check` compares instead of writing, and fails naming each crate whose surface differs
//! from its file, with the lines added and removed. `--paths` prints, per crate, how many
//! public paths reach each item that has more than one.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use rustdoc_types::{
    Crate, GenericArg, GenericArgs, GenericBound, GenericParamDef, GenericParamDefKind, Generics,
    Id, Item, ItemEnum, StructKind, Term, Type, VariantKind, Visibility, WherePredicate,
};
use xtask::util::{run as sh, workspace_root};

/// The name of each crate's committed API file, beside its `Cargo.toml`.
pub(crate) const FILE: &str = "public-api.txt";

/// What `cargo xtask public-api` does.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Mode {
    /// Write each crate's file.
    Write,
    /// Fail when a crate's surface is not its file.
    Check,
    /// Print the number of paths per item.
    Paths,
}

/// A publishable crate: its package name, library name and directory.
struct Package {
    name: String,
    lib: String,
    dir: PathBuf,
}

/// The library's name: `[lib]`'s `name`, or the package's with `_` for `-`.
pub(crate) fn lib_name(manifest: &str, package: &str) -> String {
    manifest
        .lines()
        .skip_while(|l| l.trim() != "[lib]")
        .skip(1)
        .take_while(|l| !l.trim_start().starts_with('['))
        .find_map(|l| {
            let (key, value) = l.split_once('=')?;
            (key.trim() == "name").then(|| value.trim().trim_matches('"').to_owned())
        })
        .unwrap_or_else(|| package.replace('-', "_"))
}

/// Runs `cargo xtask public-api` in `mode`.
pub(crate) fn run(mode: Mode) -> Result<(), String> {
    let root = workspace_root();
    let packages = publishable(&root)?;
    let apis = build(&root, &packages)?;
    let mut stale = Vec::new();
    for (package, api) in packages.iter().zip(&apis) {
        let file = package.dir.join(FILE);
        let shown = file
            .strip_prefix(&root)
            .unwrap_or(&file)
            .display()
            .to_string();
        match mode {
            Mode::Write => {
                std::fs::write(&file, api.text())
                    .map_err(|e| format!("writing {}: {e}", file.display()))?;
                println!("{shown}: {} lines", api.lines.len());
            }
            Mode::Check => {
                let committed = std::fs::read_to_string(&file).unwrap_or_default();
                if let Some(diff) = compare(&committed, &api.text()) {
                    stale.push(format!(
                        "{}: the public API is not {shown} (run `cargo xtask public-api` and commit the file):\n{diff}",
                        package.name
                    ));
                }
            }
            Mode::Paths => print!("{}", paths_report(&package.name, api)),
        }
    }
    if mode == Mode::Paths {
        // Every crate's paths to one item together: `rudder_core::BoxError` at its own
        // path and at the facade's re-exports.
        let mut all = Api::default();
        for api in &apis {
            for (key, paths) in &api.paths {
                all.paths
                    .entry(key.clone())
                    .or_default()
                    .extend(paths.iter().cloned());
            }
            all.aliases.extend(api.aliases.iter().cloned());
        }
        through_aliases(&mut all);
        print!("{}", paths_report("all publishable crates", &all));
    }
    if stale.is_empty() {
        if mode == Mode::Check {
            println!(
                "public-api: the surface of {} crates is their committed {FILE}",
                packages.len()
            );
        }
        Ok(())
    } else {
        Err(stale.join("\n"))
    }
}

/// The publishable packages under `root/crates` (no `publish = false`), by name.
fn publishable(root: &Path) -> Result<Vec<Package>, String> {
    let dir = root.join("crates");
    let entries = std::fs::read_dir(&dir).map_err(|e| format!("reading {}: {e}", dir.display()))?;
    let mut packages = Vec::new();
    for entry in entries.filter_map(Result::ok) {
        let Ok(text) = std::fs::read_to_string(entry.path().join("Cargo.toml")) else {
            continue;
        };
        if let Some(manifest) = crate::manifests::parse(&text)
            && manifest.publish
        {
            packages.push(Package {
                lib: lib_name(&text, &manifest.name),
                name: manifest.name,
                dir: entry.path(),
            });
        }
    }
    packages.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(packages)
}

/// Documents `packages` as JSON with nightly (all features) and reads each one's surface.
fn build(root: &Path, packages: &[Package]) -> Result<Vec<Api>, String> {
    let mut cmd = nightly_cargo();
    cmd.current_dir(root)
        .args(["+nightly", "doc", "--no-deps", "--all-features"])
        .env("RUSTDOCFLAGS", "-Z unstable-options --output-format json");
    for package in packages {
        cmd.args(["--package", &package.name]);
    }
    sh(&mut cmd)?;
    let doc = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| root.join("target"), PathBuf::from)
        .join("doc");
    packages
        .iter()
        .map(|package| {
            let json = doc.join(format!("{}.json", package.lib));
            let text = std::fs::read_to_string(&json)
                .map_err(|e| format!("reading {}: {e}", json.display()))?;
            read_api(&text).map_err(|e| format!("{}: {e}", json.display()))
        })
        .collect()
}

/// The rustup proxy's cargo, with the task's environment but the toolchain variables that
/// would pin the stable toolchain this task runs under (`+nightly` is the proxy's).
pub(crate) fn nightly_cargo() -> std::process::Command {
    let mut cmd = xtask::util::cargo_of_path();
    cmd.env_remove("RUSTUP_TOOLCHAIN")
        .env_remove("CARGO")
        .env_remove("RUSTC")
        .env_remove("RUSTDOC");
    cmd
}

/// A crate's public surface.
#[derive(Debug, Default)]
pub(crate) struct Api {
    /// One line per public item and path, sorted.
    pub(crate) lines: BTreeSet<String>,
    /// The paths that reach each item, the item named by its path where it is defined.
    pub(crate) paths: BTreeMap<String, BTreeSet<String>>,
    /// Another crate's modules re-exported here: (the path here, the module's path there).
    pub(crate) aliases: Vec<(String, String)>,
}

impl Api {
    /// The file's text: the lines, each ended by a newline.
    pub(crate) fn text(&self) -> String {
        self.lines.iter().fold(String::new(), |mut out, line| {
            out.push_str(line);
            out.push('\n');
            out
        })
    }
}

/// Reads rustdoc's JSON for one crate.
pub(crate) fn read_api(json: &str) -> Result<Api, String> {
    #[derive(serde::Deserialize)]
    struct Version {
        format_version: u32,
    }
    let version: Version = serde_json::from_str(json)
        .map_err(|e| format!("not rustdoc's JSON (no format_version): {e}"))?;
    if version.format_version != rustdoc_types::FORMAT_VERSION {
        return Err(format!(
            "rustdoc's JSON format {} is not {} (rustdoc-types' in xtask/Cargo.toml): move \
             rustdoc-types to the release for format {}, or nightly to one that writes format {}",
            version.format_version,
            rustdoc_types::FORMAT_VERSION,
            version.format_version,
            rustdoc_types::FORMAT_VERSION
        ));
    }
    let krate: Crate =
        serde_json::from_str(json).map_err(|e| format!("reading rustdoc's JSON: {e}"))?;
    let mut walk = Walk {
        krate: &krate,
        api: Api::default(),
        stack: Vec::new(),
    };
    let root = krate
        .index
        .get(&krate.root)
        .ok_or("rustdoc's JSON has no root module")?;
    let name = root.name.clone().unwrap_or_default();
    walk.module(&krate.root, &name);
    Ok(walk.api)
}

/// The walk from the crate root over every public path.
struct Walk<'a> {
    krate: &'a Crate,
    api: Api,
    /// The modules being walked, so that a re-export of an enclosing module ends.
    stack: Vec<Id>,
}

impl Walk<'_> {
    fn item(&self, id: &Id) -> Option<&Item> {
        self.krate.index.get(id)
    }

    fn line(&mut self, line: String) {
        self.api.lines.insert(line);
    }

    /// Records that `path` reaches the item `key`.
    fn reach(&mut self, key: String, path: &str) {
        self.api
            .paths
            .entry(key)
            .or_default()
            .insert(path.to_owned());
    }

    fn module(&mut self, id: &Id, path: &str) {
        if self.stack.contains(id) {
            return;
        }
        let Some(Item {
            inner: ItemEnum::Module(module),
            ..
        }) = self.item(id)
        else {
            return;
        };
        let items = module.items.clone();
        self.stack.push(*id);
        for child in &items {
            let Some(item) = self.item(child) else {
                continue;
            };
            if !matches!(item.visibility, Visibility::Public) {
                continue;
            }
            match &item.inner {
                ItemEnum::Use(use_) => {
                    let (name, target, glob) = (use_.name.clone(), use_.id, use_.is_glob);
                    let source = use_.source.clone();
                    match target {
                        Some(target) if glob => {
                            if self.item(&target).is_some() {
                                self.module(&target, path);
                            } else {
                                let external = self.external_path(&target).unwrap_or(source);
                                self.line(format!("glob-use {path}::* = {external}::*"));
                            }
                        }
                        Some(target) => {
                            let at = format!("{path}::{name}");
                            if self.item(&target).is_some() {
                                self.named(&target, &at);
                            } else {
                                let external = self.external_path(&target).unwrap_or(source);
                                let kind = self
                                    .krate
                                    .paths
                                    .get(&target)
                                    .map_or_else(|| "item".to_owned(), |s| kind_name(&s.kind));
                                if kind == "mod" {
                                    self.api.aliases.push((at.clone(), external.clone()));
                                }
                                self.reach(external.clone(), &at);
                                self.line(format!("{kind} {at} = {external}"));
                            }
                        }
                        // A re-export of a primitive or of what rustdoc could not resolve.
                        None => self.line(format!("use {path}::{name} = {source}")),
                    }
                }
                _ => {
                    let Some(name) = item.name.clone() else {
                        continue;
                    };
                    self.named(child, &format!("{path}::{name}"));
                }
            }
        }
        self.stack.pop();
    }

    fn external_path(&self, id: &Id) -> Option<String> {
        self.krate.paths.get(id).map(|s| s.path.join("::"))
    }

    /// A local item at `path`, and whatever it contains.
    fn named(&mut self, id: &Id, path: &str) {
        let Some(item) = self.item(id) else {
            return;
        };
        let item = item.clone();
        // The item by its path where it is defined, so that the counts of every crate add
        // up (a re-export elsewhere names the same path).
        let key = self
            .external_path(id)
            .unwrap_or_else(|| format!("{path} (id {})", id.0));
        match &item.inner {
            ItemEnum::Module(_) => {
                self.reach(key, path);
                self.line(format!("mod {path}"));
                self.module(id, path);
            }
            ItemEnum::Struct(s) => {
                self.reach(key, path);
                self.line(format!(
                    "struct {path}{}",
                    generics(self.krate, &s.generics)
                ));
                match &s.kind {
                    StructKind::Unit => {}
                    StructKind::Tuple(fields) => {
                        for (i, field) in fields.iter().enumerate() {
                            if let Some(field) = field {
                                self.field(field, &format!("{path}::{i}"));
                            }
                        }
                    }
                    StructKind::Plain { fields, .. } => {
                        for field in fields {
                            self.field_named(field, path);
                        }
                    }
                }
                self.impls(&s.impls, path);
            }
            ItemEnum::Union(u) => {
                self.reach(key, path);
                self.line(format!("union {path}{}", generics(self.krate, &u.generics)));
                for field in &u.fields {
                    self.field_named(field, path);
                }
                self.impls(&u.impls, path);
            }
            ItemEnum::Enum(e) => {
                self.reach(key, path);
                self.line(format!("enum {path}{}", generics(self.krate, &e.generics)));
                for variant in &e.variants {
                    self.variant(variant, path);
                }
                self.impls(&e.impls, path);
            }
            ItemEnum::Function(f) => {
                self.reach(key, path);
                self.line(format!("fn {path}{}", function(self.krate, f)));
            }
            ItemEnum::Trait(t) => {
                self.reach(key, path);
                let mut head = format!("trait {path}{}", generics(self.krate, &t.generics));
                if !t.bounds.is_empty() {
                    let _ = write!(head, ": {}", bounds(self.krate, &t.bounds));
                }
                self.line(head);
                for member in &t.items {
                    self.assoc(member, path, "trait-");
                }
            }
            ItemEnum::TraitAlias(_) => {
                self.reach(key, path);
                self.line(format!("trait-alias {path}"));
            }
            ItemEnum::TypeAlias(t) => {
                self.reach(key, path);
                self.line(format!(
                    "type {path}{} = {}",
                    generics(self.krate, &t.generics),
                    ty(self.krate, &t.type_)
                ));
            }
            ItemEnum::Constant { type_, .. } => {
                self.reach(key, path);
                self.line(format!("const {path}: {}", ty(self.krate, type_)));
            }
            ItemEnum::Static(s) => {
                self.reach(key, path);
                let mutable = if s.is_mutable { "mut " } else { "" };
                self.line(format!(
                    "static {mutable}{path}: {}",
                    ty(self.krate, &s.type_)
                ));
            }
            ItemEnum::Macro(_) => {
                self.reach(key, path);
                self.line(format!("macro {path}!"));
            }
            ItemEnum::ProcMacro(_) => {
                self.reach(key, path);
                self.line(format!("proc-macro {path}"));
            }
            ItemEnum::ExternType => {
                self.reach(key, path);
                self.line(format!("extern-type {path}"));
            }
            ItemEnum::ExternCrate { name, .. } => {
                self.line(format!("extern-crate {path} = {name}"));
            }
            // A `use` is handled by its module; the rest (fields, variants, impls,
            // associated items, primitives' docs) belong to an item above.
            _ => {}
        }
    }

    fn field_named(&mut self, id: &Id, path: &str) {
        let Some(name) = self.item(id).and_then(|f| f.name.clone()) else {
            return;
        };
        self.field(id, &format!("{path}::{name}"));
    }

    fn field(&mut self, id: &Id, path: &str) {
        if let Some(Item {
            inner: ItemEnum::StructField(type_),
            visibility: Visibility::Public | Visibility::Default,
            ..
        }) = self.item(id)
        {
            let line = format!("field {path}: {}", ty(self.krate, type_));
            self.line(line);
        }
    }

    fn variant(&mut self, id: &Id, enum_path: &str) {
        let Some(Item {
            name: Some(name),
            inner: ItemEnum::Variant(variant),
            ..
        }) = self.item(id).cloned()
        else {
            return;
        };
        let path = format!("{enum_path}::{name}");
        self.line(format!("variant {path}"));
        match &variant.kind {
            VariantKind::Plain => {}
            VariantKind::Tuple(fields) => {
                for (i, field) in fields.iter().enumerate() {
                    if let Some(field) = field {
                        self.field(field, &format!("{path}::{i}"));
                    }
                }
            }
            VariantKind::Struct { fields, .. } => {
                for field in fields {
                    self.field_named(field, &path);
                }
            }
        }
    }

    /// A type's impls: the public items of its inherent ones, a line for each trait one.
    fn impls(&mut self, ids: &[Id], path: &str) {
        for id in ids {
            let Some(Item {
                inner: ItemEnum::Impl(imp),
                ..
            }) = self.item(id).cloned()
            else {
                continue;
            };
            if imp.is_synthetic || imp.blanket_impl.is_some() {
                continue;
            }
            match &imp.trait_ {
                None => {
                    for member in &imp.items {
                        if matches!(
                            self.item(member).map(|i| &i.visibility),
                            Some(Visibility::Public)
                        ) {
                            self.assoc(member, path, "");
                        }
                    }
                }
                Some(trait_) => {
                    let negative = if imp.is_negative { "!" } else { "" };
                    self.line(format!(
                        "impl{} {negative}{} for {path}",
                        generics(self.krate, &imp.generics),
                        resolved(self.krate, trait_)
                    ));
                }
            }
        }
    }

    /// An associated item of a type or trait at `owner`, its kind prefixed by `prefix`.
    fn assoc(&mut self, id: &Id, owner: &str, prefix: &str) {
        let Some(item) = self.item(id) else {
            return;
        };
        let Some(name) = &item.name else {
            return;
        };
        let path = format!("{owner}::{name}");
        let line = match &item.inner {
            ItemEnum::Function(f) => format!("{prefix}fn {path}{}", function(self.krate, f)),
            ItemEnum::AssocConst { type_, .. } => {
                format!("{prefix}const {path}: {}", ty(self.krate, type_))
            }
            ItemEnum::AssocType {
                generics: g,
                bounds: b,
                type_,
            } => {
                let mut line = format!("{prefix}type {path}{}", generics(self.krate, g));
                if !b.is_empty() {
                    let _ = write!(line, ": {}", bounds(self.krate, b));
                }
                if let Some(type_) = type_ {
                    let _ = write!(line, " = {}", ty(self.krate, type_));
                }
                line
            }
            _ => return,
        };
        self.line(line);
    }
}

/// The kind of another crate's item, as the lines name kinds.
fn kind_name(kind: &rustdoc_types::ItemKind) -> String {
    use rustdoc_types::ItemKind as K;
    match kind {
        K::Module => "mod",
        K::Struct => "struct",
        K::Union => "union",
        K::Enum => "enum",
        K::Function => "fn",
        K::Trait => "trait",
        K::TraitAlias => "trait-alias",
        K::TypeAlias => "type",
        K::Constant => "const",
        K::Static => "static",
        K::Macro => "macro",
        K::ProcAttribute | K::ProcDerive => "proc-macro",
        K::Variant => "variant",
        _ => "item",
    }
    .to_owned()
}

/// `<T: Bound, 'a>` and ` where ...`, or nothing.
fn generics(k: &Crate, g: &Generics) -> String {
    let params: Vec<String> = g
        .params
        .iter()
        .filter(|p| {
            !matches!(
                p.kind,
                GenericParamDefKind::Type {
                    is_synthetic: true,
                    ..
                }
            )
        })
        .map(|p| param(k, p))
        .collect();
    let mut out = String::new();
    if !params.is_empty() {
        let _ = write!(out, "<{}>", params.join(", "));
    }
    let predicates: Vec<String> = g
        .where_predicates
        .iter()
        .map(|p| match p {
            WherePredicate::BoundPredicate {
                type_,
                bounds: b,
                generic_params,
            } => format!(
                "{}{}: {}",
                hrtb(k, generic_params),
                ty(k, type_),
                bounds(k, b)
            ),
            WherePredicate::LifetimePredicate { lifetime, outlives } => {
                format!("{lifetime}: {}", outlives.join(" + "))
            }
            WherePredicate::EqPredicate { lhs, rhs } => {
                format!("{} = {}", ty(k, lhs), term(k, rhs))
            }
        })
        .collect();
    if !predicates.is_empty() {
        let _ = write!(out, " where {}", predicates.join(", "));
    }
    out
}

fn param(k: &Crate, p: &GenericParamDef) -> String {
    match &p.kind {
        GenericParamDefKind::Lifetime { outlives } if outlives.is_empty() => p.name.clone(),
        GenericParamDefKind::Lifetime { outlives } => {
            format!("{}: {}", p.name, outlives.join(" + "))
        }
        GenericParamDefKind::Type {
            bounds: b, default, ..
        } => {
            let mut out = p.name.clone();
            if !b.is_empty() {
                let _ = write!(out, ": {}", bounds(k, b));
            }
            if let Some(default) = default {
                let _ = write!(out, " = {}", ty(k, default));
            }
            out
        }
        GenericParamDefKind::Const { type_, default } => {
            let mut out = format!("const {}: {}", p.name, ty(k, type_));
            if let Some(default) = default {
                let _ = write!(out, " = {default}");
            }
            out
        }
    }
}

fn hrtb(k: &Crate, params: &[GenericParamDef]) -> String {
    if params.is_empty() {
        String::new()
    } else {
        let names: Vec<String> = params.iter().map(|p| param(k, p)).collect();
        format!("for<{}> ", names.join(", "))
    }
}

fn bounds(k: &Crate, b: &[GenericBound]) -> String {
    let parts: Vec<String> = b
        .iter()
        .map(|bound| match bound {
            GenericBound::TraitBound {
                trait_,
                generic_params,
                modifier,
            } => {
                let maybe = match modifier {
                    rustdoc_types::TraitBoundModifier::None => "",
                    rustdoc_types::TraitBoundModifier::Maybe => "?",
                    rustdoc_types::TraitBoundModifier::MaybeConst => "~const ",
                };
                format!("{}{maybe}{}", hrtb(k, generic_params), resolved(k, trait_))
            }
            GenericBound::Outlives(lifetime) => lifetime.clone(),
            GenericBound::Use(args) => {
                let names: Vec<&str> = args
                    .iter()
                    .map(|a| match a {
                        rustdoc_types::PreciseCapturingArg::Lifetime(n)
                        | rustdoc_types::PreciseCapturingArg::Param(n) => n.as_str(),
                    })
                    .collect();
                format!("use<{}>", names.join(", "))
            }
        })
        .collect();
    parts.join(" + ")
}

/// `(a: A, b: B) -> C` with the function's generics and qualifiers.
fn function(k: &Crate, f: &rustdoc_types::Function) -> String {
    let mut out = String::new();
    let g = generics(k, &f.generics);
    let (params, predicates) = match g.split_once(" where ") {
        Some((params, predicates)) => (params.to_owned(), Some(predicates.to_owned())),
        None => (g, None),
    };
    out.push_str(&params);
    out.push_str(&signature(k, &f.sig));
    if let Some(predicates) = predicates {
        let _ = write!(out, " where {predicates}");
    }
    let mut qualifiers = String::new();
    if f.header.is_const {
        qualifiers.push_str("const ");
    }
    if f.header.is_async {
        qualifiers.push_str("async ");
    }
    if f.header.is_unsafe {
        qualifiers.push_str("unsafe ");
    }
    if qualifiers.is_empty() {
        out
    } else {
        format!("{out} [{}]", qualifiers.trim_end())
    }
}

fn signature(k: &Crate, sig: &rustdoc_types::FunctionSignature) -> String {
    let inputs: Vec<String> = sig
        .inputs
        .iter()
        .map(|(name, type_)| match (name.as_str(), type_) {
            ("self", Type::Generic(s)) if s == "Self" => "self".to_owned(),
            (
                "self",
                Type::BorrowedRef {
                    lifetime,
                    is_mutable,
                    type_,
                },
            ) if matches!(&**type_, Type::Generic(s) if s == "Self") => format!(
                "&{}{}self",
                lifetime
                    .as_ref()
                    .map(|l| format!("{l} "))
                    .unwrap_or_default(),
                if *is_mutable { "mut " } else { "" }
            ),
            _ => format!("{name}: {}", ty(k, type_)),
        })
        .collect();
    let mut out = format!("({})", inputs.join(", "));
    if let Some(output) = &sig.output {
        let _ = write!(out, " -> {}", ty(k, output));
    }
    out
}

fn term(k: &Crate, t: &Term) -> String {
    match t {
        Term::Type(t) => ty(k, t),
        Term::Constant(c) => c.expr.clone(),
    }
}

/// A path by the item's path in its crate (as rustdoc knows it), with its arguments.
fn resolved(k: &Crate, path: &rustdoc_types::Path) -> String {
    let mut out = k
        .paths
        .get(&path.id)
        .map_or_else(|| path.path.clone(), |s| s.path.join("::"));
    if let Some(args) = &path.args {
        out.push_str(&generic_args(k, args));
    }
    out
}

fn generic_args(k: &Crate, args: &GenericArgs) -> String {
    match args {
        GenericArgs::AngleBracketed { args, constraints } => {
            let mut parts: Vec<String> = args
                .iter()
                .map(|a| match a {
                    GenericArg::Lifetime(l) => l.clone(),
                    GenericArg::Type(t) => ty(k, t),
                    GenericArg::Const(c) => c.expr.clone(),
                    GenericArg::Infer => "_".to_owned(),
                })
                .collect();
            for c in constraints {
                let args = c
                    .args
                    .as_deref()
                    .map(|a| generic_args(k, a))
                    .unwrap_or_default();
                parts.push(match &c.binding {
                    rustdoc_types::AssocItemConstraintKind::Equality(t) => {
                        format!("{}{args} = {}", c.name, term(k, t))
                    }
                    rustdoc_types::AssocItemConstraintKind::Constraint(b) => {
                        format!("{}{args}: {}", c.name, bounds(k, b))
                    }
                });
            }
            if parts.is_empty() {
                String::new()
            } else {
                format!("<{}>", parts.join(", "))
            }
        }
        GenericArgs::Parenthesized { inputs, output } => {
            let inputs: Vec<String> = inputs.iter().map(|t| ty(k, t)).collect();
            let mut out = format!("({})", inputs.join(", "));
            if let Some(output) = output {
                let _ = write!(out, " -> {}", ty(k, output));
            }
            out
        }
        GenericArgs::ReturnTypeNotation => "(..)".to_owned(),
    }
}

/// A type as source spells it (paths as rustdoc resolved them).
fn ty(k: &Crate, t: &Type) -> String {
    match t {
        Type::ResolvedPath(path) => resolved(k, path),
        Type::DynTrait(d) => {
            let mut parts: Vec<String> = d
                .traits
                .iter()
                .map(|p| format!("{}{}", hrtb(k, &p.generic_params), resolved(k, &p.trait_)))
                .collect();
            if let Some(lifetime) = &d.lifetime {
                parts.push(lifetime.clone());
            }
            format!("dyn {}", parts.join(" + "))
        }
        Type::Generic(name) | Type::Primitive(name) => name.clone(),
        Type::FunctionPointer(f) => {
            format!("{}fn{}", hrtb(k, &f.generic_params), signature(k, &f.sig))
        }
        Type::Tuple(types) => {
            let types: Vec<String> = types.iter().map(|t| ty(k, t)).collect();
            if types.len() == 1 {
                format!("({},)", types.join(", "))
            } else {
                format!("({})", types.join(", "))
            }
        }
        Type::Slice(t) => format!("[{}]", ty(k, t)),
        Type::Array { type_, len } => format!("[{}; {len}]", ty(k, type_)),
        Type::Pat { type_, .. } => ty(k, type_),
        Type::ImplTrait(b) => format!("impl {}", bounds(k, b)),
        Type::Infer => "_".to_owned(),
        Type::RawPointer { is_mutable, type_ } => {
            format!(
                "*{} {}",
                if *is_mutable { "mut" } else { "const" },
                ty(k, type_)
            )
        }
        Type::BorrowedRef {
            lifetime,
            is_mutable,
            type_,
        } => format!(
            "&{}{}{}",
            lifetime
                .as_ref()
                .map(|l| format!("{l} "))
                .unwrap_or_default(),
            if *is_mutable { "mut " } else { "" },
            ty(k, type_)
        ),
        Type::QualifiedPath {
            name,
            args,
            self_type,
            trait_,
        } => {
            let args = args
                .as_deref()
                .map(|a| generic_args(k, a))
                .unwrap_or_default();
            match trait_ {
                Some(trait_) => format!(
                    "<{} as {}>::{name}{args}",
                    ty(k, self_type),
                    resolved(k, trait_)
                ),
                None => format!("{}::{name}{args}", ty(k, self_type)),
            }
        }
    }
}

/// The lines removed from `committed` and added by `current`, `-` and `+` prefixed, in
/// order; `None` when the two are the same lines.
pub(crate) fn compare(committed: &str, current: &str) -> Option<String> {
    let old: BTreeSet<&str> = committed.lines().filter(|l| !l.is_empty()).collect();
    let new: BTreeSet<&str> = current.lines().filter(|l| !l.is_empty()).collect();
    let mut changes: Vec<(&str, char)> = old
        .difference(&new)
        .map(|l| (*l, '-'))
        .chain(new.difference(&old).map(|l| (*l, '+')))
        .collect();
    if changes.is_empty() {
        return None;
    }
    changes.sort_unstable();
    Some(changes.iter().fold(String::new(), |mut out, (line, sign)| {
        let _ = writeln!(out, "  {sign} {line}");
        out
    }))
}

/// Adds the paths through re-exported crates and modules (`rudder::cache::X` for
/// `rudder_cache::X` when the facade re-exports `rudder_cache` as `cache`), to a fixed point.
fn through_aliases(api: &mut Api) {
    // A few rounds reach every chain of re-exports a workspace has; each adds only paths.
    for _ in 0..8 {
        let mut added = false;
        for paths in api.paths.values_mut() {
            let mut new = Vec::new();
            for path in paths.iter() {
                for (alias, target) in &api.aliases {
                    if let Some(rest) = path.strip_prefix(target.as_str())
                        && rest.starts_with("::")
                    {
                        new.push(format!("{alias}{rest}"));
                    }
                }
            }
            for path in new {
                added |= paths.insert(path);
            }
        }
        if !added {
            break;
        }
    }
}

/// The number of paths per item of `crate_name`'s surface: a summary line, then each item
/// reached by more than one path, most paths first.
fn paths_report(crate_name: &str, api: &Api) -> String {
    let items = api.paths.len();
    let paths: usize = api.paths.values().map(BTreeSet::len).sum();
    let mut many: Vec<(&String, &BTreeSet<String>)> =
        api.paths.iter().filter(|(_, p)| p.len() > 1).collect();
    many.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then_with(|| a.1.cmp(b.1)));
    let max = api.paths.values().map(BTreeSet::len).max().unwrap_or(0);
    let mut out = format!(
        "{crate_name}: {items} items at {paths} paths; {} items at more than one (at most {max})\n",
        many.len()
    );
    for (_, p) in many {
        let mut p = p.iter();
        let first = p.next().map_or("", String::as_str);
        let rest: Vec<&str> = p.map(String::as_str).collect();
        let _ = writeln!(
            out,
            "  {} {first} (also {})",
            rest.len() + 1,
            rest.join(", ")
        );
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::collections::HashMap;

    use super::*;

    /// The number of paths per item, by the item's first path.
    fn counts(api: &Api) -> HashMap<&str, usize> {
        api.paths
            .values()
            .map(|p| (p.iter().next().map_or("", String::as_str), p.len()))
            .collect()
    }

    #[test]
    fn the_same_lines_compare_equal_and_a_planted_change_is_shown() {
        let committed = "fn a::f() -> u8\nstruct a::S\n";
        assert_eq!(compare(committed, committed), None);
        // A changed signature and a new item, as a diff of lines.
        let current = "fn a::f() -> u16\nstruct a::S\nstruct a::T\n";
        let diff = compare(committed, current).unwrap();
        assert_eq!(
            diff,
            "  + fn a::f() -> u16\n  - fn a::f() -> u8\n  + struct a::T\n"
        );
        // A missing file is an empty one: every line is new.
        assert_eq!(compare("", "struct a::S\n").unwrap(), "  + struct a::S\n");
    }

    #[test]
    fn the_library_name_is_lib_s_or_the_package_s() {
        let facade = "[package]\nname = \"rudder-runtime\"\n\n[lib]\n# why\nname = \"rudder\"\n\n[dependencies]\nname = \"x\"\n";
        assert_eq!(lib_name(facade, "rudder-runtime"), "rudder");
        assert_eq!(
            lib_name("[package]\nname = \"rudder-core\"\n", "rudder-core"),
            "rudder_core"
        );
    }

    /// rustdoc's JSON for a crate of `lib.rs` alone, made with nightly in a directory of
    /// its own (a crate without dependencies: about a second).
    fn fixture_api(dir: &Path, lib: &str) -> Api {
        std::fs::create_dir_all(dir.join("src")).unwrap();
        std::fs::write(
            dir.join("Cargo.toml"),
            "[package]\nname = \"fixture\"\nversion = \"0.1.0\"\nedition = \"2024\"\n\n[workspace]\n",
        )
        .unwrap();
        std::fs::write(dir.join("src/lib.rs"), lib).unwrap();
        let mut cmd = nightly_cargo();
        cmd.current_dir(dir)
            .args(["+nightly", "rustdoc", "--lib", "-q", "--"])
            .args(["-Z", "unstable-options", "--output-format", "json"])
            .env("CARGO_TARGET_DIR", dir.join("target"));
        sh(&mut cmd).unwrap();
        let json = std::fs::read_to_string(dir.join("target/doc/fixture.json")).unwrap();
        read_api(&json).unwrap()
    }

    #[test]
    fn a_fixture_crate_s_surface_and_a_planted_change_to_it() {
        let dir = std::env::temp_dir().join(format!("public-api-fixture-{}", std::process::id()));
        let lib = "//! A fixture.\n\
            mod private { pub struct Hidden; }\n\
            pub mod error {\n    /// E.\n    pub type BoxError = Box<dyn std::error::Error + Send + Sync>;\n}\n\
            pub use error::BoxError;\n\
            pub use private::Hidden;\n\
            /// S.\n#[derive(Clone)]\npub struct S { pub a: u8, b: u8 }\n\
            impl S {\n    /// New.\n    pub fn new(a: u8) -> Self { S { a, b: 0 } }\n    fn secret(&self) -> u8 { self.b }\n}\n";
        let before = fixture_api(&dir, lib);
        assert_eq!(
            before.text(),
            "field fixture::S::a: u8\n\
             fn fixture::S::new(a: u8) -> Self\n\
             impl core::clone::Clone for fixture::S\n\
             mod fixture::error\n\
             struct fixture::Hidden\n\
             struct fixture::S\n\
             type fixture::BoxError = alloc::boxed::Box<dyn core::error::Error + core::marker::Send + core::marker::Sync>\n\
             type fixture::error::BoxError = alloc::boxed::Box<dyn core::error::Error + core::marker::Send + core::marker::Sync>\n"
        );
        let box_error = before
            .paths
            .values()
            .find(|p| p.contains("fixture::BoxError"))
            .unwrap();
        assert_eq!(box_error.len(), 2, "{box_error:?}");
        // The planted change: `new` takes a u16; the check shows it and nothing else.
        let after = fixture_api(
            &dir,
            &lib.replace("new(a: u8)", "new(a: u16)")
                .replace("S { a, b", "S { a: a as u8, b"),
        );
        assert_eq!(
            compare(&before.text(), &after.text()).unwrap(),
            "  + fn fixture::S::new(a: u16) -> Self\n  - fn fixture::S::new(a: u8) -> Self\n"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn json_of_another_format_fails_naming_both_versions() {
        let err = read_api("{\"format_version\": 1}").unwrap_err();
        assert!(err.contains("format 1"), "{err}");
        assert!(
            err.contains(&rustdoc_types::FORMAT_VERSION.to_string()),
            "{err}"
        );
        assert!(read_api("not json").is_err());
    }

    #[test]
    fn the_paths_report_counts_paths_per_item() {
        let mut api = Api::default();
        for (key, path) in [("1", "c::E"), ("1", "c::error::E"), ("2", "c::f")] {
            api.paths
                .entry(key.to_owned())
                .or_default()
                .insert(path.to_owned());
        }
        assert_eq!(counts(&api)["c::E"], 2);
        let report = paths_report("c", &api);
        assert!(
            report.starts_with("c: 2 items at 3 paths; 1 items at more than one (at most 2)\n"),
            "{report}"
        );
        assert!(report.contains("  2 c::E (also c::error::E)\n"), "{report}");
        // A facade re-exporting the crate as `f::c` reaches each item once more.
        api.aliases.push(("f::c".to_owned(), "c".to_owned()));
        through_aliases(&mut api);
        assert_eq!(counts(&api)["c::E"], 4);
        assert!(api.paths["2"].contains("f::c::f"));
    }
}
