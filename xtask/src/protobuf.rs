//! `cargo xtask protobuf`: crates/rudder-protobuf's generated decoders.
//!
//! Two steps. `go/cmd/proto-schema` walks client-go's scheme (and apiextensions' v1) with
//! `reflect` and prints every reachable struct's fields: protobuf number and wire type, JSON
//! name and `omitempty`, Go shape; that is `crates/rudder-protobuf/schema.json`. Then
//! [`generate`] reads it with k8s-openapi's own source (the struct fields, and the JSON key
//! each deserialises from) and writes `crates/rudder-protobuf/src/generated.rs`: a
//! `Message` impl for every k8s-openapi struct a kind reaches, reading each field's tag
//! straight into the k8s-openapi field the same JSON name fills. `cargo xtask tidy`
//! regenerates the Rust from the committed schema and fails when it differs; CI's Go step
//! reruns the Go program against the committed schema.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;
use xtask::util::workspace_root;

/// The k8s-openapi module the decoders are generated against: the Kubernetes release of
/// `go/go.mod`'s k8s.io/api (and `.cargo/config.toml`'s `K8S_OPENAPI_ENABLED_VERSION`).
const K8S_OPENAPI_MODULE: &str = "v1_37";

pub(crate) fn schema_path(root: &Path) -> PathBuf {
    root.join("crates/rudder-protobuf/schema.json")
}

pub(crate) fn generated_path(root: &Path) -> PathBuf {
    root.join("crates/rudder-protobuf/src/generated.rs")
}

/// `cargo xtask protobuf`: runs the Go program, writes the schema and the Rust.
pub(crate) fn run() -> Result<(), String> {
    let root = workspace_root();
    let schema = go_schema()?;
    std::fs::write(schema_path(&root), &schema).map_err(|e| format!("writing schema: {e}"))?;
    let rust = generate(&root, &schema)?;
    std::fs::write(generated_path(&root), rust)
        .map_err(|e| format!("writing generated.rs: {e}"))?;
    println!(
        "protobuf: wrote {} and {}",
        schema_path(&root).display(),
        generated_path(&root).display()
    );
    Ok(())
}

/// The Go program's output.
pub(crate) fn go_schema() -> Result<String, String> {
    let go = xtask::go::Go::find()?;
    let output = go
        .command()
        .args(["run", "./cmd/proto-schema"])
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("could not run go: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "go run ./cmd/proto-schema failed ({})",
            output.status
        ));
    }
    String::from_utf8(output.stdout).map_err(|e| format!("proto-schema printed non-UTF-8: {e}"))
}

/// What tidy checks: the committed Rust is what the committed schema makes.
pub(crate) fn stale(root: &Path) -> Result<Option<String>, String> {
    let schema = std::fs::read_to_string(schema_path(root))
        .map_err(|e| format!("reading {}: {e}", schema_path(root).display()))?;
    let rust = generate(root, &schema)?;
    let committed = std::fs::read_to_string(generated_path(root)).unwrap_or_default();
    Ok((committed != rust).then(|| {
        format!(
            "{}: not what {} makes; run `cargo xtask protobuf`",
            generated_path(root).display(),
            schema_path(root).display()
        )
    }))
}

/// One k8s-openapi struct: its fields' types by Rust name, and JSON key to Rust name.
#[derive(Default)]
struct RustStruct {
    fields: BTreeMap<String, String>,
    keys: BTreeMap<String, String>,
    resource: bool,
    /// `pub struct X(pub serde_json::Value)`: how k8s-openapi has a Go struct with no fields.
    value: bool,
    /// Whether it derives `Default` (all but those with a required time).
    default: bool,
}

/// k8s-openapi's structs by path (`api::core::v1::Pod`).
fn index_k8s_openapi(root: &Path) -> Result<BTreeMap<String, RustStruct>, String> {
    let source = k8s_openapi_src(root)?.join(K8S_OPENAPI_MODULE);
    let mut out = BTreeMap::new();
    let mut stack = vec![source.clone()];
    while let Some(dir) = stack.pop() {
        for entry in
            std::fs::read_dir(&dir).map_err(|e| format!("reading {}: {e}", dir.display()))?
        {
            let path = entry.map_err(|e| e.to_string())?.path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") || path.ends_with("mod.rs") {
                continue;
            }
            let module = path
                .parent()
                .and_then(|p| p.strip_prefix(&source).ok())
                .map(|p| {
                    p.components()
                        .map(|c| c.as_os_str().to_string_lossy().into_owned())
                        .collect::<Vec<_>>()
                        .join("::")
                })
                .unwrap_or_default();
            let text = std::fs::read_to_string(&path).map_err(|e| e.to_string())?;
            parse_file(&module, &text, &mut out);
        }
    }
    Ok(out)
}

