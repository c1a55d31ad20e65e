//! Kubernetes' protobuf wire format (`application/vnd.kubernetes.protobuf`) decoded straight
//! into [k8s-openapi]'s types, by generated code: no intermediate structs, no `.proto`
//! compiler, no serde on the way.
//!
//! ```
//! use k8s_openapi::api::core::v1::ConfigMap;
//!
//! // A ConfigMap's body as the API server sends it: the `k8s\0` magic, then a
//! // runtime.Unknown envelope (typeMeta = 1, raw = 2) around the ConfigMap's own message
//! // (metadata = 1 with name = 1; data = 2, a map entry of key = 1 and value = 2).
//! let body = b"k8s\0\x0a\x0f\x0a\x02v1\x12\x09ConfigMap\x12\x15\x0a\x06\x0a\x04conf\x12\x0b\x0a\x04mode\x12\x03dev";
//! let envelope = rudder_protobuf::unknown(body)?;
//! assert_eq!((envelope.api_version, envelope.kind), ("v1", "ConfigMap"));
//!
//! // Decoded in place behind an `Arc`, the form a cache keeps objects in.
//! let decode = rudder_protobuf::decoder::<ConfigMap>().expect("a built-in kind");
//! let config_map: std::sync::Arc<ConfigMap> = decode(envelope.raw)?;
//! assert_eq!(config_map.metadata.name.as_deref(), Some("conf"));
//! assert_eq!(config_map.data.as_ref().unwrap()["mode"], "dev");
//! # Ok::<(), rudder_protobuf::DecodeError>(())
//! ```
//!
//! # What is decoded, and how it is generated
//!
//! Every k8s-openapi struct a built-in kind reaches has a [`Message`] impl, and every kind
//! (and `Status`) a [`decoder`]: about 1,000 types, from `src/generated.rs`, which
//! `cargo xtask protobuf` writes in two steps. `go/cmd/proto-schema` walks client-go's
//! scheme and apiextensions' v1 (k8s.io/api and k8s.io/apimachinery v0.37.2, the Kubernetes
//! release the project defaults to) with `reflect` and prints every struct's fields:
//! protobuf number, JSON name and `omitempty`, pointer, slice or map (`schema.json`). The
//! Go struct tags are the one source with both the protobuf number and the JSON name (from
//! which k8s-openapi names its fields, and whose `omitempty` decides what JSON leaves out);
//! the `.proto` files have neither JSON names nor pointers. The xtask then reads
//! k8s-openapi's own source for each struct's fields and the JSON key each deserialises
//! from, and writes one `match` on the tag per struct; a field k8s-openapi lacks is skipped
//! like an unknown tag (the list is at the top of `generated.rs`). Custom resources have no
//! generated decoder: a client reads them, and CustomResourceDefinitions' schemas are
//! decoded (apiextensions.k8s.io/v1 is covered), as JSON.
//!
//! The generated code is for k8s-openapi's Kubernetes 1.37 types (its `v1_37` or `latest`
//! feature): another version's structs have other fields, and the crate does not build
//! against them. Objects from older servers decode fine (the fields they lack are absent).
//!
//! # Equal to what JSON gives
//!
//! A decoded object equals what serde_json makes of the server's JSON for the same object:
//!
//! - gogo-protobuf writes every non-pointer field, zero or not; Go's JSON leaves out a zero
//!   field tagged `omitempty`. A zero value of such a field is `None`; a pointer field on
//!   the wire is `Some` even when zero; a field without `omitempty` is `Some` when zero.
//! - A zero `Time` or `MicroTime` is `None` (JSON writes `null`). `Time` keeps whole
//!   seconds and `MicroTime` microseconds, as Go reads them.
//! - An empty list or map is absent on the wire, so it is `None` where k8s-openapi has an
//!   `Option`. JSON tells a nil list (`null`, or left out with `omitempty`) from an empty
//!   one (`[]`) for a field without `omitempty`; protobuf cannot, and the decoder gives
//!   `None`, JSON's nil. The server itself cannot tell them apart either: it keeps built-in
//!   objects in etcd as protobuf, so what it reads back (every GET, list and watch) has nil
//!   where `[]` was written, and its JSON says `null` too.
//! - `Quantity` is its canonical string, `IntOrString` its int or string, `FieldsV1` and
//!   `RawExtension` their JSON bytes parsed, `Duration` Go's `1h2m3s` form.
//!
//! Unknown tags are skipped (a newer server's fields); packed and unpacked repeated scalars
//! are both read. Bad input (truncated varints, lengths past the end, wrong wire types,
//! invalid UTF-8 or JSON, messages nested more than [`MAX_DEPTH`] deep) is a
//! [`DecodeError`] naming the message, field and tag, never a panic.
//!
//! # Lists and watches
//!
//! [`unknown`] opens a body's envelope, [`list`] reads a `XxxList` item by item, and
//! [`watch_event`] reads one frame of a protobuf watch stream; an `ERROR` event's object is
//! a [`Status`](k8s_openapi::apimachinery::pkg::apis::meta::v1::Status), which
//! [`decode`] reads like any kind.
//!
//! [k8s-openapi]: https://docs.rs/k8s-openapi