fn parse_file(module: &str, text: &str, out: &mut BTreeMap<String, RustStruct>) {
    let mut current: Option<(String, RustStruct)> = None;
    let mut named = Vec::new();
    let mut default = false;
    for line in text.lines() {
        if line.starts_with("#[derive(") {
            default = line.contains(" Default,") || line.contains("(Default,");
        }
        if let Some(rest) = line.strip_prefix("pub struct ") {
            if let Some(name) = rest.strip_suffix(" {") {
                let s = RustStruct {
                    default,
                    ..RustStruct::default()
                };
                current = Some((name.to_owned(), s));
            } else if let Some(name) = rest.strip_suffix("(pub crate::serde_json::Value);") {
                let value = RustStruct {
                    value: true,
                    ..RustStruct::default()
                };
                named.push((name.to_owned(), value));
            }
            continue;
        }
        if let Some((_, s)) = current.as_mut() {
            if line == "}" {
                if let Some(done) = current.take() {
                    named.push(done);
                }
                continue;
            }
            if let Some(field) = line.trim().strip_prefix("pub ")
                && let Some((name, ty)) = field.split_once(": ")
            {
                s.fields
                    .insert(name.to_owned(), ty.trim_end_matches(',').to_owned());
            }
            continue;
        }
        // `"containerPort" => Field::Key_container_port,` in the Deserialize impl.
        let trimmed = line.trim();
        if let Some(rest) = trimmed.strip_prefix('"')
            && let Some((key, field)) = rest.split_once("\" => Field::Key_")
            && let Some((_, s)) = named.last_mut()
        {
            s.keys
                .insert(key.to_owned(), field.trim_end_matches(',').to_owned());
        }
        if let Some(name) = trimmed
            .strip_prefix("impl crate::Resource for ")
            .and_then(|r| r.strip_suffix(" {"))
            && let Some((_, s)) = named.iter_mut().find(|(n, _)| n == name)
        {
            s.resource = true;
        }
    }
    for (name, s) in named {
        let path = if module.is_empty() {
            name
        } else {
            format!("{module}::{name}")
        };
        out.insert(path, s);
    }
}

/// The k8s-openapi source directory of the locked version (`src/`), from `cargo metadata`.
fn k8s_openapi_src(root: &Path) -> Result<PathBuf, String> {
    let output = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .current_dir(root)
        .args(["metadata", "--format-version", "1"])
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cargo metadata: {e}"))?;
    let metadata: Value = serde_json::from_slice(&output.stdout)
        .map_err(|e| format!("cargo metadata printed no JSON: {e}"))?;
    metadata["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["name"] == "k8s-openapi")
        .and_then(|p| p["manifest_path"].as_str())
        .and_then(|m| Path::new(m).parent().map(|d| d.join("src")))
        .ok_or_else(|| "cargo metadata lists no k8s-openapi".to_owned())
}

/// The Rust path (under k8s-openapi's version module) of a Go package and type name.
fn rust_path(go: &str) -> Option<String> {
    let (package, name) = go.rsplit_once('.')?;
    let module = if let Some(rest) = package.strip_prefix("k8s.io/api/") {
        format!("api/{rest}")
    } else if let Some(rest) = package.strip_prefix("k8s.io/apimachinery/") {
        format!("apimachinery/{rest}")
    } else if let Some(rest) = package.strip_prefix("k8s.io/apiextensions-apiserver/") {
        format!("apiextensions_apiserver/{rest}")
    } else {
        return None;
    };
    Some(format!(
        "{}::{name}",
        module.replace('/', "::").replace('-', "_")
    ))
}

/// The runtime's codec for a Go type with a wire form of its own.
fn special(go: &str) -> Option<&'static str> {
    Some(match go {
        "k8s.io/apimachinery/pkg/apis/meta/v1.Time" => "TimeC",
        "k8s.io/apimachinery/pkg/apis/meta/v1.MicroTime" => "MicroTimeC",
        "k8s.io/apimachinery/pkg/apis/meta/v1.Duration" => "DurationC",
        "k8s.io/apimachinery/pkg/apis/meta/v1.FieldsV1" => "Fields",
        "k8s.io/apimachinery/pkg/api/resource.Quantity" => "QuantityC",
        "k8s.io/apimachinery/pkg/util/intstr.IntOrString" => "IntOrStr",
        "k8s.io/apimachinery/pkg/runtime.RawExtension" => "RawExt",
        "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1.JSON" => "ExtJson",
        "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1.JSONSchemaPropsOrArray" => {
            "PropsOrArray"
        }
        "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1.JSONSchemaPropsOrBool" => {
            "PropsOrBool"
        }
        "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1.JSONSchemaPropsOrStringArray" => {
            "PropsOrStrings"
        }
        _ => return None,
    })
}