mod codec;
mod envelope;
#[allow(
    clippy::too_many_lines,
    clippy::match_same_arms,
    missing_docs,
    unreachable_pub
)]
mod generated;
mod kinds;
mod registry;
mod wire;

pub use envelope::{List, MAGIC, Unknown, WatchEvent, list, unknown, watch_event};
pub use kinds::Decoder;
pub use registry::decoder;
pub use wire::{DecodeError, MAX_DEPTH};

thread_local! {
    /// Set while [`without_managed_fields`] runs on this thread.
    static SKIP_MANAGED_FIELDS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `decode` with every object's `metadata.managedFields` skipped unread (left `None`),
/// for a caller that drops them anyway: Rudder's informers store objects without them by
/// default, and reading them (each entry's `fieldsV1` is a JSON document in the message)
/// is a large part of decoding a small object. Other decodes on the thread, before and
/// after, read them as usual.
///
/// ```
/// use k8s_openapi::api::core::v1::ConfigMap;
///
/// // A ConfigMap's message: metadata (tag 1) holding a name (tag 1) and one managedFields
/// // entry (tag 17) naming its manager (tag 1).
/// let bytes = [0x0a, 0x0b, 0x0a, 0x01, b'a', 0x8a, 0x01, 0x05, 0x0a, 0x03, b'k', b'c', b't'];
/// let full: ConfigMap = rudder_protobuf::decode(&bytes).unwrap();
/// assert_eq!(full.metadata.managed_fields.map(|m| m.len()), Some(1));
/// let lean: ConfigMap = rudder_protobuf::without_managed_fields(|| rudder_protobuf::decode(&bytes)).unwrap();
/// assert_eq!(lean.metadata.name.as_deref(), Some("a"));
/// assert_eq!(lean.metadata.managed_fields, None);
/// ```
pub fn without_managed_fields<T>(decode: impl FnOnce() -> T) -> T {
    /// Puts the thread's setting back however `decode` ends.
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            SKIP_MANAGED_FIELDS.with(|skip| skip.set(self.0));
        }
    }
    let _restore = Restore(SKIP_MANAGED_FIELDS.with(|skip| skip.replace(true)));
    decode()
}

/// Whether [`without_managed_fields`] runs on this thread (for the generated code).
pub(crate) fn skips_managed_fields() -> bool {
    SKIP_MANAGED_FIELDS.with(std::cell::Cell::get)
}

k8s_openapi::k8s_if_le_1_36! {
    compile_error!(
        "rudder-protobuf's decoders are generated for Kubernetes 1.37's types: enable \
         k8s-openapi's `v1_37` (or `latest`) feature"
    );
}

/// A protobuf message k8s-openapi's type can be read from: every struct a built-in kind
/// reaches (generated).
pub trait Message: Default {
    /// Reads `buf`, one message's bytes, into `self`: fields present replace (lists and maps
    /// extend) what is there, as protobuf merges.
    fn merge(&mut self, buf: &[u8]) -> Result<(), DecodeError> {
        self.merge_depth(buf, 0)
    }

    /// [`merge`](Message::merge) of a message nested `depth` deep (the generated code's
    /// recursion, bounded by [`MAX_DEPTH`]).
    #[doc(hidden)]
    fn merge_depth(&mut self, buf: &[u8], depth: u32) -> Result<(), DecodeError>;
}

/// Decodes `T` from its message, or from a whole body (the `k8s\0` magic and
/// [`Unknown`] envelope, whose `raw` is then read).
///
/// The envelope's kind is not checked against `T`; [`unknown`] gives it when it matters.
pub fn decode<T: Message>(bytes: &[u8]) -> Result<T, DecodeError> {
    let mut out = T::default();
    out.merge(message_of(bytes)?)?;
    Ok(out)
}

/// The message in `bytes`: an object's own, or a whole body's (its envelope's `raw`).
pub(crate) fn message_of(bytes: &[u8]) -> Result<&[u8], DecodeError> {
    if bytes.starts_with(MAGIC) {
        Ok(unknown(bytes)?.raw)
    } else {
        Ok(bytes)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::cast_possible_truncation)]
mod tests;