struct Generator<'a> {
    types: &'a serde_json::Map<String, Value>,
    rust: &'a BTreeMap<String, RustStruct>,
    queue: VecDeque<String>,
    seen: BTreeSet<String>,
    /// Inline (embedded) structs read into a host: (host Rust path, Go type) -> function.
    inlines: BTreeMap<(String, String), String>,
    inline_queue: VecDeque<(String, String)>,
    out: String,
    skipped: Vec<String>,
    /// k8s-openapi's `X(serde_json::Value)` of Go structs with no fields.
    empties: BTreeSet<String>,
}

impl Generator<'_> {
    /// The codec of a Go type, queueing the messages it reaches.
    fn codec(&mut self, ty: &Value) -> Option<String> {
        let named = ty["named"].as_str().unwrap_or_default();
        match ty["kind"].as_str()? {
            "ptr" => self.codec(&ty["elem"]),
            "string" => Some("Str".into()),
            "bool" => Some("Bool".into()),
            "int32" => Some("I32".into()),
            "int64" => Some("I64".into()),
            "float64" => Some("F64".into()),
            "bytes" => Some("Bytes".into()),
            "slice" => Some(format!("Items<{}>", self.codec(&ty["elem"])?)),
            "struct" => {
                if let Some(codec) = special(named) {
                    return Some(codec.into());
                }
                let path = rust_path(named)?;
                if self.rust.get(&path)?.value {
                    // A Go struct with no fields: JSON `{}`.
                    if self
                        .types
                        .get(named)
                        .and_then(Value::as_array)
                        .is_some_and(Vec::is_empty)
                    {
                        self.empties.insert(path.clone());
                        return Some(format!("Empty<k::{path}>"));
                    }
                    return None;
                }
                if self.seen.insert(named.to_owned()) {
                    self.queue.push_back(named.to_owned());
                }
                Some(format!("Msg<k::{path}>"))
            }
            _ => None,
        }
    }

    /// The match arms reading `go`'s fields into the Rust struct `host`.
    fn arms(&mut self, go: &str, host: &str) -> String {
        let mut arms = String::new();
        let fields = self
            .types
            .get(go)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let short = go.rsplit_once('.').map_or(go, |(_, n)| n).to_owned();
        for field in &fields {
            let Some(tag) = field["tag"].as_u64() else {
                continue;
            };
            let json = field["json"].as_str().unwrap_or_default();
            let ty = &field["type"];
            if field["inline"].as_bool() == Some(true) {
                let Some(inner) = ty["named"].as_str().map(str::to_owned) else {
                    continue;
                };
                let key = (host.to_owned(), inner.clone());
                let next = self.inlines.len();
                let function = self
                    .inlines
                    .entry(key.clone())
                    .or_insert_with(|| {
                        self.inline_queue.push_back(key);
                        format!("inline_{next}")
                    })
                    .clone();
                let _ = writeln!(
                    arms,
                    "{tag} => inline(this, &mut r, wire, {function}).map_err(|e| e.at({short:?}, {:?}, {tag})),",
                    field["go"].as_str().unwrap_or_default()
                );
                continue;
            }
            let target = &self.rust[host];
            let Some(rust_field) = target.keys.get(json).cloned() else {
                self.skipped
                    .push(format!("{short}.{json} (tag {tag}): no k8s-openapi field"));
                continue;
            };
            let rust_ty = target.fields.get(&rust_field).cloned().unwrap_or_default();
            let (optional, inner) = match rust_ty.strip_prefix("Option<") {
                Some(rest) => (true, rest.strip_suffix('>').unwrap_or(rest)),
                None => (false, rust_ty.as_str()),
            };
            let boxed = inner.starts_with("std::boxed::Box<");
            let is_vec = inner.starts_with("std::vec::Vec<");
            let is_map = inner.starts_with("std::collections::BTreeMap<");
            let kind = ty["kind"].as_str().unwrap_or_default();
            let call = match kind {
                "slice" if is_vec => {
                    let Some(codec) = self.codec(&ty["elem"]) else {
                        self.skipped
                            .push(format!("{short}.{json} (tag {tag}): element not decodable"));
                        continue;
                    };
                    let helper = if optional { "rep_opt" } else { "repeated" };
                    format!("{helper}::<{codec}>(&mut this.{rust_field}, &mut r, wire)")
                }
                "map" if is_map => {
                    let (Some(key), Some(value)) =
                        (self.codec(&ty["key"]), self.codec(&ty["elem"]))
                    else {
                        self.skipped
                            .push(format!("{short}.{json} (tag {tag}): map not decodable"));
                        continue;
                    };
                    let helper = if optional { "map_opt" } else { "map" };
                    format!("{helper}::<{key}, {value}>(&mut this.{rust_field}, &mut r, wire)")
                }
                "slice" | "map" => {
                    self.skipped.push(format!(
                        "{short}.{json} (tag {tag}): Go {kind}, Rust {rust_ty}"
                    ));
                    continue;
                }
                _ => {
                    let Some(codec) = self.codec(ty) else {
                        self.skipped
                            .push(format!("{short}.{json} (tag {tag}): not decodable"));
                        continue;
                    };
                    let codec = if boxed {
                        format!("Boxed<{codec}>")
                    } else {
                        codec
                    };
                    if optional {
                        let omit = field["omitempty"].as_bool() == Some(true) && kind != "ptr";
                        format!("opt::<{codec}>(&mut this.{rust_field}, &mut r, wire, {omit})")
                    } else {
                        format!("req::<{codec}>(&mut this.{rust_field}, &mut r, wire)")
                    }
                }
            };
            if short == "ObjectMeta" && json == "managedFields" {
                // Skipped unread where the caller drops them anyway (an informer's default
                // transform): see `without_managed_fields` in the runtime.
                let _ = writeln!(arms, "{tag} if skips_managed_fields() => r.skip(wire),");
            }
            let _ = writeln!(
                arms,
                "{tag} => {call}.map_err(|e| e.at({short:?}, {json:?}, {tag})),"
            );
        }
        arms
    }

    fn body(arms: &str) -> String {
        format!(
            "let mut r = Reader::new(buf, depth)?;\n\
             while let Some((tag, wire)) = r.key()? {{\n\
             match tag {{\n{arms}_ => r.skip(wire),\n}}?;\n}}\nOk(())\n"
        )
    }
}

/// The Rust the schema makes.
pub(crate) fn generate(root: &Path, schema: &str) -> Result<String, String> {
    let schema: Value =
        serde_json::from_str(schema).map_err(|e| format!("schema.json is not JSON: {e}"))?;
    let types = schema["types"]
        .as_object()
        .ok_or("schema.json has no types")?;
    let rust = index_k8s_openapi(root)?;
    let mut g = Generator {
        types,
        rust: &rust,
        queue: VecDeque::new(),
        seen: BTreeSet::new(),
        inlines: BTreeMap::new(),
        inline_queue: VecDeque::new(),
        out: String::new(),
        skipped: Vec::new(),
        empties: BTreeSet::new(),
    };
    // The roots: every registered kind k8s-openapi has, and metav1's Status.
    let mut kinds = BTreeSet::new();
    let roots = schema["kinds"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|k| k["type"].as_str())
        .chain(["k8s.io/apimachinery/pkg/apis/meta/v1.Status"]);
    for go in roots {
        let Some(path) = rust_path(go) else { continue };
        let Some(s) = rust.get(&path) else { continue };
        if go.ends_with("List") && path.ends_with("List") {
            continue;
        }
        if s.resource || go.ends_with("meta/v1.Status") {
            kinds.insert(path);
        }
        if g.seen.insert(go.to_owned()) {
            g.queue.push_back(go.to_owned());
        }
    }
    let mut impls = BTreeMap::new();
    loop {
        if let Some(go) = g.queue.pop_front() {
            let Some(path) = rust_path(&go) else { continue };
            let arms = g.arms(&go, &path);
            let target = &rust[&path];
            let fresh = if target.default {
                "Self::default()".to_owned()
            } else {
                // A required time has no default: the Unix epoch stands for a field the
                // message lacks (Go would have its zero time, which JSON writes `null`).
                let mut literal = String::from("Self {\n");
                for (name, ty) in &target.fields {
                    let value = match ty.as_str() {
                        "crate::apimachinery::pkg::apis::meta::v1::Time"
                        | "crate::apimachinery::pkg::apis::meta::v1::MicroTime" => {
                            format!(
                                "{}(k::jiff::Timestamp::UNIX_EPOCH)",
                                ty.replacen("crate::", "k::", 1)
                            )
                        }
                        t if t.starts_with("crate::") => {
                            format!("<{} as Decode>::fresh()", t.replacen("crate::", "k::", 1))
                        }
                        _ => "Default::default()".to_owned(),
                    };
                    let _ = writeln!(literal, "{name}: {value},");
                }
                literal.push('}');
                literal
            };
            let message = if target.default {
                format!(
                    "impl Message for k::{path} {{\n\
                     fn merge_depth(&mut self, buf: &[u8], depth: u32) -> Result<(), DecodeError> {{\n\
                     Decode::merge_at(self, buf, depth)\n}}\n}}\n"
                )
            } else {
                String::new()
            };
            impls.insert(
                path.clone(),
                format!(
                    "impl Decode for k::{path} {{\n\
                     fn fresh() -> Self {{\n{fresh}\n}}\n\
                     fn merge_at(&mut self, buf: &[u8], depth: u32) -> Result<(), DecodeError> {{\n\
                     let this = self;\n{}}}\n}}\n{message}",
                    Generator::body(&arms)
                ),
            );
        } else if let Some((host, go)) = g.inline_queue.pop_front() {
            let function = g.inlines[&(host.clone(), go.clone())].clone();
            let arms = g.arms(&go, &host);
            impls.insert(
                format!("~{function}"),
                format!(
                    "fn {function}(this: &mut k::{host}, buf: &[u8], depth: u32) -> Result<(), DecodeError> {{\n{}}}\n",
                    Generator::body(&arms)
                ),
            );
        } else {
            break;
        }
    }
    let mut out = String::from(
        "// @generated by `cargo xtask protobuf` from schema.json (go/cmd/proto-schema) and\n\
         // k8s-openapi's source. Do not edit.\n\n\
         use k8s_openapi as k;\n\n\
         use crate::codec::*;\n\
         use crate::kinds::Registry;\n\
         use crate::wire::Reader;\n\
         use crate::{DecodeError, Message, skips_managed_fields};\n\n",
    );
    let _ = writeln!(out, "/// Every kind's decoder ({} kinds).", kinds.len());
    out.push_str("pub(crate) fn register(registry: &mut Registry) {\n");
    for kind in &kinds {
        let _ = writeln!(out, "registry.add::<k::{kind}>();");
    }
    out.push_str("}\n\n");
    g.skipped.sort();
    g.skipped.dedup();
    out.push_str("// Fields not decoded (skipped as unknown):\n");
    for s in &g.skipped {
        let _ = writeln!(out, "// - {s}");
    }
    out.push('\n');
    for empty in &g.empties {
        let _ = writeln!(
            out,
            "impl EmptyObject for k::{empty} {{\nfn empty() -> Self {{\nSelf(serde_json::Value::Object(serde_json::Map::new()))\n}}\n}}\n"
        );
    }
    for body in impls.values() {
        out.push_str(body);
        out.push('\n');
    }
    g.out = out;
    rustfmt(&g.out)
}

fn rustfmt(code: &str) -> Result<String, String> {
    use std::io::Write as _;
    let mut child = Command::new("rustfmt")
        .args(["--edition", "2024", "--emit", "stdout"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("could not run rustfmt: {e}"))?;
    child
        .stdin
        .take()
        .ok_or("rustfmt has no stdin")?
        .write_all(code.as_bytes())
        .map_err(|e| format!("writing to rustfmt: {e}"))?;
    let output = child.wait_with_output().map_err(|e| e.to_string())?;
    if !output.status.success() {
        return Err("rustfmt failed on the generated code".into());
    }
    String::from_utf8(output.stdout).map_err(|e| e.to_string())
}
